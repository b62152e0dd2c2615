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
    quota: Rc<MemoryQuota>,
}

impl Engine {
    pub fn new(memory_limit_bytes: u64) -> Engine {
        Engine {
            spaces: Vec::new(),
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
        let at = self.spaces.partition_point(|s| s.id < space.id);
        self.spaces.insert(at, space);
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
        let at = self
            .spaces
            .binary_search_by_key(&id, |space| space.id)
            .ok()?;
        Some(&self.spaces[at])
    }

    #[inline]
    pub fn space_mut(&mut self, id: u32) -> Result<&mut Space> {
        match self.spaces.binary_search_by_key(&id, |space| space.id) {
            Ok(at) => Ok(&mut self.spaces[at]),
            Err(_) => Err(StorageError::NoSuchSpace(id.to_string().into())),
        }
    }

    pub fn space_by_name(&self, name: &str) -> Option<&Space> {
        self.spaces.iter().find(|space| &*space.name == name)
    }

    pub fn spaces(&self) -> &[Space] {
        &self.spaces
    }

    pub fn quota(&self) -> &MemoryQuota {
        &self.quota
    }
}
