//! What client connections cost the server in memory, measured as the real `tarn` process's
//! resident set (`VmRSS` in `/proc/PID/status`): a client cannot make it allocate by
//! announcing a large packet it never sends, an idle connection holds no buffers, and the
//! memory of closed connections goes back to the system.

use crate::common;

use common::Server;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// The server's resident set in bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .expect("VmRSS line");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kib * 1024
}

/// The largest resident set seen over `period`: growth that comes as the server gets to the
/// bytes sent is not missed by measuring too early.
fn rss_peak_over(pid: u32, period: Duration) -> u64 {
    let deadline = Instant::now() + period;
    let mut peak = rss_bytes(pid);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        peak = peak.max(rss_bytes(pid));
    }
    peak
}

/// The resident set once it has stopped falling for a while (memory freed as connections
/// close goes back over a few hundred milliseconds).
fn rss_settled(pid: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = rss_bytes(pid);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        let now = rss_bytes(pid);
        if now + MIB / 4 >= last {
            return now;
        }
        last = now;
    }
    last
}

/// Raises this process's descriptor limit to its hard limit: thousands of client sockets.
fn raise_open_files_limit(needed: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct given, nothing else.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    assert!(
        limit.rlim_cur >= needed,
        "this test needs {needed} descriptors; the hard limit is {}",
        limit.rlim_cur
    );
}

/// A client socket that has read the greeting and sends nothing more.
fn connect_idle(server: &Server) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut greeting = [0u8; 128];
    stream.read_exact(&mut greeting).expect("greeting");
    stream
}

/// Whether the server still has the connection open: nothing to read, no end of stream.
fn still_open(stream: &mut TcpStream) -> bool {
    stream.set_nonblocking(true).expect("nonblocking");
    let mut byte = [0u8; 1];
    let open = matches!(stream.read(&mut byte), Err(error) if error.kind() == std::io::ErrorKind::WouldBlock);
    stream.set_nonblocking(false).expect("blocking");
    open
}

#[test]
fn a_size_prefix_alone_does_not_allocate_the_announced_packet() {
    const CONNECTIONS: usize = 150;
    raise_open_files_limit(CONNECTIONS as u64 + 100);
    let server = Server::start(2, "");
    let pid = server.pid();
    let before = rss_settled(pid);
    let mut streams: Vec<TcpStream> = (0..CONNECTIONS).map(|_| connect_idle(&server)).collect();
    // MP_UINT32 16 MiB: the largest packet the shipped `max_packet_size` allows; no body follows.
    let prefix = [0xce, 0x01, 0x00, 0x00, 0x00];
    for stream in &mut streams {
        stream.write_all(&prefix).expect("send the size prefix");
    }
    let peak = rss_peak_over(pid, Duration::from_secs(2));
    // The connections wait for their packets; none was refused.
    for stream in &mut streams {
        assert!(still_open(stream), "the server closed a waiting connection");
    }
    let growth = peak.saturating_sub(before);
    eprintln!(
        "{CONNECTIONS} size prefixes of 16 MiB: RSS {} -> {} MiB (+{} KiB)",
        before / MIB,
        peak / MIB,
        growth / 1024
    );
    assert!(
        growth < 50 * MIB,
        "RSS grew by {} MiB for {CONNECTIONS} five-byte size prefixes",
        growth / MIB
    );
    drop(streams);
    assert_eq!(server.stop(), Some(0));
}

#[test]
fn idle_connections_cost_little_and_give_it_back_when_closed() {
    const CONNECTIONS: usize = 5000;
    raise_open_files_limit(CONNECTIONS as u64 + 100);
    let server = Server::start(2, "");
    let pid = server.pid();
    let before = rss_settled(pid);
    let mut streams: Vec<TcpStream> = (0..CONNECTIONS).map(|_| connect_idle(&server)).collect();
    let open = rss_peak_over(pid, Duration::from_secs(1));
    for stream in &mut streams {
        assert!(still_open(stream), "the server closed an idle connection");
    }
    drop(streams);
    let after = rss_settled(pid);
    let growth = open.saturating_sub(before);
    let kept = after.saturating_sub(before);
    eprintln!(
        "{CONNECTIONS} idle connections: RSS {} -> {} MiB (+{} KiB, {} B each); after close {} MiB (+{} KiB)",
        before / MIB,
        open / MIB,
        growth / 1024,
        growth / CONNECTIONS as u64,
        after / MIB,
        kept / 1024
    );
    assert!(
        growth < 100 * MIB,
        "RSS grew by {} MiB for {CONNECTIONS} idle connections",
        growth / MIB
    );
    assert!(
        kept < 8 * MIB,
        "RSS stayed {} MiB above the start after {CONNECTIONS} connections closed",
        kept / MIB
    );
    assert_eq!(server.stop(), Some(0));
}

