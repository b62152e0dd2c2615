//! Execution of decoded ops on one tuple.
//!
//! The tuple is a list of field slots followed by a not-yet-split tail; an op splits the
//! tail only as far as it reaches. A slot remembers whether an earlier op of this update
//! changed it: Tarantool allows only `=` on such a field (any other op ⇒ 29 "double update
//! of the same field", observed on 2.6), so a changed value is never read again and can be
//! kept unencoded until the output is written.

use super::{BitKind, Number, OpKind, ScalarOp, Target, UpdateOp};
use crate::msgpack::{
    read_value, take_value, write_array_len, write_f32, write_f64, write_int, write_str_header,
    write_uint, Value,
};
use crate::storage::error::StorageError;
use smallvec::SmallVec;

fn corrupt_tuple<T>(_: T) -> StorageError {
    StorageError::InvalidMsgpack("tuple")
}

/// A field's new content; everything borrows from the old tuple or the request.
#[derive(Debug, Clone, Copy)]
pub(super) enum Content<'x> {
    /// Whole msgpack value: an original field, or the argument of `=` / `!`.
    Raw(&'x [u8]),
    Uint(u64),
    Int(i64),
    F32(f32),
    F64(f64),
    /// A decimal result, encoded.
    Decimal(super::decimal::Packed),
    /// A spliced string: `head ++ paste ++ tail`.
    Splice {
        head: &'x [u8],
        paste: &'x [u8],
        tail: &'x [u8],
    },
}

#[derive(Debug, Clone, Copy)]
struct Slot<'x> {
    content: Content<'x>,
    /// Changed in place by an earlier op of this update (not set for inserted fields).
    updated: bool,
}

impl<'x> Slot<'x> {
    fn fresh(bytes: &'x [u8]) -> Self {
        Slot {
            content: Content::Raw(bytes),
            updated: false,
        }
    }
}

struct Fields<'x> {
    slots: SmallVec<[Slot<'x>; 8]>,
    /// Bytes of the fields not split yet; copied verbatim to the output.
    tail: &'x [u8],
    tail_count: u32,
}

impl<'x> Fields<'x> {
    fn new(tuple: &'x [u8]) -> Result<Self, StorageError> {
        let mut tail = tuple;
        let Value::Array(tail_count) = read_value(&mut tail).map_err(corrupt_tuple)? else {
            return Err(StorageError::TupleNotArray);
        };
        Ok(Fields {
            slots: SmallVec::new(),
            tail,
            tail_count,
        })
    }

    fn count(&self) -> usize {
        self.slots.len() + self.tail_count as usize
    }

    /// Splits fields off the tail until at least `count` slots exist (or the tail is empty).
    fn split_until(&mut self, count: usize) -> Result<(), StorageError> {
        while self.slots.len() < count && self.tail_count > 0 {
            let bytes = take_value(&mut self.tail).map_err(corrupt_tuple)?;
            self.slots.push(Slot::fresh(bytes));
            self.tail_count -= 1;
        }
        Ok(())
    }

    /// Tarantool's `xrow_update_op_adjust_field_no`: a 0-based position below `limit`,
    /// or 37 (by number) / 201 (by path) naming the field as the client did.
    fn resolve(&self, target: &Target<'_>, limit: usize) -> Result<usize, StorageError> {
        let field_no = i64::from(target.field_no);
        let limit = limit as i64;
        let position = if field_no >= 0 {
            field_no
        } else {
            limit + field_no
        };
        if (0..limit).contains(&position) {
            return Ok(position as usize);
        }
        Err(match target.path {
            Some(path) => StorageError::NoSuchFieldName(super::quoted(path)),
            None if field_no >= 0 => StorageError::NoSuchFieldNo(field_no + 1),
            None => StorageError::NoSuchFieldNo(field_no),
        })
    }

