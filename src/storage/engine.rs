//! One shard's storage: its spaces by id and the memory quota they share.
//!
//! Knows nothing of how requests arrive; the shard layer looks spaces up here.

use crate::storage::change::RetiredTuples;
use crate::storage::error::{Result, StorageError};
use crate::storage::memory::MemoryQuota;
use crate::storage::space::{Space, SpaceDef};
use crate::storage::tuple::Tuple;
use std::rc::Rc;

pub struct Engine {
    /// Few spaces per server, sorted by id: ids from [`DIRECT_SPACE_IDS`] up (rare) are
    /// binary-searched here.
    spaces: Vec<Space>,
    /// For each id below [`DIRECT_SPACE_IDS`] (up to the largest such id in use), its
    /// space's position in `spaces`, or [`NO_SPACE`]. A request finds its space several
    /// times on its way (placement, fetching ahead, execution): one load each, where a
    /// binary search's dependent probes showed in every one of those places.
    space_at: Vec<u16>,
    /// Spaces defined without an index yet (made over CALL, before their primary index):
    /// part of the schema, but they hold no tuples and no request reaches them (Tarantool
    /// answers "No index #0 is defined in space").
    bare: Vec<SpaceDef>,
    quota: Rc<MemoryQuota>,
    /// Tuples displaced by writes, freed a few writes later (see [`RetiredTuples`]).
    retired: RetiredTuples,
    /// Some space is `is_sync`: only then does a write look at its space's flag.
    any_sync: bool,
}

/// Ids below this (system spaces, and users' from 512) are found in `Engine::space_at`.
const DIRECT_SPACE_IDS: u32 = 1 << 13;
const NO_SPACE: u16 = u16::MAX;

impl Engine {
    pub fn new(memory_limit_bytes: u64) -> Engine {
        Engine {
            spaces: Vec::new(),
            space_at: Vec::new(),
            bare: Vec::new(),
            quota: Rc::new(MemoryQuota::new(memory_limit_bytes)),
            retired: RetiredTuples::default(),
            any_sync: false,
        }
    }

    /// Creates space `def` (empty); one without indexes is bare (see [`Engine::bare`]).
    pub fn create_space(&mut self, def: SpaceDef) -> Result<()> {
        let taken = self
            .definitions()
            .any(|(id, name)| id == def.id || **name == *def.name);
        if taken {
            return Err(StorageError::IllegalParams(
                format!("space {} '{}' already exists", def.id, def.name).into(),
            ));
        }
        if self.spaces.len() >= usize::from(NO_SPACE) {
            return Err(StorageError::IllegalParams(
                format!("too many spaces (at most {NO_SPACE})").into(),
            ));
        }
        if def.indexes.is_empty() {
            let at = self.bare.partition_point(|bare| bare.id < def.id);
            self.bare.insert(at, def);
            return Ok(());
        }
        let space = Space::new(def, self.quota.clone())?;
        let at = self
            .spaces
            .partition_point(|existing| existing.id < space.id);
        self.spaces.insert(at, space);
        self.index_positions();
        Ok(())
    }

    /// Removes space `id` with its tuples (their memory goes back to the quota).
    pub fn drop_space(&mut self, id: u32) -> Result<()> {
        if let Some(at) = self.bare.iter().position(|bare| bare.id == id) {
            self.bare.remove(at);
            return Ok(());
        }
        let at = self
            .position_of(id)
            .ok_or_else(|| StorageError::NoSuchSpace(id.to_string().into()))?;
        self.spaces.remove(at);
        self.index_positions();
        Ok(())
    }

    /// Rebuilds `space_at` whole after `spaces` changed (spaces come and go rarely).
    fn index_positions(&mut self) {
        let direct_ids = || {
            self.spaces
                .iter()
                .map(|space| space.id)
                .enumerate()
                .filter(|&(_, id)| id < DIRECT_SPACE_IDS)
        };
        let direct_len = direct_ids()
            .map(|(_, id)| id as usize + 1)
            .max()
            .unwrap_or(0);
        let mut space_at = vec![NO_SPACE; direct_len];
        for (position, id) in direct_ids() {
            space_at[id as usize] = position as u16;
        }
        self.space_at = space_at;
        self.any_sync = self.spaces.iter().any(|space| space.is_sync);
        debug_assert!(self
            .spaces
            .iter()
            .enumerate()
            .all(|(position, space)| self.position_of(space.id) == Some(position)));
    }

