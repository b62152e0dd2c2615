//! The real Python connectors (`tarantool`, and `asynctnt` in `test_asynctnt.py`) against the
//! real `tarn` binary: users' code works. Runs `tests/python` with pytest; CI installs the
//! connectors (see `.ci/run`).

use crate::common;

use std::process::Command;

fn run_pytest(shards: u32) {
    let Some(python) = common::python() else {
        if std::env::var_os("CI").is_some() {
            panic!("CI must provide the Python connector (TARN_PYTHON or .venv)");
        }
        eprintln!("skipping: no Python with the tarantool connector (run .ci/run once)");
        return;
    };
    let server = common::Server::start(shards, common::TEST_CONFIG_EXTRA);
    let status = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python"))
        .env("TARN_ADDR", server.addr.to_string())
        .status()
        .expect("run pytest");
    assert!(status.success(), "pytest failed against {shards} shard(s)");
}

#[test]
fn python_connector_suite_on_one_shard() {
    run_pytest(1);
}

#[test]
fn python_connector_suite_on_two_shards() {
    run_pytest(2);
}
