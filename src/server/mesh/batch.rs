//! The byte layout of the messages between cores: many requests (or many replies) in one
//! buffer, so that crossing a core costs one channel message per batch, not per request.
//! The contract is docs/format.md, "Messages between cores", with the crud payloads
//! ([`super::crud_payloads`]) they carry.
//!
//! Request batch, one entry per request, in the order they were queued:
//!
//! ```text
//! [kind u8][ticket u32 LE][limit u32 LE][packet length u32 LE][packet]
//! ```
//!
//! The packet is an IPROTO packet (header+body) for [`Kind::Execute`] and [`Kind::CrudPart`];
//! for [`Kind::Scan`] a scan payload ([`push_scan`]), and for [`Kind::CrudPoint`] and
//! [`Kind::CrudOps`] a crud point or ops payload.
//!
//! Reply batch, one entry per request of the batch it answers, in the same order:
//!
//! ```text
//! [ticket u32 LE][reply length u32 LE][reply bytes]
//! ```
//!
//! The reply bytes are a whole IPROTO reply packet for [`Kind::Execute`] and
//! [`Kind::CrudPoint`], the scan entries of `Shard::scan` for [`Kind::Scan`], and the
//! crud payloads for [`Kind::CrudOps`] and [`Kind::CrudPart`]. Pure functions over
//! byte buffers: no executors here.
//!
//! A reply the u32 length cannot hold (a scan or crud part over 4 GiB, which a client can
//! ask for) is not sent: [`finish_reply`] turns its entry into the *too long* marker, the
//! reserved length [`TOO_LONG`] followed by the size it had, and [`replies`] yields it as
//! [`EntryTooLong`], so the accepting core can answer the client with an error instead:
//!
//! ```text
//! [ticket u32 LE][u32::MAX][reply's size u64 LE]
//! ```

use crate::shard::ScanPart;

/// What the owner does with a request entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Execute the packet (a point request) and answer with the IPROTO reply.
    Execute = 0,
    /// Scan the range of the scan payload, at most `limit` entries, and answer with the
    /// entries.
    Scan = 1,
    /// Run the crud point payload (a point op this core owns, as the accepting core planned
    /// it) and answer with the IPROTO reply.
    CrudPoint = 2,
    /// Run the crud ops payload (this core's share of a `*_many` call) and answer with their
    /// outcomes.
    CrudOps = 3,
    /// Run this core's part of a fanned-out crud CALL packet (select, count, min/max, len,
    /// truncate) and answer with the crud part payload.
    CrudPart = 4,
}

const REQUEST_HEADER_BYTES: usize = 1 + 4 + 4 + 4;
const REPLY_HEADER_BYTES: usize = 4 + 4;

/// The reply length that marks a too-long entry; no reply is this long.
pub const TOO_LONG: u32 = u32::MAX;

/// A reply entry's bytes that its u32 length cannot hold: it travels as the too-long marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "Failed to allocate {bytes} bytes in a reply batch between cores for one reply \
     (its length field holds at most {max} bytes): ask for fewer rows, with a limit",
    max = TOO_LONG - 1
)]
pub struct EntryTooLong {
    pub bytes: u64,
}

