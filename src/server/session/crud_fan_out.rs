//! crud calls spread over cores: a `*_many` call whose ops several cores own, and a call
//! every core runs a part of (select, count, min/max, len, truncate), merged into crud's
//! reply on the accepting core.

use super::fan_out::SCAN_BYTES_HELD_MAX;
use super::{Pending, PendingReply, Session, Wait};
use crate::crud::{self, CrudReply, Plan};
use crate::placement::Destination;
use crate::server::mesh::batch::{EntryTooLong, Kind};
use crate::server::mesh::crud_payloads as wire;
use crate::shard::errors::encode_log_refused;
use crate::wal::{Commit, WalError};
use std::ops::Range;

impl Session {
    /// A `*_many` call on several cores: each owner gets its ops, in order, in one message
    /// (`Kind::CrudOps`); the outcomes go back to their positions and are finished here.
    /// Earlier queued requests finish first, so the reply keeps its place.
    pub(super) async fn crud_many(&mut self, plan: &Plan<'_>, sync: u64, out: &mut Vec<u8>) {
        let Plan::Many(many) = plan else {
            unreachable!("crud_many takes a Many plan")
        };
        self.finish(out).await;
        let shard_count = self.core.shard_count;
        let me = self.core.id();
        // positions[core] = the indexes into `many.ops` that core owns, in order.
        let mut positions: Vec<Vec<usize>> = vec![Vec::new(); shard_count];
        for (at, op) in many.ops.iter().enumerate() {
            let owner = match self.route_crud_op(many.space_id, op) {
                Destination::Owner(owner) => owner,
                Destination::Here | Destination::EveryCore => me,
            };
            positions[owner].push(at);
        }
        // Slots are 0.. in the order queued: the inbox was empty after `finish`.
        let mut slots: Vec<(usize, u32)> = Vec::new();
        let mut payload = Vec::new();
        for peer in (0..shard_count).filter(|&peer| peer != me && !positions[peer].is_empty()) {
            payload.clear();
            let ops = positions[peer].iter().map(|&at| &many.ops[at]);
            wire::encode_ops(
                &mut payload,
                many.space_id,
                many.stop_on_error,
                many.rollback_on_error,
                ops,
            );
            let slot = self
                .core
                .queue(peer, Kind::CrudOps, 0, &payload, &self.inbox);
            slots.push((peer, slot));
        }
        let mut items = vec![crud::write::BatchItem::NotPerformed; many.ops.len()];
        let (local, commit) = self.run_own_ops(many, &positions[me]);
        let mut failures = PartFailures::default();
        match local {
            Ok(Share::Items(local)) => put_back(&mut items, &positions[me], local),
            Ok(_) => debug_assert!(false, "ops answered with a part"),
            Err(error) => failures.refused_here(error),
        }
        if !slots.is_empty() {
            self.inbox.wait().await;
            let replies = self.inbox.replies();
            for &(peer, slot) in &slots {
                if let Some(remote) = failures.peer_part(replies.part(slot), wire::decode_items) {
                    put_back(&mut items, &positions[peer], remote);
                }
            }
            drop(replies);
            self.inbox.clear();
        }
        let version = self.core.schema_version();
        if failures.answered(commit, sync, version, out).await {
            return;
        }
        let values = {
            let shard = self.core.shard.borrow();
            let space = shard.engine.space(many.space_id).expect("planned");
            crud::finish_many(space, &self.core.crud, many, &items)
        };
        crud::encode_reply(out, sync, version, &CrudReply::Values(values));
    }

    /// Runs this core's own ops of a `*_many` call (at `positions`, in order) here.
    fn run_own_ops(
        &self,
        many: &crud::ManyPlan<'_>,
        positions: &[usize],
    ) -> (Result<Share, WalError>, Option<Commit>) {
        let mut shard = self.core.shard.borrow_mut();
        let ops = crud::ShardOps {
            space_id: many.space_id,
            stop_on_error: many.stop_on_error,
            rollback_on_error: many.rollback_on_error,
            ops: positions.iter().map(|&at| many.ops[at].clone()).collect(),
        };
        let ran = crud::run(&mut shard, &self.core.crud, crud::Work::Ops(&ops));
        (share_answer(ran.answer), ran.commit)
    }

