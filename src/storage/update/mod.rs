//! Tarantool UPDATE operations on tuple bytes (`=`, `+`, `-`, `&`, `|`, `^`, `:`, `!`, `#`).
//!
//! Owns two steps, and every rule of Tarantool 2.11 about them (spec §12):
//! * [`UpdateOps::decode`] turns the msgpack array of operations into a validated list that
//!   borrows from the request. Everything that can be checked without the tuple is checked
//!   here (op shape, names, argument types, field addressing), because UPSERT returns these
//!   errors while it only logs the ones found at execution.
//! * [`UpdateOps::apply`] / [`UpdateOps::apply_skipping_failures`] run the list on one tuple
//!   (a msgpack array) and write the new tuple.
//!
//! It must not know about spaces, formats, indexes or the wire: field names reach it only
//! through a resolver closure, and the caller validates the result against the space format
//! and decides what a changed key means (see [`UpdateOps::lowest_field_touched`]).
//!
//! Cost sketch: the tuple is split into fields lazily, only up to the last field an op
//! reaches; the untouched tail is copied as one slice. Field slots live in a `SmallVec` of 8
//! and the op list in a `SmallVec` of 4, so `+` on one field of a small tuple allocates
//! nothing but the growth of `out`. Results of `+`/`:` are kept as numbers or as borrowed
//! string pieces and encoded straight into `out`; nothing is copied twice.
//!
//! Known gaps (documented, not silent):
//! * JSON paths that go inside a field (`"[3].a"`, `"name.sub"`, `"[3][1]"`) are rejected at
//!   decode with `Illegal parameters, update of a nested JSON path is not supported`.
//!   Whole-field paths (`"[3]"`, `"name"`, `"['name']"`) work.
//! * Decimal arithmetic is not implemented: a decimal argument is rejected at decode, a
//!   decimal field at execution, with an `Illegal parameters` error saying so.
//!
//! Deliberate differences from Tarantool, on input no client sends:
//! * A field id outside int32 is 26 `… expected an integer` naming the number as sent;
//!   Tarantool names whatever field number was left in its op struct.
//! * `"invalid JSON in position N"` counts bytes; Tarantool counts UTF-8 characters.
//!
//! Besides spec §12, one rule observed on Tarantool 2.6: once an op has changed a field,
//! only `=` may touch it again in the same update; any other op there is 29
//! `Field N UPDATE error: double update of the same field`. Fields created by `!` (or by
//! `=` appending) start fresh.

mod apply;
mod decode;
#[cfg(test)]
mod tests;

use crate::storage::error::StorageError;
use smallvec::SmallVec;

/// Tarantool's `BOX_UPDATE_OP_CNT_MAX`: longer op lists are refused before any decoding.
pub const OPS_MAX: u32 = 4000;

/// Decoded, validated list of update operations, borrowing from the request bytes.
#[derive(Debug, Clone)]
pub struct UpdateOps<'a> {
    ops: SmallVec<[UpdateOp<'a>; 4]>,
}

/// One decoded operation.
#[derive(Debug, Clone, Copy)]
struct UpdateOp<'a> {
    /// The op character as sent (`b'+'` …); error messages quote it.
    opcode: u8,
    target: Target<'a>,
    kind: OpKind<'a>,
}

/// Which field an op addresses, and how to name it in messages.
#[derive(Debug, Clone, Copy)]
struct Target<'a> {
    /// 0-based when non-negative (index base already removed); negative counts from the end.
    field_no: i32,
    /// The string the client addressed the field by, if any: messages then quote it.
    path: Option<&'a [u8]>,
}

