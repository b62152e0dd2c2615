//! Replication (`docs/replication.md`): replicas that copy a master and then follow every one
//! of its shards' WAL, asynchronously, or synchronously for `is_sync` spaces.
//!
//! * `relay`: the master's side, a thread per subscribed replica that streams snapshots and
//!   WAL batches from the files (what each shard's writer has written, no more).
//! * `applier`: the replica's side, a task on core 0 that applies what its master streams
//!   through a session of its own, placed by key on its own shards.
//! * `position`: what a replica has applied, on disk (`replica.toml`).
//! * `schema_gate`: the relay's barrier that sends a schema change once every shard has
//!   reached it.
//! * `status`: what `box.info` says of both.
//! * `term`: the replica set's term, on disk; a newer one heard fences a master.
//! * `promote`: `box.ctl.promote()`, a replica made the master of a new term.
//! * `synchro`: synchronous replication's quorum and timeout on a master (the limbo task).
//!
//! The packets are `protocol::replication`'s; the WAL is read by `wal::follow`.

pub mod applier;
pub mod position;
pub mod promote;
pub mod relay;
mod schema_gate;
pub mod status;
pub mod synchro;
pub mod term;

use crate::protocol::replication::Vclock;

/// A replica's SUBSCRIBE, accepted by its session: the connection hands its socket to a
/// relay with it.
#[derive(Debug, Clone)]
pub struct Subscription {
    /// The request's sync: every packet of the stream carries it.
    pub sync: u64,
    /// The replica's address, for the log and `box.info.replication`.
    pub peer: String,
    pub instance_uuid: String,
    /// The master fingerprint the replica's position is of; 0 when it copies the master.
    pub fingerprint: u64,
    /// What the replica has applied of each master shard; a shard it has not copied is
    /// absent.
    pub vclock: Vclock,
    /// The master's last schema change the replica has made.
    pub schema_version: u64,
    /// The subscriber's term.
    pub term: u64,
    /// The subscriber accepts writes itself: it takes no rows, only the term.
    pub writable: bool,
}