    /// Puts space `def.id` under `def`, its tuples kept: the redefinition prepared for it
    /// when one is ready (which `def` must be), else [`Space::redefine_at_once`], which says
    /// what is checked. A refused change leaves the space as it was.
    /// A bare space given indexes becomes a space (empty); a space left without indexes
    /// becomes bare, its tuples dropped (as Tarantool's drop of a primary index does).
    pub fn redefine_space(&mut self, def: SpaceDef) -> Result<()> {
        let outcome = self.redefine_space_in_place(def);
        self.any_sync = self.spaces.iter().any(|space| space.is_sync);
        outcome
    }

    /// Whether a write to space `id` is synchronous (its space is `is_sync`); one load
    /// when no space is.
    #[inline]
    pub fn is_sync(&self, id: u32) -> bool {
        self.any_sync && self.find_space(id).is_some_and(|space| space.is_sync)
    }

    /// [`Engine::redefine_space`]'s change.
    fn redefine_space_in_place(&mut self, def: SpaceDef) -> Result<()> {
        if let Some((id, name)) = self
            .definitions()
            .find(|(id, name)| *id != def.id && ***name == *def.name)
        {
            return Err(StorageError::IllegalParams(
                format!("space {id} '{name}' already exists").into(),
            ));
        }
        if let Some(at) = self.bare.iter().position(|bare| bare.id == def.id) {
            let bare = self.bare.remove(at);
            return self
                .create_space(def)
                .inspect_err(|_| self.bare.insert(at, bare));
        }
        let at = self
            .position_of(def.id)
            .ok_or_else(|| StorageError::NoSuchSpace(def.id.to_string().into()))?;
        if def.indexes.is_empty() {
            self.drop_space(def.id)?;
            return self.create_space(def);
        }
        let space = &mut self.spaces[at];
        if space.finish_redefinition() {
            return Ok(());
        }
        space.cancel_redefinition();
        space.redefine_at_once(def)
    }

    /// Starts preparing space `def.id`'s redefinition as `def` while it serves (see
    /// [`Space::prepare_redefinition`]); [`Engine::redefine_space`] of `def` then switches
    /// to it once [`Engine::redefinition_step`] says it is done. `Ok(false)` when it cannot
    /// be prepared so ([`Engine::check_redefinition`] then says whether the change can be
    /// made at all, in one step).
    pub fn prepare_redefinition(&mut self, def: &SpaceDef) -> Result<bool> {
        match self.position_of(def.id) {
            Some(at) if !def.indexes.is_empty() => {
                self.spaces[at].prepare_redefinition(def.clone())
            }
            _ => Ok(false),
        }
    }

    /// Takes the prepared redefinition of space `id` up to `tuples` tuples further;
    /// `Ok(true)` once done (see [`Space::redefinition_step`]).
    pub fn redefinition_step(&mut self, id: u32, tuples: usize) -> Result<bool> {
        self.space_mut(id)?.redefinition_step(tuples)
    }

    /// Drops the prepared redefinition of space `id`, if any.
    pub fn cancel_redefinition(&mut self, id: u32) {
        if let Ok(space) = self.space_mut(id) {
            space.cancel_redefinition();
        }
    }

    /// Whether [`Engine::redefine_space`] of `def` would succeed, changing nothing: the space
    /// is built aside under it (every tuple checked, every index built) and dropped.
    pub fn check_redefinition(&self, def: &SpaceDef) -> Result<()> {
        match self.find_space(def.id) {
            Some(space) if !def.indexes.is_empty() => space.redefined(def.clone()).map(drop),
            Some(_) => Ok(()),
            None if self.bare.iter().any(|bare| bare.id == def.id) => {
                if def.indexes.is_empty() {
                    return Ok(());
                }
                Space::new(def.clone(), self.quota.clone()).map(drop)
            }
            None => Err(StorageError::NoSuchSpace(def.id.to_string().into())),
        }
    }

