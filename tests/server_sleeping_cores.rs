//! Cores that sleep as soon as they run out of work (`--idle-poll-us 0`) are woken by every
//! request that hops to them. Going to sleep and being notified race (the sleeper checks its
//! inboxes once more after saying it sleeps; a sender checks whether to wake it after
//! publishing): a wake-up lost there leaves a request waiting until some timer of the
//! sleeping core fires, tens of milliseconds later: with glommio's notifications disabled
//! this test got to its 2,009th request in 60 s. It bounds the whole run at 60 s, a hundred
//! times what it takes (under a second): a liveness bound, not a measure of speed.

use crate::common;

use common::{encode_kv_select, kv_tuple, Client, Server, KV};
use std::time::{Duration, Instant};
use tarn::msgpack::{read_value, Value};
use tarn::placement::shard_of_key;
use tarn::protocol::client::{self, decode_reply};

const SHARDS: u32 = 2;
const KEYS: u64 = 2_000;
/// Every this many requests the client pauses, long enough for both cores to go to sleep.
const PAUSE_EVERY: u64 = 50;
const PAUSE: Duration = Duration::from_millis(2);
/// Both passes over `KEYS` keys; they take well under a second here.
const RUN_BOUND: Duration = Duration::from_secs(60);

fn round_trip(client: &mut Client, request: &[u8], sync: u64, started: Instant) -> Vec<u8> {
    assert!(
        started.elapsed() < RUN_BOUND,
        "sync {sync} after {RUN_BOUND:?}: requests wait for wake-ups that do not come"
    );
    client.send(request);
    let packet = client
        .read_packet()
        .unwrap_or_else(|| panic!("no reply to sync {sync}: a core slept through its wake-up"));
    let reply = decode_reply(&packet).expect("a reply that decodes");
    assert!(!reply.is_error(), "sync {sync}: {:?}", reply.error_code());
    assert_eq!(reply.sync(), sync);
    reply.data().expect("a data reply").to_vec()
}

#[test]
fn requests_that_hop_wake_a_sleeping_core() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_in(dir.path(), SHARDS, "", &["--idle-poll-us", "0"]);
    let mut client = Client::connect(&server);
    let hopping = (0..KEYS)
        .filter(|&id| shard_of_key(&id.to_be_bytes(), SHARDS as usize) == 1)
        .count();
    assert!(
        hopping > 500,
        "both cores own keys: {hopping} of {KEYS} on core 1"
    );

    let started = Instant::now();
    for id in 0..KEYS {
        let mut request = Vec::new();
        client::encode_replace(&mut request, id, KV, &kv_tuple(id, &format!("v{id}")));
        round_trip(&mut client, &request, id, started);
        if id % PAUSE_EVERY == 0 {
            std::thread::sleep(PAUSE);
        }
    }
    for id in 0..KEYS {
        let sync = KEYS + id;
        let mut request = Vec::new();
        encode_kv_select(&mut request, sync, 0, id, 1);
        let data = round_trip(&mut client, &request, sync, started);
        let mut tuples: &[u8] = &data;
        assert_eq!(read_value(&mut tuples), Ok(Value::Array(1)), "key {id}");
        assert_eq!(tuples, kv_tuple(id, &format!("v{id}")), "key {id}");
        if id % PAUSE_EVERY == 0 {
            std::thread::sleep(PAUSE);
        }
    }
    drop(client);
    assert_eq!(server.stop(), Some(0));
}
