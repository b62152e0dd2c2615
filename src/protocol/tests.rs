//! Cross-module tests of the protocol layer: spec §3 golden bytes, the error table of
//! every request, encode→decode roundtrips, and "never panics" properties.

use super::client::*;
use super::codes::{body_key, feature, request_type};
use super::error::invalid_msgpack;
use super::reply::*;
use super::request::*;
use super::*;
use crate::msgpack::{read_value, Value};
use proptest::prelude::*;

fn hex(text: &str) -> Vec<u8> {
    text.split_whitespace()
        .filter(|t| *t != "|")
        .map(|t| u8::from_str_radix(t, 16).unwrap())
        .collect()
}

/// Strips the size prefix and decodes header + body.
fn decode_framed(bytes: &[u8]) -> Result<(Header, Request<'_>), PacketError> {
    let (packet, consumed) = frame::split_frame(bytes).unwrap().unwrap();
    assert_eq!(consumed, bytes.len());
    decode_packet(packet)
}

/// Decodes a body for `request_type` and returns the error.
fn body_error(request_type: u64, body: &[u8]) -> (u32, String) {
    let error = decode_body(request_type, body).unwrap_err();
    (error.code().0, error.to_string())
}

fn missing(name: &str) -> (u32, String) {
    (69, format!("Missing mandatory field '{name}' in request"))
}

fn invalid(what: &str) -> (u32, String) {
    (20, format!("Invalid MsgPack - {what}"))
}

// ---- spec §3 golden bytes -------------------------------------------------------------

#[test]
fn golden_ping_request_and_response() {
    let request = hex("ce 00 00 00 05 | 82 00 40 01 01");
    let mut out = Vec::new();
    encode_ping(&mut out, 1);
    assert_eq!(out, request);
    let (header, body) = decode_framed(&request).unwrap();
    assert_eq!((header.request_type, header.sync), (64, 1));
    assert_eq!(body, Request::Ping);

    let mut out = Vec::new();
    encode_ok(&mut out, 1, 0x50);
    assert_eq!(out, hex("ce 00 00 00 08 | 83 00 00 01 01 05 50 | 80"));
}

#[test]
fn golden_select_request() {
    let bytes =
        hex("ce 00 00 00 15 | 82 00 01 01 02 | 86 10 cd 02 00 11 00 12 0a 13 00 14 00 20 91 01");
    let (header, request) = decode_framed(&bytes).unwrap();
    assert_eq!(header.sync, 2);
    let expected = Select {
        space_id: 512,
        index_id: 0,
        limit: 10,
        offset: 0,
        iterator: 0,
        key: &[0x91, 0x01],
        fetch_position: false,
        after_position: None,
        after_tuple: None,
    };
    assert_eq!(request, Request::Select(expected));
    let mut out = Vec::new();
    encode_select(&mut out, 2, &expected);
    assert_eq!(out, bytes);
}

#[test]
fn golden_select_response_both_ways() {
    let golden = hex("ce 00 00 00 0e | 83 00 00 01 02 05 50 | 81 30 91 92 01 a1 61");
    let tuple = hex("92 01 a1 61");

    let mut out = Vec::new();
    let mark = begin_data_reply(&mut out, 2, 0x50, 1);
    out.extend_from_slice(&tuple);
    finish_packet(&mut out, mark);
    assert_eq!(out, golden);

    let mut out = Vec::new();
    encode_data(&mut out, 2, 0x50, [tuple.as_slice()].into_iter());
    assert_eq!(out, golden);

    // Count learned afterwards: a 5-byte 0xdd header, same meaning.
    let mut out = Vec::new();
    let mut data = DataReply::begin(&mut out, 2, 0x50);
    data.push_raw(&mut out, &tuple);
    data.finish(&mut out);
    assert_eq!(
        out,
        hex("ce 00 00 00 12 | 83 00 00 01 02 05 50 | 81 30 dd 00 00 00 01 92 01 a1 61")
    );
    let (packet, _) = split_server_frame(&out).unwrap().unwrap();
    let reply = decode_reply(packet).unwrap();
    assert!(!reply.is_error());
    assert_eq!(reply.header.schema_version, 0x50);
    assert_eq!(reply.data().unwrap(), hex("dd 00 00 00 01 92 01 a1 61"));
}

#[test]
fn a_select_reply_wrapped_in_one_list_is_what_a_call_returning_the_list_answers() {
    // Bytes after the header as Tarantool 2.6 answered `box.space.kv:select` over CALL.
    let tuple = hex("93 01 01 a2 76 31");
    let mut out = vec![0xaa]; // a reply before it stays as it is
    let mut data = DataReply::begin(&mut out, 7, 1);
    data.push_raw(&mut out, &tuple);
    data.push_raw(&mut out, &tuple);
    data.finish(&mut out);
    wrap_data_in_one_list(&mut out, 1);
    assert_eq!(out[0], 0xaa);
    let (packet, used) = split_server_frame(&out[1..]).unwrap().unwrap();
    assert_eq!(used, out.len() - 1);
    let reply = decode_reply(packet).unwrap();
    let mut expected = hex("dd 00 00 00 01 92");
    expected.extend_from_slice(&tuple);
    expected.extend_from_slice(&tuple);
    assert_eq!(reply.data().unwrap(), expected);

    let mut empty = Vec::new();
    DataReply::begin(&mut empty, 7, 1).finish(&mut empty);
    wrap_data_in_one_list(&mut empty, 0);
    let (packet, _) = split_server_frame(&empty).unwrap().unwrap();
    assert_eq!(
        decode_reply(packet).unwrap().data().unwrap(),
        hex("dd 00 00 00 01 90")
    );

    let mut error = Vec::new();
    encode_error(&mut error, 7, 1, ErrorCode::ER_KEY_PART_TYPE, "bad key");
    let unchanged = error.clone();
    wrap_data_in_one_list(&mut error, 0);
    assert_eq!(error, unchanged);
}

