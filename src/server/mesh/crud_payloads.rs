//! The bytes a crud call's shard-side work travels as between cores: a `*_many` call's ops
//! for one shard and their outcomes, and one shard's part of a fanned-out call. (A point op
//! travels as its CALL packet instead: the owner plans it again and answers with the whole
//! IPROTO reply.) Pure functions over byte buffers; both ends are the same build, so a
//! malformed buffer is a bug and asserts. The contract is docs/format.md, "Messages between
//! cores", beside the batches ([`super::batch`]) these payloads ride in.
//!
//! ```text
//! ops:     [space_id u32][flags u8: 1 stop_on_error, 2 rollback_on_error][count u32]
//!          count × ([tag u8][len u32][bytes]   tuple or key
//!                   [len u32][bytes])          update/upsert operations (else len 0)
//! items:   [status u8: 0 ok, 0xff WAL refused][count u32]
//!          count × ([tag u8: 0 done (no row), 1 done, 2 failed, 3 not performed,
//!                   4 rolled back][len u32][row or message])
//! part:    [tag u8: 0 rows, 1 count, 2 done, 3 failed, 0xff WAL refused] then
//!          rows: [count u32] count × ([key len u32][key][tuple len u32][tuple])
//!          count: [u64 LE];  failed: [len u32][message]
//! ```
//!
//! All integers little-endian.

use crate::crud::write::{BatchItem, OpBytes, PointOp};
use crate::crud::{Part, ShardOps};
use crate::storage::key::KeyBuf;

/// The status byte of an answer whose WAL rows could not be written.
pub const WAL_REFUSED: u8 = 0xff;

const STOP_ON_ERROR: u8 = 1;
const ROLLBACK_ON_ERROR: u8 = 2;

fn put_u32(out: &mut Vec<u8>, value: usize) {
    let value = u32::try_from(value).expect("bounded by max_packet_size");
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u32(out, bytes.len());
    out.extend_from_slice(bytes);
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn u8(&mut self) -> u8 {
        let (&byte, rest) = self.rest.split_first().expect("torn crud message");
        self.rest = rest;
        byte
    }

    fn take(&mut self, len: usize) -> &'a [u8] {
        assert!(self.rest.len() >= len, "torn crud message");
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        taken
    }

    fn u32(&mut self) -> usize {
        let bytes = self.take(4);
        u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize
    }

    fn bytes(&mut self) -> &'a [u8] {
        let len = self.u32();
        self.take(len)
    }

    fn end(&self) {
        assert!(self.rest.is_empty(), "trailing bytes in a crud message");
    }
}

/// Appends the ops (in their order) for one shard.
pub fn encode_ops<'o, 'b: 'o>(
    out: &mut Vec<u8>,
    space_id: u32,
    stop_on_error: bool,
    rollback_on_error: bool,
    ops: impl ExactSizeIterator<Item = &'o PointOp<'b>>,
) {
    out.extend_from_slice(&space_id.to_le_bytes());
    let flags = if stop_on_error { STOP_ON_ERROR } else { 0 }
        | if rollback_on_error {
            ROLLBACK_ON_ERROR
        } else {
            0
        };
    out.push(flags);
    put_u32(out, ops.len());
    for op in ops {
        let none = OpBytes::Borrowed(&[]);
        let (tag, first, second) = match op {
            PointOp::Insert { tuple } => (0, tuple, &none),
            PointOp::Replace { tuple } => (1, tuple, &none),
            PointOp::Upsert { tuple, ops } => (2, tuple, ops),
            PointOp::Update { key, ops } => (3, key, ops),
            PointOp::Delete { key } => (4, key, &none),
            PointOp::Get { key } => (5, key, &none),
        };
        let (first, second) = (first.bytes(), second.bytes());
        out.push(tag);
        put_bytes(out, &first);
        put_bytes(out, &second);
    }
}

/// A batch of ops for one shard, decoded; the ops borrow their bytes from the message.
pub fn decode_ops(bytes: &[u8]) -> ShardOps<'_> {
    let mut reader = Reader { rest: bytes };
    let space_id = reader.u32() as u32;
    let flags = reader.u8();
    let count = reader.u32();
    let mut ops = Vec::with_capacity(count);
    for _ in 0..count {
        let tag = reader.u8();
        let first = OpBytes::from(reader.bytes());
        let second = OpBytes::from(reader.bytes());
        ops.push(match tag {
            0 => PointOp::Insert { tuple: first },
            1 => PointOp::Replace { tuple: first },
            2 => PointOp::Upsert {
                tuple: first,
                ops: second,
            },
            3 => PointOp::Update {
                key: first,
                ops: second,
            },
            4 => PointOp::Delete { key: first },
            5 => PointOp::Get { key: first },
            other => panic!("crud ops: unknown op tag {other}"),
        });
    }
    reader.end();
    ShardOps {
        space_id,
        stop_on_error: flags & STOP_ON_ERROR != 0,
        rollback_on_error: flags & ROLLBACK_ON_ERROR != 0,
        ops,
    }
}

