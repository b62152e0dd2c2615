//! Fan-out: a select or a crud call that every core runs a part of, and the merge of
//! their answers into one reply.

use super::{Pending, PendingReply, Session, Wait};
use crate::crud::{self, CrudReply, Plan};
use crate::placement::Destination;
use crate::protocol::reply::DataReply;
use crate::protocol::request::Select;
use crate::server::mesh::batch::{EntryTooLong, Kind};
use crate::server::mesh::crud_payloads as wire;
use crate::server::schema::SCHEMA_VERSION;
use crate::shard::errors::{encode_log_refused, encode_storage_error};
use crate::shard::ScanPart;
use crate::storage::IteratorType;
use crate::wal::{Commit, WalError};
use smallvec::SmallVec;
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
            for &(peer, slot) in &slots {
                match self.inbox.replies().part(slot).map(wire::decode_items) {
                    Ok(Some(remote)) => put_back(&mut items, &positions[peer], remote),
                    Ok(None) => failures.refused_elsewhere(),
                    Err(error) => failures.too_long = Some(error),
                }
            }
            self.inbox.clear();
        }
        if failures.answered(commit, sync, out).await {
            return;
        }
        let values = {
            let shard = self.core.shard.borrow();
            let space = shard.engine.space(many.space_id).expect("planned");
            crud::finish_many(space, &self.core.crud, many, &items)
        };
        crud::encode_reply(out, sync, SCHEMA_VERSION, &CrudReply::Values(values));
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

    /// A crud call on every core (select, count, min/max, len, truncate): each runs its part
    /// of the CALL packet (`Kind::CrudPart`), this core merges. Earlier queued requests
    /// finish first, so the call sees their writes and the reply keeps its place.
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
        for slot in 0..(self.core.shard_count - 1) as u32 {
            match self.inbox.replies().part(slot).map(wire::decode_part) {
                Ok(Some(part)) => parts.push(part),
                Ok(None) => failures.refused_elsewhere(),
                Err(error) => failures.too_long = Some(error),
            }
        }
        self.inbox.clear();
        if failures.answered(commit, sync, out).await {
            return;
        }
        let values = {
            let shard = self.core.shard.borrow();
            crud::finish_parts(&shard.engine, &self.core.crud, plan, parts)
        };
        crud::encode_reply(out, sync, SCHEMA_VERSION, &CrudReply::Values(values));
    }

    /// Starts a select that every core scans (each returns at most offset + limit entries
    /// in index order): each peer's part is queued in this tick's batch, behind the requests
    /// queued to that peer before it, so it sees their writes; this core's part is scanned
    /// now, after the local requests before it. [`Session::finish`] merges the parts into
    /// the reply's place ([`Session::merge_fan_outs`]), so the connection reads on and many
    /// scans are in flight at once. Returns [`Wait::Finish`] once the parts held here pass
    /// [`SCAN_BYTES_HELD_MAX`].
    pub(super) fn fan_out_select(
        &mut self,
        select: &Select<'_>,
        sync: u64,
        out: &mut Vec<u8>,
    ) -> Option<Wait> {
        let part = ScanPart::of(select);
        // This core's part first: a scan this shard refuses (no such space or index, a bad
        // key) is refused by every shard alike, so nothing is sent and the error answers.
        let local_start = self.scans.len();
        let scanned = self.core.shard.borrow().scan(&part, &mut self.scans);
        if let Err(error) = scanned {
            self.scans.truncate(local_start);
            encode_storage_error(out, sync, SCHEMA_VERSION, &error);
            return None;
        }
        let me = self.core.id();
        let mut first_slot = None;
        for peer in (0..self.core.shard_count).filter(|&peer| peer != me) {
            let slot = self.core.queue_scan(peer, &part, &self.inbox);
            // The inbox hands out slots in order: the peers' parts are `first_slot..`.
            first_slot.get_or_insert(slot);
        }
        let fan_out = FanOut {
            sync,
            first_slot: first_slot.expect("a fan-out has a peer"),
            local: local_start..self.scans.len(),
            merged: 0..0,
            order: MergeOrder::of(select),
        };
        let index = u32::try_from(self.fan_outs.len()).expect("bounded by the read buffer");
        self.fan_outs.push(fan_out);
        self.pending.push(Pending {
            at: out.len(),
            reply: PendingReply::FanOut(index),
        });
        (self.scans.len() >= SCAN_BYTES_HELD_MAX).then_some(Wait::Finish)
    }

    /// Merges each fan-out's parts (this core's in `scans`, the peers' in the inbox) into
    /// its reply, appended to `merged`; once every part has arrived.
    pub(super) fn merge_fan_outs(&mut self) {
        let peers = (self.core.shard_count - 1) as u32;
        let replies = self.inbox.replies();
        for fan_out in &mut self.fan_outs {
            let parts = fan_out.first_slot..fan_out.first_slot + peers;
            let start = self.merged.len();
            match parts.clone().find_map(|slot| replies.part(slot).err()) {
                Some(too_long) => {
                    too_long.encode_reply(&mut self.merged, fan_out.sync, SCHEMA_VERSION)
                }
                None => {
                    let mut streams: SmallVec<[ScanEntries<'_>; 8]> = SmallVec::new();
                    streams.push(ScanEntries::new(&self.scans[fan_out.local.clone()]));
                    streams.extend(parts.map(|slot| ScanEntries::new(replies.get(slot))));
                    merge(fan_out.order, &mut streams, fan_out.sync, &mut self.merged);
                }
            }
            fan_out.merged = start..self.merged.len();
        }
    }
}

