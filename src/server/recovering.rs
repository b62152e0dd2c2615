//! A shard's engine while it recovers, following the schema its data was written under: a
//! snapshot's schema section sets the definitions its tuples are loaded with, and each
//! committed schema row in the WAL changes one space in place among the rows (see
//! `docs/ddl.md`). Tuples, replaces and deletes go to the engine as `wal` has them go.
//!
//! Knows storage's definitions and the schema record's rows (`schema.rs`,
//! `schema_change.rs`); nothing of files or executors.

use crate::server::schema::{self, is_system_space, read_entries, space_rows};
use crate::server::schema_change::decode_space_rows;
use crate::storage::{Engine, SpaceDef, Tuple};
use crate::wal::format::SchemaRow;
use crate::wal::recovery::SpaceBlocks;
use crate::wal::RecoveryTarget;

pub struct Recovering<'e> {
    engine: &'e mut Engine,
    /// The user spaces the engine began with: what a snapshot without a schema section (or
    /// no snapshot) was written under.
    baseline: Vec<SpaceDef>,
}

impl<'e> Recovering<'e> {
    /// Recovery into `engine`, whose user spaces are those the oldest data was written with.
    pub fn new(engine: &'e mut Engine) -> Recovering<'e> {
        let baseline = user_defs(engine);
        Recovering { engine, baseline }
    }

    /// Back to the baseline: its spaces as they were defined, and no other user space (a
    /// damaged snapshot's section may have made some). The engine holds no tuples yet, so
    /// this is cheap.
    fn reset(&mut self) -> Result<(), String> {
        let baseline = self.baseline.clone();
        let others: Vec<u32> = user_defs(self.engine)
            .into_iter()
            .filter(|held| !baseline.iter().any(|def| def.id == held.id))
            .map(|held| held.id)
            .collect();
        for id in others {
            self.engine.drop_space(id).map_err(|e| e.to_string())?;
        }
        baseline.into_iter().try_for_each(|def| self.define(def))
    }

    /// Creates the space `def` describes, or redefines the one of its id unless it is
    /// defined so already.
    fn define(&mut self, def: SpaceDef) -> Result<(), String> {
        let held = self.engine.space_def(def.id).map(|held| space_rows(&held));
        let outcome = match held {
            Some(rows) if rows == space_rows(&def) => return Ok(()),
            Some(_) => self.engine.redefine_space(def),
            None => self.engine.create_space(def),
        };
        outcome.map_err(|e| e.to_string())
    }
}

fn user_defs(engine: &Engine) -> Vec<SpaceDef> {
    let mut defs = engine.space_defs();
    defs.retain(|def| !is_system_space(def.id));
    defs
}

impl RecoveryTarget for Recovering<'_> {
    type Staged = Vec<Tuple>;

    fn stage_space(
        &self,
        space_id: u32,
        blocks: &mut SpaceBlocks<'_>,
    ) -> Result<Vec<Tuple>, String> {
        self.engine.stage_space(space_id, blocks)
    }

    fn load_staged(&mut self, space_id: u32, staged: Vec<Tuple>) -> Result<(), String> {
        self.engine.load_staged(space_id, staged)
    }

    fn replace(&mut self, space_id: u32, tuple: &[u8]) -> Result<(), String> {
        self.engine.replace(space_id, tuple)
    }

    fn delete(&mut self, space_id: u32, key: &[u8]) -> Result<(), String> {
        self.engine.delete(space_id, key)
    }

    /// The section's spaces are defined as it says; a space of the baseline it lacks stays
    /// (empty): the config has it, and spaces the config adds are created if missing.
    fn begin_snapshot(&mut self, section: Option<&[u8]>) -> Result<(), String> {
        self.reset()?;
        let Some(bytes) = section.filter(|bytes| !bytes.is_empty()) else {
            return Ok(());
        };
        let (_version, spaces) =
            read_entries(bytes).ok_or("the schema section is not whole entries")?;
        for (_, rows) in spaces {
            self.define(decode_space_rows(&rows)?)?;
        }
        Ok(())
    }

    fn change_schema(&mut self, space_id: u32, change: SchemaRow<'_>) -> Result<(), String> {
        if change.definition.is_empty() {
            return self.engine.drop_space(space_id).map_err(|e| e.to_string());
        }
        let def = decode_space_rows(change.definition)?;
        if def.id != space_id || schema::is_system_space(def.id) {
            return Err(format!(
                "schema version {}: a definition of space {} in a row of space {space_id}",
                change.version, def.id
            ));
        }
        self.define(def)
    }
}

#[cfg(test)]
mod tests;