#[test]
fn golden_id_request_and_reply() {
    let bytes = hex("ce 00 00 00 0b | 82 00 49 01 04 | 82 54 06 55 91 02");
    let mut out = Vec::new();
    encode_id(&mut out, 4, 6, &[feature::ERROR_EXTENSION]);
    assert_eq!(out, bytes);
    let (_, request) = decode_framed(&bytes).unwrap();
    let Request::Id(id) = request else {
        panic!("{request:?}")
    };
    assert_eq!(id.version, 6);
    assert!(id.has_feature(feature::ERROR_EXTENSION));
    assert!(!id.has_feature(feature::STREAMS));

    let mut out = Vec::new();
    encode_id_reply(&mut out, 4, 1, 4, &[0, 1, 2, 3, 4], Some("chap-sha1"));
    let mut expected =
        hex("ce 00 00 00 1c | 83 00 00 01 04 05 01 | 83 54 04 55 95 00 01 02 03 04 5b a9");
    expected.extend_from_slice(b"chap-sha1");
    assert_eq!(out, expected);
}

#[test]
fn error_reply_carries_message_and_stack() {
    let mut out = Vec::new();
    let message = "Space '9999' does not exist";
    encode_error(&mut out, 7, 80, ErrorCode::ER_NO_SUCH_SPACE, message);
    // header {0: 0x8024, 1: 7, 5: 80}
    assert_eq!(&out[5..13], &hex("83 00 cd 80 24 01 07 05")[..]);
    let (packet, consumed) = split_server_frame(&out).unwrap().unwrap();
    assert_eq!(consumed, out.len());
    let reply = decode_reply(packet).unwrap();
    assert_eq!(reply.error_code(), Some(ErrorCode::ER_NO_SUCH_SPACE));
    assert_eq!(reply.sync(), 7);
    assert_eq!(reply.error_message(), Some(message));
    assert_eq!(reply.error_top(), Some(("ClientError", message, 36)));

    // Every stack entry has keys 0..=5 (Python indexes them directly).
    let stack = reply.field(body_key::ERROR).unwrap();
    let mut buf = stack;
    assert_eq!(read_value(&mut buf), Ok(Value::Map(1)));
    assert_eq!(read_value(&mut buf), Ok(Value::Uint(0)));
    assert_eq!(read_value(&mut buf), Ok(Value::Array(1)));
    assert_eq!(read_value(&mut buf), Ok(Value::Map(6)));

    let mut out = Vec::new();
    let error = ProtocolError::UnknownRequestType(12);
    encode_protocol_error(&mut out, 3, 1, &error);
    let reply = decode_reply(split_server_frame(&out).unwrap().unwrap().0).unwrap();
    assert_eq!(reply.status(), 0x8030);
    assert_eq!(reply.error_message(), Some("Unknown request type 12"));
}

#[test]
fn a_reply_no_length_field_can_hold_becomes_an_error_reply_in_its_place() {
    // A whole reply before it stays as it was; the oversized one (its length is passed in:
    // a real one would take 4 GiB of memory) turns into ER_MEMORY_ISSUE for its own sync.
    let mut out = Vec::new();
    encode_ok(&mut out, 1, 4);
    let before = out.clone();
    let mut data = DataReply::begin(&mut out, 9, 4);
    data.push_raw(&mut out, &hex("91 01"));
    assert_eq!(data.count(), 1);
    replace_with_too_large_error(&mut out, before.len(), 5_000_000_000);

    assert_eq!(&out[..before.len()], &before[..]);
    let rest = &out[before.len()..];
    assert_eq!(&rest[5..14], &hex("83 00 cd 80 02 01 09 05 04")[..]);
    let (packet, consumed) = split_server_frame(rest).unwrap().unwrap();
    assert_eq!(consumed, rest.len());
    let reply = decode_reply(packet).unwrap();
    assert_eq!(reply.error_code(), Some(ErrorCode::ER_MEMORY_ISSUE));
    assert_eq!(
        reply.error_message(),
        Some(
            "Failed to allocate 5000000000 bytes in the reply buffer for one reply packet \
             (IPROTO's length field holds at most 4294967295 bytes): ask for fewer rows, with a \
             limit"
        )
    );
}

#[test]
fn error_stack_with_fields_and_causes() {
    let fields = hex("81 ab 6f 62 6a 65 63 74 5f 74 79 70 65 a5 73 70 61 63 65");
    let top = ErrorEntry {
        fields: Some(&fields),
        ..ErrorEntry::new(ErrorCode::ER_ACCESS_DENIED, "Read access denied")
    };
    let cause = ErrorEntry::new(ErrorCode::ER_PROC_LUA, "boom");
    let mut out = Vec::new();
    encode_error_stack(&mut out, 1, 1, &[top, cause]);
    let reply = decode_reply(split_server_frame(&out).unwrap().unwrap().0).unwrap();
    assert_eq!(reply.error_code(), Some(ErrorCode::ER_ACCESS_DENIED));
    assert_eq!(
        reply.error_top(),
        Some(("AccessDeniedError", "Read access denied", 42))
    );

    let mut ext = Vec::new();
    write_mp_error_ext(&mut ext, &[cause]);
    let mut buf = ext.as_slice();
    let Ok(Value::Ext(3, payload)) = read_value(&mut buf) else {
        panic!("{ext:x?}")
    };
    assert!(buf.is_empty());
    assert_eq!(payload[0], 0x81);
}

#[test]
fn event_has_no_schema_version() {
    let mut out = Vec::new();
    encode_event(&mut out, 9, "box.shutdown", Some(&[0xc3]));
    let reply = decode_reply(split_server_frame(&out).unwrap().unwrap().0).unwrap();
    assert_eq!(reply.status(), request_type::EVENT);
    assert_eq!(reply.sync(), 9);
    assert_eq!(&out[5..10], &hex("82 00 4c 01 09")[..]);
    assert_eq!(reply.field(body_key::EVENT_DATA), Some(&[0xc3][..]));
}

// ---- request errors, spec §6 and §9 -------------------------------------------------

