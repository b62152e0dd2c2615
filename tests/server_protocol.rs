//! The real `tarn` binary over raw IPROTO: pipelining, bad input that hurts no one else,
//! fan-out across shards, and a clean stop on SIGTERM.

use crate::common;

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
        let count = match tarn::msgpack::read_value(&mut data).unwrap() {
            tarn::msgpack::Value::Array(n) => n,
            other => panic!("{other:?}"),
        };
        let mut ids = Vec::new();
        for _ in 0..count {
            let tuple = tarn::msgpack::take_value(&mut data).unwrap();
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

/// The shipped config with these limits instead of its own.
fn limited_config(max_connections: u32, max_packet_size: &str) -> String {
    let shipped = include_str!("../conf/tarn.toml");
    let limited = shipped
        .replace(
            "max_connections = 10000",
            &format!("max_connections = {max_connections}"),
        )
        .replace(
            r#"max_packet_size = "16MiB""#,
            &format!(r#"max_packet_size = "{max_packet_size}""#),
        );
    assert_ne!(limited, shipped, "the shipped config still has these keys");
    limited
}

#[test]
fn a_packet_over_max_packet_size_closes_only_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::Server::try_start_with(dir.path(), &limited_config(100, "1KiB"), 2, &[])
        .expect("starts");
    let mut healthy = Client::connect(&server);
    let mut big = Client::connect(&server);
    let mut request = Vec::new();
    client::encode_replace(&mut request, 3, 512, &kv_tuple(1, &"x".repeat(2000)));
    big.send(&request);
    assert!(
        big.read_packet().is_none(),
        "the oversized packet's connection is closed"
    );
    let mut ping = Vec::new();
    client::encode_ping(&mut ping, 4);
    healthy.send(&ping);
    assert_eq!(
        decode_reply(&healthy.read_packet().unwrap())
            .unwrap()
            .sync(),
        4
    );
}

#[test]
fn connections_over_max_connections_are_closed_and_the_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::Server::try_start_with(dir.path(), &limited_config(2, "16MiB"), 1, &[])
        .expect("starts");
    let mut first = Client::connect(&server);
    let mut second = Client::connect(&server);
    // The third is accepted by the kernel and closed by tarn before its greeting.
    let mut third = std::net::TcpStream::connect(server.addr).expect("tcp connect");
    third
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        std::io::Read::read(&mut third, &mut byte).unwrap_or(0),
        0,
        "closed without a greeting"
    );
    let mut ping = Vec::new();
    client::encode_ping(&mut ping, 8);
    for client in [&mut first, &mut second] {
        client.send(&ping);
        assert_eq!(
            decode_reply(&client.read_packet().unwrap()).unwrap().sync(),
            8
        );
    }
    // A slot frees when a client leaves.
    drop(first);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut fourth = Client::connect(&server);
    fourth.send(&ping);
    assert_eq!(
        decode_reply(&fourth.read_packet().unwrap()).unwrap().sync(),
        8
    );
}

/// A crud call framed as one packet: `header` (a map's bytes), then `{FUNCTION_NAME: name,
/// TUPLE: args}` with `args` as given (whole or not).
fn crud_packet(header: &[u8], name: &str, args: &[u8]) -> Vec<u8> {
    let mut body = vec![0x82, 0x22, 0xa0 | name.len() as u8];
    body.extend_from_slice(name.as_bytes());
    body.push(0x21);
    body.extend_from_slice(args);
    let len = (header.len() + body.len()) as u32;
    let mut packet = vec![0xce];
    packet.extend_from_slice(&len.to_be_bytes());
    packet.extend_from_slice(header);
    packet.extend_from_slice(&body);
    packet
}

/// The crud decoder leaves a call's arguments for the planner to walk; torn ones still get
/// the general decoder's answer, before any other error, and the connection goes on.
#[test]
fn torn_crud_arguments_are_packet_body_errors() {
    let server = common::Server::start(2, "");
    let mut client = Client::connect(&server);
    // ["kv", [7, "seven"]]: whole, then cut inside the tuple, then with a byte after it.
    let whole: &[u8] = &[
        0x92, 0xa2, b'k', b'v', 0x92, 0x07, 0xa5, b's', b'e', b'v', b'e', b'n',
    ];
    let cut = &whole[..whole.len() - 2];
    let trailing = [whole, &[0xc0]].concat();
    // {REQUEST_TYPE: CALL, SYNC: n}, and one with SCHEMA_VERSION 99 (a wrong one).
    let header = |sync: u8| vec![0x82, 0x00, 0x0a, 0x01, sync];
    let wrong_schema = |sync: u8| vec![0x83, 0x00, 0x0a, 0x01, sync, 0x05, 99];
    for (sync, packet) in [
        (1, crud_packet(&header(1), "crud.insert", cut)),
        (2, crud_packet(&header(2), "crud.replace", &trailing)),
        (3, crud_packet(&header(3), "crud.select", cut)),
        (4, crud_packet(&wrong_schema(4), "crud.get", &trailing)),
    ] {
        client.send(&packet);
        let reply = client.read_packet().expect("an error reply");
        let reply = decode_reply(&reply).unwrap();
        assert_eq!(reply.sync(), sync);
        assert_eq!(reply.error_code(), Some(ErrorCode::ER_INVALID_MSGPACK));
        assert_eq!(reply.error_message(), Some("Invalid MsgPack - packet body"));
    }
    // A wrong schema version with whole arguments is its own error.
    client.send(&crud_packet(&wrong_schema(5), "crud.get", whole));
    let reply = client.read_packet().expect("an error reply");
    let reply = decode_reply(&reply).unwrap();
    assert_eq!(
        (reply.sync(), reply.error_code()),
        (5, Some(ErrorCode::ER_WRONG_SCHEMA_VERSION))
    );
    // The connection goes on: the whole call is answered.
    client.send(&crud_packet(&header(6), "crud.insert", whole));
    let reply = client.read_packet().expect("a reply");
    let reply = decode_reply(&reply).unwrap();
    assert_eq!((reply.sync(), reply.error_code()), (6, None));
}