    /// Starts a crud call every core answers a part of without writing (select, count,
    /// min/max, len), pipelined as a select every core scans is: each peer's part of the
    /// CALL packet (`Kind::CrudPart`) is queued behind the requests queued to that peer
    /// before it, so it sees their writes; this core's part runs now; [`Session::finish`]
    /// merges the parts into the reply's place ([`Session::merge_crud_reads`]), so the
    /// connection reads on. Returns [`Wait::Finish`] once the parts held here pass
    /// [`SCAN_BYTES_HELD_MAX`].
    pub(super) fn start_crud_read(
        &mut self,
        packet: &[u8],
        plan: Plan<'static>,
        sync: u64,
        out: &[u8],
    ) -> Option<Wait> {
        let local = {
            let mut shard = self.core.shard.borrow_mut();
            let ran = crud::run(&mut shard, &self.core.crud, crud::Work::Part(&plan));
            debug_assert!(ran.commit.is_none(), "a read part writes nothing");
            match ran.answer {
                crud::Answer::Part(part) => part,
                other => unreachable!("a read part answers with a part, not {other:?}"),
            }
        };
        self.crud_read_bytes += local_part_bytes(&local);
        let me = self.core.id();
        let mut first_slot = None;
        for peer in (0..self.core.shard_count).filter(|&peer| peer != me) {
            let slot = self
                .core
                .queue(peer, Kind::CrudPart, 0, packet, &self.inbox);
            // The inbox hands out slots in order: the peers' parts are `first_slot..`.
            first_slot.get_or_insert(slot);
        }
        let index = u32::try_from(self.crud_reads.len()).expect("bounded by the read buffer");
        self.crud_reads.push(CrudRead {
            sync,
            first_slot: first_slot.expect("a fan-out has a peer"),
            plan,
            local: Some(local),
            merged: 0..0,
        });
        self.pending.push(Pending {
            at: out.len(),
            reply: PendingReply::CrudRead(index),
        });
        (self.scans.len() + self.crud_read_bytes >= SCAN_BYTES_HELD_MAX).then_some(Wait::Finish)
    }

    /// Merges each crud read's parts (this core's, kept; the peers', in the inbox) into its
    /// crud reply, appended to `merged`; once every part has arrived.
    pub(super) fn merge_crud_reads(&mut self) {
        let peers = (self.core.shard_count - 1) as u32;
        let replies = self.inbox.replies();
        let shard = self.core.shard.borrow();
        for read in &mut self.crud_reads {
            let start = self.merged.len();
            let mut parts = Vec::with_capacity(self.core.shard_count);
            parts.extend(read.local.take());
            let mut failures = PartFailures::default();
            for slot in read.first_slot..read.first_slot + peers {
                parts.extend(failures.peer_part(replies.part(slot), wire::decode_part));
            }
            if !failures.answered_now(read.sync, self.core.schema_version(), &mut self.merged) {
                let values = crud::finish_parts(&shard.engine, &self.core.crud, &read.plan, parts);
                let reply = CrudReply::Values(values);
                crud::encode_reply(
                    &mut self.merged,
                    read.sync,
                    self.core.schema_version(),
                    &reply,
                );
            }
            read.merged = start..self.merged.len();
        }
        self.crud_read_bytes = 0;
    }

    /// A crud call on every core that writes (truncate): each runs its part of the CALL
    /// packet (`Kind::CrudPart`), this core merges. Earlier queued requests finish first,
    /// so the call sees their writes and the reply keeps its place.
    pub(super) async fn crud_fan_out(
        &mut self,
        packet: &[u8],
        plan: &Plan<'_>,
        sync: u64,
        out: &mut Vec<u8>,
    ) {
        self.finish(out).await;
        let me = self.core.id();
        for peer in (0..self.core.shard_count).filter(|&peer| peer != me) {
            // Slots are 0.. in peer order: the inbox was empty after `finish`.
            self.core
                .queue(peer, Kind::CrudPart, 0, packet, &self.inbox);
        }
        let (local, commit) = {
            let mut shard = self.core.shard.borrow_mut();
            let ran = crud::run(&mut shard, &self.core.crud, crud::Work::Part(plan));
            (share_answer(ran.answer), ran.commit)
        };
        self.inbox.wait().await;
        let mut parts = Vec::with_capacity(self.core.shard_count);
        let mut failures = PartFailures::default();
        match local {
            Ok(Share::Part(part)) => parts.push(part),
            Ok(_) => debug_assert!(false, "a part answered with items"),
            Err(error) => failures.refused_here(error),
        }
        let replies = self.inbox.replies();
        for slot in 0..(self.core.shard_count - 1) as u32 {
            parts.extend(failures.peer_part(replies.part(slot), wire::decode_part));
        }
        drop(replies);
        self.inbox.clear();
        if failures
            .answered(commit, sync, self.core.schema_version(), out)
            .await
        {
            return;
        }
        let values = {
            let shard = self.core.shard.borrow();
            crud::finish_parts(&shard.engine, &self.core.crud, plan, parts)
        };
        crud::encode_reply(
            out,
            sync,
            self.core.schema_version(),
            &CrudReply::Values(values),
        );
    }
}