/// `box.info.net` of the server, as `(connections, memory)`.
fn box_info_net(client: &mut common::Client, sync: u64) -> (u64, u64) {
    use tarn::msgpack::{read_value, take_value, Value};
    let mut call = Vec::new();
    tarn::protocol::client::encode_call(&mut call, sync, "box.info", &[0x90]);
    client.send(&call);
    let packet = client.read_packet().expect("box.info reply");
    let reply = tarn::protocol::client::decode_reply(&packet).expect("decodes");
    let mut data = reply.data().expect("data");
    assert!(matches!(read_value(&mut data), Ok(Value::Array(1))));
    let Ok(Value::Map(pairs)) = read_value(&mut data) else {
        panic!("box.info is a map");
    };
    for _ in 0..pairs {
        let key = read_value(&mut data).expect("key");
        if key != Value::Str(b"net") {
            take_value(&mut data).expect("value");
            continue;
        }
        assert!(matches!(read_value(&mut data), Ok(Value::Map(2))));
        let mut fields = [0u64; 2];
        for (field, name) in fields.iter_mut().zip([&b"connections"[..], b"memory"]) {
            assert_eq!(read_value(&mut data).expect("name"), Value::Str(name));
            let Ok(Value::Uint(value)) = read_value(&mut data) else {
                panic!("net.{} is a number", String::from_utf8_lossy(name));
            };
            *field = value;
        }
        return (fields[0], fields[1]);
    }
    panic!("box.info has no net");
}

#[test]
fn box_info_counts_the_connections_and_their_memory() {
    const IDLE: usize = 100;
    let server = Server::start(2, "");
    let mut client = common::Client::connect(&server);
    let (connections, alone_bytes) = box_info_net(&mut client, 1);
    assert_eq!(connections, 1);
    let idle: Vec<TcpStream> = (0..IDLE).map(|_| connect_idle(&server)).collect();
    let (connections, memory_bytes) = box_info_net(&mut client, 2);
    assert_eq!(connections, IDLE as u64 + 1);
    // Each idle connection holds its task and session, and no buffer.
    let per_idle = memory_bytes.saturating_sub(alone_bytes) / IDLE as u64;
    eprintln!(
        "box.info.net.memory: {alone_bytes} B with one connection, {per_idle} B per idle one"
    );
    assert!(
        per_idle > 0 && per_idle <= 16 * 1024,
        "{per_idle} B per idle connection"
    );
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(10);
    while box_info_net(&mut client, 3).0 != 1 {
        assert!(
            Instant::now() < deadline,
            "closed connections still counted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.stop(), Some(0));
}

/// In process: a session that ran a deep pipeline of requests to another core keeps little
/// of it once it shrinks its buffers, as its connection has it do when it goes idle.
#[test]
fn an_idle_session_keeps_little_of_a_deep_pipeline() {
    use tarn::config::{Config, SHIPPED_CONFIG_TOML};
    use tarn::server::session::Session;
    const PIPELINE: u64 = 8000;
    const KEPT_BYTES: usize = 16 * 1024;
    let mut config = Config::from_toml_str(SHIPPED_CONFIG_TOML).expect("shipped config");
    config.data_dir = tempfile::tempdir().expect("data dir").keep();
    let sizes = tarn::server::start_cores(config, 2, |core| async move {
        if core.id() != 0 {
            return None;
        }
        let mut session = Session::new(core);
        let (mut framed, mut out) = (Vec::new(), Vec::new());
        for id in 0..PIPELINE {
            common::encode_kv_select(&mut framed, id, 0, id, 1);
        }
        let mut rest = &framed[..];
        while let Some((packet, used)) = tarn::protocol::frame::split_frame(rest).expect("frame") {
            session.submit(packet, &mut out).await;
            rest = &rest[used..];
        }
        session.finish(&mut out).await;
        let grown = session.buffer_bytes();
        session.shrink_buffers(KEPT_BYTES);
        Some((grown, session.buffer_bytes()))
    })
    .expect("cores");
    let (grown, kept) = sizes[0].expect("core 0 ran the session");
    eprintln!("session buffers after {PIPELINE} requests: {grown} B, shrunk {kept} B");
    assert!(
        grown > 8 * KEPT_BYTES,
        "the pipeline grew the buffers: {grown} B"
    );
    assert!(kept <= 4 * KEPT_BYTES, "{kept} B kept");
}
