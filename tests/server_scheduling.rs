//! Each shard's thread asks the scheduler for `sched_slice_us` (see `server::scheduling`),
//! and only the shards' threads do: the kernel says so in `/proc/PID/task/TID/sched`.

mod common;

use common::Server;

/// The `se.slice` of each of the server's threads, in nanoseconds; empty where the kernel
/// does not report slices (before Linux 6.6).
fn thread_slices_ns(server: &Server) -> Vec<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", server.pid())).expect("task dir");
    let mut slices = Vec::new();
    for task in tasks {
        let path = task.expect("task").path().join("sched");
        let Ok(text) = std::fs::read_to_string(path) else {
            continue; // a thread that has just ended
        };
        let slice: Option<u64> = text
            .lines()
            .find(|line| line.starts_with("se.slice"))
            .and_then(|line| line.split(':').nth(1))
            .and_then(|value| value.trim().parse().ok());
        slices.extend(slice);
    }
    slices
}

fn count_with(slices: &[u64], slice_ns: u64) -> usize {
    slices.iter().filter(|&&slice| slice == slice_ns).count()
}

#[test]
fn every_shard_thread_and_no_other_runs_in_the_configured_slice() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_in(dir.path(), 2, "", &["--sched-slice-us", "300"]);
    let slices = thread_slices_ns(&server);
    if slices.is_empty() {
        eprintln!("this kernel reports no scheduler slices; nothing to check");
        return;
    }
    assert_eq!(count_with(&slices, 300_000), 2, "slices: {slices:?}");
    assert!(
        slices.len() > 2,
        "the process has threads besides its shards"
    );
}

#[test]
fn zero_leaves_every_thread_on_the_kernels_slice() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_in(dir.path(), 2, "", &["--sched-slice-us", "0"]);
    let slices = thread_slices_ns(&server);
    if let Some(&first) = slices.first() {
        assert!(
            slices.iter().all(|&slice| slice == first),
            "slices: {slices:?}"
        );
        assert_ne!(first, 100_000, "the shipped 100 us was applied anyway");
    }
}
