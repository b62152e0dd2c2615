//! The Prometheus endpoint of the real binary (`--metrics-listen 127.0.0.1:0`, its address
//! read from the "metrics on ADDR" log line): counters that must move by exactly what a
//! client did, space lengths once the shards have published, per-shard series that sum to
//! the totals, a scrape taken while a writer runs that `promtool check metrics` accepts
//! (when promtool is installed; `.ci/run` installs it, and under CI=true it must be there).

use crate::common::{self, Client, Server};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One scrape: every sample by its name and its labels other than `alias`, sorted.
struct Scrape {
    text: String,
    samples: BTreeMap<(String, String), f64>,
}

impl Scrape {
    /// The sample `name` with exactly these labels (besides `alias`); panics if absent.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let key = (name.to_owned(), label_text(labels));
        match self.samples.get(&key) {
            Some(value) => *value,
            None => panic!("no sample {name}{{{}}} in:\n{}", key.1, self.text),
        }
    }

    /// The sum over shards of `name` with these other labels.
    fn shard_sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let wanted = label_text(labels);
        let of_shards = self.samples.iter().filter(|((sample, sample_labels), _)| {
            let others: Vec<&str> = sample_labels
                .split(',')
                .filter(|label| !label.starts_with("shard=") && !label.is_empty())
                .collect();
            sample == name && sample_labels.contains("shard=") && others.join(",") == wanted
        });
        let (count, sum) = of_shards.fold((0, 0.0), |(count, sum), (_, value)| {
            (count + 1, sum + value)
        });
        assert!(count > 0, "no per-shard samples of {name}:\n{}", self.text);
        sum
    }
}

fn label_text(labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    labels.sort();
    labels.join(",")
}

/// Parses the exposition text (as tarn writes it: no spaces or commas inside label values).
fn parse(text: String) -> Scrape {
    let mut samples = BTreeMap::new();
    for line in text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}')),
            None => (series, ""),
        };
        let mut labels: Vec<&str> = labels
            .split(',')
            .filter(|l| !l.starts_with("alias="))
            .collect();
        labels.sort();
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
        let previous = samples.insert((name.to_owned(), labels.join(",")), value);
        assert!(previous.is_none(), "sample written twice: {line}");
    }
    Scrape { text, samples }
}

