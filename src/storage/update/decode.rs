//! Decoding of the operation list: shape, op names, argument types, field addressing.
//!
//! Check order follows Tarantool's `xrow_update_op_decode` so that, of several problems in
//! one op, the same one is reported: array, non-empty, name is a string, name is known,
//! argument count, field id, then the arguments.

use super::path::{Lexer, Token};
use super::{BitKind, Number, OpKind, ScalarOp, Target, UpdateOp, UpdateOps, OPS_MAX};
use crate::msgpack::{read_value, take_value, MsgpackError, Value};
use crate::storage::error::StorageError;
use smallvec::SmallVec;

/// The ops come from a request body; Tarantool checks the whole body before decoding, so a
/// broken or non-array op list is a body error (20), not an update error.
fn packet_body(_: MsgpackError) -> StorageError {
    StorageError::InvalidMsgpack("packet body")
}

fn illegal(message: &str) -> StorageError {
    StorageError::IllegalParams(message.into())
}

pub(super) fn decode_ops<'a>(
    ops: &'a [u8],
    index_base: u32,
    field_no_by_name: &dyn Fn(&str) -> Option<u32>,
) -> Result<UpdateOps<'a>, StorageError> {
    let mut buf = ops;
    let count = match read_value(&mut buf).map_err(packet_body)? {
        Value::Array(count) => count,
        _ => return Err(StorageError::InvalidMsgpack("packet body")),
    };
    if count > OPS_MAX {
        return Err(illegal("too many operations for update"));
    }
    let mut list = SmallVec::new();
    for op_number in 1..=count {
        list.push(decode_op(
            &mut buf,
            op_number,
            index_base,
            field_no_by_name,
        )?);
    }
    if !buf.is_empty() {
        return Err(illegal("can't unpack update operations"));
    }
    let nested = list.iter().any(|op: &UpdateOp<'_>| op.target.is_nested());
    Ok(UpdateOps { ops: list, nested })
}

/// Total array length each op must have, name included.
fn arg_count(opcode: u8) -> Option<u32> {
    match opcode {
        b'=' | b'+' | b'-' | b'&' | b'|' | b'^' | b'!' | b'#' => Some(3),
        b':' => Some(5),
        _ => None,
    }
}

fn decode_op<'a>(
    buf: &mut &'a [u8],
    op_number: u32,
    index_base: u32,
    field_no_by_name: &dyn Fn(&str) -> Option<u32>,
) -> Result<UpdateOp<'a>, StorageError> {
    let array_len = match read_value(buf).map_err(packet_body)? {
        Value::Array(len) => len,
        _ => return Err(illegal("update operation must be an array {op,..}")),
    };
    if array_len == 0 {
        return Err(illegal(
            "update operation must be an array {op,..}, got empty array",
        ));
    }
    let name = match read_value(buf).map_err(packet_body)? {
        Value::Str(name) => name,
        _ => return Err(illegal("update operation name must be a string")),
    };
    let expected = match name {
        [opcode] => arg_count(*opcode),
        _ => None,
    };
    let (opcode, expected) = match expected {
        Some(expected) => (name[0], expected),
        None => {
            return Err(StorageError::UnknownUpdateOp {
                op_number,
                detail: format!("\"{}\"", String::from_utf8_lossy(name)).into(),
            })
        }
    };
    if array_len != expected {
        return Err(StorageError::UnknownUpdateOp {
            op_number,
            detail: format!("wrong number of arguments, expected {expected}, got {array_len}")
                .into(),
        });
    }
    let target = decode_target(buf, opcode, index_base, field_no_by_name)?;
    let kind = decode_args(buf, opcode, &target, index_base)?;
    Ok(UpdateOp {
        opcode,
        target,
        kind,
    })
}

fn arg_type(opcode: u8, target: &Target<'_>, expected: &'static str) -> StorageError {
    StorageError::UpdateArgType {
        op: char::from(opcode),
        field: target.label(),
        expected,
    }
}

fn decode_target<'a>(
    buf: &mut &'a [u8],
    opcode: u8,
    index_base: u32,
    field_no_by_name: &dyn Fn(&str) -> Option<u32>,
) -> Result<Target<'a>, StorageError> {
    let raw = match read_value(buf).map_err(packet_body)? {
        Value::Uint(n) => i128::from(n),
        Value::Int(n) => i128::from(n),
        Value::Str(path) => {
            let (field_no, nested_at) = resolve_path(path, field_no_by_name)?;
            return Ok(Target {
                field_no,
                nested_at,
                path: Some(path),
            });
        }
        _ => return Err(illegal("field id must be a number or a string")),
    };
    // Tarantool reads field ids as int32; beyond that it complains about the argument
    // type. It has no field to name yet, so we print the number as sent.
    let Ok(field_no) = i32::try_from(raw) else {
        return Err(StorageError::UpdateArgType {
            op: char::from(opcode),
            field: raw.to_string().into(),
            expected: "an integer",
        });
    };
    if field_no < 0 {
        return Ok(Target {
            field_no,
            nested_at: 0,
            path: None,
        });
    }
    let adjusted = i64::from(field_no) - i64::from(index_base as i32);
    match i32::try_from(adjusted) {
        Ok(adjusted) if adjusted >= 0 => Ok(Target {
            field_no: adjusted,
            nested_at: 0,
            path: None,
        }),
        // Only reachable with index base 1 and field 0 (or a nonsense base): Tarantool
        // prints the number as sent.
        _ => Err(StorageError::NoSuchFieldNo(i64::from(field_no))),
    }
}

