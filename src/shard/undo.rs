//! The writes a shard applied in memory whose WAL rows are not yet known to be durable,
//! oldest first, each with what undoing it needs.
//!
//! A write changes the engine at once and is acknowledged only when its row is durable, so
//! between the two its change is visible but not yet promised. If the log then refuses the
//! row (a failed write or fsync), Tarantool rolls back that transaction and every one queued
//! behind it; so does tarn: [`UndoLog::roll_back_after`] undoes every write after the last
//! durable LSN, newest first, before any of their writers is answered. No reply, no later
//! read and no snapshot then sees a write the log refused.
//!
//! A write to a synchronous space (and every write after it) is not *settled* while its
//! quorum is pending, durable or not: its record stays until the WAL writer says it is settled
//! (`release_durable` gets the settled LSN), and a sync write that times out is rolled back
//! with every write after it by [`UndoLog::roll_back_compensating`], which also says what
//! row undoes each in the log ([`Compensation`]), since theirs are durable already.
//!
//! Back of the envelope: one 48-byte record per write in flight on the shard (bounded by
//! the requests in flight, a few thousand at most), kept in a ring that grows to that once
//! and is reused; a record is released by the next write after its row is durable, and its
//! old tuple is then retired like any displaced tuple.
//!
//! Knows nothing of the WAL's files or of requests: LSNs and storage changes.

use crate::storage::{Change, Engine};
use std::collections::VecDeque;

struct UndoRecord {
    lsn: u64,
    space_id: u32,
    change: Change,
}

#[derive(Default)]
pub struct UndoLog {
    records: VecDeque<UndoRecord>,
}

impl UndoLog {
    /// Keeps the change a write made, whose row was just appended at `lsn`.
    #[inline]
    pub fn push(&mut self, lsn: u64, space_id: u32, change: Change) {
        debug_assert!(!change.is_none());
        debug_assert!(
            self.records.back().is_none_or(|last| last.lsn < lsn),
            "LSNs grow"
        );
        self.records.push_back(UndoRecord {
            lsn,
            space_id,
            change,
        });
    }

    /// Forgets up to two of the writes whose rows are durable (LSN up to
    /// `lsn_durable_last`): they can no longer be refused. Their displaced tuples go to the
    /// engine's retired ring. Called once per write, so the records drain twice as fast as
    /// they come, and the frees are spread one or two per write as without a log: released
    /// all at once after each flush, a flush's worth of frees overflowed the allocator's
    /// per-size cache and cost ~70 instructions per write more in malloc and free.
    #[inline]
    pub fn release_durable(&mut self, lsn_durable_last: u64, engine: &mut Engine) {
        for _ in 0..2 {
            match self.records.front() {
                Some(oldest) if oldest.lsn <= lsn_durable_last => {}
                _ => return,
            }
            let released = self.records.pop_front();
            if let Some(old) = released.and_then(|record| record.change.old) {
                engine.retire(old);
            }
        }
    }

    /// Forgets every write whose row is durable (LSN up to `lsn_durable_last`), at once.
    pub fn release_all_durable(&mut self, lsn_durable_last: u64, engine: &mut Engine) {
        while self
            .records
            .front()
            .is_some_and(|oldest| oldest.lsn <= lsn_durable_last)
        {
            self.release_durable(lsn_durable_last, engine);
        }
    }

    /// Undoes every write after `lsn_durable_last`, newest first; returns how many.
    pub fn roll_back_after(&mut self, lsn_durable_last: u64, engine: &mut Engine) -> usize {
        self.roll_back_compensating(lsn_durable_last + 1, engine, &mut Vec::new(), |_, _| {})
    }

    /// Undoes every write from `lsn_first` on, newest first, and hands `compensate` the row
    /// that undoes each in the log (`key` is scratch for a primary key), in that order:
    /// logged after them, those rows bring recovery and replicas back to the state before
    /// `lsn_first`. Returns how many writes were undone.
    pub fn roll_back_compensating(
        &mut self,
        lsn_first: u64,
        engine: &mut Engine,
        key: &mut Vec<u8>,
        mut compensate: impl FnMut(u32, Compensation<'_>),
    ) -> usize {
        let mut undone = 0;
        while self
            .records
            .back()
            .is_some_and(|newest| newest.lsn >= lsn_first)
        {
            let Some(record) = self.records.pop_back() else {
                break;
            };
            match (&record.change.old, &record.change.new) {
                (Some(old), _) => compensate(record.space_id, Compensation::Replace(old.data())),
                (None, Some(new)) => {
                    key.clear();
                    if let Ok(space) = engine.space(record.space_id) {
                        space.write_primary_key(new, key);
                    }
                    compensate(record.space_id, Compensation::Delete(key));
                }
                (None, None) => {}
            }
            let outcome = engine
                .space_mut(record.space_id)
                .and_then(|space| space.undo(record.change));
            // Undoing the latest write of a key cannot fail: its keys were computed when it
            // was stored. A failure here is a bug in storage, not an operating error.
            debug_assert!(outcome.is_ok(), "undo failed: {outcome:?}");
            if let Err(error) = outcome {
                tracing::error!(space_id = record.space_id, %error, "undo of a write failed");
            }
            undone += 1;
        }
        undone
    }
}

/// The row that undoes a rolled-back write in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compensation<'a> {
    /// Store this tuple again (msgpack): the one the write replaced or deleted.
    Replace(&'a [u8]),
    /// Delete this primary key (a msgpack array): the write stored a new key.
    Delete(&'a [u8]),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_small() {
        // Two tuple handles (one pointer each, `None` in its niche), an LSN and a space id.
        assert_eq!(std::mem::size_of::<UndoRecord>(), 32);
    }
}
