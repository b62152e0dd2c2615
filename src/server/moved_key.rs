//! The second half of an UPDATE that moves a tuple's primary key: Tarantool answers 3
//! (ER_TUPLE_FOUND, naming the tuple that holds the key) when the new key is taken and 94
//! when it is free. The shard that ran the update answers 94 unless it holds the new key
//! itself (see [`Awaiting::MovedKey`]); when the new key belongs to another shard, the core
//! that sends the reply asks that shard here, and swaps the 94 for a 3 if the key is taken.
//!
//! Only the error path of such an update comes here: a lookup on one other core, with the
//! allocations an error reply makes anyway.

use crate::protocol::client::{decode_reply, split_server_frame};
use crate::protocol::request::Select;
use crate::server::batch::Kind;
use crate::server::core::Core;
use crate::server::inbox::Inbox;
use crate::server::schema::{self, SpacePlacement, SCHEMA_VERSION};
use crate::shard::{MovedKey, Shard};
use crate::storage::key::SearchKeyBuf;
use crate::storage::msgpack::{self, Value};
use crate::storage::text::msgpack_to_text;
use crate::storage::StorageError;
use std::rc::Rc;

/// The shard that owns the new primary key of `moved`, when that is not this core's (whose
/// shard ran the update and already looked there); `None` when nothing needs asking.
/// `shard` is this core's.
pub fn owner_to_ask(core: &Core, shard: &Shard, moved: &MovedKey) -> Option<usize> {
    if core.shard_count == 1
        || schema::placement_of(&core.shared.config, moved.space_id) != SpacePlacement::ByPrimaryKey
    {
        return None;
    }
    let space = shard.engine.find_space(moved.space_id)?;
    let mut encoded = SearchKeyBuf::new();
    space.indexes()[0]
        .def
        .key_def
        .encode_from_tuple_data(&moved.new_tuple, &mut encoded)
        .ok()?;
    let owner = crate::server::shard_of_key(&encoded, core.shard_count);
    (owner != core.id()).then_some(owner)
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
    crate::shard::errors::encode_storage_error(&mut reply, moved.sync, SCHEMA_VERSION, &error);
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
