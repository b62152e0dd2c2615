//! IPROTO framing: the msgpack-uint size prefix in front of every packet (spec §3).
//!
//! Owns the asymmetry: clients may send any uint width, the server always writes `0xce` +
//! u32 big-endian. It must not know what is inside a packet, nor how bytes are read.

use crate::protocol::error::{invalid_msgpack, ProtocolError, PACKET_LEN_MAX};

/// The size of the prefix the server writes: `0xce` + u32 BE.
pub const SERVER_PREFIX_SIZE: usize = 5;

/// The outcome of looking at the start of the read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameLen {
    /// Not even the whole prefix has arrived yet.
    Incomplete,
    /// The packet (header + body) is `packet_len` bytes after a `prefix_len`-byte prefix.
    /// The packet itself may not have arrived yet: compare with [`FrameLen::total_len`].
    Complete {
        prefix_len: usize,
        packet_len: usize,
    },
    /// The first byte is not a msgpack uint: Tarantool answers 20 `packet length`
    /// (sync 0) and closes the connection.
    Invalid,
    /// Larger than [`PACKET_LEN_MAX`]: also answered with 20 and a close.
    TooLarge { packet_len: u64 },
}

impl FrameLen {
    /// Prefix plus packet, when known.
    pub fn total_len(self) -> Option<usize> {
        match self {
            FrameLen::Complete {
                prefix_len,
                packet_len,
            } => Some(prefix_len + packet_len),
            _ => None,
        }
    }

    /// The error to send (with sync 0) before closing, for the two bad outcomes.
    pub fn error(self) -> Option<ProtocolError> {
        match self {
            FrameLen::Invalid => Some(ProtocolError::InvalidMsgpack(
                invalid_msgpack::PACKET_LENGTH,
            )),
            FrameLen::TooLarge { packet_len } => Some(ProtocolError::PacketTooLarge(packet_len)),
            _ => None,
        }
    }
}

/// Reads the size prefix at the start of `buf` (client→server, any uint width).
#[inline]
pub fn parse_frame_len(buf: &[u8]) -> FrameLen {
    let Some(&marker) = buf.first() else {
        return FrameLen::Incomplete;
    };
    let width = match marker {
        0x00..=0x7f => {
            return FrameLen::Complete {
                prefix_len: 1,
                packet_len: marker as usize,
            }
        }
        0xcc => 1,
        0xcd => 2,
        0xce => 4,
        0xcf => 8,
        _ => return FrameLen::Invalid,
    };
    let Some(digits) = buf.get(1..1 + width) else {
        return FrameLen::Incomplete;
    };
    let packet_len = digits
        .iter()
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
    if packet_len > PACKET_LEN_MAX {
        return FrameLen::TooLarge { packet_len };
    }
    #[allow(
        clippy::cast_possible_truncation,
        reason = "PACKET_LEN_MAX, checked above, fits in usize on every 32- and 64-bit target"
    )]
    FrameLen::Complete {
        prefix_len: 1 + width,
        packet_len: packet_len as usize,
    }
}

/// Splits one whole packet (without its prefix) off the front of `buf`.
///
/// `Ok(None)` means "read more"; `Ok(Some((packet, consumed)))` hands out the packet and
/// how many bytes to drop from the buffer afterwards.
#[inline]
pub fn split_frame(buf: &[u8]) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    match parse_frame_len(buf) {
        FrameLen::Incomplete => Ok(None),
        FrameLen::Complete {
            prefix_len,
            packet_len,
        } => Ok(buf
            .get(prefix_len..prefix_len + packet_len)
            .map(|packet| (packet, prefix_len + packet_len))),
        bad => Err(bad.error().unwrap_or(ProtocolError::InvalidMsgpack(
            invalid_msgpack::PACKET_LENGTH,
        ))),
    }
}

/// Writes the server-style prefix for a packet of `packet_len` bytes.
#[inline]
pub fn write_server_prefix(out: &mut Vec<u8>, packet_len: u32) {
    out.push(0xce);
    out.extend_from_slice(&packet_len.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_uint_width_is_accepted() {
        let cases: &[(&[u8], usize, usize)] = &[
            (&[0x1a], 1, 0x1a),
            (&[0xcc, 0xff], 2, 0xff),
            (&[0xcd, 0x01, 0x00], 3, 0x100),
            (&[0xce, 0x00, 0x00, 0x00, 0x05], 5, 5),
            (&[0xcf, 0, 0, 0, 0, 0, 0, 0x01, 0x00], 9, 0x100),
        ];
        for &(bytes, prefix_len, packet_len) in cases {
            assert_eq!(
                parse_frame_len(bytes),
                FrameLen::Complete {
                    prefix_len,
                    packet_len
                },
                "{bytes:x?}"
            );
            for cut in 0..bytes.len() {
                assert_eq!(parse_frame_len(&bytes[..cut]), FrameLen::Incomplete);
            }
        }
    }

    #[test]
    fn non_uint_prefix_is_invalid() {
        for marker in [0x80u8, 0x90, 0xa0, 0xc0, 0xc1, 0xd0, 0xd3, 0xff] {
            assert_eq!(parse_frame_len(&[marker, 0, 0, 0, 0]), FrameLen::Invalid);
        }
        let error = FrameLen::Invalid.error().unwrap();
        assert_eq!(error.to_string(), "Invalid MsgPack - packet length");
        assert_eq!(error.code().0, 20);
        assert!(error.closes_connection());
    }

    #[test]
    fn oversized_packet_is_refused() {
        let bytes = [0xcf, 0, 0, 0, 0, 0x80, 0, 0, 1];
        assert_eq!(
            parse_frame_len(&bytes),
            FrameLen::TooLarge {
                packet_len: (1 << 31) + 1
            }
        );
        let bytes = [0xce, 0x80, 0, 0, 0];
        assert!(matches!(parse_frame_len(&bytes), FrameLen::Complete { .. }));
    }

    #[test]
    fn split_waits_for_the_whole_packet() {
        let bytes = [0x03, 0x81, 0x00, 0x40, 0x99];
        assert_eq!(split_frame(&bytes[..3]), Ok(None));
        assert_eq!(split_frame(&bytes), Ok(Some((&bytes[1..4], 4))));
        assert!(split_frame(&[0xa0]).is_err());
    }
}