#[test]
fn mandatory_fields_lowest_key_first() {
    use request_type as t;
    assert_eq!(body_error(t::SELECT, &[]), missing("SPACE_ID"));
    assert_eq!(body_error(t::SELECT, &hex("80")), missing("SPACE_ID"));
    assert_eq!(body_error(t::SELECT, &hex("81 20 90")), missing("SPACE_ID"));
    assert_eq!(
        body_error(t::SELECT, &hex("82 10 01 20 90")),
        missing("LIMIT")
    );
    assert_eq!(
        body_error(t::SELECT, &hex("82 10 01 12 01")),
        missing("KEY")
    );
    assert_eq!(body_error(t::INSERT, &[]), missing("SPACE_ID"));
    assert_eq!(body_error(t::REPLACE, &hex("81 10 01")), missing("TUPLE"));
    assert_eq!(
        body_error(t::UPDATE, &hex("82 10 01 21 90")),
        missing("KEY")
    );
    assert_eq!(
        body_error(t::UPDATE, &hex("82 10 01 20 90")),
        missing("TUPLE")
    );
    assert_eq!(body_error(t::DELETE, &hex("81 10 01")), missing("KEY"));
    assert_eq!(body_error(t::UPSERT, &hex("81 10 01")), missing("TUPLE"));
    assert_eq!(
        body_error(t::UPSERT, &hex("82 10 01 21 90")),
        missing("OPS")
    );
    assert_eq!(body_error(t::CALL, &hex("80")), missing("FUNCTION_NAME"));
    assert_eq!(
        body_error(t::CALL_16, &hex("81 21 90")),
        missing("FUNCTION_NAME")
    );
    assert_eq!(body_error(t::EVAL, &hex("80")), missing("EXPR"));
    assert_eq!(body_error(t::AUTH, &hex("81 21 90")), missing("USER_NAME"));
    assert_eq!(body_error(t::AUTH, &hex("81 23 a1 75")), missing("TUPLE"));
    assert_eq!(body_error(t::WATCH, &[]), missing("EVENT_KEY"));
    assert_eq!(body_error(t::UNWATCH, &hex("80")), missing("EVENT_KEY"));
}

#[test]
fn missing_bodies() {
    use request_type as t;
    assert_eq!(body_error(t::CALL, &[]), invalid("missing request body"));
    assert_eq!(body_error(t::EVAL, &[]), invalid("missing request body"));
    assert_eq!(body_error(t::AUTH, &[]), invalid("missing request body"));
    assert_eq!(body_error(t::ID, &[]), invalid("request body"));
    assert_eq!(decode_body(t::PING, &[]), Ok(Request::Ping));
    assert_eq!(decode_body(t::COMMIT, &[]), Ok(Request::Commit));
    assert_eq!(decode_body(t::ROLLBACK, &[]), Ok(Request::Rollback));
    assert_eq!(
        decode_body(t::BEGIN, &[]),
        Ok(Request::Begin(Begin {
            timeout_seconds: None,
            isolation: 0
        }))
    );
}

/// Tarantool 2.6 (docs/tarantool-reference.md (m)): JOIN, SUBSCRIBE and REGISTER decode
/// their body before anything else, so without one they are 20 "request body"; with one
/// they reach replication, which tarn does not serve (48). VOTE (67, 68) and
/// FETCH_SNAPSHOT (69) never read a body: 48 either way.
#[test]
fn replication_requests_without_a_body_are_request_body_errors() {
    for request_type in [65, 66, 70] {
        assert_eq!(
            body_error(request_type, &[]),
            (20, "Invalid MsgPack - request body".to_string()),
            "{request_type}"
        );
        if request_type == 66 {
            // A SUBSCRIBE with a body is the session's to judge: a tarn replica's is served,
            // a Tarantool replica's answered 48 there (tests/replication.rs).
            let body = hex("80");
            let decoded = decode_body(request_type, &body).unwrap();
            assert!(matches!(decoded, Request::Subscribe(_)));
            continue;
        }
        assert_eq!(
            body_error(request_type, &hex("80")),
            (48, format!("Unknown request type {request_type}")),
        );
    }
    for request_type in [67, 68, 69, 71] {
        assert_eq!(
            body_error(request_type, &[]),
            (48, format!("Unknown request type {request_type}")),
        );
    }
}

#[test]
fn wrong_types_and_trailing_bytes_are_packet_body_errors() {
    use request_type as t;
    let body = invalid("packet body");
    // SPACE_ID as a string, and as a positive number in an int format
    assert_eq!(body_error(t::SELECT, &hex("81 10 a1 31")), body);
    assert_eq!(body_error(t::INSERT, &hex("82 10 d0 05 21 90")), body);
    // KEY / TUPLE / OPS / args not arrays
    assert_eq!(body_error(t::SELECT, &hex("83 10 01 12 01 20 01")), body);
    assert_eq!(body_error(t::INSERT, &hex("82 10 01 21 01")), body);
    assert_eq!(body_error(t::UPDATE, &hex("83 10 01 20 91 01 21 80")), body);
    assert_eq!(body_error(t::UPSERT, &hex("83 10 01 21 90 28 a0")), body);
    assert_eq!(body_error(t::CALL, &hex("82 22 a1 66 21 01")), body);
    assert_eq!(body_error(t::CALL, &hex("81 22 01")), body);
    // body not a map, truncated, trailing bytes
    assert_eq!(body_error(t::INSERT, &hex("92 10 01")), body);
    assert_eq!(body_error(t::INSERT, &hex("82 10 01 21 92 01")), body);
    assert_eq!(body_error(t::INSERT, &hex("82 10 01 21 90 00")), body);
    assert_eq!(body_error(t::PING, &hex("80 80")), body);
    assert_eq!(body_error(t::PING, &hex("c1 c1")), body);
    assert_eq!(body_error(t::PING, &hex("92 c1")), body);
    assert_eq!(body_error(t::PING, &hex("c7 01 00")), body);
    // A NOP may not have a body at all.
    assert_eq!(body_error(t::NOP, &hex("80")), body);
    // ITERATOR as bool, FETCH_POSITION as int
    assert_eq!(
        body_error(t::SELECT, &hex("84 10 01 12 01 20 90 14 c3")),
        body
    );
    assert_eq!(
        body_error(t::SELECT, &hex("84 10 01 12 01 20 90 1f 01")),
        body
    );
}