/// The parts of a session's fan-outs held between `finish`es, past which the session
/// merges them before reading on (a pipeline of scans with large limits).
pub(super) const SCAN_BYTES_HELD_MAX: usize = 256 * 1024;

/// A select every core scans, in flight: the peers' parts arrive in the inbox at slots
/// `first_slot..` (one per peer), this core's is in the session's `scans` at `local`; the
/// merged reply goes to the session's `merged` at `merged`.
pub(super) struct FanOut {
    sync: u64,
    first_slot: u32,
    local: Range<usize>,
    pub(super) merged: Range<usize>,
    order: MergeOrder,
}

/// What a merge of a select's parts keeps: entries in index order (descending for
/// LT/LE/REQ iterators), `offset` skipped, at most `limit`.
#[derive(Debug, Clone, Copy)]
pub(super) struct MergeOrder {
    descending: bool,
    offset: u32,
    limit: u32,
}

impl MergeOrder {
    fn of(select: &Select<'_>) -> MergeOrder {
        MergeOrder {
            descending: IteratorType::from_code(select.iterator)
                .is_ok_and(IteratorType::is_descending),
            offset: select.offset,
            limit: select.limit,
        }
    }
}

/// Writes the merged reply: entries in index order (descending for LT/LE/REQ iterators),
/// `offset` skipped, at most `limit` written.
pub(super) fn merge(
    order: MergeOrder,
    streams: &mut [ScanEntries<'_>],
    sync: u64,
    out: &mut Vec<u8>,
) {
    let mut data = DataReply::begin(out, sync, SCHEMA_VERSION);
    let mut skipped = 0u32;
    while data.count() < order.limit {
        let Some(next) = next_stream(streams, order.descending) else {
            break;
        };
        let Some(entry) = streams[next].next() else {
            break;
        };
        if skipped < order.offset {
            skipped += 1;
            continue;
        }
        data.push_raw(out, entry.tuple);
    }
    data.finish(out);
}

/// The stream whose head comes first in the merge's order; on equal keys (which distinct
/// entries do not have) the first such stream. `None` once every stream is spent.
#[inline]
fn next_stream(streams: &[ScanEntries<'_>], descending: bool) -> Option<usize> {
    let mut best: Option<(usize, &ScanEntry<'_>)> = None;
    for (at, stream) in streams.iter().enumerate() {
        let Some(head) = &stream.head else { continue };
        match best {
            Some((_, leader)) if !head.precedes(leader, descending) => {}
            _ => best = Some((at, head)),
        }
    }
    best.map(|(at, _)| at)
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

/// One entry of a scan part: its key (the index's order-preserving encoding) with the
/// key's first eight bytes as a number, which decides most comparisons in one instruction,
/// and the tuple.
pub(super) struct ScanEntry<'a> {
    prefix: u64,
    key: &'a [u8],
    tuple: &'a [u8],
}

impl ScanEntry<'_> {
    /// Whether this entry comes before `other` in the merge: by key, descending or not.
    /// Keys compare as bytes; the prefixes, zero-padded first eight bytes, order two keys
    /// the same way whenever they differ (a shorter key padded with zeros is below any
    /// longer key that differs from it in those bytes), so only equal prefixes need the
    /// bytes.
    #[inline]
    fn precedes(&self, other: &ScanEntry<'_>, descending: bool) -> bool {
        let order = self
            .prefix
            .cmp(&other.prefix)
            .then_with(|| self.key.cmp(other.key));
        if descending {
            order.is_gt()
        } else {
            order.is_lt()
        }
    }
}

/// The zero-padded first eight bytes of `key`, big-endian: its order among prefixes is the
/// order of the keys wherever the prefixes differ.
#[inline]
fn key_prefix(key: &[u8]) -> u64 {
    match key.first_chunk::<8>() {
        Some(first) => u64::from_be_bytes(*first),
        None => {
            let mut padded = [0u8; 8];
            padded[..key.len()].copy_from_slice(key);
            u64::from_be_bytes(padded)
        }
    }
}

/// Reads the `[key length u32 LE][key][tuple length u32 LE][tuple]` entries written by
/// `Shard::scan`, its next entry read ahead once (the merge compares it many times).
pub(super) struct ScanEntries<'a> {
    head: Option<ScanEntry<'a>>,
    rest: &'a [u8],
}

impl<'a> ScanEntries<'a> {
    fn new(bytes: &'a [u8]) -> ScanEntries<'a> {
        let mut entries = ScanEntries {
            head: None,
            rest: bytes,
        };
        entries.head = entries.read();
        entries
    }

    /// Reads one entry off `rest`; `None` at the end (a torn entry ends the stream: both
    /// ends are this build, so it is a bug, asserted in debug builds).
    #[inline]
    fn read(&mut self) -> Option<ScanEntry<'a>> {
        if self.rest.is_empty() {
            return None;
        }
        let entry = take_sized(&mut self.rest).zip(take_sized(&mut self.rest));
        debug_assert!(entry.is_some(), "a torn scan entry");
        let (key, tuple) = entry?;
        Some(ScanEntry {
            prefix: key_prefix(key),
            key,
            tuple,
        })
    }
}

/// `[length u32 LE][bytes]` off the front of `rest`.
#[inline]
fn take_sized<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (length, after) = rest.split_first_chunk::<4>()?;
    let length = usize::try_from(u32::from_le_bytes(*length)).ok()?;
    let bytes = after.get(..length)?;
    *rest = &after[length..];
    Some(bytes)
}

