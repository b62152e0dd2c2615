//! The IPROTO protocol layer: bytes in, borrowed requests out; replies written in place.
//!
//! Owns framing, the greeting, header and body decoding, reply encoding, Tarantool error
//! codes and the chap-sha1 scramble. It knows nothing of storage internals (only the
//! low-level `msgpack` reader/writer), sockets or executors.
//!
//! The server's read path, per packet:
//!
//! 1. [`frame::parse_frame_len`] on the read buffer: wait, fail (reply 20 with sync 0 and
//!    close), or a whole packet.
//! 2. [`header::decode_header`]: sync, type, schema version, stream id, and the body bytes.
//!    From here on every error is answered with the header's sync.
//! 3. [`request::decode_body`]: a [`Request`] that borrows from the packet.
//! 4. [`reply`] functions write the answer into the write buffer.
//!
//! | module | owns |
//! | --- | --- |
//! | [`codes`] | request types, header/body keys, feature ids |
//! | [`crud_call`] | one pass over the CALL packets crud calls arrive as |
//! | [`error_code`] | Tarantool error codes and type names |
//! | [`error`] | [`ProtocolError`] with Tarantool's texts |
//! | [`greeting`] | the 128-byte greeting |
//! | [`frame`] | the size prefix |
//! | [`header`] | the header map |
//! | [`request`] | request bodies |
//! | `fast_decode` | one pass over header and body of the common requests |
//! | [`replication`] | the packets between a tarn master and a tarn replica |
//! | [`reply`] | server replies |
//! | [`auth`] | chap-sha1 |
//! | [`client`] | request encoders and a reply decoder for tests and tools |

// Bytes here come from clients or disk: an `expect` is fixed or says where it stands why
// it cannot fire, and a truncating cast is fixed or says where it stands why it cannot
// truncate (or that truncating is meant).
#![warn(clippy::expect_used, clippy::cast_possible_truncation)]

pub mod auth;
pub mod client;
pub mod codes;
pub mod crud_call;
pub mod error;
pub mod error_code;
pub mod fast_decode;
pub mod frame;
pub mod greeting;
pub mod header;
pub mod replication;
pub mod reply;
pub mod request;

#[cfg(test)]
mod tests;

pub use error::ProtocolError;
pub use error_code::ErrorCode;
pub use frame::{parse_frame_len, FrameLen};
pub use header::{decode_header, Header, PacketError};
pub use request::{decode_body, Request, RequestTarget};

/// Steps 2 and 3 together: header, then body, with the sync kept for the error reply.
///
/// The common requests take a single-pass decoder; anything it does not expect, errors
/// included, is decoded by [`decode_packet_general`], with the same result either way.
#[inline]
pub fn decode_packet(packet: &[u8]) -> Result<(Header, Request<'_>), PacketError> {
    match fast_decode::decode_common(packet) {
        Some(decoded) => Ok(decoded),
        None => decode_packet_general(packet),
    }
}

/// [`decode_packet`] without the fast path: the reference every packet can be checked
/// against.
pub fn decode_packet_general(packet: &[u8]) -> Result<(Header, Request<'_>), PacketError> {
    let (header, body) = decode_header(packet)?;
    match decode_body(header.request_type, body) {
        Ok(request) => Ok((header, request)),
        Err(error) => Err(PacketError {
            sync: header.sync,
            error,
        }),
    }
}
