//! The plan of the common point call in one pass: `crud.insert`, `replace`, `upsert`,
//! `update`, `delete` or `get` with its positional arguments as the connectors send them
//! (the space by name, a tuple as an array, operations as an array) and no options (nil,
//! `{}` or `[]`, or none at all).
//!
//! The general path ([`super::plan_general`]) checks every argument's Lua type, reads the
//! options pair by pair and plans through closures built for every function; for these
//! shapes all of that has one outcome, which this writes down directly.
//!
//! It gives up (`None`) on anything else — another shape, an unknown space, a tuple whose
//! bucket_id cannot be set, arguments that are not exactly one whole value — and reports
//! nothing: the caller then plans the general way, which also produces every error. When
//! it does plan a call, the plan is exactly the general one (see the property tests in
//! `crud::tests`).

use super::result::Columns;
use super::write::PointOp;
use super::{flatten, mp, select, CrudConfig, Func, PointPlan};
use crate::storage::Engine;

/// The plan of a common point call, or `None` to plan it the general way.
#[inline]
pub fn plan_point<'a>(
    engine: &Engine,
    config: &CrudConfig,
    func: Func,
    args: &'a [u8],
) -> Option<PointPlan<'a>> {
    use Func::*;
    let positional = match func {
        Insert | Replace | Delete | Get => 2,
        Upsert | Update => 3,
        _ => return None,
    };
    let (&marker, mut cursor) = args.split_first()?;
    let count = match marker {
        0x90..=0x9f => marker & 0x0f,
        _ => return None,
    };
    if count != positional && count != positional + 1 {
        return None;
    }
    let space = engine.space_named(space_name(&mut cursor)?)?;
    // Each op is built where it is planned: a point op is large, and every move of one
    // costs stores on the hottest path a crud call has.
    let op = match func {
        // A tuple is measured and given its bucket_id in one walk.
        Insert | Replace | Upsert => {
            let tuple = flatten::take_with_bucket_id(
                space,
                &mut cursor,
                config.bucket_count,
                func != Upsert,
            )?;
            match func {
                Insert => PointOp::Insert { tuple },
                Replace => PointOp::Replace { tuple },
                _ => PointOp::Upsert {
                    tuple,
                    ops: array(&mut cursor)?.into(),
                },
            }
        }
        _ => {
            let key = mp::take(&mut cursor)?;
            if key == mp::NIL {
                // vshard refuses to hash a nil key: the general path raises its error.
                return None;
            }
            let key = select::key_array(key);
            match func {
                Update => PointOp::Update {
                    key,
                    ops: array(&mut cursor)?.into(),
                },
                Delete => PointOp::Delete { key },
                _ => PointOp::Get { key },
            }
        }
    };
    // Options, when given, are nil or an empty table: one byte, a whole value.
    if count > positional {
        let ([0xc0 | 0x80 | 0x90], rest) = cursor.split_at_checked(1)? else {
            return None;
        };
        cursor = rest;
    }
    // The arguments end here, or they are torn (the decoder may leave them unmeasured:
    // `protocol::crud_call`), which the general planner reports.
    if !cursor.is_empty() {
        return None;
    }
    Some(PointPlan {
        func,
        space_id: space.id,
        op,
        columns: Columns::All,
        noreturn: false,
    })
}

/// The bytes of the fixstr or str8 at the start of `cursor`, which moves past it.
#[inline(always)]
fn space_name<'a>(cursor: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (len, rest) = match *cursor {
        [marker @ 0xa0..=0xbf, rest @ ..] => (usize::from(marker & 0x1f), rest),
        [0xd9, len, rest @ ..] => (usize::from(*len), rest),
        _ => return None,
    };
    let name = rest.get(..len)?;
    *cursor = &rest[len..];
    Some(name)
}

/// The whole array at the start of `cursor` (update and upsert operations), which moves
/// past it; `None` for any other value.
#[inline(always)]
fn array<'a>(cursor: &mut &'a [u8]) -> Option<&'a [u8]> {
    let value = mp::take(cursor)?;
    matches!(value.first(), Some(0x90..=0x9f | 0xdc | 0xdd)).then_some(value)
}