/// Appends a batch's outcomes, or (with `None`) the WAL's refusal.
pub fn encode_items(out: &mut Vec<u8>, items: Option<&[BatchItem]>) {
    let Some(items) = items else {
        out.push(WAL_REFUSED);
        return;
    };
    out.push(0);
    put_u32(out, items.len());
    for item in items {
        let (tag, bytes): (u8, &[u8]) = match item {
            BatchItem::Done(None) => (0, &[]),
            BatchItem::Done(Some(row)) => (1, row),
            BatchItem::Failed(message) => (2, message.as_bytes()),
            BatchItem::NotPerformed => (3, &[]),
            BatchItem::RolledBack => (4, &[]),
        };
        out.push(tag);
        put_bytes(out, bytes);
    }
}

/// The outcomes, in the order of the ops sent; `None` when the WAL refused their rows.
pub fn decode_items(bytes: &[u8]) -> Option<Vec<BatchItem>> {
    let mut reader = Reader { rest: bytes };
    match reader.u8() {
        0 => {}
        WAL_REFUSED => return None,
        other => panic!("crud items: unknown status {other}"),
    }
    let count = reader.u32();
    let mut items = Vec::with_capacity(count);
    for _ in 0..count {
        let tag = reader.u8();
        let bytes = reader.bytes();
        items.push(match tag {
            0 => BatchItem::Done(None),
            1 => BatchItem::Done(Some(bytes.to_vec())),
            2 => BatchItem::Failed(String::from_utf8_lossy(bytes).into_owned()),
            3 => BatchItem::NotPerformed,
            4 => BatchItem::RolledBack,
            other => panic!("crud items: unknown tag {other}"),
        });
    }
    reader.end();
    Some(items)
}

/// Appends one shard's part, or (with `None`) the WAL's refusal.
pub fn encode_part(out: &mut Vec<u8>, part: Option<&Part>) {
    match part {
        None => out.push(WAL_REFUSED),
        Some(Part::Rows(rows)) => {
            out.push(0);
            put_u32(out, rows.len());
            for (key, tuple) in rows {
                put_bytes(out, key);
                put_bytes(out, tuple);
            }
        }
        Some(Part::Count(count)) => {
            out.push(1);
            out.extend_from_slice(&count.to_le_bytes());
        }
        Some(Part::Done) => out.push(2),
        Some(Part::Failed(message)) => {
            out.push(3);
            put_bytes(out, message.as_bytes());
        }
    }
}

/// One shard's part; `None` when the WAL refused its rows.
pub fn decode_part(bytes: &[u8]) -> Option<Part> {
    let mut reader = Reader { rest: bytes };
    let part = match reader.u8() {
        WAL_REFUSED => return None,
        0 => {
            let count = reader.u32();
            let mut rows = Vec::with_capacity(count);
            for _ in 0..count {
                let key = KeyBuf::from_slice(reader.bytes());
                rows.push((key, reader.bytes().to_vec()));
            }
            Part::Rows(rows)
        }
        1 => {
            let bytes = reader.take(8);
            Part::Count(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
        }
        2 => Part::Done,
        3 => Part::Failed(String::from_utf8_lossy(reader.bytes()).into_owned()),
        other => panic!("crud part: unknown tag {other}"),
    };
    reader.end();
    Some(part)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crud::select::ShardRows;

    #[test]
    fn ops_round_trip() {
        let ops = vec![
            PointOp::Insert {
                tuple: vec![0x91, 1].into(),
            },
            PointOp::Upsert {
                tuple: vec![0x91, 2].into(),
                ops: vec![0x90].into(),
            },
            PointOp::Update {
                key: vec![0x91, 3].into(),
                ops: vec![0x91, 0x93].into(),
            },
            PointOp::Delete {
                key: vec![0x91, 4].into(),
            },
            PointOp::Replace {
                tuple: vec![0x90].into(),
            },
            PointOp::Get {
                key: vec![0x91, 5].into(),
            },
        ];
        let mut bytes = Vec::new();
        encode_ops(&mut bytes, 512, true, false, ops.iter());
        assert_eq!(
            decode_ops(&bytes),
            ShardOps {
                space_id: 512,
                stop_on_error: true,
                rollback_on_error: false,
                ops
            }
        );
    }

    #[test]
    fn items_round_trip_and_refusal() {
        let items = vec![
            BatchItem::Done(None),
            BatchItem::Done(Some(vec![0x91, 1])),
            BatchItem::Failed("Duplicate key".into()),
            BatchItem::NotPerformed,
            BatchItem::RolledBack,
        ];
        let mut bytes = Vec::new();
        encode_items(&mut bytes, Some(&items));
        assert_eq!(decode_items(&bytes), Some(items));
        bytes.clear();
        encode_items(&mut bytes, None);
        assert_eq!(decode_items(&bytes), None);
    }

    #[test]
    fn parts_round_trip() {
        let rows: ShardRows = vec![(KeyBuf::from_slice(b"k1"), vec![0x91, 1])];
        for part in [
            Part::Rows(rows),
            Part::Rows(Vec::new()),
            Part::Count(u64::MAX),
            Part::Done,
            Part::Failed("bad key".into()),
        ] {
            let mut bytes = Vec::new();
            encode_part(&mut bytes, Some(&part));
            assert_eq!(decode_part(&bytes), Some(part));
        }
        assert_eq!(decode_part(&[WAL_REFUSED]), None);
    }
}