#[test]
fn unknown_and_non_uint_keys_are_skipped() {
    // {"x": 1, -1: [], 0x99: {"a": 1}, 0x10: 5, 0x21: [1]}
    let body = hex("85 a1 78 01 ff 90 cc 99 81 a1 61 01 10 05 21 91 01");
    assert_eq!(
        decode_body(request_type::INSERT, &body),
        Ok(Request::Insert(Insert {
            space_id: 5,
            tuple: &[0x91, 0x01]
        }))
    );
    // A PING body is ignored, whatever it holds, once it passes Tarantool's `mp_check`,
    // which takes 0xc1 for a one-byte value (Tarantool 2.6 answers these ok).
    for body in ["81 10 a1 78", "c1", "91 c1", "81 c1 c1", "01", "d4 00 00"] {
        assert_eq!(
            decode_body(request_type::PING, &hex(body)),
            Ok(Request::Ping),
            "{body}"
        );
    }
}

#[test]
fn unknown_request_types_are_48() {
    // JOIN (65), SUBSCRIBE and REGISTER without a body are 20 instead (see
    // `replication_requests_without_a_body_are_request_body_errors`).
    for code in [0u64, 12, 17, 30, 68, 76, 77, 128, 0x8000, u64::MAX] {
        assert_eq!(
            body_error(code, &[]),
            (48, format!("Unknown request type {code}"))
        );
    }
    // A malformed body is reported before the type, as Tarantool does.
    assert_eq!(body_error(12, &hex("92")), invalid("packet body"));
}

#[test]
fn call_defaults_and_call_16_flag() {
    let body = hex("81 22 a8 62 6f 78 2e 69 6e 66 6f");
    let call = decode_body(request_type::CALL, &body).unwrap();
    assert_eq!(
        call,
        Request::Call(Call {
            function_name: "box.info",
            args: &[0x90],
            is_call_16: false
        })
    );
    let body = hex("82 22 a1 66 21 91 01");
    let call = decode_body(request_type::CALL_16, &body).unwrap();
    assert_eq!(call.request_type(), request_type::CALL_16);
}

#[test]
fn select_defaults_and_pagination() {
    let body = hex("83 10 cd 01 19 12 ce ff ff ff ff 20 90");
    let Request::Select(select) = decode_body(request_type::SELECT, &body).unwrap() else {
        panic!()
    };
    assert_eq!(
        (
            select.space_id,
            select.index_id,
            select.limit,
            select.offset,
            select.iterator
        ),
        (281, 0, u32::MAX, 0, 0)
    );
    assert_eq!(select.key, &[0x90]);
    let body = hex("86 10 01 12 01 20 90 1f c3 2e a2 70 31 2f 91 05");
    let Request::Select(select) = decode_body(request_type::SELECT, &body).unwrap() else {
        panic!()
    };
    assert!(select.fetch_position);
    assert_eq!(select.after_position, Some(&b"p1"[..]));
    assert_eq!(select.after_tuple, Some(&[0x91, 0x05][..]));
}

#[test]
fn auth_follows_the_2_11_table() {
    let salt = [5u8; 32];
    let mut out = Vec::new();
    encode_auth(&mut out, 1, "tester", &salt, b"testpass");
    let (header, request) = decode_framed(&out).unwrap();
    assert_eq!(header.request_type, request_type::AUTH);
    let Request::Auth(auth) = request else {
        panic!()
    };
    assert_eq!(auth.user_name, "tester");
    let scramble = auth.chap_sha1_scramble().unwrap();
    let hash2 = auth::password_hash2(b"testpass");
    assert!(auth::check_chap_sha1(&salt, scramble, &hash2));

    fn decode_auth(body: &[u8]) -> Result<Auth<'_>, (u32, String)> {
        match decode_body(request_type::AUTH, body) {
            Ok(Request::Auth(auth)) => Ok(auth),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err((e.code().0, e.to_string())),
        }
    }
    type MethodAndScramble = (Option<String>, Option<Vec<u8>>);
    /// The decoded method and scramble, or the decode error.
    fn decode(body: &str) -> Result<MethodAndScramble, (u32, String)> {
        let body = hex(body);
        decode_auth(&body).map(|a| (a.method.map(str::to_owned), a.scramble.map(<[u8]>::to_vec)))
    }
    fn check(body: &str) -> (u32, String) {
        let body = hex(body);
        let error = decode_auth(&body)
            .unwrap()
            .chap_sha1_scramble()
            .unwrap_err();
        (error.code().0, error.to_string())
    }
    let twenty = "00 ".repeat(20);
    // guest with [] is decodable; the server decides it is fine for guest only
    assert_eq!(decode("82 23 a5 67 75 65 73 74 21 90"), Ok((None, None)));
    assert_eq!(
        check("82 23 a1 75 21 90"),
        invalid("authentication request body")
    );
    // method not a string
    assert_eq!(
        decode("82 23 a1 75 21 92 01 a0"),
        Err(invalid("authentication request body"))
    );
    // unknown method
    assert_eq!(
        check("82 23 a1 75 21 92 aa 70 61 70 2d 73 68 61 32 35 36 a0"),
        (249, "Unknown authentication method 'pap-sha256'".into())
    );
    // scramble as BIN of 20 bytes is fine, STR of 19 bytes is not, an int is not a string
    let chap = "a9 63 68 61 70 2d 73 68 61 31";
    let bin = hex(&format!("82 23 a1 75 21 92 {chap} c4 14 {twenty}"));
    assert_eq!(
        decode_auth(&bin).unwrap().chap_sha1_scramble(),
        Ok(&[0u8; 20])
    );
    assert_eq!(
        check(&format!("82 23 a1 75 21 92 {chap} b3 {}", "00 ".repeat(19))),
        (
            251,
            "Invalid 'chap-sha1' request: invalid scramble size".into()
        )
    );
    assert_eq!(
        check(&format!("82 23 a1 75 21 92 {chap} 01")),
        (
            251,
            "Invalid 'chap-sha1' request: scramble must be string".into()
        )
    );
}

#[test]
fn id_body_rules() {
    use request_type as t;
    // unknown keys and large feature ids are ignored
    let body = hex("83 54 06 55 94 00 03 0b cd 01 00 99 a1 78");
    let Request::Id(id) = decode_body(t::ID, &body).unwrap() else {
        panic!()
    };
    assert_eq!(id.version, 6);
    assert_eq!(id.features, (1 << 0) | (1 << 3) | (1 << 11));
    assert_eq!(
        body_error(t::ID, &hex("81 55 91 a1 78")),
        invalid("request body")
    );
    assert_eq!(body_error(t::ID, &hex("81 54 a0")), invalid("request body"));
    assert_eq!(body_error(t::ID, &hex("90")), invalid("request body"));
}

