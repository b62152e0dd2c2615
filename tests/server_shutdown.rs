//! Graceful shutdown of the real binary: on SIGTERM tarn stops accepting, answers every
//! request it has read (their WAL writes included), closes the connections, closes the WALs
//! and exits 0; a restart finds every acknowledged write.

use crate::common;

use common::{Client, Server};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tarn::protocol::client::{self, decode_reply};

const WRITERS: u64 = 4;
const ROWS_PER_WRITER: u64 = 200_000;
/// Replaces each writer keeps in flight: many requests read and not yet answered when the
/// signal comes, on both shards (the keys of one connection hash to both).
const WINDOW: u64 = 512;
/// SIGTERM comes once this many writes were acknowledged.
const ACKNOWLEDGED_BEFORE_SIGNAL: usize = 20_000;

fn kv_tuple(id: u64) -> Vec<u8> {
    common::kv_tuple(id, &format!("value-{id}"))
}

/// What one writer saw: the syncs answered, in order, and whether any reply was an error.
#[derive(Default)]
struct Seen {
    answered: Vec<u64>,
    errors: Vec<String>,
}

/// Pipelines replaces of rows `first..first + count`, `WINDOW` in flight, from one thread
/// that sends and one that reads, until the server closes the connection.
fn write_rows(
    addr: std::net::SocketAddr,
    first: u64,
    count: u64,
    acknowledged: Arc<AtomicUsize>,
) -> Seen {
    let mut reader = Client::connect_to(addr);
    let mut writer = reader.stream().try_clone().expect("clone the socket");
    let answered_count = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicBool::new(false));
    let sender = {
        let (answered_count, closed) = (answered_count.clone(), closed.clone());
        std::thread::spawn(move || {
            let mut next = first;
            let end = first + count;
            while next < end && !closed.load(Ordering::Relaxed) {
                let in_flight = next - first - answered_count.load(Ordering::Relaxed) as u64;
                if in_flight >= WINDOW {
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                }
                let mut batch = Vec::new();
                let batch_end = (next + (WINDOW - in_flight).min(64)).min(end);
                for id in next..batch_end {
                    client::encode_replace(&mut batch, id, 512, &kv_tuple(id));
                }
                if writer.write_all(&batch).is_err() {
                    return;
                }
                next = batch_end;
            }
        })
    };
    let mut seen = Seen::default();
    while let Some(packet) = reader.read_packet() {
        let reply = decode_reply(&packet).expect("reply decodes");
        if reply.is_error() {
            seen.errors.push(format!(
                "sync {}: {:?}",
                reply.sync(),
                reply.error_message()
            ));
        } else {
            acknowledged.fetch_add(1, Ordering::Relaxed);
        }
        seen.answered.push(reply.sync());
        answered_count.fetch_add(1, Ordering::Relaxed);
    }
    closed.store(true, Ordering::Relaxed);
    sender.join().expect("sender");
    seen
}

fn all_ids(addr: std::net::SocketAddr) -> BTreeSet<u64> {
    let rows = common::kv_rows(addr).into_iter();
    rows.map(|(id, tuple)| {
        assert_eq!(tuple, kv_tuple(id), "row {id} is whole");
        id
    })
    .collect()
}

fn send_signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill");
    assert!(status.success());
}

/// The number after `name=` in the first log line that contains `message`.
fn logged_count(log: &str, message: &str, name: &str) -> Option<u64> {
    let line = log.lines().find(|line| line.contains(message))?;
    let at = line.find(&format!("{name}="))? + name.len() + 1;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn sigterm_mid_stream(wal_mode: &str) {
    let dir = tempfile::tempdir().expect("dir");
    let args = ["--wal-mode", wal_mode];
    let server = Server::start_in(dir.path(), 2, "", &args);
    let addr = server.addr;
    let mut idle = Client::connect_to(addr);
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let acknowledged = acknowledged.clone();
            let first = 1 + writer * ROWS_PER_WRITER;
            std::thread::spawn(move || write_rows(addr, first, ROWS_PER_WRITER, acknowledged))
        })
        .collect();
    while acknowledged.load(Ordering::Relaxed) < ACKNOWLEDGED_BEFORE_SIGNAL {
        std::thread::sleep(Duration::from_millis(1));
    }
    let signalled = Instant::now();
    send_signal(server.pid(), "TERM");
    let seen: Vec<Seen> = writers
        .into_iter()
        .map(|writer| writer.join().expect("writer"))
        .collect();
    // The idle connection is closed too, without a reply.
    assert_eq!(idle.read_packet(), None);
    let (status, log) = server.stop_with_log();
    eprintln!(
        "{wal_mode}: exit {status:?} {} ms after SIGTERM",
        signalled.elapsed().as_millis()
    );
    let mut acknowledged = BTreeSet::new();
    for (writer, seen) in seen.iter().enumerate() {
        assert!(seen.errors.is_empty(), "writer {writer}: {:?}", seen.errors);
        // Every request is answered in order up to where the connection closed.
        let first = 1 + writer as u64 * ROWS_PER_WRITER;
        let expected: Vec<u64> = (first..first + seen.answered.len() as u64).collect();
        assert!(
            seen.answered == expected,
            "writer {writer} answered out of order"
        );
        assert!(
            (seen.answered.len() as u64) < ROWS_PER_WRITER,
            "writer {writer} finished before the signal"
        );
        acknowledged.extend(seen.answered.iter().copied());
    }
    eprintln!("{wal_mode}: {} writes acknowledged", acknowledged.len());
    assert_eq!(status, Some(0), "{log}");
    assert_eq!(
        logged_count(&log, "shutdown finished", "cut"),
        Some(0),
        "{log}"
    );

    let restarted = Server::start_in(dir.path(), 2, "", &args);
    let present = all_ids(restarted.addr);
    let missing: Vec<_> = acknowledged.difference(&present).take(5).collect();
    assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
    assert_eq!(restarted.stop(), Some(0));
}

#[test]
fn sigterm_answers_every_write_read_in_fsync_mode() {
    sigterm_mid_stream("fsync");
}

#[test]
fn sigterm_answers_every_write_read_in_write_mode() {
    sigterm_mid_stream("write");
}

/// A client that sends and never reads its replies keeps its connection busy forever; the
/// shutdown cuts it after the grace period and still exits 0, saying so.
#[test]
fn sigterm_cuts_a_connection_that_does_not_finish() {
    let server = Server::start(2, "");
    let mut stream = std::net::TcpStream::connect(server.addr).expect("connect");
    let mut greeting = [0u8; 128];
    stream.read_exact(&mut greeting).expect("greeting");
    let mut sender = stream.try_clone().expect("clone");
    let value = "x".repeat(4096);
    // Replies of 4 KiB each, never read: the server's writes stall once the socket buffers
    // are full, with requests still unanswered.
    let flooding = std::thread::spawn(move || {
        for id in 0..1_000_000u64 {
            let mut request = Vec::new();
            client::encode_replace(&mut request, id, 512, &common::kv_tuple(id % 64, &value));
            if sender.write_all(&request).is_err() {
                return;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    send_signal(server.pid(), "TERM");
    let (status, log) = server.stop_with_log_within(Duration::from_secs(30));
    assert_eq!(status, Some(0), "{log}");
    assert_eq!(
        logged_count(&log, "shutdown finished", "cut"),
        Some(1),
        "{log}"
    );
    drop(stream);
    flooding.join().expect("flooding client");
}
