//! One listening socket per server: a second `tarn` on the same port fails at start with
//! "address in use" instead of joining the first one's port and taking half its new
//! connections, and port 0 works with any number of shards.

use crate::common;

use common::{Client, Server};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tarn::protocol::client::{self, decode_reply};

/// Runs a second `tarn` on `addr` with its own data directory until it exits (at most 30 s);
/// returns its exit code and what it logged.
fn run_second_instance(addr: std::net::SocketAddr, shards: u32) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("dir");
    let shipped = include_str!("../conf/tarn.toml");
    let config_path = dir.path().join("tarn.toml");
    std::fs::write(&config_path, shipped).expect("config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .arg("--config")
        .arg(&config_path)
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--shards")
        .arg(shards.to_string())
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the second tarn");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut log = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut log)
        .expect("log");
    (status, log)
}

/// Connects and checks that the server answers a PING on the connection.
fn ping(addr: std::net::SocketAddr, sync: u64) {
    let mut client = Client::connect_to(addr);
    let mut request = Vec::new();
    client::encode_ping(&mut request, sync);
    client.send(&request);
    let packet = client.read_packet().expect("a reply");
    let reply = decode_reply(&packet).expect("decodes");
    assert!(!reply.is_error());
    assert_eq!(reply.sync(), sync);
}

/// `connections_served=N` summed over the shards' shutdown log lines.
fn connections_served(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|line| line.contains("traffic to other shards"))
        .filter_map(|line| {
            let at = line.find("connections_served=")? + "connections_served=".len();
            line[at..]
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

#[test]
fn a_second_server_on_the_same_port_fails_at_start() {
    let first = Server::start(2, "");
    let addr = first.addr;
    for shards in [1, 2] {
        let (status, log) = run_second_instance(addr, shards);
        assert!(
            !log.contains("listening on"),
            "a second tarn with {shards} shards listened on {addr}:\n{log}"
        );
        assert!(
            matches!(status, Some(code) if code != 0),
            "exit status {status:?}:\n{log}"
        );
        let message = format!("cannot listen on {addr}: address in use");
        assert!(log.contains(&message), "no `{message}` in:\n{log}");
    }
    // Every new connection still reaches the first server, and only it.
    const CONNECTIONS: u64 = 20;
    for sync in 0..CONNECTIONS {
        ping(addr, sync);
    }
    let (status, log) = first.stop_with_log();
    assert_eq!(status, Some(0));
    assert_eq!(
        connections_served(&log).iter().sum::<u64>(),
        CONNECTIONS,
        "{log}"
    );
}

#[test]
fn a_memory_quota_a_shard_cannot_hold_fails_at_start() {
    let dir = tempfile::tempdir().expect("dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--shards",
            "2",
            "--memory",
            "40GiB",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tarn");
    // A server that starts anyway is stopped, and the test fails on its log.
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let output = child.wait_with_output().expect("tarn's log");
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(!log.contains("listening on"), "{log}");
    assert!(
        matches!(output.status.code(), Some(code) if code != 0),
        "{:?}: {log}",
        output.status
    );
    let message = "memory 42949672960 over 2 shards is 21474836480 bytes a shard, more than \
                   the 16106127360 bytes of tuple pages a shard can hold: lower `memory` or \
                   raise `shards`";
    assert!(log.contains(message), "no `{message}` in:\n{log}");
}

#[test]
fn port_zero_serves_on_every_shard() {
    const CONNECTIONS: u64 = 12;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    for shards in 1..=cores.min(4) {
        let server = Server::start(shards, "");
        let clients: Vec<Client> = (0..CONNECTIONS)
            .map(|sync| {
                let mut client = Client::connect(&server);
                let mut request = Vec::new();
                client::encode_ping(&mut request, sync);
                client.send(&request);
                let packet = client.read_packet().expect("a reply");
                assert_eq!(decode_reply(&packet).expect("decodes").sync(), sync);
                client
            })
            .collect();
        drop(clients);
        let (status, log) = server.stop_with_log();
        assert_eq!(status, Some(0));
        if shards > 1 {
            // Sequential connects: each core serves its share, whichever accepted them.
            let per_shard = CONNECTIONS / u64::from(shards);
            assert_eq!(
                connections_served(&log),
                vec![per_shard; shards as usize],
                "{log}"
            );
        }
    }
}
