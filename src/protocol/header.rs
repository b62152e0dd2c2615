//! The IPROTO header map: request type, sync, schema version, stream id (spec §3, §4.1).
//!
//! Decoded on its own, before the body, so that a reply to a bad body still carries the
//! right sync. It must not know any body layout or what a request type means.

use crate::msgpack::{read_value, skip_value, Value};
use crate::protocol::codes::header_key;
use crate::protocol::error::{invalid_msgpack, ProtocolError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// Request type; an absent key means 0, which no request has (error 48).
    pub request_type: u64,
    pub sync: u64,
    /// 0 = "don't check".
    pub schema_version: u64,
    /// 0 = not in a stream.
    pub stream_id: u64,
}

/// A failure that still knows which sync to answer with.
///
/// Tarantool replies with whatever sync it had decoded before the failure (0 if none),
/// so a client waiting on that sync gets its error instead of a hang.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketError {
    pub sync: u64,
    pub error: ProtocolError,
}

/// Decodes the header at the start of `packet` (the bytes after the size prefix) and
/// returns it with the rest of the packet: the body, empty when absent.
///
/// Non-uint keys, and known keys with a value of the wrong msgpack type, are errors;
/// unknown keys are skipped.
pub fn decode_header(packet: &[u8]) -> Result<(Header, &[u8]), PacketError> {
    let mut header = Header::default();
    let mut buf = packet;
    let bad = |header: &Header| PacketError {
        sync: header.sync,
        error: ProtocolError::InvalidMsgpack(invalid_msgpack::PACKET_HEADER),
    };
    let Ok(Value::Map(pairs)) = read_value(&mut buf) else {
        return Err(bad(&header));
    };
    for _ in 0..pairs {
        let Ok(Value::Uint(key)) = read_value(&mut buf) else {
            return Err(bad(&header));
        };
        let well_typed = match key {
            header_key::TIMESTAMP => {
                matches!(read_value(&mut buf), Ok(Value::F64(_) | Value::F32(_)))
            }
            header_key::REQUEST_TYPE..=header_key::STREAM_ID => match read_value(&mut buf) {
                Ok(Value::Uint(value)) => {
                    match key {
                        header_key::REQUEST_TYPE => header.request_type = value,
                        header_key::SYNC => header.sync = value,
                        header_key::SCHEMA_VERSION => header.schema_version = value,
                        header_key::STREAM_ID => header.stream_id = value,
                        _ => {} // replication-only keys: checked, then ignored
                    }
                    true
                }
                _ => false,
            },
            // Unknown key: any value is fine as long as it is whole.
            _ => skip_value(&mut buf).is_ok(),
        };
        if !well_typed {
            return Err(bad(&header));
        }
    }
    Ok((header, buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(packet: &[u8]) -> PacketError {
        decode_header(packet).unwrap_err()
    }

    #[test]
    fn decodes_known_keys_and_returns_the_body() {
        // {0: 1, 1: 2, 5: 7, 10: 3} + body
        let packet = [0x84, 0x00, 0x01, 0x01, 0x02, 0x05, 0x07, 0x0a, 0x03, 0x80];
        let (header, body) = decode_header(&packet).unwrap();
        assert_eq!(
            header,
            Header {
                request_type: 1,
                sync: 2,
                schema_version: 7,
                stream_id: 3
            }
        );
        assert_eq!(body, &[0x80]);
    }

    #[test]
    fn any_uint_width_and_unknown_keys() {
        // {0: 0xce 64, 1: 0xcf big, 0x30: [1, "x"]}
        let mut packet = vec![0x83, 0x00, 0xce, 0, 0, 0, 0x40, 0x01, 0xcf];
        packet.extend_from_slice(&u64::MAX.to_be_bytes());
        packet.extend_from_slice(&[0x30, 0x92, 0x01, 0xa1, b'x']);
        let (header, body) = decode_header(&packet).unwrap();
        assert_eq!(header.request_type, 64);
        assert_eq!(header.sync, u64::MAX);
        assert!(body.is_empty());
    }

    #[test]
    fn bad_headers_are_error_20_with_the_sync_seen_so_far() {
        let expected = ProtocolError::InvalidMsgpack("packet header");
        // not a map
        assert_eq!(err(&[0x91, 0x00]).error, expected);
        // empty packet
        assert_eq!(err(&[]).error, expected);
        // sync decoded, then a non-uint key
        let e = err(&[0x82, 0x01, 0x09, 0xa1, b'k', 0x00]);
        assert_eq!((e.sync, e.error), (9, expected.clone()));
        // sync as int format is the wrong type
        assert_eq!(err(&[0x81, 0x01, 0xd0, 0x05]).sync, 0);
        // timestamp must be a double, lsn a uint
        assert!(decode_header(&[0x81, 0x04, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0]).is_ok());
        assert_eq!(err(&[0x81, 0x04, 0x01]).error, expected);
        assert_eq!(err(&[0x81, 0x03, 0xa0]).error, expected);
        // truncated
        assert_eq!(err(&[0x82, 0x00, 0x40]).error, expected);
        assert_eq!(err(&[0x81, 0x33, 0x92, 0x01]).error, expected);
    }
}
