//! The relay's barrier for schema changes: a master's change is one schema row in every
//! shard's WAL, each at its own place. A shard's stream stops at its row until every shard
//! has reached the same change (or is past it: its snapshot was taken after it), so that no
//! row written before the change on any shard reaches the replica after it (an older
//! version of a tuple may not fit the new definition). Then the held batches go, and the
//! replica makes the change at the first of them (it skips the rows of a change it has).
//!
//! Knows batches as bytes and their first row's kind; nothing of sockets or files.

use crate::protocol::replication as wire;
use crate::wal::follow::FollowedBatch;

/// Where each shard's stream is in the master's schema changes.
pub(super) struct SchemaGate {
    /// The last change every shard has passed: its rows go on without a stop.
    released: u64,
    shards: Vec<GateShard>,
}

struct GateShard {
    /// The schema version the shard's stream is at.
    version_at: u64,
    /// The batch that begins with the shard's row of a change not yet released, and that
    /// change's version.
    held: Option<(u64, FollowedBatch)>,
}

impl SchemaGate {
    /// `versions_at`: each shard's version where its stream starts; `released`: the version
    /// the replica has.
    pub(super) fn new(versions_at: Vec<u64>, released: u64) -> SchemaGate {
        let shards = versions_at.into_iter().map(|version_at| GateShard {
            version_at: version_at.max(released),
            held: None,
        });
        SchemaGate {
            released,
            shards: shards.collect(),
        }
    }

    /// Whether shard `shard`'s stream waits at a change.
    pub(super) fn is_held(&self, shard: usize) -> bool {
        self.shards[shard].held.is_some()
    }

    /// The shard's next batch: given back when it may go now, kept when it begins a change
    /// not every shard has reached.
    pub(super) fn admit(&mut self, shard: usize, batch: FollowedBatch) -> Option<FollowedBatch> {
        let Some(version) = batch.schema_change else {
            return Some(batch);
        };
        if version <= self.released {
            let at = &mut self.shards[shard].version_at;
            *at = (*at).max(version);
            return Some(batch);
        }
        self.shards[shard].held = Some((version, batch));
        None
    }

    /// Sends the held batches of the least change held once every shard has reached it.
    pub(super) fn release(&mut self, (sync, out): (u64, &mut Vec<u8>)) {
        let held = self.shards.iter().filter_map(|shard| shard.held.as_ref());
        let Some(version) = held.map(|(version, _)| *version).min() else {
            return;
        };
        let reached = |shard: &GateShard| {
            shard.version_at >= version || shard.held.as_ref().is_some_and(|h| h.0 == version)
        };
        if !self.shards.iter().all(reached) {
            return;
        }
        self.released = version;
        for (at, shard) in self.shards.iter_mut().enumerate() {
            if shard.held.as_ref().is_some_and(|h| h.0 == version) {
                if let Some((_, batch)) = shard.held.take() {
                    wire::encode_wal_batch(sync, at as u32, batch.lsn_first, &batch.bytes, out);
                }
                shard.version_at = version;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-row batch at `lsn` (its bytes stand for themselves here).
    fn batch(lsn: u64) -> FollowedBatch {
        FollowedBatch {
            lsn_first: lsn,
            lsn_last: lsn,
            schema_change: None,
            bytes: lsn.to_le_bytes().to_vec(),
        }
    }

    fn change(lsn: u64, version: u64) -> FollowedBatch {
        FollowedBatch {
            schema_change: Some(version),
            ..batch(lsn)
        }
    }

    #[test]
    fn a_change_goes_once_every_shard_has_reached_it() {
        let mut gate = SchemaGate::new(vec![0, 0], 0);
        assert!(gate.admit(0, batch(1)).is_some(), "rows go");
        assert!(
            gate.admit(0, change(2, 1)).is_none(),
            "shard 0 waits at version 1"
        );
        assert!(gate.is_held(0));
        let mut out = Vec::new();
        gate.release((7, &mut out));
        assert!(out.is_empty(), "shard 1 has not reached it");
        assert!(
            gate.admit(1, batch(5)).is_some(),
            "shard 1's rows before it go"
        );
        assert!(gate.admit(1, change(6, 1)).is_none());
        gate.release((7, &mut out));
        assert!(!gate.is_held(0) && !gate.is_held(1));
        let mut expected = Vec::new();
        wire::encode_wal_batch(7, 0, 2, &change(2, 1).bytes, &mut expected);
        wire::encode_wal_batch(7, 1, 6, &change(6, 1).bytes, &mut expected);
        assert_eq!(out, expected, "both held batches, in shard order");
        // A change the replica has goes on without a stop.
        assert!(gate.admit(0, change(9, 1)).is_some());
    }

    #[test]
    fn a_shard_whose_snapshot_is_past_the_change_does_not_hold_it_back() {
        let mut gate = SchemaGate::new(vec![0, 3], 0);
        assert!(gate.admit(0, change(4, 2)).is_none());
        let mut out = Vec::new();
        gate.release((1, &mut out));
        assert!(!out.is_empty() && !gate.is_held(0));
    }
}