    /// Every space's id and name, bare ones included.
    fn definitions(&self) -> impl Iterator<Item = (u32, &Box<str>)> {
        let spaces = self.spaces.iter().map(|space| (space.id, &space.name));
        spaces.chain(self.bare.iter().map(|bare| (bare.id, &bare.name)))
    }

    /// Every space's definition, bare ones included, by id: the schema.
    pub fn space_defs(&self) -> Vec<SpaceDef> {
        let mut defs: Vec<SpaceDef> = self.spaces.iter().map(Space::def).collect();
        defs.extend(self.bare.iter().cloned());
        defs.sort_by_key(|def| def.id);
        defs
    }

    /// The definition of space `id`, bare or not.
    pub fn space_def(&self, id: u32) -> Option<SpaceDef> {
        match self.find_space(id) {
            Some(space) => Some(space.def()),
            None => self.bare.iter().find(|bare| bare.id == id).cloned(),
        }
    }

    /// The definition of the space (bare or not) named `name`.
    pub fn space_def_named(&self, name: &[u8]) -> Option<SpaceDef> {
        match self.space_named(name) {
            Some(space) => Some(space.def()),
            None => self
                .bare
                .iter()
                .find(|bare| same_name(bare.name.as_bytes(), name))
                .cloned(),
        }
    }

    /// Why space `id` cannot be found: a bare one has no index 0.
    #[cold]
    fn missing(&self, id: u32) -> StorageError {
        match self.bare.iter().find(|bare| bare.id == id) {
            Some(bare) => StorageError::NoSuchIndexId {
                index_id: 0,
                space: bare.name.clone(),
            },
            None => StorageError::NoSuchSpace(id.to_string().into()),
        }
    }

    /// Where space `id` is in `spaces`.
    #[inline]
    fn position_of(&self, id: u32) -> Option<usize> {
        if id < DIRECT_SPACE_IDS {
            return match self.space_at.get(id as usize) {
                Some(&position) if position != NO_SPACE => Some(usize::from(position)),
                _ => None,
            };
        }
        self.spaces.binary_search_by_key(&id, |space| space.id).ok()
    }

    #[inline]
    pub fn space(&self, id: u32) -> Result<&Space> {
        self.find_space(id).ok_or_else(|| self.missing(id))
    }

    /// [`Engine::space`] for callers to whom a missing space is no error (and who must not
    /// pay for formatting one).
    #[inline]
    pub fn find_space(&self, id: u32) -> Option<&Space> {
        let at = self.position_of(id)?;
        Some(&self.spaces[at])
    }

    #[inline]
    pub fn space_mut(&mut self, id: u32) -> Result<&mut Space> {
        match self.position_of(id) {
            Some(at) => Ok(&mut self.spaces[at]),
            None => Err(self.missing(id)),
        }
    }

    pub fn space_by_name(&self, name: &str) -> Option<&Space> {
        self.space_named(name.as_bytes())
    }

    /// [`Engine::space_by_name`] of a name's bytes (a request's, not UTF-8 checked: a
    /// name that matches is a space's text). From the back: requests name users' spaces,
    /// whose ids (from 512) sort after the system spaces'. Names are unique.
    #[inline]
    pub fn space_named(&self, name: &[u8]) -> Option<&Space> {
        self.spaces
            .iter()
            .rev()
            .find(|space| same_name(space.name.as_bytes(), name))
    }

    pub fn spaces(&self) -> &[Space] {
        &self.spaces
    }

    /// Frees a tuple a write displaced a few writes from now, when the lines it touches
    /// are warm (see [`RetiredTuples`]).
    #[inline]
    pub fn retire(&mut self, tuple: Tuple) {
        self.retired.retire(tuple);
    }

    pub fn quota(&self) -> &MemoryQuota {
        &self.quota
    }

    /// Frees the tuples waiting in the retired ring now (see [`RetiredTuples`]): their
    /// slots, and the quota's bytes for them, come back at once.
    pub fn free_retired(&mut self) {
        self.retired = RetiredTuples::default();
    }
}