    /// Writes the new tuple; `double_fields[n]` says whether the space types field `n` of
    /// the result `double`.
    fn write(&self, out: &mut Vec<u8>, double_fields: &[bool]) -> Result<(), StorageError> {
        let count = u32::try_from(self.count())
            .map_err(|_| StorageError::IllegalParams("too many fields in tuple".into()))?;
        write_array_len(out, count);
        for (position, slot) in self.slots.iter().enumerate() {
            match slot.content {
                // Tarantool's `xrow_update_op_store_arith`: a float result goes out as a
                // float64 where the format (at the field's final position) wants a double.
                Content::F32(value) if double_fields.get(position) == Some(&true) => {
                    write_f64(out, f64::from(value))
                }
                content => write_content(out, &content),
            }
        }
        out.extend_from_slice(self.tail);
        Ok(())
    }
}

pub(super) fn write_content(out: &mut Vec<u8>, content: &Content<'_>) {
    match *content {
        Content::Raw(bytes) => out.extend_from_slice(bytes),
        Content::Uint(value) => write_uint(out, value),
        Content::Int(value) => write_int(out, value),
        Content::F32(value) => write_f32(out, value),
        Content::F64(value) => write_f64(out, value),
        Content::Decimal(packed) => out.extend_from_slice(packed.as_bytes()),
        Content::Splice { head, paste, tail } => {
            write_str_header(out, head.len() + paste.len() + tail.len());
            out.extend_from_slice(head);
            out.extend_from_slice(paste);
            out.extend_from_slice(tail);
        }
    }
}

pub(super) fn apply(
    ops: &[UpdateOp<'_>],
    tuple: &[u8],
    out: &mut Vec<u8>,
    double_fields: &[bool],
    mut on_skip: Option<&mut dyn FnMut(&StorageError)>,
) -> Result<(), StorageError> {
    let mut fields = Fields::new(tuple)?;
    for op in ops {
        if let Err(error) = apply_op(op, &mut fields) {
            match on_skip.as_mut() {
                // A broken stored tuple is not an op failure: UPSERT must not hide it.
                Some(on_skip) if !matches!(error, StorageError::InvalidMsgpack(_)) => {
                    on_skip(&error)
                }
                _ => return Err(error),
            }
        }
    }
    fields.write(out, double_fields)
}

/// Applies one op. On error `fields` is unchanged in meaning (it may be split further).
fn apply_op<'x>(op: &UpdateOp<'x>, fields: &mut Fields<'x>) -> Result<(), StorageError> {
    let target = &op.target;
    match op.kind {
        OpKind::Set(value) => {
            // `=` one past the last field appends; checked before resolving, so a negative
            // number never appends.
            if target.field_no >= 0 && target.field_no as usize == fields.count() {
                fields.split_until(usize::MAX)?;
                fields.slots.push(Slot::fresh(value));
                return Ok(());
            }
            let position = fields.resolve(target, fields.count())?;
            fields.split_until(position + 1)?;
            fields.slots[position] = Slot {
                content: Content::Raw(value),
                updated: true,
            };
        }
        OpKind::Insert(value) => {
            // One more valid position than fields: the end; -1 means after the last field.
            let position = fields.resolve(target, fields.count() + 1)?;
            fields.split_until(position)?;
            fields.slots.insert(position, Slot::fresh(value));
        }
        OpKind::Delete(count) => {
            let position = fields.resolve(target, fields.count())?;
            let count = (count as usize).min(fields.count() - position);
            fields.split_until(position + count)?;
            fields.slots.drain(position..position + count);
        }
        OpKind::Scalar(scalar) => {
            let position = fields.resolve(target, fields.count())?;
            fields.split_until(position + 1)?;
            let slot = &mut fields.slots[position];
            let old = match slot.content {
                Content::Raw(bytes) if !slot.updated => bytes,
                _ => {
                    return Err(StorageError::UpdateField {
                        field: target.label_at(position),
                        reason: "double update of the same field".into(),
                    })
                }
            };
            slot.content = compute(op.opcode, target, scalar, old, position)?;
            slot.updated = true;
        }
    }
    Ok(())
}

