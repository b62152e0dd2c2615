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
        let mut undone = 0;
        while self
            .records
            .back()
            .is_some_and(|newest| newest.lsn > lsn_durable_last)
        {
            let Some(record) = self.records.pop_back() else {
                break;
            };
            let outcome = engine
                .space_mut(record.space_id)
                .and_then(|space| space.undo(record.change));
            // Undoing the latest write of a key cannot fail: its keys were computed when it
            // was stored. A failure here is a bug in storage, not an operating error.
            debug_assert!(outcome.is_ok(), "undo failed: {outcome:?}");
            if let Err(error) = outcome {
                tracing::error!(space_id = record.space_id, %error, "undo of a refused write failed");
            }
            undone += 1;
        }
        undone
    }
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