impl EntryTooLong {
    /// The ER_MEMORY_ISSUE reply the client gets instead of the reply that did not fit.
    #[cold]
    pub fn encode_reply(&self, out: &mut Vec<u8>, sync: u64, schema_version: u64) {
        crate::protocol::reply::encode_error(
            out,
            sync,
            schema_version,
            crate::protocol::error_code::ErrorCode::ER_MEMORY_ISSUE,
            &self.to_string(),
        );
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestEntry<'a> {
    pub kind: Kind,
    pub ticket: u32,
    pub limit: u32,
    pub packet: &'a [u8],
}

pub fn push_request(batch: &mut Vec<u8>, kind: Kind, ticket: u32, limit: u32, packet: &[u8]) {
    let packet_len = u32::try_from(packet.len()).expect(
        "packets are bounded by max_packet_size, which server::limits asserts at compile \
         time fits u32 (MAX_PACKET_SIZE_BYTES_MAX <= u32::MAX)",
    );
    batch.push(kind as u8);
    batch.extend_from_slice(&ticket.to_le_bytes());
    batch.extend_from_slice(&limit.to_le_bytes());
    batch.extend_from_slice(&packet_len.to_le_bytes());
    batch.extend_from_slice(packet);
}

/// [`push_request`] of the packet that `write_packet` appends to the batch: a payload is
/// encoded straight into the batch, with no buffer of its own.
pub fn push_request_with(
    batch: &mut Vec<u8>,
    kind: Kind,
    ticket: u32,
    limit: u32,
    write_packet: impl FnOnce(&mut Vec<u8>),
) {
    batch.push(kind as u8);
    batch.extend_from_slice(&ticket.to_le_bytes());
    batch.extend_from_slice(&limit.to_le_bytes());
    let length_at = batch.len();
    batch.extend_from_slice(&[0; 4]);
    write_packet(batch);
    let packet_len = u32::try_from(batch.len() - length_at - 4).expect(
        "packets are bounded by max_packet_size, which server::limits asserts at compile \
         time fits u32 (MAX_PACKET_SIZE_BYTES_MAX <= u32::MAX); a payload is no longer \
         than the packet it was planned from",
    );
    batch[length_at..length_at + 4].copy_from_slice(&packet_len.to_le_bytes());
}

/// Bytes of a scan payload before its key.
const SCAN_HEADER_BYTES: usize = 4 + 4 + 4;

/// Appends a [`Kind::Scan`] entry for `part`: the entry's limit is the part's, and its
/// payload the rest of it, decoded where it lies ([`scan_part`]), so the owner neither
/// decodes the client's packet again nor routes it:
///
/// ```text
/// [space id u32 LE][index id u32 LE][iterator u32 LE][key: msgpack array]
/// ```
pub fn push_scan(batch: &mut Vec<u8>, ticket: u32, part: &ScanPart<'_>) {
    push_request_with(batch, Kind::Scan, ticket, part.limit, |payload| {
        payload.reserve(SCAN_HEADER_BYTES + part.key.len());
        payload.extend_from_slice(&part.space_id.to_le_bytes());
        payload.extend_from_slice(&part.index_id.to_le_bytes());
        payload.extend_from_slice(&part.iterator.to_le_bytes());
        payload.extend_from_slice(part.key);
    });
}

/// The scan part a [`Kind::Scan`] entry carries (see [`push_scan`]).
pub fn scan_part<'a>(entry: &RequestEntry<'a>) -> ScanPart<'a> {
    assert!(
        entry.kind == Kind::Scan && entry.packet.len() >= SCAN_HEADER_BYTES,
        "a torn scan payload"
    );
    let payload = entry.packet;
    ScanPart {
        space_id: read_u32(payload),
        index_id: read_u32(&payload[4..]),
        iterator: read_u32(&payload[8..]),
        key: &payload[SCAN_HEADER_BYTES..],
        limit: entry.limit,
    }
}

/// The entries of a request batch. A malformed batch is a bug of this module: it asserts.
pub fn requests(batch: &[u8]) -> Requests<'_> {
    Requests { rest: batch }
}

pub struct Requests<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Requests<'a> {
    type Item = RequestEntry<'a>;

    fn next(&mut self) -> Option<RequestEntry<'a>> {
        if self.rest.is_empty() {
            return None;
        }
        assert!(
            self.rest.len() >= REQUEST_HEADER_BYTES,
            "torn request batch"
        );
        let kind = match self.rest[0] {
            0 => Kind::Execute,
            1 => Kind::Scan,
            2 => Kind::CrudPoint,
            3 => Kind::CrudOps,
            4 => Kind::CrudPart,
            other => panic!("request batch: unknown kind {other}"),
        };
        let ticket = read_u32(&self.rest[1..]);
        let limit = read_u32(&self.rest[5..]);
        let packet_len = read_u32(&self.rest[9..]) as usize;
        let end = REQUEST_HEADER_BYTES + packet_len;
        assert!(self.rest.len() >= end, "torn request batch");
        let packet = &self.rest[REQUEST_HEADER_BYTES..end];
        self.rest = &self.rest[end..];
        Some(RequestEntry {
            kind,
            ticket,
            limit,
            packet,
        })
    }
}

/// Where a reply entry's length goes, once its bytes are written.
#[must_use = "call finish_reply"]
pub struct ReplyMark {
    at: usize,
}

/// Starts a reply entry; the caller appends the reply bytes, then calls [`finish_reply`].
pub fn begin_reply(batch: &mut Vec<u8>, ticket: u32) -> ReplyMark {
    let at = batch.len();
    batch.extend_from_slice(&ticket.to_le_bytes());
    batch.extend_from_slice(&[0; 4]);
    ReplyMark { at }
}

