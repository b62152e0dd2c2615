//! Reply order: the replies of a session's queued requests (other cores', and local writes
//! waiting for their commit) put into their places in `out`, in request order.

use super::crud_fan_out::CrudRead;
use super::fan_out::FanOut;
use super::{KeyCheck, Pending, PendingReply, Session, Unacknowledged};
use crate::server::mesh::inbox::Replies;
use crate::server::moved_key;

impl Session {
    /// Waits for the replies of every queued request and puts each in its place in `out`.
    /// Returns at once when nothing is queued.
    pub async fn finish(&mut self, out: &mut Vec<u8>) {
        self.wait_for_commits(out).await;
        if !self.key_checks.is_empty() {
            self.run_key_checks(out).await;
        }
        if self.pending.is_empty() {
            return;
        }
        self.inbox.wait().await;
        if !self.fan_outs.is_empty() {
            self.merge_fan_outs();
        }
        if !self.crud_reads.is_empty() {
            self.merge_crud_reads();
        }
        {
            let sources = ReplySources {
                inbox: &self.inbox.replies(),
                fan_outs: &self.fan_outs,
                crud_reads: &self.crud_reads,
                merged: &self.merged,
            };
            splice_replies(out, &self.pending, &sources);
        }
        self.pending.clear();
        self.fan_outs.clear();
        self.crud_reads.clear();
        self.scans.clear();
        self.merged.clear();
        self.inbox.clear();
    }

    /// Waits until every local write of this round is in the WAL. A write whose row could
    /// not be written has its reply replaced by an error: it is never acknowledged.
    pub(super) async fn wait_for_commits(&mut self, out: &mut Vec<u8>) {
        let mut failed = Vec::new();
        for write in self.unacknowledged.drain(..) {
            if let Err(error) = write.commit.await {
                failed.push((write.start, write.end, write.sync, error));
            }
        }
        // From the back, so earlier places in `out` stay where they are.
        for (start, end, sync, refusal) in failed.into_iter().rev() {
            let mut error = Vec::new();
            let reason = Some(&refusal);
            crate::shard::errors::encode_log_refused(
                &mut error,
                sync,
                self.core.schema_version(),
                reason,
            );
            self.replace_reply(out, start, end, error);
        }
    }

    /// Asks the owners of the new keys of local UPDATEs answered 94 (one at most: each is
    /// run as [`Wait::KeyCheck`] before the next request), and turns each reply whose key is
    /// taken into Tarantool's 3. The ask is queued behind the requests queued to the same
    /// owner before it, so it sees their writes and none of a later request's.
    pub(super) async fn run_key_checks(&mut self, out: &mut Vec<u8>) {
        let mut checks = std::mem::take(&mut self.key_checks);
        let mut at = 0;
        while at < checks.len() {
            let check = &checks[at];
            if let Some(reply) =
                moved_key::reply_if_taken(&self.core, check.owner, &check.moved).await
            {
                let (start, end) = (check.start, check.end);
                let grown = reply.len() as isize - (end - start) as isize;
                self.replace_reply(out, start, end, reply);
                for later in checks.iter_mut().filter(|later| later.start >= end) {
                    later.start = (later.start as isize + grown) as usize;
                    later.end = (later.end as isize + grown) as usize;
                }
            }
            at += 1;
        }
        checks.clear();
        self.key_checks = checks;
    }

    /// Puts `reply` in place of `out[start..end]`, moving the places of the replies still
    /// to come after it.
    pub(super) fn replace_reply(
        &mut self,
        out: &mut Vec<u8>,
        start: usize,
        end: usize,
        reply: Vec<u8>,
    ) {
        let grown = reply.len() as isize - (end - start) as isize;
        out.splice(start..end, reply);
        let moved = |at: &mut usize| *at = (*at as isize + grown) as usize;
        for pending in self.pending.iter_mut().filter(|p| p.at >= end) {
            moved(&mut pending.at);
        }
        for check in self.key_checks.iter_mut().filter(|c| c.start >= end) {
            moved(&mut check.start);
            moved(&mut check.end);
        }
    }

