//! One shard's storage: its spaces by id and the memory quota they share.
//!
//! Knows nothing of how requests arrive; the shard layer looks spaces up here.

use crate::storage::error::{Result, StorageError};
use crate::storage::memory::MemoryQuota;
use crate::storage::space::{Space, SpaceDef};
use std::rc::Rc;

pub struct Engine {
    /// Few spaces per server, looked up on every request: a sorted vector beats a map.
    spaces: Vec<Space>,
    /// `spaces`' ids in the same order: the lookup's search touches one cache line here
    /// rather than one `Space` (hundreds of bytes) per probe.
    space_ids: Vec<u32>,
    quota: Rc<MemoryQuota>,
}

impl Engine {
    pub fn new(memory_limit_bytes: u64) -> Engine {
        Engine {
            spaces: Vec::new(),
            space_ids: Vec::new(),
            quota: Rc::new(MemoryQuota::new(memory_limit_bytes)),
        }
    }

    pub fn create_space(&mut self, def: SpaceDef) -> Result<()> {
        if self
            .spaces
            .iter()
            .any(|space| space.id == def.id || space.name == def.name)
        {
            return Err(StorageError::IllegalParams(
                format!("space {} '{}' already exists", def.id, def.name).into(),
            ));
        }
        let space = Space::new(def, self.quota.clone())?;
        let at = self.space_ids.partition_point(|&id| id < space.id);
        self.space_ids.insert(at, space.id);
        self.spaces.insert(at, space);
        debug_assert!(self
            .space_ids
            .iter()
            .eq(self.spaces.iter().map(|space| &space.id)));
        Ok(())
    }

    #[inline]
    pub fn space(&self, id: u32) -> Result<&Space> {
        self.find_space(id)
            .ok_or_else(|| StorageError::NoSuchSpace(id.to_string().into()))
    }

    /// [`Engine::space`] for callers to whom a missing space is no error (and who must not
    /// pay for formatting one).
    #[inline]
    pub fn find_space(&self, id: u32) -> Option<&Space> {
        let at = self.space_ids.binary_search(&id).ok()?;
        Some(&self.spaces[at])
    }

    #[inline]
    pub fn space_mut(&mut self, id: u32) -> Result<&mut Space> {
        match self.space_ids.binary_search(&id) {
            Ok(at) => Ok(&mut self.spaces[at]),
            Err(_) => Err(StorageError::NoSuchSpace(id.to_string().into())),
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

    pub fn quota(&self) -> &MemoryQuota {
        &self.quota
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