/// Writes the length of the reply entry at `mark`. A reply its length cannot hold is
/// dropped and the entry becomes the too-long marker: the batch stays well-formed, and the
/// caller may answer with an error instead ([`reopen_too_long`]).
pub fn finish_reply(batch: &mut Vec<u8>, mark: ReplyMark) -> Result<(), EntryTooLong> {
    let start = mark.at + REPLY_HEADER_BYTES;
    assert!(batch.len() >= start, "reply mark past the batch end");
    match reply_length(batch.len() - start) {
        Ok(len) => {
            batch[mark.at + 4..start].copy_from_slice(&len.to_le_bytes());
            Ok(())
        }
        Err(too_long) => {
            finish_too_long(batch, mark, too_long);
            Err(too_long)
        }
    }
}

/// The length field for a reply of `bytes`; apart from [`finish_reply`] so that a test can
/// ask about a length it cannot allocate.
fn reply_length(bytes: usize) -> Result<u32, EntryTooLong> {
    match u32::try_from(bytes) {
        Ok(len) if len != TOO_LONG => Ok(len),
        _ => Err(EntryTooLong {
            bytes: bytes as u64,
        }),
    }
}

/// Makes the entry at `mark` the too-long marker, as [`finish_reply`] does for a reply that
/// does not fit (a rebuilt batch copies one this way), dropping whatever was written.
#[cold]
pub fn finish_too_long(batch: &mut Vec<u8>, mark: ReplyMark, too_long: EntryTooLong) {
    batch.truncate(mark.at + 4);
    batch.extend_from_slice(&TOO_LONG.to_le_bytes());
    batch.extend_from_slice(&too_long.bytes.to_le_bytes());
}

/// Opens again the too-long entry that [`finish_reply`] just left at the end of `batch`, for
/// a reply that says so instead (an error reply packet).
pub fn reopen_too_long(batch: &mut Vec<u8>) -> ReplyMark {
    let too_long_entry_bytes = REPLY_HEADER_BYTES + 8;
    assert!(
        batch.len() >= too_long_entry_bytes,
        "no too-long entry to reopen"
    );
    let at = batch.len() - too_long_entry_bytes;
    assert_eq!(
        read_u32(&batch[at + 4..]),
        TOO_LONG,
        "no too-long entry to reopen"
    );
    batch.truncate(at + REPLY_HEADER_BYTES);
    ReplyMark { at }
}

/// The `(ticket, reply bytes)` entries of a reply batch; a too-long entry's are its
/// [`EntryTooLong`].
pub fn replies(batch: &[u8]) -> ReplyEntries<'_> {
    ReplyEntries { rest: batch }
}

pub struct ReplyEntries<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for ReplyEntries<'a> {
    type Item = (u32, Result<&'a [u8], EntryTooLong>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        assert!(self.rest.len() >= REPLY_HEADER_BYTES, "torn reply batch");
        let ticket = read_u32(self.rest);
        let len = read_u32(&self.rest[4..]);
        if len == TOO_LONG {
            let end = REPLY_HEADER_BYTES + 8;
            assert!(self.rest.len() >= end, "torn reply batch");
            let mut size = [0; 8];
            size.copy_from_slice(&self.rest[REPLY_HEADER_BYTES..end]);
            self.rest = &self.rest[end..];
            let bytes = u64::from_le_bytes(size);
            return Some((ticket, Err(EntryTooLong { bytes })));
        }
        let len = len as usize;
        let end = REPLY_HEADER_BYTES + len;
        assert!(self.rest.len() >= end, "torn reply batch");
        let bytes = &self.rest[REPLY_HEADER_BYTES..end];
        self.rest = &self.rest[end..];
        Some((ticket, Ok(bytes)))
    }
}