/// `GET path` over HTTP/1.0: the status code and the body.
fn http_get(address: SocketAddr, path: &str) -> (u32, String) {
    let mut stream = TcpStream::connect(address).expect("connect to the metrics endpoint");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = format!("GET {path} HTTP/1.0\r\nHost: tarn\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("a whole response");
    let (head, body) = response.split_once("\r\n\r\n").expect("headers end");
    let status = head.split(' ').nth(1).and_then(|code| code.parse().ok());
    (status.expect("a status code"), body.to_owned())
}

fn scrape(address: SocketAddr) -> Scrape {
    let (status, body) = http_get(address, "/metrics");
    assert_eq!(status, 200, "{body}");
    parse(body)
}

/// Waits up to 5 s for a scrape that `holds`; the last scrape otherwise, with the panic.
fn scrape_until(address: SocketAddr, what: &str, holds: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let scrape = scrape(address);
        if holds(&scrape) {
            return scrape;
        }
        assert!(Instant::now() < deadline, "never: {what}\n{}", scrape.text);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The endpoint's address, from the log line tarn writes when it binds.
fn metrics_address(server: &Server) -> SocketAddr {
    let log = server.log_so_far();
    let at = log.find("metrics on ").expect("a \"metrics on ADDR\" line") + "metrics on ".len();
    let address: String = log[at..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    address.parse().expect("an address")
}

/// tarn on two shards with the endpoint on a free port; its data directory lives as long as
/// the returned one.
fn start() -> (tempfile::TempDir, Server, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--metrics-listen", "127.0.0.1:0"];
    let server = Server::start_in(dir.path(), 2, common::TEST_CONFIG_EXTRA, &args);
    let address = metrics_address(&server);
    (dir, server, address)
}

/// Sends `packets` pipelined and reads one reply each; the reply bytes with their prefixes.
fn exchange(client: &mut Client, packets: &[u8], count: usize) -> usize {
    client.send(packets);
    let replies = (0..count).map(|_| client.read_packet().expect("a reply"));
    replies.map(|reply| reply.len() + 5).sum()
}

#[test]
fn counters_move_by_what_a_client_did_and_shards_sum_to_the_totals() {
    let (_dir, server, address) = start();
    let before = scrape(address);
    let mut client = Client::connect(&server);
    let (rows, selects) = (300u64, 40u64);
    let mut packets = Vec::new();
    for id in 0..rows {
        let tuple = common::kv_tuple(id, "metrics");
        tarn::protocol::client::encode_replace(&mut packets, id, common::KV, &tuple);
    }
    for id in 0..selects {
        common::encode_kv_select(&mut packets, rows + id, 0, id, 1);
    }
    tarn::protocol::client::encode_ping(&mut packets, 0);
    let reply_bytes = exchange(&mut client, &packets, (rows + selects + 1) as usize);
    let delta = |scrape: &Scrape, name: &str, labels: &[(&str, &str)]| {
        scrape.value(name, labels) - before.value(name, labels)
    };
    let sent = (128 + reply_bytes) as f64;
    // A reply's bytes are counted just after the write that sent them returns.
    let after = scrape_until(address, "every reply byte counted", |scrape| {
        delta(scrape, "tnt_net_sent_total", &[]) == sent
    });
    assert_eq!(
        delta(&after, "tnt_net_received_total", &[]),
        packets.len() as f64
    );
    assert_eq!(
        delta(&after, "tnt_net_requests_total", &[]),
        (rows + selects + 1) as f64
    );
    let op = |operation| [("operation", operation)];
    assert_eq!(
        delta(&after, "tnt_stats_op_total", &op("replace")),
        rows as f64
    );
    assert_eq!(
        delta(&after, "tnt_stats_op_total", &op("select")),
        selects as f64
    );
    assert_eq!(delta(&after, "tnt_stats_op_total", &op("insert")), 0.0);
    assert_eq!(delta(&after, "tnt_net_connections_total", &[]), 1.0);
    assert_eq!(after.value("tnt_net_connections_current", &[]), 1.0);
    let sums = [
        ("tarn_requests_total", "tnt_net_requests_total"),
        ("tarn_net_received_bytes_total", "tnt_net_received_total"),
        ("tarn_net_sent_bytes_total", "tnt_net_sent_total"),
        ("tarn_connections_total", "tnt_net_connections_total"),
        ("tarn_connections", "tnt_net_connections_current"),
    ];
    for (per_shard, total) in sums {
        assert_eq!(
            after.shard_sum(per_shard, &[]),
            after.value(total, &[]),
            "{per_shard}"
        );
    }
    for operation in ["replace", "select", "call"] {
        let total = after.value("tnt_stats_op_total", &op(operation));
        assert_eq!(
            after.shard_sum("tarn_operations_total", &op(operation)),
            total
        );
    }
    // The shards publish their engines' numbers once a second.
    let kv = [("name", "kv"), ("engine", "memtx")];
    let published = scrape_until(address, "kv's length published", |scrape| {
        scrape.value("tnt_space_len", &kv) == rows as f64
    });
    assert!(published.value("tnt_space_bsize", &kv) > 0.0);
    let primary = [("name", "kv"), ("index_name", "primary")];
    assert!(published.value("tnt_space_index_bsize", &primary) > 0.0);
    let data = published.value("tnt_info_memory_data", &[]);
    assert_eq!(published.shard_sum("tarn_memory_data_bytes", &[]), data);
    let index = published.value("tnt_info_memory_index", &[]);
    assert_eq!(published.shard_sum("tarn_memory_index_bytes", &[]), index);
    let wal_rows = published.shard_sum("tarn_wal_rows_total", &[]);
    assert_eq!(wal_rows, rows as f64, "one WAL row a replace");
    assert_eq!(published.value("tnt_info_lsn", &[]), rows as f64);
    // Two shards, keys spread over both, one connection: some requests hopped.
    assert!(published.shard_sum("tarn_hops_total", &[]) > 0.0);
    assert_eq!(published.value("tnt_read_only", &[]), 0.0);
    assert!(published.value("tnt_cpu_user_time", &[]) > 0.0);
    drop(client);
    server.stop();
}

#[test]
fn a_scrape_taken_while_a_writer_runs_is_valid_and_counters_only_grow() {
    let (_dir, server, address) = start();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = std::thread::spawn({
        let (server_address, stop) = (server.addr, stop.clone());
        move || {
            let mut client = Client::connect_to(server_address);
            let mut id = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mut packets = Vec::new();
                for _ in 0..50 {
                    let tuple = common::kv_tuple(id, "load");
                    tarn::protocol::client::encode_replace(&mut packets, id, common::KV, &tuple);
                    id += 1;
                }
                exchange(&mut client, &packets, 50);
            }
            id
        }
    });
    let mut previous: Option<Scrape> = None;
    for _ in 0..10 {
        let scrape = scrape(address);
        if let Some(previous) = &previous {
            for name in [
                "tnt_net_requests_total",
                "tnt_net_received_total",
                "tnt_net_sent_total",
            ] {
                assert!(
                    scrape.value(name, &[]) >= previous.value(name, &[]),
                    "{name} went back"
                );
            }
        }
        previous = Some(scrape);
        std::thread::sleep(Duration::from_millis(50));
    }
    let last = previous.expect("scraped");
    promtool_check(&last.text);
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().expect("the writer");
    let done = scrape_until(address, "every replace counted", |scrape| {
        scrape.value("tnt_stats_op_total", &[("operation", "replace")]) == written as f64
    });
    assert!(done.value("tnt_net_requests_total", &[]) >= written as f64);
    let (status, _) = http_get(address, "/elsewhere");
    assert_eq!(status, 404);
    server.stop();
}

/// `promtool check metrics` on `text`, when promtool is installed (it must be under CI).
fn promtool_check(text: &str) {
    let spawned = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
            panic!("promtool is not installed (.ci/run installs Debian's prometheus): {error}")
        }
        Err(error) => {
            eprintln!("promtool check skipped: {error} (apt-get install prometheus)");
            return;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics failed:\n{}{}\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
