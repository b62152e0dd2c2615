//! The second half of an UPDATE that moves a tuple's primary key: Tarantool answers 3
//! (ER_TUPLE_FOUND, naming the tuple that holds the key) when the new key is taken and 94
//! when it is free. The shard that ran the update answers 94 unless it holds the new key
//! itself (see `shard::Executed::moved_key`); when the new key belongs to another shard, the core
//! that sends the reply asks that shard here, and swaps the 94 for a 3 if the key is taken.
//!
//! Only the error path of such an update comes here: a lookup on one other core, with the
//! allocations an error reply makes anyway.
//!
//! The answer must be as if a client's pipelined requests ran in order, so the session makes
//! the lookup before its next request runs: after an UPDATE it ran itself that answered 94,
//! and around an UPDATE for another core whose ops [`may_move_key`] (the only other scan of
//! an UPDATE's ops outside the update engine: it must stay cheap and conservative).

use crate::msgpack::{self, Value};
use crate::placement::{self, Destination, SpacePlacement};
use crate::protocol::client::{decode_reply, split_server_frame};
use crate::protocol::request::{Select, Update};
use crate::server::mesh::batch::Kind;
use crate::server::mesh::core::Core;
use crate::server::mesh::inbox::Inbox;
use crate::shard::{MovedKey, Shard};
use crate::storage::key::KeyPart;
use crate::storage::text::msgpack_to_text;
use crate::storage::StorageError;
use std::rc::Rc;

/// The shard that owns the new primary key of `moved`, when that is not this core's (whose
/// shard ran the update and already looked there); `None` when nothing needs asking.
/// `shard` is this core's.
pub fn owner_to_ask(core: &Core, shard: &Shard, moved: &MovedKey) -> Option<usize> {
    let catalog = &core.catalog();
    if catalog.placement(moved.space_id) != SpacePlacement::ByPrimaryKey {
        return None;
    }
    let space = shard.engine.find_space(moved.space_id)?;
    let key_def = &space.indexes()[0].def.key_def;
    let destination = placement::route_by_primary_key(catalog, moved.space_id, core.id(), |key| {
        key_def
            .encode_from_tuple_data(&moved.new_tuple, key)
            .is_ok()
    });
    match destination {
        Destination::Owner(owner) => Some(owner),
        Destination::Here | Destination::EveryCore => None,
    }
}

/// Asks `owner` for the tuple holding the new primary key of `moved`; the reply that
/// replaces the 94 when one does (3, as Tarantool words it), `None` to keep the 94.
pub async fn reply_if_taken(core: &Rc<Core>, owner: usize, moved: &MovedKey) -> Option<Vec<u8>> {
    let (packet, space_name, index_name) = {
        let shard = core.shard.borrow();
        let space = shard.engine.space(moved.space_id).ok()?;
        let new_tuple = space.build_tuple(&moved.new_tuple).ok()?;
        let mut key = Vec::new();
        space.write_primary_key(&new_tuple, &mut key);
        let mut packet = Vec::new();
        crate::protocol::client::encode_select(
            &mut packet,
            0,
            &Select {
                space_id: moved.space_id,
                index_id: 0,
                limit: 1,
                offset: 0,
                iterator: 0,
                key: &key,
                fetch_position: false,
                after_position: None,
                after_tuple: None,
            },
        );
        let index_name = space.indexes()[0].def.name.clone();
        (packet, space.name.clone(), index_name)
    };
    let inbox = Rc::new(Inbox::default());
    // A core's batches carry packets without the size prefix.
    let unframed = &packet[crate::protocol::frame::SERVER_PREFIX_SIZE..];
    let slot = core.queue(owner, Kind::Execute, 0, unframed, &inbox);
    inbox.wait().await;
    let holder = {
        let replies = inbox.replies();
        holder_in_reply(replies.get(slot))
    };
    inbox.clear();
    let holder = holder?;
    let error = StorageError::TupleFound {
        index: index_name,
        space: space_name,
        old_tuple: msgpack_to_text(&holder).into(),
        new_tuple: msgpack_to_text(&moved.new_tuple).into(),
    };
    let mut reply = Vec::new();
    crate::shard::errors::encode_storage_error(
        &mut reply,
        moved.sync,
        core.schema_version(),
        &error,
    );
    Some(reply)
}

