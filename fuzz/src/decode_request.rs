//! Feeds arbitrary bytes through the server's read path: frame, header, body, and the
//! AUTH scramble checks. Any panic is a bug: this layer faces the network. Every packet is
//! also decoded by the general decoder alone, which must agree with the one-pass fast paths
//! tried first — `protocol::decode_packet`'s, and the crud CALL decoder the server's
//! sessions use (`protocol::crud_call::decode_packet`): the same request, or the same
//! error. The crud decoder leaves arguments that end the packet unmeasured, so it may take
//! a packet the general one refuses: then only a call with torn arguments, which planning
//! answers with the general decoder's reply, byte for byte.
//!
//! The seeds are framed crud CALLs and a SELECT, which random bytes would take long to
//! find. fuzz/README.md says how to run it.

use tarn::crud::{self, CrudConfig, CrudReply};
use tarn::protocol::crud_call as fast_call;
use tarn::protocol::header::PacketError;
use tarn::protocol::{decode_packet, decode_packet_general, frame, request::Request};
use tarn::storage::Engine;

/// A packet the general decoder refused and the crud decoder took as `call`.
fn check_torn_call(call: &Request<'_>, refused: &PacketError, packet: &[u8]) {
    let Request::Call(call) = call else {
        panic!("the crud decoder took a packet that is no call: {packet:02x?}");
    };
    assert!(fast_call::is_torn(call.args), "{packet:02x?}");
    assert_eq!(refused.error, fast_call::torn_args_error(), "{packet:02x?}");
    let config = CrudConfig::for_instance(3000, "aaaaaaaa-0000-4000-8000-000000000001");
    let raised = crud::plan(
        &Engine::new(1 << 20),
        &config,
        call.function_name,
        call.args,
    )
    .expect_err("torn arguments are refused");
    let mut from_plan = Vec::new();
    crud::encode_reply(&mut from_plan, refused.sync, 1, &CrudReply::Raised(raised));
    let mut from_decoder = Vec::new();
    tarn::protocol::reply::encode_protocol_error(
        &mut from_decoder,
        refused.sync,
        1,
        &refused.error,
    );
    assert_eq!(from_plan, from_decoder, "{packet:02x?}");
}

pub fn run(data: &[u8]) {
    let mut buf = data;
    let mut out = Vec::new();
    loop {
        match frame::split_frame(buf) {
            Ok(Some((packet, consumed))) => {
                let decoded = decode_packet(packet);
                let general = decode_packet_general(packet);
                assert_eq!(decoded, general, "{packet:02x?}");
                match (&general, fast_call::decode_packet(packet)) {
                    (Err(refused), Ok((header, call))) => {
                        assert_eq!(header.sync, refused.sync, "{packet:02x?}");
                        check_torn_call(&call, refused, packet);
                    }
                    (_, fast) => assert_eq!(fast, general, "{packet:02x?}"),
                }
                match decoded {
                    Ok((header, request)) => {
                        if let Request::Auth(auth) = request {
                            let _ = auth.chap_sha1_scramble();
                        }
                        tarn::protocol::reply::encode_ok(&mut out, header.sync, 1);
                    }
                    Err(e) => {
                        tarn::protocol::reply::encode_protocol_error(&mut out, e.sync, 1, &e.error)
                    }
                }
                buf = &buf[consumed..];
            }
            Ok(None) => break,
            Err(error) => {
                tarn::protocol::reply::encode_protocol_error(&mut out, 0, 1, &error);
                break;
            }
        }
    }
}
