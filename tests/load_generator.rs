//! `perf-simple-query --connect`, the load generator, as a user runs it: against the real
//! `tarn`, and against a server that greets and then never answers.

use crate::common;

use common::Server;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs the load generator with `args` (split at spaces), killing it (and failing) if it has
/// not ended within `limit`.
fn run_load_generator(args: &str, limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_perf-simple-query"))
        .args(args.split_whitespace())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start perf-simple-query");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("perf-simple-query still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn a_fixed_count_of_gets_against_tarn_ends_with_every_reply_and_no_error() {
    let server = Server::start(2, "");
    let addr = server.addr;
    let output = run_load_generator(
        &format!(
            "--connect {addr} --smp 1 --conns 2 --pipeline 8 --partitions 500 \
             --operations-per-shard 3000 --random-seed 7"
        ),
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("\n3000 operations, 0 errors\n"), "{stdout}");
}

#[test]
fn select_secondary_populates_customers_and_reads_them_without_error() {
    use tarn::msgpack::{read_value, Value};
    use tarn::protocol::client::{decode_reply, encode_select};
    use tarn::protocol::request::Select;
    let server = Server::start(2, "");
    let addr = server.addr;
    let output = run_load_generator(
        &format!(
            "--connect {addr} --smp 1 --conns 2 --pipeline 8 --partitions 500 \
             --operations-per-shard 2000 --random-seed 7 --select-secondary 10"
        ),
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("\n2000 operations, 0 errors\n"), "{stdout}");
    // The rows it read are the customers rows 0..500 it populated, and nothing in kv.
    let count = |space_id| {
        let mut client = common::Client::connect(&server);
        let mut request = Vec::new();
        let select = Select {
            space_id,
            index_id: 0,
            limit: u32::MAX,
            offset: 0,
            iterator: 2,
            key: &[0x90],
            fetch_position: false,
            after_position: None,
            after_tuple: None,
        };
        encode_select(&mut request, 1, &select);
        client.send(&request);
        let packet = client.read_packet().expect("a reply");
        let reply = decode_reply(&packet).expect("decodes");
        let mut data = reply.data().expect("rows");
        match read_value(&mut data).expect("an array") {
            Value::Array(rows) => rows,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!((count(513), count(512)), (500, 0));
}

/// A server that sends a Tarantool greeting on every connection, then reads and never
/// answers.
fn silent_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut greeting = format!(
                    "{:<63}\n",
                    "Tarantool 2.6.0 (Binary) 00000000-0000-0000-0000-000000000000"
                );
                greeting.push_str(&format!(
                    "{:<63}\n",
                    "c2FsdHNhbHRzYWx0c2FsdHNhbHRzYWx0c2FsdHNhbHQ="
                ));
                assert_eq!(greeting.len(), 128);
                if stream.write_all(greeting.as_bytes()).is_err() {
                    return;
                }
                let mut sink = [0u8; 4096];
                while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

#[test]
fn a_server_that_stops_answering_fails_the_run_after_io_timeout() {
    let addr = silent_server().to_string();
    let output = run_load_generator(
        &format!(
            "--connect {addr} --no-populate --smp 2 --conns 3 --pipeline 4 --duration 30 \
             --io-timeout 1"
        ),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{addr} sent no reply for 1 s (--io-timeout)")),
        "{stderr}"
    );
}