/// `a == b`, for the short names looked up on every request (a space's, a field's): two
/// overlapping loads from each end instead of a call to `memcmp`, which costs more to
/// enter than such names cost to compare.
#[inline(always)]
pub fn same_name(a: &[u8], b: &[u8]) -> bool {
    fn ends<const N: usize>(a: &[u8], b: &[u8]) -> bool {
        a.first_chunk::<N>() == b.first_chunk::<N>() && a.last_chunk::<N>() == b.last_chunk::<N>()
    }
    a.len() == b.len()
        && match a.len() {
            0 => true,
            1 => a[0] == b[0],
            2..=3 => ends::<2>(a, b),
            4..=7 => ends::<4>(a, b),
            8..=16 => ends::<8>(a, b),
            _ => a == b,
        }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{FieldDef, FieldType, IndexDef, KeyPart, SpaceFormat};

    fn def(id: u32) -> SpaceDef {
        SpaceDef {
            id,
            name: format!("s{id}").into(),
            format: SpaceFormat::new(vec![FieldDef::new("id", FieldType::Unsigned)]),
            indexes: vec![IndexDef::tree(
                0,
                "primary",
                true,
                vec![KeyPart::new(0, FieldType::Unsigned)],
            )],
            is_sync: false,
        }
    }

    #[test]
    fn spaces_are_found_by_id_on_both_sides_of_the_direct_table() {
        let ids = [
            DIRECT_SPACE_IDS + 5,
            513,
            280,
            DIRECT_SPACE_IDS - 1,
            DIRECT_SPACE_IDS,
            512,
            u32::MAX,
        ];
        let mut engine = Engine::new(u64::MAX);
        for (created, &id) in ids.iter().enumerate() {
            engine.create_space(def(id)).unwrap();
            // Every space created so far, wherever the new one sorted, is still found.
            for &earlier in &ids[..=created] {
                assert_eq!(
                    engine.find_space(earlier).map(|space| space.id),
                    Some(earlier)
                );
                assert_eq!(engine.space_mut(earlier).unwrap().id, earlier);
            }
        }
        for missing in [
            0,
            281,
            514,
            DIRECT_SPACE_IDS - 2,
            DIRECT_SPACE_IDS + 1,
            u32::MAX - 1,
        ] {
            assert!(engine.find_space(missing).is_none(), "{missing}");
            assert!(matches!(
                engine.space(missing),
                Err(StorageError::NoSuchSpace(_))
            ));
        }
    }

    #[test]
    fn a_dropped_space_is_gone_its_memory_returned_and_the_others_still_found() {
        let mut engine = Engine::new(u64::MAX);
        for id in [512, 513, DIRECT_SPACE_IDS + 1] {
            engine.create_space(def(id)).unwrap();
        }
        let empty_bytes = engine.quota().used_bytes();
        let space = engine.space_mut(512).unwrap();
        for key in 0..1000u64 {
            space
                .insert(&[0x91, 0xcd, (key >> 8) as u8, key as u8])
                .unwrap();
        }
        assert!(engine.quota().used_bytes() > empty_bytes);
        engine.drop_space(512).unwrap();
        assert_eq!(engine.quota().used_bytes(), empty_bytes);
        assert!(engine.find_space(512).is_none());
        assert_eq!(engine.space(513).unwrap().id, 513);
        assert_eq!(
            engine.space(DIRECT_SPACE_IDS + 1).unwrap().id,
            DIRECT_SPACE_IDS + 1
        );
        assert!(matches!(
            engine.drop_space(512),
            Err(StorageError::NoSuchSpace(_))
        ));
        // The id is free again, and a space made under it starts empty.
        engine.create_space(def(512)).unwrap();
        assert_eq!(engine.space(512).unwrap().len(), 0);
    }

    #[test]
    fn same_name_is_byte_equality_at_every_length() {
        for len in 0..=20usize {
            let name: Vec<u8> = (0..len as u8).map(|at| b'a' + at).collect();
            assert!(same_name(&name, &name.clone()), "{len}");
            for at in 0..len {
                let mut other = name.clone();
                other[at] = b'_';
                assert!(!same_name(&name, &other), "{len} at {at}");
            }
            assert!(
                !same_name(&name, &[name.as_slice(), b"x"].concat()),
                "{len}"
            );
        }
    }
}