/// The one tuple of a select's reply packet, if it found one.
fn holder_in_reply(reply: &[u8]) -> Option<Vec<u8>> {
    let (packet, _) = split_server_frame(reply).ok()??;
    let mut data = decode_reply(packet).ok()?.data()?;
    match msgpack::read_value(&mut data) {
        Ok(Value::Array(1)) => msgpack::take_value(&mut data).ok().map(<[u8]>::to_vec),
        _ => None,
    }
}

/// Whether `update`, which another core runs, may change its tuple's primary key, so that
/// the owner of the new key has to be asked ([`Executed::moved_key`]) before the session's
/// next request runs. Only spaces placed by primary key move keys between shards; `core`
/// is the session's (every core holds the same schema).
///
/// [`Executed::moved_key`]: crate::shard::Executed::moved_key
pub fn may_move_key(core: &Core, update: &Update<'_>) -> bool {
    if update.index_id != 0
        || core.catalog().placement(update.space_id) != SpacePlacement::ByPrimaryKey
    {
        return false;
    }
    let shard = core.shard.borrow();
    let Some(space) = shard.engine.find_space(update.space_id) else {
        // The owner answers 36: nothing moves.
        return false;
    };
    ops_may_move_key(
        update.ops,
        update.index_base,
        &space.indexes()[0].def.key_def.parts,
        &|name| space.format.field_no_by_name(name),
    )
}

/// Whether some op of `ops` (an UPDATE's msgpack op list) may write a field of the primary
/// key `parts`, or shift one (`!` inserting, `#` deleting at or before the key's last field).
/// Conservative: true for anything it cannot place exactly (a negative field number, which
/// counts from the tuple's end, an index base other than 0 and 1, a path it does not read,
/// an op list that does not decode, whose error the owner answers anyway); a wrong `true`
/// only makes the request wait for the ones before it.
pub fn ops_may_move_key(
    ops: &[u8],
    index_base: u32,
    parts: &[KeyPart],
    field_no_by_name: &dyn Fn(&str) -> Option<u32>,
) -> bool {
    let mut buf = ops;
    let Ok(Value::Array(count)) = msgpack::read_value(&mut buf) else {
        return true;
    };
    let last_key_field = parts.iter().map(|part| part.field_no).max().unwrap_or(0);
    for _ in 0..count {
        let Ok(Value::Array(len @ 2..)) = msgpack::read_value(&mut buf) else {
            return true;
        };
        let Ok(Value::Str(&[opcode])) = msgpack::read_value(&mut buf) else {
            return true;
        };
        let field_no = match msgpack::read_value(&mut buf) {
            Ok(Value::Uint(number)) => numbered_field(number, index_base),
            Ok(Value::Int(number)) => u64::try_from(number)
                .ok()
                .and_then(|number| numbered_field(number, index_base)),
            Ok(Value::Str(path)) => path_field(path, field_no_by_name),
            _ => None,
        };
        let Some(field_no) = field_no else {
            return true;
        };
        let touches_key = match opcode {
            b'!' | b'#' => field_no <= last_key_field,
            _ => parts.iter().any(|part| part.field_no == field_no),
        };
        if touches_key {
            return true;
        }
        for _ in 2..len {
            if msgpack::take_value(&mut buf).is_err() {
                return true;
            }
        }
    }
    false
}

/// The 0-based field a non-negative field number of an op names (Tarantool reads it as an
/// int32); `None` where that is not plain.
fn numbered_field(number: u64, index_base: u32) -> Option<u32> {
    let number = u32::try_from(number)
        .ok()
        .filter(|&n| n <= i32::MAX as u32)?;
    match index_base {
        0 => Some(number),
        1 => number.checked_sub(1),
        _ => None,
    }
}

