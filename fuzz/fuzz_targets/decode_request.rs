//! Feeds arbitrary bytes through the server's read path: frame, header, body, and the
//! AUTH scramble checks. Any panic is a bug: this layer faces the network. Every packet is
//! also decoded by the general decoder alone, which must agree with the one-pass fast paths
//! tried first — `protocol::decode_packet`'s, and the crud CALL decoder the server's
//! sessions use (`server::crud::fast_call::decode_packet`): the same request, or the same
//! error.
//!
//! Run with `cargo +nightly fuzz run decode_request fuzz/corpus/decode_request
//! fuzz/seeds/decode_request` from the repository root (or with `RUSTC_BOOTSTRAP=1 cargo
//! fuzz run …` on a stable toolchain). The seeds are framed crud CALLs and a SELECT, which
//! random bytes would take long to find.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn::protocol::{decode_packet, decode_packet_general, frame, request::Request};
use tarn::server::crud::fast_call;

fuzz_target!(|data: &[u8]| {
    let mut buf = data;
    let mut out = Vec::new();
    loop {
        match frame::split_frame(buf) {
            Ok(Some((packet, consumed))) => {
                let decoded = decode_packet(packet);
                let general = decode_packet_general(packet);
                assert_eq!(decoded, general, "{packet:02x?}");
                assert_eq!(fast_call::decode_packet(packet), general, "{packet:02x?}");
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
});