/// The new value of a scalar op on the field whose bytes are `old`.
pub(super) fn compute<'x>(
    opcode: u8,
    target: &Target<'_>,
    scalar: ScalarOp<'x>,
    old: &'x [u8],
    position: usize,
) -> Result<Content<'x>, StorageError> {
    let mut old_reader = old;
    let value = read_value(&mut old_reader).map_err(corrupt_tuple)?;
    let arg_type = |expected| StorageError::UpdateArgType {
        op: char::from(opcode),
        field: target.label_at(position),
        expected,
    };
    match scalar {
        ScalarOp::Arith { subtract, arg } => {
            let field = match value {
                Value::Uint(n) => Number::Uint(n),
                Value::Int(n) => Number::Int(n),
                Value::F32(x) => Number::F32(x),
                Value::F64(x) => Number::F64(x),
                Value::Ext(1, payload) if super::decimal::unpack(payload).is_some() => {
                    Number::Decimal(payload)
                }
                _ => return Err(arg_type("a number")),
            };
            arith(field, arg, subtract).map_err(|error| match error {
                ArithError::IntegerOverflow => StorageError::UpdateIntegerOverflow {
                    op: char::from(opcode),
                    field: target.label_at(position),
                },
                ArithError::DecimalOverflow => StorageError::UpdateDecimalOverflow {
                    op: char::from(opcode),
                    field: target.label_at(position),
                },
                ArithError::NotDecimal => arg_type("a number convertible to decimal"),
            })
        }
        ScalarOp::Bit { kind, arg } => {
            let Value::Uint(field) = value else {
                return Err(arg_type("a positive integer"));
            };
            Ok(Content::Uint(match kind {
                BitKind::And => field & arg,
                BitKind::Or => field | arg,
                BitKind::Xor => field ^ arg,
            }))
        }
        ScalarOp::Splice {
            offset,
            cut_length,
            paste,
        } => {
            let Value::Str(string) = value else {
                return Err(arg_type("a string"));
            };
            let (head_end, tail_start) = splice_bounds(string.len(), offset, cut_length)
                .ok_or_else(|| StorageError::UpdateSplice {
                    field: target.label_at(position),
                    reason: "offset is out of bound",
                })?;
            Ok(Content::Splice {
                head: &string[..head_end],
                paste,
                tail: &string[tail_start..],
            })
        }
    }
}

/// Why `+`/`-` has no result.
enum ArithError {
    IntegerOverflow,
    DecimalOverflow,
    /// NaN, ±inf or a double of 10^38 and more against a decimal.
    NotDecimal,
}

/// A number as Tarantool's `xrow_update_arg_arith_to_decimal` converts it.
fn to_decimal(n: Number<'_>) -> Option<super::decimal::Dec> {
    use super::decimal;
    match n {
        Number::Uint(u) => Some(decimal::from_u64(u)),
        Number::Int(i) => Some(decimal::from_i64(i)),
        Number::F32(x) => decimal::from_f64(f64::from(x)),
        Number::F64(x) => decimal::from_f64(x),
        Number::Decimal(payload) => decimal::unpack(payload),
    }
}

