//! The server's threads as the operating system sees them (`/proc/PID/task/TID`): the
//! process keeps its name through its huge-page restart, each shard's thread is named after
//! its shard, and only the shards' threads ask the scheduler for `sched_slice_us` (see
//! `server::os::scheduling`).

use crate::common;

use common::Server;

/// Each thread of the server: its name, and its scheduler slice in nanoseconds where the
/// kernel reports one (`se.slice`, Linux 6.6 and later).
fn threads(server: &Server) -> Vec<(String, Option<u64>)> {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", server.pid())).expect("task dir");
    let mut threads = Vec::new();
    for task in tasks {
        let dir = task.expect("task").path();
        // A thread that has just ended has no files left: skip it.
        let (Ok(comm), Ok(sched)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("sched")),
        ) else {
            continue;
        };
        let slice_ns: Option<u64> = sched
            .lines()
            .find(|line| line.starts_with("se.slice"))
            .and_then(|line| line.split(':').nth(1))
            .and_then(|value| value.trim().parse().ok());
        threads.push((comm.trim_end().to_owned(), slice_ns));
    }
    threads.sort();
    threads
}

#[test]
fn the_process_is_tarn_and_its_shard_threads_are_named_after_their_shards() {
    let server = Server::start(2, "");
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", server.pid())).expect("comm");
    assert_eq!(comm.trim_end(), "tarn", "what ps, pgrep and killall see");
    let names: Vec<String> = threads(&server).into_iter().map(|(name, _)| name).collect();
    assert_eq!(
        names
            .iter()
            .filter(|name| name.starts_with("shard-"))
            .collect::<Vec<_>>(),
        ["shard-0", "shard-1"],
        "threads: {names:?}"
    );
}

#[test]
fn every_shard_thread_and_no_other_runs_in_the_configured_slice() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_in(dir.path(), 2, "", &["--sched-slice-us", "300"]);
    let threads = threads(&server);
    if threads.iter().all(|(_, slice)| slice.is_none()) {
        eprintln!("this kernel reports no scheduler slices; nothing to check");
        return;
    }
    let on_slice: Vec<&str> = threads
        .iter()
        .filter(|(_, slice)| *slice == Some(300_000))
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(on_slice, ["shard-0", "shard-1"], "threads: {threads:?}");
    assert!(
        threads.len() > 2,
        "the process has threads besides its shards"
    );
}

#[test]
fn zero_leaves_every_thread_on_the_kernels_slice() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_in(dir.path(), 2, "", &["--sched-slice-us", "0"]);
    let slices: Vec<u64> = threads(&server)
        .into_iter()
        .filter_map(|(_, slice)| slice)
        .collect();
    if let Some(&first) = slices.first() {
        assert!(
            slices.iter().all(|&slice| slice == first),
            "slices: {slices:?}"
        );
        assert_ne!(first, 100_000, "the shipped 100 us was applied anyway");
    }
}
