//! Feeds arbitrary bytes through the server's read path: frame, header, body, and the
//! AUTH scramble checks. Any panic is a bug: this layer faces the network. Every packet is
//! also decoded by the general decoder alone, which must agree with the one-pass fast path
//! `decode_packet` tries first: the same request, or the same error.
//!
//! Run with `cargo +nightly fuzz run decode_request` from the repository root
//! (or `RUSTC_BOOTSTRAP=1 cargo fuzz run decode_request` on a stable toolchain).

#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn::protocol::{decode_packet, decode_packet_general, frame, request::Request};

fuzz_target!(|data: &[u8]| {
    let mut buf = data;
    let mut out = Vec::new();
    loop {
        match frame::split_frame(buf) {
            Ok(Some((packet, consumed))) => {
                let decoded = decode_packet(packet);
                assert_eq!(decoded, decode_packet_general(packet), "{packet:02x?}");
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
