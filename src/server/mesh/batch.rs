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
//! The packet is an IPROTO packet (header+body), except for [`Kind::CrudOps`], whose
//! "packet" is a crud ops payload.
//!
//! Reply batch, one entry per request of the batch it answers, in the same order:
//!
//! ```text
//! [ticket u32 LE][reply length u32 LE][reply bytes]
//! ```
//!
//! The reply bytes are a whole IPROTO reply packet for [`Kind::Execute`] and
//! [`Kind::CrudCall`], the scan entries of `Shard::scan` for [`Kind::Scan`], and the
//! crud payloads for [`Kind::CrudOps`] and [`Kind::CrudPart`]. Pure functions over
//! byte buffers: no executors here.

/// What the owner does with a request entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Execute the packet (a point request) and answer with the IPROTO reply.
    Execute = 0,
    /// Scan the SELECT packet's range, at most `limit` entries, and answer with the entries.
    Scan = 1,
    /// Run a crud CALL packet (a point op this core owns) here and answer with the IPROTO
    /// reply.
    CrudCall = 2,
    /// Run the crud ops payload (this core's share of a `*_many` call) and answer with their
    /// outcomes.
    CrudOps = 3,
    /// Run this core's part of a fanned-out crud CALL packet (select, count, min/max, len,
    /// truncate) and answer with the crud part payload.
    CrudPart = 4,
}

const REQUEST_HEADER_BYTES: usize = 1 + 4 + 4 + 4;
const REPLY_HEADER_BYTES: usize = 4 + 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestEntry<'a> {
    pub kind: Kind,
    pub ticket: u32,
    pub limit: u32,
    pub packet: &'a [u8],
}

pub fn push_request(batch: &mut Vec<u8>, kind: Kind, ticket: u32, limit: u32, packet: &[u8]) {
    let packet_len = u32::try_from(packet.len()).expect("packets are bounded by max_packet_size");
    batch.push(kind as u8);
    batch.extend_from_slice(&ticket.to_le_bytes());
    batch.extend_from_slice(&limit.to_le_bytes());
    batch.extend_from_slice(&packet_len.to_le_bytes());
    batch.extend_from_slice(packet);
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
            2 => Kind::CrudCall,
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

pub fn finish_reply(batch: &mut [u8], mark: ReplyMark) {
    let start = mark.at + REPLY_HEADER_BYTES;
    assert!(batch.len() >= start, "reply mark past the batch end");
    let len = u32::try_from(batch.len() - start).expect("a reply fits in u32 bytes");
    batch[mark.at + 4..start].copy_from_slice(&len.to_le_bytes());
}

/// The `(ticket, reply bytes)` entries of a reply batch.
pub fn replies(batch: &[u8]) -> ReplyEntries<'_> {
    ReplyEntries { rest: batch }
}

pub struct ReplyEntries<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for ReplyEntries<'a> {
    type Item = (u32, &'a [u8]);

    fn next(&mut self) -> Option<(u32, &'a [u8])> {
        if self.rest.is_empty() {
            return None;
        }
        assert!(self.rest.len() >= REPLY_HEADER_BYTES, "torn reply batch");
        let ticket = read_u32(self.rest);
        let len = read_u32(&self.rest[4..]) as usize;
        let end = REPLY_HEADER_BYTES + len;
        assert!(self.rest.len() >= end, "torn reply batch");
        let bytes = &self.rest[REPLY_HEADER_BYTES..end];
        self.rest = &self.rest[end..];
        Some((ticket, bytes))
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
    fn replies_round_trip_in_order() {
        let mut batch = Vec::new();
        let mark = begin_reply(&mut batch, 3);
        batch.extend_from_slice(b"hello");
        finish_reply(&mut batch, mark);
        let mark = begin_reply(&mut batch, 1);
        finish_reply(&mut batch, mark);
        let entries: Vec<_> = replies(&batch).collect();
        assert_eq!(entries, vec![(3, &b"hello"[..]), (1, &b""[..])]);
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