/// Puts one core's outcomes (in the order of its ops) back at the ops' positions.
fn put_back(
    items: &mut [crud::write::BatchItem],
    positions: &[usize],
    outcomes: Vec<crud::write::BatchItem>,
) {
    assert_eq!(positions.len(), outcomes.len(), "one outcome per op sent");
    for (&at, outcome) in positions.iter().zip(outcomes) {
        items[at] = outcome;
    }
}

/// A crud call every core answers a part of without writing, in flight: the peers' parts
/// arrive in the inbox at slots `first_slot..` (one per peer), this core's is `local`
/// (until the merge takes it); the merged reply goes to the session's `merged` at `merged`.
pub(super) struct CrudRead {
    sync: u64,
    first_slot: u32,
    plan: Plan<'static>,
    local: Option<crud::Part>,
    pub(super) merged: Range<usize>,
}

/// About the bytes a part holds while it waits for the merge: its rows' keys and tuples.
fn local_part_bytes(part: &crud::Part) -> usize {
    match part {
        crud::Part::Rows(rows) => rows
            .iter()
            .map(|(key, tuple)| key.len() + tuple.len())
            .sum(),
        crud::Part::Count(_) | crud::Part::Done | crud::Part::Failed(_) => 0,
    }
}

/// What this core's share of a crud call spread over cores answered.
enum Share {
    Items(Vec<crud::write::BatchItem>),
    Part(crud::Part),
}

/// A share's [`crud::Answer`]: its items or part, or the log's refusal.
fn share_answer(answer: crud::Answer) -> Result<Share, crate::wal::WalError> {
    match answer {
        crud::Answer::Items(items) => Ok(Share::Items(items)),
        crud::Answer::Part(part) => Ok(Share::Part(part)),
        crud::Answer::Refused(error) => Err(error),
        crud::Answer::Replied => unreachable!("a share is not a whole call"),
    }
}

/// Whether the WAL of some shard refused a part of a crud call that spans shards, and why
/// when it was this core's (another core logs its own reason; its part only says refused).
/// What stops a fan-out's merge: a write the log refused (here, or on a peer, which then
/// answered no part), or a part too long to cross cores. Such a call is never acknowledged.
#[derive(Default)]
pub(super) struct PartFailures {
    refused: bool,
    /// Why this core's log refused, when it did (a peer's reason is in its own log).
    refused_here: Option<WalError>,
    too_long: Option<EntryTooLong>,
}

impl PartFailures {
    fn refused_here(&mut self, error: WalError) {
        self.refused = true;
        self.refused_here.get_or_insert(error);
    }

    /// A peer's part as it arrived in the inbox, decoded; `None`, and noted, when the
    /// peer's log refused its share (it answered no part) or the part was too long to
    /// cross cores.
    fn peer_part<T>(
        &mut self,
        reply: Result<&[u8], EntryTooLong>,
        decode: impl FnOnce(&[u8]) -> Option<T>,
    ) -> Option<T> {
        match reply.map(decode) {
            Ok(Some(part)) => Some(part),
            Ok(None) => {
                self.refused = true;
                None
            }
            Err(too_long) => {
                self.too_long = Some(too_long);
                None
            }
        }
    }

    /// [`PartFailures::answered`] for a call that wrote nothing here: no commit to wait for.
    fn answered_now(self, sync: u64, schema_version: u64, out: &mut Vec<u8>) -> bool {
        debug_assert!(self.refused_here.is_none(), "nothing was written here");
        self.encode_reply(sync, schema_version, out)
    }

    /// Waits for this core's own `commit`, then writes the call's error reply if a part
    /// failed: a log refusal first (see `encode_log_refused`), then a part too long. `true`
    /// when it did, and the merge must not run.
    async fn answered(
        mut self,
        commit: Option<Commit>,
        sync: u64,
        schema_version: u64,
        out: &mut Vec<u8>,
    ) -> bool {
        if let Some(commit) = commit {
            if let Err(error) = commit.await {
                self.refused_here(error);
            }
        }
        self.encode_reply(sync, schema_version, out)
    }

    /// Writes the call's error reply if a part failed: a log refusal first (see
    /// `encode_log_refused`), then a part too long. `true` when it did.
    fn encode_reply(&self, sync: u64, schema_version: u64, out: &mut Vec<u8>) -> bool {
        if self.refused {
            encode_log_refused(out, sync, schema_version, self.refused_here.as_ref());
        } else if let Some(too_long) = &self.too_long {
            too_long.encode_reply(out, sync, schema_version);
        } else {
            return false;
        }
        true
    }
}
