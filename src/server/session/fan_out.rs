//! Fan-out of a select: every core scans its part of the range, and the accepting core
//! merges the parts into one reply, in request order, while the connection reads on.

use super::{Pending, PendingReply, Session, Wait};
use crate::protocol::reply::DataReply;
use crate::protocol::request::Select;
use crate::shard::errors::encode_storage_error;
use crate::shard::{ScanPart, SCAN_KEY_IS_HEAD};
use crate::storage::IteratorType;
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::ops::Range;

impl Session {
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
            encode_storage_error(out, sync, self.core.schema_version(), &error);
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
            index: (select.space_id, select.index_id),
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
                Some(too_long) => too_long.encode_reply(
                    &mut self.merged,
                    fan_out.sync,
                    self.core.schema_version(),
                ),
                None => {
                    let mut streams: SmallVec<[ScanEntries<'_>; 8]> = SmallVec::new();
                    streams.push(ScanEntries::new(&self.scans[fan_out.local.clone()]));
                    streams.extend(parts.map(|slot| ScanEntries::new(replies.get(slot))));
                    let shard = self.core.shard.borrow();
                    let (space_id, index_id) = fan_out.index;
                    let break_tie =
                        |a: &[u8], b: &[u8]| shard.compare_entry_keys(space_id, index_id, a, b);
                    let merged = &mut self.merged;
                    merge(
                        fan_out.order,
                        &mut streams,
                        &break_tie,
                        (fan_out.sync, self.core.schema_version()),
                        merged,
                    );
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
    /// The space and index scanned, whose keys break ties between heads.
    index: (u32, u32),
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

/// Compares the keys of two tuples whose heads tie (see [`SCAN_KEY_IS_HEAD`]).
pub(super) type TieBreak<'a> = dyn Fn(&[u8], &[u8]) -> Ordering + 'a;

/// Writes the merged reply: entries in index order (descending for LT/LE/REQ iterators),
/// `offset` skipped, at most `limit` written.
pub(super) fn merge(
    order: MergeOrder,
    streams: &mut [ScanEntries<'_>],
    break_tie: &TieBreak<'_>,
    (sync, schema_version): (u64, u64),
    out: &mut Vec<u8>,
) {
    let mut data = DataReply::begin(out, sync, schema_version);
    let mut skipped = 0u32;
    while data.count() < order.limit {
        let Some(next) = next_stream(streams, order.descending, break_tie) else {
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
fn next_stream(
    streams: &[ScanEntries<'_>],
    descending: bool,
    break_tie: &TieBreak<'_>,
) -> Option<usize> {
    let mut best: Option<(usize, &ScanEntry<'_>)> = None;
    for (at, stream) in streams.iter().enumerate() {
        let Some(head) = &stream.head else { continue };
        match best {
            Some((_, leader)) if !head.precedes(leader, descending, break_tie) => {}
            _ => best = Some((at, head)),
        }
    }
    best.map(|(at, _)| at)
}

/// One entry of a scan part: its key (the index's order-preserving encoding, or its first
/// 16 bytes, see [`SCAN_KEY_IS_HEAD`]) with the key's first eight bytes as a number, which
/// decides most comparisons in one instruction, and the tuple.
pub(super) struct ScanEntry<'a> {
    prefix: u64,
    key: &'a [u8],
    /// Whether `key` is only the key's head.
    key_is_head: bool,
    tuple: &'a [u8],
}

impl ScanEntry<'_> {
    /// Whether this entry comes before `other` in the merge: by key, descending or not.
    /// Keys compare as bytes; the prefixes, zero-padded first eight bytes, order two keys
    /// the same way whenever they differ (a shorter key padded with zeros is below any
    /// longer key that differs from it in those bytes), so only equal prefixes need the
    /// bytes; and only equal heads need the whole keys, which `break_tie` compares.
    #[inline]
    fn precedes(&self, other: &ScanEntry<'_>, descending: bool, break_tie: &TieBreak<'_>) -> bool {
        let order = self
            .prefix
            .cmp(&other.prefix)
            .then_with(|| self.key.cmp(other.key))
            .then_with(|| match self.key_is_head {
                true => break_tie(self.tuple, other.tuple),
                false => Ordering::Equal,
            });
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
        let ((key, key_is_head), (tuple, _)) = entry?;
        Some(ScanEntry {
            prefix: key_prefix(key),
            key,
            key_is_head,
            tuple,
        })
    }
}

/// `[length u32 LE][bytes]` off the front of `rest`, with whether the length word has
/// [`SCAN_KEY_IS_HEAD`] set.
#[inline]
fn take_sized<'a>(rest: &mut &'a [u8]) -> Option<(&'a [u8], bool)> {
    let (word, after) = rest.split_first_chunk::<4>()?;
    let word = u32::from_le_bytes(*word);
    let length = usize::try_from(word & !SCAN_KEY_IS_HEAD).ok()?;
    let bytes = after.get(..length)?;
    *rest = &after[length..];
    Some((bytes, word & SCAN_KEY_IS_HEAD != 0))
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
            let entry = |key| ScanEntry { prefix: key_prefix(key), key, key_is_head: false, tuple: &[] };
            let (a_entry, b_entry) = (entry(&a), entry(&b));
            let never = |_: &[u8], _: &[u8]| -> Ordering { panic!("whole keys need no tie-break") };
            proptest::prop_assert_eq!(a_entry.precedes(&b_entry, false, &never), a < b);
            proptest::prop_assert_eq!(a_entry.precedes(&b_entry, true, &never), a > b);
        }
    }

    #[test]
    fn entries_whose_heads_tie_are_ordered_by_their_whole_keys() {
        let head = [7u8; 16];
        let entry = |tuple| ScanEntry {
            prefix: key_prefix(&head),
            key: &head,
            key_is_head: true,
            tuple,
        };
        let (low, high) = (entry(&[1][..]), entry(&[2][..]));
        let by_tuple = |a: &[u8], b: &[u8]| a.cmp(b);
        assert!(low.precedes(&high, false, &by_tuple));
        assert!(!high.precedes(&low, false, &by_tuple));
        assert!(high.precedes(&low, true, &by_tuple));
        // A head that differs decides without the tie-break.
        let other_head = [8u8; 16];
        let later = ScanEntry {
            prefix: key_prefix(&other_head),
            key: &other_head,
            key_is_head: true,
            tuple: &[0][..],
        };
        let never = |_: &[u8], _: &[u8]| -> Ordering { panic!("heads that differ decide") };
        assert!(high.precedes(&later, false, &never));
    }
}
