//! What `box.info` says of replication: the master this instance follows (its upstream) and
//! the replicas that follow it (downstreams). Written by the applier task and the relay
//! threads a few times a second at most, read by `box.info`: a mutex each, never on the
//! request path. Each downstream's acknowledged LSNs are also kept in atomics, one per
//! shard, for the synchronous quorum ([`ReplicationStatus::quorum_lsn`]), read every ~150 µs
//! by a shard with sync rows pending.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::protocol::replication::Vclock;

use super::Subscription;

/// Replication as this instance sees it.
#[derive(Default)]
pub struct ReplicationStatus {
    upstream: Mutex<Option<UpstreamStatus>>,
    downstreams: Mutex<Vec<Arc<Downstream>>>,
    /// This instance's shards: how many LSNs a downstream acknowledges.
    shard_count: usize,
}

/// The master this instance follows, as its applier last saw it.
#[derive(Debug, Clone)]
pub struct UpstreamStatus {
    /// Tarantool's words: "connect", "auth", "initial_join" (copying the master), "follow",
    /// "disconnected", "stopped".
    pub status: &'static str,
    /// Why it is disconnected or stopped.
    pub message: Option<String>,
    pub peer: String,
    pub master_uuid: Option<String>,
    /// Per master shard, the last LSN applied here.
    pub applied: Vclock,
    /// Per master shard, the last LSN the master had written when it last said.
    pub master_written: Vclock,
    /// When the last packet came from the master.
    pub last_heard: Option<Instant>,
    /// Since when `applied` has been behind `master_written` (`None`: caught up).
    pub behind_since: Option<Instant>,
}

impl UpstreamStatus {
    /// A new upstream, not connected yet.
    pub fn new(peer: String, status: &'static str) -> UpstreamStatus {
        UpstreamStatus {
            status,
            message: None,
            peer,
            master_uuid: None,
            applied: Vclock::new(),
            master_written: Vclock::new(),
            last_heard: None,
            behind_since: None,
        }
    }

    /// Records what the master has written and what is applied here.
    pub fn progress(&mut self, applied: Option<&Vclock>, master_written: Option<&Vclock>) {
        if let Some(applied) = applied {
            self.applied.clone_from(applied);
        }
        if let Some(written) = master_written {
            self.master_written.clone_from(written);
        }
        self.last_heard = Some(Instant::now());
        let behind = self
            .master_written
            .iter()
            .enumerate()
            .any(|(at, written)| *written > self.applied.get(at).copied().flatten());
        self.behind_since = match (behind, self.behind_since) {
            (false, _) => None,
            (true, None) => Some(Instant::now()),
            (true, since) => since,
        };
    }

    /// `box.info`'s lag: how long the replica has been behind what its master last said it
    /// had written (0 when caught up). tarn's rows carry no time of their own, so this is
    /// the replica's view: it grows while the replica does not catch up.
    pub fn lag(&self) -> std::time::Duration {
        self.behind_since
            .map_or(std::time::Duration::ZERO, |since| since.elapsed())
    }
}

/// A replica that follows this instance.
pub struct Downstream {
    pub peer: String,
    pub instance_uuid: String,
    gone: AtomicBool,
    /// Per shard, the last LSN it acknowledged (durable in its WAL): `state.acknowledged`,
    /// without the lock.
    acked: Box<[AtomicU64]>,
    state: Mutex<DownstreamSeen>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownstreamState {
    Follow,
    Stopped,
}

/// What a downstream last acknowledged.
#[derive(Debug, Clone)]
pub struct DownstreamSeen {
    pub state: DownstreamState,
    pub acknowledged: Vclock,
    pub last_ack: Instant,
    /// When it left (`state` stopped).
    pub stopped_at: Option<Instant>,
}

impl ReplicationStatus {
    /// For an instance of `shard_count` shards.
    pub fn new(shard_count: usize) -> ReplicationStatus {
        ReplicationStatus {
            shard_count,
            ..ReplicationStatus::default()
        }
    }

    /// The LSN of shard `shard` that `quorum` instances have in their WAL: the quorum-th
    /// largest of this instance's `own_durable` and what each replica known acknowledged
    /// (0 when fewer instances than that are known).
    pub fn quorum_lsn(&self, shard: usize, own_durable: u64, quorum: usize) -> u64 {
        let mut lsns: smallvec::SmallVec<[u64; 8]> = smallvec::smallvec![own_durable];
        let downstreams = self.downstreams.lock().unwrap_or_else(|p| p.into_inner());
        lsns.extend(downstreams.iter().map(|downstream| {
            downstream
                .acked
                .get(shard)
                .map_or(0, |lsn| lsn.load(Ordering::Acquire))
        }));
        drop(downstreams);
        nth_largest(&mut lsns, quorum)
    }

