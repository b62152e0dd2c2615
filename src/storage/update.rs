//! Update and upsert operations (stub until the update branch lands).

use crate::storage::error::{Result, StorageError};

pub struct UpdateOps<'a> {
    _ops: &'a [u8],
}

impl<'a> UpdateOps<'a> {
    pub fn decode(
        ops: &'a [u8],
        _index_base: u32,
        _field_no_by_name: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<Self> {
        Ok(UpdateOps { _ops: ops })
    }

    pub fn apply(&self, _tuple: &[u8], _out: &mut Vec<u8>) -> Result<()> {
        Err(StorageError::IllegalParams(
            "update is not built yet".into(),
        ))
    }

    pub fn apply_skipping_failures(
        &self,
        tuple: &[u8],
        out: &mut Vec<u8>,
        _on_skip: &mut dyn FnMut(&StorageError),
    ) -> Result<()> {
        out.extend_from_slice(tuple);
        Ok(())
    }
}