fn decode_args<'a>(
    buf: &mut &'a [u8],
    opcode: u8,
    target: &Target<'a>,
    index_base: u32,
) -> Result<OpKind<'a>, StorageError> {
    match opcode {
        b'=' => Ok(OpKind::Set(take_value(buf).map_err(packet_body)?)),
        b'!' => Ok(OpKind::Insert(take_value(buf).map_err(packet_body)?)),
        // Tarantool keeps the low 32 bits of the count, and refuses what is then 0: 2^32
        // deletes nothing (29), 2^32 + 1 deletes one field.
        b'#' => match read_value(buf).map_err(packet_body)? {
            Value::Uint(count) if count as u32 == 0 => Err(StorageError::UpdateField {
                field: target.label(),
                reason: "cannot delete 0 fields".into(),
            }),
            Value::Uint(count) => Ok(OpKind::Delete(count as u32)),
            _ => Err(arg_type(opcode, target, "a positive integer")),
        },
        b'+' | b'-' => {
            let arg = match read_value(buf).map_err(packet_body)? {
                Value::Uint(n) => Number::Uint(n),
                Value::Int(n) => Number::Int(n),
                Value::F32(x) => Number::F32(x),
                Value::F64(x) => Number::F64(x),
                // Tarantool ignores a failed `decimal_unpack` here and computes with
                // garbage; a payload that does not unpack is refused as no number instead.
                Value::Ext(1, payload) if super::decimal::unpack(payload).is_some() => {
                    Number::Decimal(payload)
                }
                _ => return Err(arg_type(opcode, target, "a number")),
            };
            Ok(OpKind::Scalar(ScalarOp::Arith {
                subtract: opcode == b'-',
                arg,
            }))
        }
        b'&' | b'|' | b'^' => {
            let Value::Uint(arg) = read_value(buf).map_err(packet_body)? else {
                return Err(arg_type(opcode, target, "a positive integer"));
            };
            let kind = match opcode {
                b'&' => BitKind::And,
                b'|' => BitKind::Or,
                _ => BitKind::Xor,
            };
            Ok(OpKind::Scalar(ScalarOp::Bit { kind, arg }))
        }
        _ => decode_splice(buf, opcode, target, index_base),
    }
}

fn read_int32(buf: &mut &[u8], opcode: u8, target: &Target<'_>) -> Result<i32, StorageError> {
    let value = match read_value(buf).map_err(packet_body)? {
        Value::Uint(n) => i32::try_from(n).ok(),
        Value::Int(n) => i32::try_from(n).ok(),
        _ => None,
    };
    value.ok_or_else(|| arg_type(opcode, target, "an integer"))
}

fn decode_splice<'a>(
    buf: &mut &'a [u8],
    opcode: u8,
    target: &Target<'a>,
    index_base: u32,
) -> Result<OpKind<'a>, StorageError> {
    let mut offset = read_int32(buf, opcode, target)?;
    if offset >= 0 {
        // Offset 0 with base 1 names no character; Tarantool calls that out of bound.
        match i32::try_from(i64::from(offset) - i64::from(index_base as i32)) {
            Ok(adjusted) if adjusted >= 0 => offset = adjusted,
            _ => {
                return Err(StorageError::UpdateSplice {
                    field: target.label(),
                    reason: "offset is out of bound",
                })
            }
        }
    }
    let cut_length = read_int32(buf, opcode, target)?;
    let Value::Str(paste) = read_value(buf).map_err(packet_body)? else {
        return Err(arg_type(opcode, target, "a string"));
    };
    Ok(OpKind::Scalar(ScalarOp::Splice {
        offset,
        cut_length,
        paste,
    }))
}

/// Resolves a string field id as `xrow_update_op_decode`: a whole format name first (names
/// may contain dots), then the first step of a JSON path, `[n]` or a name. Returns the
/// 0-based field number and where the steps inside the field start (0: none). Only the
/// first step is checked here; Tarantool reads the rest while it applies the op, so
/// their errors are execution errors (UPSERT skips the op).
fn resolve_path(
    path: &[u8],
    field_no_by_name: &dyn Fn(&str) -> Option<u32>,
) -> Result<(i32, u32), StorageError> {
    let by_name = |name: &[u8]| {
        std::str::from_utf8(name)
            .ok()
            .and_then(field_no_by_name)
            .and_then(|no| i32::try_from(no).ok())
    };
    if let Some(field_no) = by_name(path) {
        return Ok((field_no, 0));
    }
    let not_found = || StorageError::NoSuchFieldName(String::from_utf8_lossy(path).into());
    let mut lexer = Lexer::new(path);
    let token = lexer
        .next_token()
        .map_err(|position| StorageError::UpdateField {
            field: super::quoted(path),
            reason: format!("invalid JSON in position {position}").into(),
        })?;
    let field_no = match token {
        Token::Num(field_no) => field_no,
        Token::Str(name) => by_name(name).ok_or_else(not_found)?,
        Token::End | Token::Any => return Err(not_found()),
    };
    let nested_at = if lexer.is_eof() {
        0
    } else {
        // A request is far below 4 GiB, and so is any path in it.
        u32::try_from(lexer.offset).map_err(|_| not_found())?
    };
    Ok((field_no, nested_at))
}