#[test]
fn bad_body_is_answered_with_the_header_sync() {
    let mut packet = hex("82 00 02 01 cd 12 34");
    packet.extend_from_slice(&hex("81 10 a0"));
    let error = decode_packet(&packet).unwrap_err();
    assert_eq!(error.sync, 0x1234);
    assert_eq!(
        error.error,
        ProtocolError::InvalidMsgpack(invalid_msgpack::PACKET_BODY)
    );
}

#[test]
fn any_client_prefix_width_works_end_to_end() {
    // The Python connector sends the shortest prefix.
    let bytes = hex("05 | 82 00 40 01 01");
    assert_eq!(decode_framed(&bytes).unwrap().1, Request::Ping);
    let bytes = hex("cf 00 00 00 00 00 00 00 05 | 82 00 40 01 01");
    assert_eq!(decode_framed(&bytes).unwrap().1, Request::Ping);
}

// ---- roundtrips ------------------------------------------------------------------------

fn roundtrip(header: Header, request: Request<'_>) {
    let mut out = Vec::new();
    encode_request_with_header(&mut out, &header, &request);
    let (decoded_header, decoded) = decode_framed(&out).unwrap();
    assert_eq!(decoded, request);
    assert_eq!(
        decoded_header,
        Header {
            request_type: request.request_type(),
            ..header
        }
    );
}

#[test]
fn every_request_roundtrips() {
    let key = hex("92 01 a1 61");
    let tuple = hex("93 01 a1 61 cb 3f f8 00 00 00 00 00 00");
    let ops = hex("91 93 a1 3d 01 a1 62");
    let scramble = [7u8; 20];
    let sql = hex("82 40 a8 53 45 4c 45 43 54 20 31 41 90");
    let requests = [
        Request::Select(Select {
            space_id: 512,
            index_id: 1,
            limit: u32::MAX,
            offset: 3,
            iterator: 6,
            key: &key,
            fetch_position: true,
            after_position: Some(b"opaque"),
            after_tuple: Some(&tuple),
        }),
        Request::Insert(Insert {
            space_id: 513,
            tuple: &tuple,
        }),
        Request::Replace(Insert {
            space_id: 514,
            tuple: &tuple,
        }),
        Request::Update(Update {
            space_id: 515,
            index_id: 2,
            key: &key,
            ops: &ops,
            index_base: 1,
        }),
        Request::Delete(Delete {
            space_id: 516,
            index_id: 0,
            key: &key,
        }),
        Request::Upsert(Upsert {
            space_id: 517,
            index_id: 0,
            tuple: &tuple,
            ops: &ops,
            index_base: 0,
        }),
        Request::Call(Call {
            function_name: "crud.insert",
            args: &tuple,
            is_call_16: false,
        }),
        Request::Call(Call {
            function_name: "f",
            args: &[0x90],
            is_call_16: true,
        }),
        Request::Eval(Eval {
            expr: "return ...",
            args: &key,
        }),
        Request::Auth(Auth {
            user_name: "admin",
            method: Some("chap-sha1"),
            scramble: Some(&scramble),
        }),
        Request::Auth(Auth {
            user_name: "guest",
            method: None,
            scramble: None,
        }),
        Request::Id(Id {
            version: 4,
            features: 0b11111,
            auth_type: Some("chap-sha1"),
        }),
        Request::Ping,
        Request::Execute(RawBody { body: &sql }),
        Request::Prepare(RawBody { body: &sql }),
        Request::Begin(Begin {
            timeout_seconds: Some(1.5),
            isolation: 1,
        }),
        Request::Commit,
        Request::Rollback,
        Request::Watch(Watch { key: "box.status" }),
        Request::Unwatch(Watch { key: "box.status" }),
    ];
    for request in requests {
        roundtrip(
            Header {
                request_type: 0,
                sync: 42,
                schema_version: 0,
                stream_id: 0,
            },
            request,
        );
        roundtrip(
            Header {
                request_type: 0,
                sync: u64::MAX,
                schema_version: 86,
                stream_id: 3,
            },
            request,
        );
    }
}

#[test]
fn client_helpers_match_generic_encoder() {
    let tuple = hex("91 01");
    let mut a = Vec::new();
    let mut b = Vec::new();
    encode_insert(&mut a, 1, 512, &tuple);
    encode_request(
        &mut b,
        1,
        &Request::Insert(Insert {
            space_id: 512,
            tuple: &tuple,
        }),
    );
    assert_eq!(a, b);
    let mut out = Vec::new();
    encode_replace(&mut out, 2, 512, &tuple);
    encode_delete(&mut out, 3, 512, 0, &tuple);
    encode_call(&mut out, 4, "box.info", &[0x90]);
    encode_eval(&mut out, 5, "return 1", &[0x90]);
    encode_watch(&mut out, 6, "box.shutdown");
    let begin = Begin {
        timeout_seconds: None,
        isolation: 0,
    };
    encode_begin(&mut out, 7, 9, &begin);
    let mut buf = out.as_slice();
    let mut syncs = Vec::new();
    while let Some((packet, consumed)) = frame::split_frame(buf).unwrap() {
        let (header, _) = decode_packet(packet).unwrap();
        syncs.push(header.sync);
        buf = &buf[consumed..];
    }
    assert_eq!(syncs, [2, 3, 4, 5, 6, 7]);
}

// ---- properties ------------------------------------------------------------------------

/// Runs the whole server read path over `bytes`; must never panic.
fn read_path(mut bytes: &[u8]) {
    while let Ok(Some((packet, consumed))) = frame::split_frame(bytes) {
        if let Ok((_, Request::Auth(auth))) = decode_packet(packet) {
            let _ = auth.chap_sha1_scramble();
        }
        bytes = &bytes[consumed..];
    }
}

