//! Connections are spread evenly over the cores, whichever core the kernel hands each accept
//! to: a core serving more connections than its share would be the server's bottleneck.

use crate::common;

use common::{Client, Server};
use tarn::protocol::client::{self, decode_reply};

const SHARDS: u32 = 2;
/// Sequential connects, so every placement sees the ones before it. A split left to the
/// kernel's hash of the client ports comes out exactly even only about one time in seven.
const CONNECTIONS: u64 = 32;

/// `connections_served=N` of each shard's shutdown log line, by shard.
fn served_by_shard(log: &str) -> Vec<(u32, u64)> {
    let field = |line: &str, name: &str| -> Option<u64> {
        let at = line.find(name)? + name.len();
        line[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let mut served: Vec<(u32, u64)> = log
        .lines()
        .filter(|line| line.contains("traffic to other shards"))
        .filter_map(|line| {
            Some((
                field(line, " shard=")? as u32,
                field(line, "connections_served=")?,
            ))
        })
        .collect();
    served.sort();
    served
}

#[test]
fn connections_are_spread_evenly_over_the_cores() {
    let server = Server::start(SHARDS, "");
    let mut clients: Vec<Client> = (0..CONNECTIONS).map(|_| Client::connect(&server)).collect();
    // Every connection is served wherever it went: each answers a PING.
    for (sync, client) in clients.iter_mut().enumerate() {
        let mut ping = Vec::new();
        client::encode_ping(&mut ping, sync as u64);
        client.send(&ping);
        let packet = client.read_packet().expect("a reply");
        let reply = decode_reply(&packet).expect("a reply that decodes");
        assert!(!reply.is_error());
        assert_eq!(reply.sync(), sync as u64);
    }
    drop(clients);
    let (status, log) = server.stop_with_log();
    assert_eq!(status, Some(0));
    let half = CONNECTIONS / u64::from(SHARDS);
    assert_eq!(
        served_by_shard(&log),
        vec![(0, half), (1, half)],
        "log:\n{log}"
    );
}
