//! Which core runs a request.

use super::*;

impl Session {
    /// The core that owns a crud point op's key; this one when the key does not parse (the
    /// local shard then reports the error).
    pub(super) fn crud_owner(&self, space_id: u32, op: &crud::write::PointOp) -> usize {
        if self.core.shard_count == 1 {
            return 0;
        }
        match schema::placement_of(&self.core.shared.config, space_id) {
            SpacePlacement::Shard0 => return 0,
            SpacePlacement::Everywhere => return self.core.id(),
            SpacePlacement::ByPrimaryKey => {}
        }
        let shard = self.core.shard.borrow();
        let Ok(space) = shard.engine.space(space_id) else {
            return self.core.id();
        };
        let mut key = SearchKeyBuf::new();
        match op.placement_key(space, &mut key) {
            Ok(()) => crate::placement::shard_of_key(&key, self.core.shard_count),
            Err(_) => self.core.id(),
        }
    }

    /// The core that runs a write request.
    pub(super) fn write_owner(&self, request: &Request<'_>) -> usize {
        // One core owns everything: no placement to look up.
        if self.core.shard_count == 1 {
            return 0;
        }
        let (space_id, index_id, key, tuple) = match request {
            Request::Insert(r) | Request::Replace(r) => (r.space_id, 0, None, Some(r.tuple)),
            Request::Upsert(r) => (r.space_id, 0, None, Some(r.tuple)),
            Request::Update(r) => (r.space_id, r.index_id, Some(r.key), None),
            Request::Delete(r) => (r.space_id, r.index_id, Some(r.key), None),
            _ => return self.core.id(),
        };
        match schema::placement_of(&self.core.shared.config, space_id) {
            SpacePlacement::Shard0 => 0,
            _ if index_id != 0 => self.core.id(),
            _ => self
                .owner_of(space_id, key, tuple)
                .unwrap_or(self.core.id()),
        }
    }

    /// Where a decoded point request runs, and where its lookup will go when it runs here,
    /// so that a pipelined run of requests can prefetch it a few requests ahead
    /// ([`LookupPipeline`]). The lookup is `None` for anything else: a request another core
    /// runs, a scan, a packet that did not decode; the owner is `None` where it is not
    /// worked out here (any request but a point select or a write).
    pub(super) fn place(&self, decoded: &Decoded<'_>) -> (Option<usize>, Option<PointTarget>) {
        let Ok((_, request)) = decoded else {
            return (None, None);
        };
        let owner = match request {
            Request::Select(select) => match self.select_owner(select) {
                Some(owner) => owner,
                None => return (None, None),
            },
            Request::Insert(_)
            | Request::Replace(_)
            | Request::Update(_)
            | Request::Delete(_)
            | Request::Upsert(_) => self.write_owner(request),
            _ => return (None, None),
        };
        if owner != self.core.id() {
            return (Some(owner), None);
        }
        let engine = &self.core.shard.borrow().engine;
        (Some(owner), PointTarget::of(&request.target(), engine))
    }

    /// The core that owns the primary key given as a search key or inside a tuple; `None`
    /// when the key does not parse (then the local shard reports the error).
    pub(super) fn owner_of(
        &self,
        space_id: u32,
        key: Option<&[u8]>,
        tuple: Option<&[u8]>,
    ) -> Option<usize> {
        if self.core.shard_count == 1 {
            return Some(0);
        }
        let shard = self.core.shard.borrow();
        let space = shard.engine.find_space(space_id)?;
        let key_def = &space.indexes()[0].def.key_def;
        let mut encoded = SearchKeyBuf::new();
        // The usual primary key, one unsigned part, encodes to its 8 big-endian bytes: no
        // need for the general encoder (the same bytes, so the same owner).
        if let [part] = key_def.parts.as_slice() {
            if part.field_type == FieldType::Unsigned && !part.is_nullable {
                let id = match (key, tuple) {
                    (Some(key), _) => msgpack::single_uint_array(key),
                    (None, Some(tuple)) => space.leading_primary_key(tuple),
                    (None, None) => None,
                };
                if let Some(id) = id {
                    return Some(crate::placement::shard_of_key(
                        &id.to_be_bytes(),
                        self.core.shard_count,
                    ));
                }
            }
        }
        match (key, tuple) {
            (Some(key), _) => {
                let parts = key_def.encode_search_key(key, &mut encoded).ok()?;
                if parts != key_def.part_count() {
                    return None;
                }
            }
            (None, Some(tuple)) => key_def.encode_from_tuple_data(tuple, &mut encoded).ok()?,
            (None, None) => return None,
        }
        Some(crate::placement::shard_of_key(
            &encoded,
            self.core.shard_count,
        ))
    }

    /// The one core that can answer `select`, or `None` when every core must scan.
    pub(super) fn select_owner(&self, select: &Select<'_>) -> Option<usize> {
        if self.core.shard_count == 1 {
            return Some(0);
        }
        let placement = schema::placement_of(&self.core.shared.config, select.space_id);
        let is_point = select.index_id == 0 && select.iterator == IteratorType::Eq as u32;
        match placement {
            SpacePlacement::Everywhere => Some(self.core.id()),
            SpacePlacement::Shard0 => Some(0),
            SpacePlacement::ByPrimaryKey if is_point => {
                self.owner_of(select.space_id, Some(select.key), None)
            }
            SpacePlacement::ByPrimaryKey => None,
        }
    }
}