    /// Requests queued for other cores and not yet finished.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Bytes the session's own buffers hold (they grow with the deepest pipeline seen).
    pub fn buffer_bytes(&self) -> usize {
        self.pending.capacity() * std::mem::size_of::<Pending>()
            + self.unacknowledged.capacity() * std::mem::size_of::<Unacknowledged>()
            + self.key_checks.capacity() * std::mem::size_of::<KeyCheck>()
            + self.fan_outs.capacity() * std::mem::size_of::<FanOut>()
            + self.crud_reads.capacity() * std::mem::size_of::<CrudRead>()
            + self.scans.capacity()
            + self.merged.capacity()
            + self.inbox.capacity_bytes()
    }

    /// Shrinks each buffer that grew past `kept_bytes` back to that, between runs (after
    /// [`Session::finish`]): the connection calls it when its client goes quiet, so an idle
    /// session does not keep what its deepest pipeline needed. (Below `kept_bytes` nothing
    /// changes, so a steady pipeline does not free and regrow its buffers on every pause.)
    pub fn shrink_buffers(&mut self, kept_bytes: usize) {
        if self.pending.is_empty() {
            self.pending
                .shrink_to(kept_bytes / std::mem::size_of::<Pending>());
        }
        if self.unacknowledged.is_empty() {
            self.unacknowledged
                .shrink_to(kept_bytes / std::mem::size_of::<Unacknowledged>());
        }
        if self.key_checks.is_empty() {
            self.key_checks.shrink_to(0);
        }
        if self.crud_reads.is_empty() {
            self.crud_reads
                .shrink_to(kept_bytes / std::mem::size_of::<CrudRead>());
        }
        if self.fan_outs.is_empty() {
            self.fan_outs
                .shrink_to(kept_bytes / std::mem::size_of::<FanOut>());
            self.scans.shrink_to(kept_bytes);
            self.merged.shrink_to(kept_bytes);
        }
        self.inbox.shrink(kept_bytes);
    }
}

/// Where the pending replies' bytes are: another core's in the inbox, a fan-out's merged.
pub(super) struct ReplySources<'a> {
    pub(super) inbox: &'a Replies<'a>,
    pub(super) fan_outs: &'a [FanOut],
    pub(super) crud_reads: &'a [CrudRead],
    pub(super) merged: &'a [u8],
}

impl ReplySources<'_> {
    fn get(&self, reply: PendingReply) -> &[u8] {
        match reply {
            PendingReply::Slot(slot) => self.inbox.get(slot),
            PendingReply::FanOut(at) => &self.merged[self.fan_outs[at as usize].merged.clone()],
            PendingReply::CrudRead(at) => &self.merged[self.crud_reads[at as usize].merged.clone()],
        }
    }
}

/// Moves the bytes of `out` apart so that each pending reply lands at its `at`, in one pass
/// from the end (no second buffer): segment `i` (from `at[i]` to `at[i+1]`) moves right by
/// the total length of replies `0..=i`.
pub(super) fn splice_replies(out: &mut Vec<u8>, pending: &[Pending], sources: &ReplySources) {
    let added: usize = pending.iter().map(|p| sources.get(p.reply).len()).sum();
    let old_len = out.len();
    out.resize(old_len + added, 0);
    let mut shift = added;
    let mut segment_end = old_len;
    for pending in pending.iter().rev() {
        assert!(pending.at <= segment_end, "pending replies out of order");
        out.copy_within(pending.at..segment_end, pending.at + shift);
        let reply = sources.get(pending.reply);
        shift -= reply.len();
        out[pending.at + shift..pending.at + shift + reply.len()].copy_from_slice(reply);
        segment_end = pending.at;
    }
    assert_eq!(shift, 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::mesh::inbox::Inbox;

    #[test]
    fn replies_are_spliced_into_their_places() {
        let inbox = Inbox::default();
        let mut pending = Vec::new();
        // out: "A" [r0] "BC" [r1] [r2] "D" [r3]
        let mut out = b"ABCD".to_vec();
        for (at, reply) in [(1, "x"), (3, "yy"), (3, ""), (4, "zzz")] {
            let slot = inbox.reserve();
            pending.push(Pending {
                at,
                reply: PendingReply::Slot(slot),
            });
            inbox.deliver(slot, reply.as_bytes());
        }
        let sources = ReplySources {
            inbox: &inbox.replies(),
            fan_outs: &[],
            crud_reads: &[],
            merged: &[],
        };
        splice_replies(&mut out, &pending, &sources);
        assert_eq!(std::str::from_utf8(&out).unwrap(), "AxBCyyDzzz");
    }
}
