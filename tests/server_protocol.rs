//! The real `tarn` binary over raw IPROTO: pipelining, bad input that hurts no one else,
//! fan-out across shards, and a clean stop on SIGTERM.

mod common;

use common::{kv_tuple, Client};
use tarn::protocol::client::{self, decode_reply};
use tarn::protocol::request::Select;
use tarn::protocol::ErrorCode;

#[test]
fn a_thousand_pipelined_requests_are_all_answered_in_order() {
    let server = common::Server::start(2, "");
    let mut client = Client::connect(&server);
    let mut batch = Vec::new();
    for sync in 0..1000u64 {
        if sync % 2 == 0 {
            client::encode_ping(&mut batch, sync);
        } else {
            client::encode_insert(&mut batch, sync, 512, &kv_tuple(sync, "v"));
        }
    }
    client.send(&batch);
    for sync in 0..1000u64 {
        let packet = client.read_packet().expect("reply");
        let reply = decode_reply(&packet).expect("decodes");
        assert_eq!(reply.sync(), sync);
        assert!(
            !reply.is_error(),
            "sync {sync}: {:?}",
            reply.error_message()
        );
    }
}

#[test]
fn fan_out_select_merges_shards_in_index_order_with_offset_and_limit() {
    let server = common::Server::start(2, "");
    let mut client = Client::connect(&server);
    let mut batch = Vec::new();
    for id in (1..=50u64).rev() {
        client::encode_replace(&mut batch, id, 512, &kv_tuple(id, "x"));
    }
    client.send(&batch);
    for _ in 0..50 {
        assert!(!decode_reply(&client.read_packet().unwrap())
            .unwrap()
            .is_error());
    }
    let select = |iterator: u32, key: &[u8], offset: u32, limit: u32| {
        let mut out = Vec::new();
        client::encode_select(
            &mut out,
            7,
            &Select {
                space_id: 512,
                index_id: 0,
                limit,
                offset,
                iterator,
                key,
                fetch_position: false,
                after_position: None,
                after_tuple: None,
            },
        );
        out
    };
    // GE 10, offset 5, limit 4 => ids 15..=18; LE 10 (descending), limit 3 => 10, 9, 8.
    for (request, expected) in [
        (select(5, &[0x91, 10], 5, 4), vec![15u64, 16, 17, 18]),
        (select(4, &[0x91, 10], 0, 3), vec![10, 9, 8]),
    ] {
        client.send(&request);
        let packet = client.read_packet().unwrap();
        let reply = decode_reply(&packet).unwrap();
        let mut data = reply.data().expect("data");
        let count = match tarn::storage::msgpack::read_value(&mut data).unwrap() {
            tarn::storage::msgpack::Value::Array(n) => n,
            other => panic!("{other:?}"),
        };
        let mut ids = Vec::new();
        for _ in 0..count {
            let tuple = tarn::storage::msgpack::take_value(&mut data).unwrap();
            ids.push(tuple[1] as u64);
        }
        assert_eq!(ids, expected);
    }
}

#[test]
fn bad_input_closes_only_the_offending_connection() {
    let server = common::Server::start(2, "");
    let mut healthy = Client::connect(&server);
    let mut bad_body = Client::connect(&server);
    // A known body key with the wrong type: error 20, and the connection goes on.
    bad_body.send(&[0x09, 0x82, 0x00, 0x01, 0x01, 0x05, 0x81, 0x10, 0xa1, b'x']);
    let packet = bad_body.read_packet().expect("an error reply");
    let reply = decode_reply(&packet).unwrap();
    assert_eq!(
        (reply.sync(), reply.error_code()),
        (5, Some(ErrorCode::ER_INVALID_MSGPACK))
    );
    let mut ping = Vec::new();
    client::encode_ping(&mut ping, 9);
    bad_body.send(&ping);
    assert_eq!(
        decode_reply(&bad_body.read_packet().unwrap())
            .unwrap()
            .sync(),
        9
    );
    // A broken frame: error 20 with sync 0, then the connection is closed.
    let mut broken = Client::connect(&server);
    broken.send(&[0xa1, b'x']);
    let packet = broken.read_packet().expect("an error reply");
    let reply = decode_reply(&packet).unwrap();
    assert_eq!(
        (reply.sync(), reply.error_code()),
        (0, Some(ErrorCode::ER_INVALID_MSGPACK))
    );
    assert!(broken.read_packet().is_none(), "connection closed");
    // Everyone else never noticed.
    healthy.send(&ping);
    assert_eq!(
        decode_reply(&healthy.read_packet().unwrap())
            .unwrap()
            .sync(),
        9
    );
}

#[test]
fn unknown_function_and_unsupported_requests_have_tarantools_codes() {
    let server = common::Server::start(1, "");
    let mut client = Client::connect(&server);
    let mut out = Vec::new();
    client::encode_call(&mut out, 1, "no.such.function", &[0x90]);
    client::encode_eval(&mut out, 2, "return 1", &[0x90]);
    client.send(&out);
    let first = client.read_packet().unwrap();
    let reply = decode_reply(&first).unwrap();
    assert_eq!(reply.error_code(), Some(ErrorCode::ER_NO_SUCH_PROC));
    assert_eq!(
        reply.error_message(),
        Some("Procedure 'no.such.function' is not defined")
    );
    let second = client.read_packet().unwrap();
    let reply = decode_reply(&second).unwrap();
    assert_eq!(reply.error_code(), Some(ErrorCode::ER_UNSUPPORTED));
    assert_eq!(
        reply.error_message(),
        Some("tarn does not support Lua (EVAL)")
    );
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    let server = common::Server::start(2, "");
    let _client = Client::connect(&server);
    assert_eq!(server.stop(), Some(0));
}