fn valid_packets() -> Vec<Vec<u8>> {
    let mut packets = Vec::new();
    for request_type in [
        1u64, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 64, 73, 74, 75,
    ] {
        // A body holding every key any request reads, with plausible types.
        let body = hex(
            "8d 10 01 11 02 12 03 13 04 14 05 15 01 20 91 01 21 92 a9 63 68 61 70 2d 73 68 61 31 a0 \
             22 a1 66 23 a1 75 27 a1 65 28 90 57 a1 6b",
        );
        let mut packet = hex("82 00");
        crate::msgpack::write_uint(&mut packet, request_type);
        packet.extend_from_slice(&[0x01, 0x01]);
        packet.extend_from_slice(&body);
        packets.push(packet);
    }
    packets
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        read_path(&bytes);
        for request_type in [1u64, 4, 7, 9, 10, 73, 74] {
            let _ = decode_body(request_type, &bytes);
        }
        let _ = decode_reply(&bytes);
        let _ = greeting::parse_greeting(&bytes);
    }

    #[test]
    fn mutated_valid_packets_never_panic(
        which in 0usize..19,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        cut in any::<usize>(),
    ) {
        let mut packet = valid_packets().swap_remove(which);
        for (at, byte) in flips {
            let at = at % packet.len();
            packet[at] = byte;
        }
        packet.truncate(cut % (packet.len() + 1));
        let _ = decode_packet(&packet);
    }

    #[test]
    fn select_and_update_roundtrip(
        space_id in any::<u32>(), index_id in any::<u32>(), limit in any::<u32>(),
        offset in any::<u32>(), iterator in any::<u32>(), sync in any::<u64>(),
        key_item in any::<u64>(), index_base in 0u32..2,
    ) {
        let mut key = vec![0x91];
        crate::msgpack::write_uint(&mut key, key_item);
        let select = Select {
            space_id, index_id, limit, offset, iterator, key: &key,
            fetch_position: false, after_position: None, after_tuple: None,
        };
        let mut out = Vec::new();
        encode_select(&mut out, sync, &select);
        let (header, request) = decode_framed(&out).unwrap();
        prop_assert_eq!(header.sync, sync);
        prop_assert_eq!(request, Request::Select(select));

        let update = Update { space_id, index_id, key: &key, ops: &[0x90], index_base };
        out.clear();
        encode_update(&mut out, sync, &update);
        prop_assert_eq!(decode_framed(&out).unwrap().1, Request::Update(update));
    }
}

#[test]
fn valid_packets_decode() {
    for packet in valid_packets() {
        decode_packet(&packet).unwrap();
    }
}

// ---- the single-pass decoder against the general one -------------------------------------

/// One msgpack value for a map slot: mostly what requests carry, plus every kind of
/// mistake (int formats, wrong types, nested containers, wide and narrow widths).
fn any_value() -> impl Strategy<Value = Vec<u8>> {
    value(true)
}

/// `any_value`, with the one marker msgpack never uses (0xc1) only when `allow_invalid`.
fn value(allow_invalid: bool) -> impl Strategy<Value = Vec<u8>> {
    let scalar = prop_oneof![
        any::<u64>().prop_map(|n| {
            let mut out = Vec::new();
            crate::msgpack::write_uint(&mut out, n);
            out
        }),
        (0u8..0x80).prop_map(|n| vec![n]),
        any::<u8>().prop_map(|n| vec![0xcc, n]),
        any::<u16>().prop_map(|n| [&[0xcd][..], &n.to_be_bytes()].concat()),
        any::<u32>().prop_map(|n| [&[0xce][..], &n.to_be_bytes()].concat()),
        any::<u64>().prop_map(|n| [&[0xcf][..], &n.to_be_bytes()].concat()),
        any::<i8>().prop_map(|n| vec![0xd0, n as u8]),
        any::<i64>().prop_map(|n| {
            let mut out = Vec::new();
            crate::msgpack::write_int(&mut out, n);
            out
        }),
        Just(vec![0xc0]),
        Just(vec![0xc3]),
        Just(vec![if allow_invalid { 0xc1 } else { 0xc0 }]),
        any::<f64>().prop_map(|v| [&[0xcb][..], &v.to_be_bytes()].concat()),
        any::<f32>().prop_map(|v| [&[0xca][..], &v.to_be_bytes()].concat()),
        proptest::collection::vec(b'a'..=b'z', 0..40).prop_map(|text| {
            let mut out = Vec::new();
            crate::msgpack::write_str(&mut out, &text);
            out
        }),
        proptest::collection::vec(any::<u8>(), 0..4).prop_map(|bytes| {
            [&[0xc4, u8::try_from(bytes.len()).unwrap()][..], &bytes].concat()
        }),
        Just(vec![0x80]),
        Just(vec![0x81, 0x01, 0x02]),
    ];
    scalar.prop_recursive(3, 24, 6, |inner| {
        (proptest::collection::vec(inner, 0..6), 0u8..3).prop_map(|(items, width)| {
            let len = items.len();
            let mut out = match width {
                0 => vec![0x90 | u8::try_from(len).unwrap()],
                1 => [&[0xdc][..], &u16::try_from(len).unwrap().to_be_bytes()].concat(),
                _ => [&[0xdd][..], &u32::try_from(len).unwrap().to_be_bytes()].concat(),
            };
            for item in items {
                out.extend_from_slice(&item);
            }
            out
        })
    })
}

/// A map key: nearly always one a request uses, sometimes an unknown or non-fixint one.
fn any_key(known: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => proptest::sample::select(known).prop_map(|key| vec![key]),
        1 => (0u8..0x80).prop_map(|key| vec![key]),
        1 => proptest::sample::select(known).prop_map(|key| vec![0xcc, key]),
        1 => Just(vec![0xa1, b'k']),
    ]
}

/// A map of `pairs`, its header usually right, sometimes wide, sometimes miscounted.
fn map_bytes(pairs: &[(Vec<u8>, Vec<u8>)], header: u8) -> Vec<u8> {
    let count = u8::try_from(pairs.len()).unwrap();
    let mut out = match header {
        0 => vec![0x80 | count],
        1 => [&[0xde][..], &u16::from(count).to_be_bytes()].concat(),
        2 => vec![0x80 | (count + 1)],
        _ => vec![0x80 | count.saturating_sub(1)],
    };
    for (key, value) in pairs {
        out.extend_from_slice(key);
        out.extend_from_slice(value);
    }
    out
}