#[derive(Debug, Clone, Copy)]
enum OpKind<'a> {
    /// `=`: the argument's msgpack bytes, stored verbatim.
    Set(&'a [u8]),
    /// `!`: the argument's msgpack bytes, stored verbatim.
    Insert(&'a [u8]),
    /// `#`: how many fields to delete, > 0: the low 32 bits of the count sent, as Tarantool
    /// keeps them (`(uint32_t) mp_decode_uint`).
    Delete(u32),
    /// An op that computes a field's new value from its old one.
    Scalar(ScalarOp<'a>),
}

#[derive(Debug, Clone, Copy)]
enum ScalarOp<'a> {
    /// `+` / `-`.
    Arith { subtract: bool, arg: Number },
    /// `&` / `|` / `^` on unsigned values.
    Bit { kind: BitKind, arg: u64 },
    /// `:`: offset already index-base adjusted when non-negative.
    Splice {
        offset: i32,
        cut_length: i32,
        paste: &'a [u8],
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BitKind {
    And,
    Or,
    Xor,
}

/// A number as msgpack typed it; the distinction decides integer vs double arithmetic.
/// (Decimals are recognised but refused before they would become one.)
#[derive(Debug, Clone, Copy)]
enum Number {
    Uint(u64),
    Int(i64),
    F32(f32),
    F64(f64),
}

impl Target<'_> {
    /// The field as Tarantool prints it before the op resolved it: `'path'`, the 1-based
    /// number, or a negative number as sent.
    fn label(&self) -> Box<str> {
        match self.path {
            Some(path) => quoted(path),
            None if self.field_no >= 0 => (i64::from(self.field_no) + 1).to_string().into(),
            None => self.field_no.to_string().into(),
        }
    }

    /// The field as Tarantool prints it once resolved to `position` (0-based): a negative
    /// number has become a real position by then, so it prints 1-based too.
    fn label_at(&self, position: usize) -> Box<str> {
        match self.path {
            Some(path) => quoted(path),
            None => (position as u64 + 1).to_string().into(),
        }
    }
}

fn quoted(path: &[u8]) -> Box<str> {
    format!("'{}'", String::from_utf8_lossy(path)).into()
}

impl<'a> UpdateOps<'a> {
    /// Decodes the msgpack array of operations.
    ///
    /// `index_base`: 0 → integer field numbers (and splice offsets) are 0-based, the wire
    /// default; 1 → 1-based (`IPROTO_INDEX_BASE = 1`, crud/Lua). Negative numbers count
    /// from the end and are never adjusted. Tarantool keeps the base in an `int`, so a base
    /// of 2^31 or more is negative (`0xffff_ffff` is -1: field numbers shift up by one). `field_no_by_name` maps a format field name to
    /// its 0-based number.
    ///
    /// Errors: ops not an array or truncated ⇒ `InvalidMsgpack("packet body")`; more than
    /// [`OPS_MAX`] ⇒ `IllegalParams`; every per-op decode error of spec §12.1.
    pub fn decode(
        ops: &'a [u8],
        index_base: u32,
        field_no_by_name: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<Self, StorageError> {
        decode::decode_ops(ops, index_base, field_no_by_name)
    }

    /// How many operations there are.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Applies the ops in order to `tuple` (a msgpack array) and appends the new tuple to
    /// `out`. On the first failing op returns its error; `out` is then left as it was.
    ///
    /// `double_fields[n]` says whether the space types field `n` (0-based, in the new
    /// tuple) `double`: a `+`/`-` result that fits a float32 is written as a float64 there,
    /// as Tarantool does; elsewhere as a float32. Fields past its end are not doubles.
    pub fn apply(
        &self,
        tuple: &[u8],
        out: &mut Vec<u8>,
        double_fields: &[bool],
    ) -> Result<(), StorageError> {
        apply::apply(&self.ops, tuple, out, double_fields, None)
    }

    /// UPSERT semantics: an op that fails at execution is skipped and handed to `on_skip`
    /// (so the caller can log it); the others apply. A malformed `tuple` is still an error.
    pub fn apply_skipping_failures(
        &self,
        tuple: &[u8],
        out: &mut Vec<u8>,
        double_fields: &[bool],
        on_skip: &mut dyn FnMut(&StorageError),
    ) -> Result<(), StorageError> {
        apply::apply(&self.ops, tuple, out, double_fields, Some(on_skip))
    }

    /// The lowest 0-based field number whose value or position the ops may change in a
    /// tuple of `field_count` fields; `None` if there are no ops. Fields below it are
    /// guaranteed to come out byte-identical, so a caller whose primary key lies entirely
    /// below it can skip the "was the key modified" comparison.
    ///
    /// Conservative: negative field numbers are resolved against the smallest count the
    /// tuple can have at that op (earlier `#` ops may have shrunk it), and failed ops are
    /// counted as if they had run.
    pub fn lowest_field_touched(&self, field_count: u32) -> Option<u32> {
        let mut deleted_max: u64 = 0;
        let mut lowest: Option<u32> = None;
        for op in &self.ops {
            let position = if op.target.field_no >= 0 {
                op.target.field_no as u32
            } else {
                let count_min = i64::from(field_count).saturating_sub(deleted_max as i64);
                // `!` resolves against count + 1: -1 means "after the last field".
                let extra = i64::from(matches!(op.kind, OpKind::Insert(_)));
                (count_min + extra + i64::from(op.target.field_no)).clamp(0, i64::from(u32::MAX))
                    as u32
            };
            if let OpKind::Delete(count) = op.kind {
                deleted_max = deleted_max.saturating_add(u64::from(count));
            }
            lowest = Some(lowest.map_or(position, |low| low.min(position)));
        }
        lowest
    }
}