impl<'a> Iterator for ScanEntries<'a> {
    type Item = ScanEntry<'a>;

    #[inline]
    fn next(&mut self) -> Option<ScanEntry<'a>> {
        let head = self.head.take()?;
        self.head = self.read();
        Some(head)
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

    fn refused_elsewhere(&mut self) {
        self.refused = true;
    }

    /// Waits for this core's own `commit`, then writes the call's error reply if a part
    /// failed: a log refusal first (see `encode_log_refused`), then a part too long. `true`
    /// when it did, and the merge must not run.
    async fn answered(mut self, commit: Option<Commit>, sync: u64, out: &mut Vec<u8>) -> bool {
        if let Some(commit) = commit {
            if let Err(error) = commit.await {
                self.refused_here(error);
            }
        }
        if self.refused {
            encode_log_refused(out, sync, SCHEMA_VERSION, self.refused_here.as_ref());
        } else if let Some(too_long) = &self.too_long {
            too_long.encode_reply(out, sync, SCHEMA_VERSION);
        } else {
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Comparing prefixes first, then bytes, orders keys exactly as comparing bytes
        /// does, short keys and keys with zero bytes included.
        #[test]
        fn prefixes_then_bytes_order_keys_as_bytes_do(
            a in proptest::collection::vec(proptest::sample::select(vec![0u8, 1, 0x7f, 0xff]), 0..12),
            b in proptest::collection::vec(proptest::sample::select(vec![0u8, 1, 0x7f, 0xff]), 0..12),
        ) {
            let entry = |key| ScanEntry { prefix: key_prefix(key), key, tuple: &[] };
            let (a_entry, b_entry) = (entry(&a), entry(&b));
            proptest::prop_assert_eq!(a_entry.precedes(&b_entry, false), a < b);
            proptest::prop_assert_eq!(a_entry.precedes(&b_entry, true), a > b);
        }
    }
}