fn read_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_in_order() {
        let mut batch = Vec::new();
        push_request(&mut batch, Kind::Execute, 7, 0, b"abc");
        push_request(&mut batch, Kind::Scan, 8, 100, b"");
        push_request(&mut batch, Kind::Execute, u32::MAX, 1, &[0xff; 300]);
        let entries: Vec<_> = requests(&batch).collect();
        assert_eq!(entries.len(), 3);
        assert_eq!(
            entries[0],
            RequestEntry {
                kind: Kind::Execute,
                ticket: 7,
                limit: 0,
                packet: b"abc"
            }
        );
        assert_eq!((entries[1].kind, entries[1].limit), (Kind::Scan, 100));
        assert!(entries[1].packet.is_empty());
        assert_eq!(entries[2].ticket, u32::MAX);
        assert_eq!(entries[2].packet.len(), 300);
    }

    #[test]
    fn a_scan_part_round_trips_between_point_requests() {
        let part = ScanPart {
            space_id: 513,
            index_id: 2,
            iterator: 6,
            key: &[0x92, 0x05, 0xcd, 0x12, 0x34],
            limit: u32::MAX,
        };
        let mut batch = Vec::new();
        push_request(&mut batch, Kind::Execute, 1, 0, b"get");
        push_scan(&mut batch, 2, &part);
        push_scan(
            &mut batch,
            3,
            &ScanPart {
                key: &[0x90],
                ..part
            },
        );
        let entries: Vec<_> = requests(&batch).collect();
        assert_eq!(entries.len(), 3);
        assert_eq!((entries[1].kind, entries[1].ticket), (Kind::Scan, 2));
        assert_eq!(scan_part(&entries[1]), part);
        assert_eq!(scan_part(&entries[2]).key, &[0x90]);
        assert_eq!(entries[0].packet, b"get");
    }

    #[test]
    fn replies_round_trip_in_order() {
        let mut batch = Vec::new();
        let mark = begin_reply(&mut batch, 3);
        batch.extend_from_slice(b"hello");
        assert_eq!(finish_reply(&mut batch, mark), Ok(()));
        let mark = begin_reply(&mut batch, 1);
        assert_eq!(finish_reply(&mut batch, mark), Ok(()));
        let entries: Vec<_> = replies(&batch).collect();
        assert_eq!(entries, vec![(3, Ok(&b"hello"[..])), (1, Ok(&b""[..]))]);
    }

    #[test]
    fn a_reply_length_holds_up_to_one_less_than_the_marker() {
        assert_eq!(reply_length(0), Ok(0));
        assert_eq!(reply_length(TOO_LONG as usize - 1), Ok(TOO_LONG - 1));
        assert_eq!(
            reply_length(TOO_LONG as usize),
            Err(EntryTooLong {
                bytes: u64::from(TOO_LONG)
            })
        );
        assert_eq!(
            reply_length(5_000_000_000),
            Err(EntryTooLong {
                bytes: 5_000_000_000
            })
        );
    }

    #[test]
    fn a_too_long_entry_is_read_back_between_others() {
        let too_long = EntryTooLong {
            bytes: 5_000_000_000,
        };
        let mut batch = Vec::new();
        let mark = begin_reply(&mut batch, 1);
        batch.extend_from_slice(b"a");
        assert_eq!(finish_reply(&mut batch, mark), Ok(()));
        let mark = begin_reply(&mut batch, 2);
        batch.extend_from_slice(b"dropped");
        finish_too_long(&mut batch, mark, too_long);
        let mark = begin_reply(&mut batch, 3);
        batch.extend_from_slice(b"c");
        assert_eq!(finish_reply(&mut batch, mark), Ok(()));
        let entries: Vec<_> = replies(&batch).collect();
        assert_eq!(
            entries,
            vec![(1, Ok(&b"a"[..])), (2, Err(too_long)), (3, Ok(&b"c"[..]))]
        );
    }

    #[test]
    fn a_reopened_too_long_entry_takes_another_reply() {
        let mut batch = Vec::new();
        let mark = begin_reply(&mut batch, 9);
        finish_too_long(&mut batch, mark, EntryTooLong { bytes: 1 << 33 });
        let mark = reopen_too_long(&mut batch);
        EntryTooLong { bytes: 1 << 33 }.encode_reply(&mut batch, 5, 1);
        assert_eq!(finish_reply(&mut batch, mark), Ok(()));
        let entries: Vec<_> = replies(&batch).collect();
        assert_eq!(entries.len(), 1);
        let (ticket, reply) = entries[0];
        let reply = reply.expect("an error reply fits");
        assert_eq!(ticket, 9);
        let message = String::from_utf8_lossy(reply);
        assert!(
            message.contains("Failed to allocate 8589934592 bytes in a reply batch"),
            "{message}"
        );
    }

    #[test]
    #[should_panic(expected = "torn request batch")]
    fn a_torn_request_batch_is_a_bug() {
        let mut batch = Vec::new();
        push_request(&mut batch, Kind::Execute, 1, 0, b"abcdef");
        batch.pop();
        requests(&batch).for_each(drop);
    }
}
