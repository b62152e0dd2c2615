//! The bytes a crud call's shard-side work travels as between cores: a point op planned by
//! the accepting core, a `*_many` call's ops for one shard and their outcomes, and one
//! shard's part of a fanned-out call. Pure functions over byte buffers; both ends are the
//! same build, so a malformed buffer is a bug and asserts. The contract is docs/format.md,
//! "Messages between cores", beside the batches ([`super::batch`]) these payloads ride in.
//!
//! ```text
//! op:      [tag u8: 0 insert, 1 replace, 2 upsert, 3 update, 4 delete, 5 get]
//!          [len u32][bytes]   tuple or key
//!          [len u32][bytes]   update/upsert operations (else len 0)
//! point:   [sync u64][func u8: its place in Func::ALL, `func as u8`][space_id u32][flags u8: 1 noreturn]
//!          [field count u32, 0xffffffff: all fields] field count × [field u32]
//!          op
//! ops:     [space_id u32][flags u8: 1 stop_on_error, 2 rollback_on_error][count u32]
//!          count × op
//! items:   [status u8: 0 ok, 0xff WAL refused][count u32]
//!          count × ([tag u8: 0 done (no row), 1 done, 2 failed, 3 not performed,
//!                   4 rolled back][len u32][row or message])
//! part:    [tag u8: 0 rows, 1 count, 2 done, 3 failed, 0xff WAL refused] then
//!          rows: [count u32] count × ([key len u32][key][tuple len u32][tuple])
//!          count: [u64 LE];  failed: [len u32][message]
//! ```
//!
//! All integers little-endian.

use crate::crud::result::Columns;
use crate::crud::write::{BatchItem, OpBytes, PointOp};
use crate::crud::{Func, Part, PointPlan, ShardOps};
use crate::storage::key::KeyBuf;

/// The status byte of an answer whose WAL rows could not be written.
pub const WAL_REFUSED: u8 = 0xff;

const STOP_ON_ERROR: u8 = 1;
const ROLLBACK_ON_ERROR: u8 = 2;
const NORETURN: u8 = 1;
/// The field count that means every field (`Columns::All`).
const ALL_FIELDS: u32 = u32::MAX;

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

    fn u32(&mut self) -> u32 {
        let bytes = self.take(4);
        u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
    }

    /// A length or a count (written by [`put_u32`]).
    fn length(&mut self) -> usize {
        usize::try_from(self.u32()).expect("a u32 fits usize on the targets tarn builds for")
    }

    fn u64(&mut self) -> u64 {
        let bytes = self.take(8);
        u64::from_le_bytes(bytes.try_into().expect("took 8 bytes"))
    }

    fn bytes(&mut self) -> &'a [u8] {
        let len = self.length();
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
        put_op(out, op);
    }
}

/// Appends one op: its tag, its tuple or key, and its operations.
fn put_op(out: &mut Vec<u8>, op: &PointOp<'_>) {
    let none = OpBytes::Borrowed(&[]);
    let (tag, first, second) = match op {
        PointOp::Insert { tuple } => (0, tuple, &none),
        PointOp::Replace { tuple } => (1, tuple, &none),
        PointOp::Upsert { tuple, ops } => (2, tuple, ops),
        PointOp::Update { key, ops } => (3, key, ops),
        PointOp::Delete { key } => (4, key, &none),
        PointOp::Get { key } => (5, key, &none),
    };
    out.push(tag);
    put_op_bytes(out, first);
    put_op_bytes(out, second);
}

/// Appends an op's bytes with their length; spliced bytes are joined as they are copied.
fn put_op_bytes(out: &mut Vec<u8>, bytes: &OpBytes<'_>) {
    match bytes {
        OpBytes::Spliced(spliced) => {
            let pieces = spliced.pieces();
            put_u32(out, pieces.iter().map(|piece| piece.len()).sum());
            for piece in pieces {
                out.extend_from_slice(piece);
            }
        }
        other => put_bytes(out, &other.bytes()),
    }
}

impl<'a> Reader<'a> {
    fn op(&mut self) -> PointOp<'a> {
        let tag = self.u8();
        let first = OpBytes::from(self.bytes());
        let second = OpBytes::from(self.bytes());
        match tag {
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
            other => panic!("crud op: unknown op tag {other}"),
        }
    }
}