/// The top-level field a string field id of an op names: a format field's name, or a path
/// that starts with `[n]` (1-based) or with a name; `None` for any other path.
fn path_field(path: &[u8], field_no_by_name: &dyn Fn(&str) -> Option<u32>) -> Option<u32> {
    let by_name = |name: &[u8]| std::str::from_utf8(name).ok().and_then(field_no_by_name);
    if let Some(field_no) = by_name(path) {
        return Some(field_no);
    }
    if let Some(rest) = path.strip_prefix(b"[") {
        let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
        if digits == 0 || digits > 9 || rest.get(digits) != Some(&b']') {
            return None;
        }
        let number: u32 = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
        return number.checked_sub(1);
    }
    let name_len = path
        .iter()
        .position(|&byte| byte == b'.' || byte == b'[')
        .unwrap_or(path.len());
    by_name(&path[..name_len])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgpack::{write_array_len, write_int, write_str, write_uint};
    use crate::storage::FieldType;

    enum Field<'a> {
        No(i64),
        Name(&'a str),
    }

    fn ops(list: &[(&str, Field<'_>)]) -> Vec<u8> {
        let mut out = Vec::new();
        write_array_len(&mut out, list.len() as u32);
        for (op, field) in list {
            let args = if *op == ":" { 5 } else { 3 };
            write_array_len(&mut out, args);
            write_str(&mut out, op.as_bytes());
            match field {
                Field::No(n) if *n < 0 => write_int(&mut out, *n),
                Field::No(n) => write_uint(&mut out, *n as u64),
                Field::Name(name) => write_str(&mut out, name.as_bytes()),
            }
            for _ in 2..args {
                write_uint(&mut out, 1);
            }
        }
        out
    }

    /// A space `[a, b, id, c]` keyed by field 2 (`id`), and one keyed by fields 0 and 2.
    fn moves(list: &[(&str, Field<'_>)], index_base: u32, key_fields: &[u32]) -> bool {
        let names = ["a", "b", "id", "c"];
        let parts: Vec<KeyPart> = key_fields
            .iter()
            .map(|&no| KeyPart::new(no, FieldType::Unsigned))
            .collect();
        ops_may_move_key(&ops(list), index_base, &parts, &|name| {
            names.iter().position(|n| *n == name).map(|no| no as u32)
        })
    }

    #[test]
    fn ops_on_other_fields_do_not_move_the_key() {
        use Field::*;
        let key = &[2];
        assert!(!moves(&[], 0, key));
        assert!(!moves(&[("=", No(0)), ("+", No(1)), ("=", No(3))], 0, key));
        assert!(!moves(&[("=", No(4)), (":", No(1))], 1, key));
        assert!(!moves(&[("!", No(3)), ("#", No(5))], 0, key));
        assert!(!moves(
            &[("=", Name("c")), ("=", Name("a")), ("=", Name("[4]"))],
            0,
            key
        ));
        assert!(!moves(
            &[("=", Name("c.x")), ("=", Name("[1].y[2]"))],
            0,
            key
        ));
    }

    #[test]
    fn ops_that_write_or_shift_a_key_field_may_move_it() {
        use Field::*;
        let key = &[2];
        assert!(moves(&[("=", No(0)), ("=", No(2))], 0, key));
        assert!(moves(&[("+", No(3))], 1, key));
        assert!(moves(&[(":", Name("id"))], 0, key));
        assert!(moves(&[("=", Name("[3]"))], 0, key));
        assert!(moves(&[("=", Name("id.x"))], 0, key));
        assert!(moves(&[("!", No(2))], 0, key));
        assert!(moves(&[("#", No(0))], 0, key));
        assert!(moves(&[("!", Name("b"))], 0, key));
        assert!(moves(
            &[("=", No(0)), ("=", No(0)), ("=", No(2))],
            0,
            &[0, 2]
        ));
        assert!(!moves(&[("=", No(1))], 0, &[0, 2]));
        assert!(moves(&[("#", No(1))], 0, &[0, 2]));
    }

    #[test]
    fn what_it_cannot_place_counts_as_moving() {
        use Field::*;
        let key = &[2];
        assert!(moves(&[("=", No(-1))], 0, key));
        assert!(moves(&[("=", No(0))], 1, key));
        assert!(moves(&[("=", No(3))], 2, key));
        assert!(moves(&[("=", Name("nope"))], 0, key));
        assert!(moves(&[("=", Name("[0]"))], 0, key));
        assert!(moves(&[("=", Name("['c']"))], 0, key));
        assert!(moves(&[("=", No(1i64 << 31))], 0, key));
        assert!(ops_may_move_key(&[0x91, 0x90], 0, &[], &|_| None));
        assert!(ops_may_move_key(&[0x81], 0, &[], &|_| None));
        assert!(ops_may_move_key(
            &[0x91, 0x93, 0xa1, b'=', 0x05],
            0,
            &[],
            &|_| None
        ));
    }
}