    /// The upstream, to read or change.
    pub fn upstream(&self) -> MutexGuard<'_, Option<UpstreamStatus>> {
        self.upstream
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a replica that subscribed; one that left before is replaced.
    pub(super) fn add_downstream(&self, subscription: &Subscription) -> Arc<Downstream> {
        let downstream = Arc::new(Downstream {
            peer: subscription.peer.to_string(),
            instance_uuid: subscription.instance_uuid.clone(),
            gone: AtomicBool::new(false),
            acked: (0..self.shard_count)
                .map(|shard| {
                    let lsn = subscription.vclock.get(shard).copied().flatten();
                    AtomicU64::new(lsn.unwrap_or(0))
                })
                .collect(),
            state: Mutex::new(DownstreamSeen {
                state: DownstreamState::Follow,
                acknowledged: subscription.vclock.clone(),
                last_ack: Instant::now(),
                stopped_at: None,
            }),
        });
        let mut downstreams = self.downstreams.lock().unwrap_or_else(|p| p.into_inner());
        downstreams.retain(|known| known.instance_uuid != downstream.instance_uuid);
        downstreams.push(downstream.clone());
        downstream
    }

    /// The last LSN of shard `shard` every replica known has (rows after it are still to
    /// be sent to one): replicas connected, and those that left less than `keep` ago.
    /// `None`: no replica needs anything kept.
    pub fn needed_after(&self, shard: usize, keep: std::time::Duration) -> Option<u64> {
        let mut downstreams = self.downstreams.lock().unwrap_or_else(|p| p.into_inner());
        let mut needed: Option<u64> = None;
        downstreams.retain(|downstream| {
            let seen = downstream.state.lock().unwrap_or_else(|p| p.into_inner());
            let kept = seen
                .stopped_at
                .is_none_or(|stopped| stopped.elapsed() < keep);
            if kept {
                let has = seen.acknowledged.get(shard).copied().flatten().unwrap_or(0);
                needed = Some(needed.map_or(has, |lsn| lsn.min(has)));
            }
            kept
        });
        needed
    }

    /// Every replica known, with what it last acknowledged.
    pub fn downstreams(&self) -> Vec<(String, String, DownstreamSeen)> {
        let downstreams = self.downstreams.lock().unwrap_or_else(|p| p.into_inner());
        downstreams
            .iter()
            .map(|d| (d.peer.clone(), d.instance_uuid.clone(), d.seen()))
            .collect()
    }
}

impl Downstream {
    pub(super) fn acknowledged(&self, vclock: &Vclock) {
        for (acked, lsn) in self.acked.iter().zip(vclock.iter()) {
            if let Some(lsn) = lsn {
                acked.fetch_max(*lsn, Ordering::Release);
            }
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.acknowledged = vclock.clone();
        state.last_ack = Instant::now();
    }

    /// What it is being sent from, before it acknowledges anything: per shard its position,
    /// or the LSN of the snapshot it copies (the WAL after it must stay).
    pub(super) fn starts_from(&self, vclock: Vclock) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .acknowledged = vclock;
    }

    pub(super) fn stop(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.state = DownstreamState::Stopped;
        state.stopped_at = Some(Instant::now());
    }

    /// The replica closed its connection (or sent what is not an acknowledgement).
    pub(super) fn set_gone(&self) {
        self.gone.store(true, Ordering::Release);
    }

    pub(super) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    fn seen(&self) -> DownstreamSeen {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The `n`-th largest of `lsns` (1: the largest); 0 when there are fewer.
fn nth_largest(lsns: &mut [u64], n: usize) -> u64 {
    if n == 0 || n > lsns.len() {
        return 0;
    }
    lsns.sort_unstable_by(|a, b| b.cmp(a));
    lsns[n - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quorum_lsn_is_the_quorum_th_largest() {
        assert_eq!(nth_largest(&mut [5], 1), 5);
        assert_eq!(nth_largest(&mut [5], 2), 0);
        assert_eq!(nth_largest(&mut [5, 9, 7], 2), 7);
        assert_eq!(nth_largest(&mut [5, 9, 7], 3), 5);
    }
}
