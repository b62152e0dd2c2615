//! The fuzz targets' checks (`fuzz/src`), compiled by the main build so that they keep up
//! with the code they drive, and run once on every checked-in input: the seeds each
//! target starts from (`fuzz/seeds/<target>/`) and the inputs that once found a bug
//! (`fuzz/regressions/<target>/`). This is no fuzzing, only a replay of those files
//! (milliseconds); fuzz/README.md says how to fuzz.

#[path = "../fuzz/src/lib.rs"]
mod fuzz_checks;

use std::path::Path;

/// Runs `check` on every file of the target's seed and regression directories; returns
/// how many seeds there were.
fn replay(target: &str, check: fn(&[u8])) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut seeds = 0;
    for (kind, required) in [("seeds", true), ("regressions", false)] {
        let dir = root.join(kind).join(target);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(_) if !required => continue,
            Err(error) => panic!("{}: {error}", dir.display()),
        };
        let mut paths: Vec<_> = entries.map(|entry| entry.unwrap().path()).collect();
        paths.sort();
        for path in paths {
            let input = std::fs::read(&path).unwrap();
            eprintln!("{target}: {}", path.display());
            check(&input);
            if kind == "seeds" {
                seeds += 1;
            }
        }
    }
    seeds
}

#[test]
fn decode_request_replays_its_seeds() {
    assert!(replay("decode_request", fuzz_checks::decode_request::run) >= 5);
}

#[test]
fn update_ops_replays_its_seeds() {
    assert!(replay("update_ops", fuzz_checks::update_ops::run) >= 5);
}

#[test]
fn tuple_format_replays_its_seeds() {
    assert!(replay("tuple_format", fuzz_checks::tuple_format::run) >= 5);
}

#[test]
fn wal_files_replays_its_seeds() {
    assert!(replay("wal_files", fuzz_checks::wal_files::run) >= 5);
}

#[test]
fn crud_call_replays_its_seeds() {
    assert!(replay("crud_call", fuzz_checks::crud_call::run) >= 5);
}

#[test]
fn schema_record_replays_its_seeds() {
    assert!(replay("schema_record", fuzz_checks::schema_record::run) >= 5);
}

#[test]
fn replication_packets_replays_its_seeds() {
    assert!(replay("replication_packets", fuzz_checks::replication_packets::run) >= 5);
}
