//! See `tarn_fuzz::replication_packets` (fuzz/src/replication_packets.rs) for what this target
//! feeds and checks, and fuzz/README.md for how to run it.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tarn_fuzz::replication_packets::run(data));