/// `value` as a msgpack uint: minimal, or in a wider form when `width` asks and it fits.
fn uint_of_width(value: u64, width: u8) -> Vec<u8> {
    let (byte, short, word) = (
        u8::try_from(value),
        u16::try_from(value),
        u32::try_from(value),
    );
    match (width, byte, short, word) {
        (1, Ok(byte), _, _) => vec![0xcc, byte],
        (2, _, Ok(short), _) => [&[0xcd][..], &short.to_be_bytes()].concat(),
        (3, _, _, Ok(word)) => [&[0xce][..], &word.to_be_bytes()].concat(),
        (4, ..) => [&[0xcf][..], &value.to_be_bytes()].concat(),
        _ => {
            let mut out = Vec::new();
            crate::msgpack::write_uint(&mut out, value);
            out
        }
    }
}

/// Small numbers most of the time, as requests carry them; any u64 sometimes.
fn a_number() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..200, 0u64..70_000, any::<u64>()]
}

/// What a [`common_like_packet`] is built from.
#[derive(Debug, Clone)]
struct Shape {
    request_type: u8,
    numbers: [u64; 8],
    widths: [u8; 8],
    present: u8,
    key: Vec<u8>,
    tuple: Vec<u8>,
    order: u64,
    deviation: u8,
    at: usize,
    odd_value: Vec<u8>,
    odd_key: Vec<u8>,
    trailer: Vec<u8>,
}

fn a_shape() -> impl Strategy<Value = Shape> {
    const ODD_KEYS: &[u8] = &[
        0x00, 0x01, 0x02, 0x04, 0x05, 0x0a, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x1f, 0x20, 0x21,
        0x28, 0x2e, 0x2f, 0x30,
    ];
    (
        (
            proptest::sample::select(&[1u8, 2, 3, 4, 5, 1, 3, 9][..]),
            proptest::array::uniform8(a_number()),
            proptest::array::uniform8(0u8..5),
            any::<u8>(),
            any_value(),
            any_value(),
        ),
        (
            any::<u64>(),
            0u8..16,
            any::<usize>(),
            any_value(),
            any_key(ODD_KEYS),
            proptest::collection::vec(any::<u8>(), 1..3),
        ),
    )
        .prop_map(
            |(
                (request_type, numbers, widths, present, key, tuple),
                (order, deviation, at, odd_value, odd_key, trailer),
            )| Shape {
                request_type,
                numbers,
                widths,
                present,
                key,
                tuple,
                order,
                deviation,
                at,
                odd_value,
                odd_key,
                trailer,
            },
        )
}

/// Fisher-Yates driven by a tiny LCG: the order of map pairs, reproducible from `seed`.
fn shuffle<T>(items: &mut [T], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        items.swap(i, (seed >> 33) as usize % (i + 1));
    }
}

/// Packets shaped like the requests the fast path takes, in any key order and integer
/// width, about half of them with one deviation: a value of another type, an odd or
/// non-fixint key, a missing or repeated pair, a miscounted map, trailing bytes, a cut.
fn common_like_packet() -> impl Strategy<Value = Vec<u8>> {
    a_shape().prop_map(|shape| {
        let n = |i: usize| uint_of_width(shape.numbers[i], shape.widths[i]);
        let present = |bit: u8| shape.present & (1 << bit) != 0;
        let mut header = vec![
            (
                vec![0x00],
                uint_of_width(shape.request_type.into(), shape.widths[7] % 3),
            ),
            (vec![0x01], n(0)),
        ];
        if present(0) {
            header.push((vec![0x05], n(1)));
        }
        if present(1) {
            header.push((vec![0x0a], n(2)));
        }
        let mut body = vec![(vec![0x10], n(3))];
        let optional = |bit: u8, key: u8, value: Vec<u8>| present(bit).then(|| (vec![key], value));
        let key = (vec![0x20], shape.key.clone());
        let tuple = (vec![0x21], shape.tuple.clone());
        if shape.request_type == 1 {
            body.extend(optional(2, 0x11, n(5)));
            body.push((vec![0x12], n(4)));
            body.extend(optional(3, 0x13, n(6)));
            body.extend(optional(4, 0x14, n(7)));
            body.push(key);
        } else {
            body.extend(optional(2, 0x11, n(5)));
            body.extend(optional(3, 0x15, n(6)));
            if shape.request_type != 2 && shape.request_type != 3 || present(5) {
                body.push(key);
            }
            if shape.request_type != 5 || present(6) {
                body.push(tuple);
            }
        }
        // Half keep the order clients write (the fast path's first guess), half any order.
        shuffle(&mut header, shape.order);
        if shape.order & 1 == 0 {
            shuffle(&mut body, shape.order >> 7);
        }
        let mut header_map = 0;
        let mut body_map = 0;
        let mut trailer: &[u8] = &[];
        let mut cut = None;
        let pairs = if shape.deviation % 2 == 0 {
            &mut header
        } else {
            &mut body
        };
        let at = shape.at % pairs.len();
        match shape.deviation {
            0 | 1 => pairs[at].1 = shape.odd_value.clone(),
            2 | 3 => pairs[at].0 = shape.odd_key.clone(),
            4 | 5 => drop(pairs.remove(at)),
            6 | 7 => pairs.push(pairs[at].clone()),
            8 => header_map = 1 + u8::try_from(shape.at % 3).unwrap(),
            9 => body_map = 1 + u8::try_from(shape.at % 3).unwrap(),
            10 => trailer = &shape.trailer,
            11 => cut = Some(shape.at),
            _ => {}
        }
        let mut packet = map_bytes(&header, header_map);
        packet.extend_from_slice(&map_bytes(&body, body_map));
        packet.extend_from_slice(trailer);
        if let Some(cut) = cut {
            packet.truncate(cut % packet.len());
        }
        packet
    })
}

fn a_header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => proptest::sample::select(&[1u8, 2, 3, 4, 5, 9, 64][..]).prop_map(|t| vec![t]),
        1 => proptest::sample::select(&[1u8, 2, 3, 4, 5][..]).prop_map(|t| vec![0xcd, 0, t]),
        3 => any_value(),
    ]
}

