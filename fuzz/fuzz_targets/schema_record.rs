//! See `tarn_fuzz::schema_record` (fuzz/src/schema_record.rs) for what this target feeds and
//! checks, and fuzz/README.md for how to run it.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tarn_fuzz::schema_record::run(data));