/// Appends a point op as the accepting core planned it, with the sync its reply answers.
pub fn encode_point(out: &mut Vec<u8>, sync: u64, plan: &PointPlan<'_>) {
    out.extend_from_slice(&sync.to_le_bytes());
    // Its place in `Func::ALL` (declaration order; a test below pins it).
    out.push(plan.func as u8);
    out.extend_from_slice(&plan.space_id.to_le_bytes());
    out.push(if plan.noreturn { NORETURN } else { 0 });
    match &plan.columns {
        Columns::All => out.extend_from_slice(&ALL_FIELDS.to_le_bytes()),
        Columns::Fields(fields) => {
            put_u32(out, fields.len());
            for field in fields {
                out.extend_from_slice(&field.to_le_bytes());
            }
        }
    }
    put_op(out, &plan.op);
}

/// A point op's sync and plan, decoded; the op borrows its bytes from the message.
pub fn decode_point(bytes: &[u8]) -> (u64, PointPlan<'_>) {
    let mut reader = Reader { rest: bytes };
    let sync = reader.u64();
    let func = *Func::ALL
        .get(usize::from(reader.u8()))
        .expect("crud point: unknown function");
    let space_id = reader.u32();
    let noreturn = reader.u8() & NORETURN != 0;
    let columns = match reader.u32() {
        ALL_FIELDS => Columns::All,
        count => Columns::Fields((0..count).map(|_| reader.u32()).collect()),
    };
    let op = reader.op();
    reader.end();
    let plan = PointPlan {
        func,
        space_id,
        op,
        columns,
        noreturn,
    };
    (sync, plan)
}

/// The sync a point payload's reply answers, read without decoding the rest.
pub fn point_sync(bytes: &[u8]) -> u64 {
    Reader { rest: bytes }.u64()
}

/// A batch of ops for one shard, decoded; the ops borrow their bytes from the message.
pub fn decode_ops(bytes: &[u8]) -> ShardOps<'_> {
    let mut reader = Reader { rest: bytes };
    let space_id = reader.u32();
    let flags = reader.u8();
    let count = reader.length();
    let ops = (0..count).map(|_| reader.op()).collect();
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
    let count = reader.length();
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
            let count = reader.length();
            let mut rows = Vec::with_capacity(count);
            for _ in 0..count {
                let key = KeyBuf::from_slice(reader.bytes());
                rows.push((key, reader.bytes().to_vec()));
            }
            Part::Rows(rows)
        }
        1 => Part::Count(reader.u64()),
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
    fn a_function_travels_as_its_place_in_func_all() {
        for (place, func) in Func::ALL.into_iter().enumerate() {
            assert_eq!(func as usize, place, "{func:?}");
        }
    }

    #[test]
    fn point_round_trip_keeps_the_plan() {
        let head = [0x93, 0x01];
        let tail = [0xa1, b'x'];
        let spliced =
            crate::crud::write::Spliced::new(&head, [0xcd, 0x0b, 0xb8, 0, 0, 0, 0, 0, 0], 3, &tail);
        let plans = [
            PointPlan {
                func: Func::InsertObject,
                space_id: 512,
                op: PointOp::Insert {
                    tuple: OpBytes::Spliced(spliced.clone()),
                },
                columns: Columns::All,
                noreturn: false,
            },
            PointPlan {
                func: Func::Update,
                space_id: 513,
                op: PointOp::Update {
                    key: vec![0x91, 7].into(),
                    ops: vec![0x91, 0x93, 0xa1, b'=', 2, 3].into(),
                },
                columns: Columns::Fields(vec![2, 0]),
                noreturn: true,
            },
            PointPlan {
                func: Func::Get,
                space_id: 514,
                op: PointOp::Get {
                    key: vec![0x91, 1].into(),
                },
                columns: Columns::Fields(Vec::new()),
                noreturn: false,
            },
        ];
        for (sync, plan) in (u64::MAX - 2..).zip(plans) {
            let mut bytes = Vec::new();
            encode_point(&mut bytes, sync, &plan);
            assert_eq!(point_sync(&bytes), sync);
            let (decoded_sync, decoded) = decode_point(&bytes);
            assert_eq!((decoded_sync, &decoded), (sync, &plan));
        }
        // The spliced tuple travels joined.
        let mut bytes = Vec::new();
        encode_point(
            &mut bytes,
            1,
            &PointPlan {
                func: Func::Insert,
                space_id: 512,
                op: PointOp::Insert {
                    tuple: OpBytes::Spliced(spliced),
                },
                columns: Columns::All,
                noreturn: false,
            },
        );
        let (_, decoded) = decode_point(&bytes);
        let PointOp::Insert { tuple } = decoded.op else {
            panic!("an insert")
        };
        assert_eq!(&*tuple.bytes(), &[0x93, 0x01, 0xcd, 0x0b, 0xb8, 0xa1, b'x']);
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