/// Maps of random pairs after a header that is usually plausible: the fast path's shapes
/// arise rarely, the general decoder's errors often.
fn unstructured_packet() -> impl Strategy<Value = Vec<u8>> {
    const HEADER_KEYS: &[u8] = &[0x00, 0x01, 0x05, 0x0a, 0x02, 0x04];
    const BODY_KEYS: &[u8] = &[
        0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x20, 0x21, 0x28, 0x1f, 0x2e, 0x2f,
    ];
    let header_pairs = proptest::collection::vec((any_key(HEADER_KEYS), a_header_value()), 0..5);
    let body_pairs = proptest::collection::vec((any_key(BODY_KEYS), any_value()), 0..8);
    (
        proptest::sample::select(&[1u8, 2, 3, 4, 5, 9][..]),
        header_pairs,
        0u8..6,
        body_pairs,
        0u8..6,
        proptest::collection::vec(any::<u8>(), 0..3),
        any::<usize>(),
        0u8..8,
    )
        .prop_map(
            |(request_type, mut header, header_map, body, body_map, trailer, cut, damage)| {
                if header_map < 4 {
                    header.insert(0, (vec![0x00], vec![request_type]));
                }
                let mut packet = map_bytes(&header, header_map.min(3) & 1);
                packet.extend_from_slice(&map_bytes(&body, body_map.min(3)));
                match damage {
                    0 => packet.extend_from_slice(&trailer),
                    1 => packet.truncate(cut % (packet.len() + 1)),
                    _ => {}
                }
                packet
            },
        )
}

/// The bodies the fast path is for, keys in the order connectors send them.
fn common_packet() -> impl Strategy<Value = Vec<u8>> {
    let key = proptest::collection::vec(any::<u64>(), 0..3).prop_map(|parts| {
        let mut key = Vec::new();
        crate::msgpack::write_array_len(&mut key, u32::try_from(parts.len()).unwrap());
        for part in parts {
            crate::msgpack::write_uint(&mut key, part);
        }
        key
    });
    let tuple = proptest::collection::vec(value(false), 0..20).prop_map(|fields| {
        let mut tuple = Vec::new();
        crate::msgpack::write_array_len(&mut tuple, u32::try_from(fields.len()).unwrap());
        for field in fields {
            tuple.extend_from_slice(&field);
        }
        tuple
    });
    (
        0u8..5,
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        0u32..12,
        key,
        tuple,
    )
        .prop_map(|(which, sync, space_id, number, iterator, key, tuple)| {
            let mut out = Vec::new();
            match which {
                0 => {
                    let select = Select {
                        space_id,
                        index_id: number % 3,
                        limit: number,
                        offset: number / 7,
                        iterator,
                        key: &key,
                        fetch_position: false,
                        after_position: None,
                        after_tuple: None,
                    };
                    encode_select(&mut out, sync, &select);
                }
                1 => encode_insert(&mut out, sync, space_id, &tuple),
                2 => encode_replace(&mut out, sync, space_id, &tuple),
                3 => {
                    let update = Update {
                        space_id,
                        index_id: number % 3,
                        key: &key,
                        ops: &tuple,
                        index_base: number % 2,
                    };
                    encode_update(&mut out, sync, &update);
                }
                _ => encode_delete(&mut out, sync, space_id, number % 3, &key),
            }
            let (packet, _) = frame::split_frame(&out).unwrap().unwrap();
            packet.to_vec()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn fast_path_agrees_on_common_like_packets(packet in common_like_packet()) {
        prop_assert_eq!(decode_packet(&packet), decode_packet_general(&packet));
    }

    #[test]
    fn fast_path_agrees_on_unstructured_packets(packet in unstructured_packet()) {
        prop_assert_eq!(decode_packet(&packet), decode_packet_general(&packet));
    }

    #[test]
    fn fast_path_agrees_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..64),
        request_type in proptest::sample::select(&[1u8, 2, 3, 4, 5][..]),
    ) {
        prop_assert_eq!(decode_packet(&bytes), decode_packet_general(&bytes));
        let packet = [&[0x82, 0x00, request_type, 0x01, 0x07][..], &bytes].concat();
        prop_assert_eq!(decode_packet(&packet), decode_packet_general(&packet));
        let packet = [&[0x82, 0x00, request_type, 0x01, 0x07, 0x82][..], &bytes].concat();
        prop_assert_eq!(decode_packet(&packet), decode_packet_general(&packet));
    }

    #[test]
    fn fast_path_takes_and_agrees_on_common_packets(
        packet in common_packet(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
    ) {
        let fast = fast_decode::decode_common(&packet);
        prop_assert!(fast.is_some(), "not taken: {:02x?}", packet);
        prop_assert_eq!(Ok(fast.unwrap()), decode_packet_general(&packet));
        let mut mutated = packet.clone();
        for (at, byte) in flips {
            let at = at % mutated.len();
            mutated[at] = byte;
        }
        prop_assert_eq!(decode_packet(&mutated), decode_packet_general(&mutated));
    }
}

#[test]
fn fast_path_takes_what_connectors_send() {
    // Python connector: {0: 1, 1: sync} + a select with limit 0xFFFFFFFF; with schema
    // version and stream id in the header too.
    let select = hex(
        "84 00 01 01 cd 01 00 05 07 0a 00 | 86 10 cd 02 00 11 00 12 ce ff ff ff ff 13 00 14 00 \
         20 91 a3 6b 65 79",
    );
    let replace = hex("82 00 03 01 01 | 82 10 cd 02 00 21 93 01 cd 0b b9 a3 61 62 63");
    let update = hex("82 00 04 01 01 | 84 10 cd 02 00 11 00 20 91 01 21 91 93 a1 2b 01 01");
    let delete = hex("82 00 05 01 01 | 83 10 cd 02 00 11 00 20 91 01");
    for packet in [select, replace, update, delete] {
        let fast = fast_decode::decode_common(&packet);
        assert!(fast.is_some(), "not taken: {packet:02x?}");
        assert_eq!(Ok(fast.unwrap()), decode_packet_general(&packet));
    }
}