/// `+`/`-` per spec §12 and Tarantool's `xrow_update_arith_make`: with a decimal operand
/// the other is converted and the result is a decimal; integers stay integers if the
/// result fits in i64 ∪ u64; with any float or double the result is a double, kept as a
/// float when it lies within ±`f32::MAX` and float32 holds it exactly (so ±inf and NaN
/// stay doubles). Whether a float is written as one is decided at the end, by the field it
/// lands in (see [`Fields::write`]).
fn arith(
    field: Number<'_>,
    arg: Number<'_>,
    subtract: bool,
) -> Result<Content<'static>, ArithError> {
    if matches!(field, Number::Decimal(_)) || matches!(arg, Number::Decimal(_)) {
        let (Some(a), Some(b)) = (to_decimal(field), to_decimal(arg)) else {
            return Err(ArithError::NotDecimal);
        };
        let result = super::decimal::add(&a, &b, subtract).ok_or(ArithError::DecimalOverflow)?;
        return Ok(Content::Decimal(super::decimal::pack(&result)));
    }
    let as_int = |n: Number| match n {
        Number::Uint(u) => Some(i128::from(u)),
        Number::Int(i) => Some(i128::from(i)),
        _ => None,
    };
    if let (Some(a), Some(b)) = (as_int(field), as_int(arg)) {
        // |a|, |b| < 2^64, so the i128 result is exact.
        let result = if subtract { a - b } else { a + b };
        let content = if result < 0 {
            i64::try_from(result).ok().map(Content::Int)
        } else {
            u64::try_from(result).ok().map(Content::Uint)
        };
        return content.ok_or(ArithError::IntegerOverflow);
    }
    let as_f64 = |n: Number| match n {
        Number::Uint(u) => u as f64,
        Number::Int(i) => i as f64,
        Number::F32(x) => f32_to_f64(x),
        Number::F64(x) => x,
        // Handled above.
        Number::Decimal(_) => f64::NAN,
    };
    let (a, b) = (as_f64(field), as_f64(arg));
    let result = x86_nan(a, b).unwrap_or_else(|| {
        let sum = if subtract { a - b } else { a + b };
        if sum.is_nan() {
            // inf - inf: the x86 default NaN, negative.
            f64::from_bits(X86_DEFAULT_NAN)
        } else {
            sum
        }
    });
    let narrow = result as f32;
    // NaN fails both comparisons, so it stays a double, its sign and payload as computed.
    let within_float = (-f64::from(f32::MAX)..=f64::from(f32::MAX)).contains(&result);
    Ok(if within_float && f64::from(narrow) == result {
        Content::F32(narrow)
    } else {
        Content::F64(result)
    })
}

/// The quiet bit of a float64 NaN.
const QUIET_NAN_BIT: u64 = 1 << 51;
/// The NaN x86's SSE unit makes of an invalid operation (`inf - inf`).
const X86_DEFAULT_NAN: u64 = 0xfff8_0000_0000_0000;

/// The NaN `a ± b` gives on x86 when an operand is one, as Tarantool (built for x86-64)
/// computes it: the first NaN operand, quieted, sign and payload kept (`x - NaN` is that
/// NaN, not its negation). Spelled out because Rust leaves a NaN result's sign and payload
/// unspecified, and the optimiser may rewrite `a - b` as `a + -b`.
fn x86_nan(a: f64, b: f64) -> Option<f64> {
    let quiet = |x: f64| f64::from_bits(x.to_bits() | QUIET_NAN_BIT);
    if a.is_nan() {
        Some(quiet(a))
    } else if b.is_nan() {
        Some(quiet(b))
    } else {
        None
    }
}

/// A float32 widened as x86's `cvtss2sd` does: exactly, and a NaN quieted with its sign and
/// its payload moved to the top of the wider fraction.
fn f32_to_f64(x: f32) -> f64 {
    if !x.is_nan() {
        return f64::from(x);
    }
    let bits = x.to_bits();
    let sign = u64::from(bits >> 31) << 63;
    let fraction = u64::from(bits & 0x007f_ffff) << 29;
    f64::from_bits(sign | 0x7ff0_0000_0000_0000 | fraction | QUIET_NAN_BIT)
}

/// Splice bounds on a string of `len` bytes, as Tarantool's `xrow_update_op_do_splice`:
/// returns (end of kept head, start of kept tail), or `None` if a negative offset reaches
/// before the start.
fn splice_bounds(len: usize, offset: i32, cut_length: i32) -> Option<(usize, usize)> {
    let len = len as i64;
    let offset = i64::from(offset);
    let offset = if offset < 0 {
        // -1 is "after the last character".
        if -offset > len + 1 {
            return None;
        }
        offset + len + 1
    } else {
        offset.min(len)
    };
    let cut_length = i64::from(cut_length);
    let room = len - offset;
    let cut_length = if cut_length < 0 {
        // Negative: cut up to |cut_length| characters before the end.
        (room + cut_length).max(0)
    } else {
        cut_length.min(room)
    };
    Some((offset as usize, (offset + cut_length) as usize))
}
