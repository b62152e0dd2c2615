//! `box.info` over CALL, in Tarantool 2.6's shape (`docs/tarantool-reference.md` (q)):
//! connection pools read `ro` and `status`; tools read `vclock`, `lsn` and `replication`.
//!
//! tarn's vclock has one component per master shard, keyed by the shard's id + 1 (Tarantool
//! keys its components by replica id): on a master, what each of its shards' WAL has written;
//! on a replica, what it has applied of each of its master's shards. Components at 0 are
//! left out, as in Tarantool. A master is replica id 1, its replicas 2, 3, ... in the order
//! they subscribed; a replica calls itself 2.

use super::Session;
use crate::msgpack::{write_array_len, write_f64, write_map_len, write_str, write_uint};
use crate::protocol::replication::Vclock;
use crate::protocol::reply;
use crate::server::replication::applier::COPYING;
use crate::server::replication::status::{DownstreamState, UpstreamStatus};

/// The replica id a master answers as, and a replica gives it.
const MASTER_ID: u64 = 1;
/// The replica id a replica answers as.
const REPLICA_ID: u64 = 2;

/// `box.info.election` in Tarantool 2.10's shape (2.6 has none): `state` is `leader` on the
/// master of the current term, `follower` elsewhere; `leader` is this instance's id when it
/// leads, 0 when it does not know the leader's; no votes (promotion is manual).
fn write_election(shared: &crate::server::Shared, id: u64, out: &mut Vec<u8>) {
    let leads = shared.leads_term();
    write_str(out, b"election");
    write_map_len(out, 4);
    write_str(out, b"state");
    write_str(out, if leads { &b"leader"[..] } else { b"follower" });
    write_str(out, b"vote");
    write_uint(out, 0);
    write_str(out, b"leader");
    write_uint(out, if leads { id } else { 0 });
    write_str(out, b"term");
    write_uint(out, shared.terms.current());
}

/// tarn's own `box.info.net`: client connections open and the memory they hold.
fn write_net(net: &crate::server::connection::NetStats, out: &mut Vec<u8>) {
    write_str(out, b"net");
    write_map_len(out, 2);
    write_str(out, b"connections");
    write_uint(out, net.connections() as u64);
    write_str(out, b"memory");
    write_uint(out, net.memory_bytes() as u64);
}

impl Session {
    /// `box.info`: Tarantool's keys, in its order, then tarn's own `net` (connections open
    /// and the memory they hold, see `NetStats`).
    pub(super) fn box_info(&self, sync: u64, out: &mut Vec<u8>) {
        let shared = &self.core.shared;
        let upstream = shared.replication.upstream().clone();
        let own_uuid = shared.instance_uuid.to_string();
        // A promoted replica keeps a link to its former master (to fence it), but its
        // numbers are a master's.
        let follows = upstream.is_some() && !shared.leads_term();
        let vclock = match (&upstream, follows) {
            (Some(upstream), true) => upstream.applied.clone(),
            _ => shared.wal_written_vclock(),
        };
        let signature: u64 = vclock.iter().flatten().sum();
        let (id, lsn) = match follows {
            true => (REPLICA_ID, 0),
            false => (MASTER_ID, signature),
        };
        let mark = reply::begin_data_reply(out, sync, self.core.schema_version(), 1);
        write_map_len(out, 21);
        write_str(out, b"version");
        write_str(out, crate::server::ADVERTISED_VERSION.as_bytes());
        write_str(out, b"id");
        write_uint(out, id);
        write_str(out, b"ro");
        out.push(if self.core.shared.is_read_only() {
            0xc3
        } else {
            0xc2
        });
        write_str(out, b"uuid");
        write_str(out, own_uuid.as_bytes());
        write_str(out, b"package");
        write_str(out, b"Tarantool");
        write_str(out, b"cluster");
        write_map_len(out, 1);
        write_str(out, b"uuid");
        let master_uuid = upstream.as_ref().and_then(|u| u.master_uuid.clone());
        write_str(out, master_uuid.as_deref().unwrap_or(&own_uuid).as_bytes());
        write_str(out, b"listen");
        write_str(out, shared.config.listen.to_string().as_bytes());
        write_str(out, b"replication_anon");
        write_map_len(out, 1);
        write_str(out, b"count");
        write_uint(out, 0);
        write_str(out, b"replication");
        self.write_replication(upstream.as_ref(), (&own_uuid, lsn), out);
        write_str(out, b"signature");
        write_uint(out, signature);
        write_str(out, b"status");
        // A replica copying its master holds part of its data: "loading", as Tarantool during
        // a bootstrap, so that connection pools leave it alone until the copy is done.
        let copying = upstream.as_ref().is_some_and(|u| u.status == COPYING);
        write_str(out, if copying { &b"loading"[..] } else { b"running" });
        write_str(out, b"vclock");
        write_vclock(out, &vclock);
        write_str(out, b"uptime");
        write_uint(out, shared.started.elapsed().as_secs());
        write_str(out, b"lsn");
        write_uint(out, lsn);
        for empty in [&b"sql"[..], b"gc", b"vinyl", b"memory"] {
            write_str(out, empty);
            write_array_len(out, 0);
        }
        write_str(out, b"pid");
        write_uint(out, u64::from(std::process::id()));
        write_election(shared, id, out);
        write_net(&shared.net, out);
        reply::finish_packet(out, mark);
    }

    /// `box.info.replication`: this instance's entry, its master's (with `upstream`) or its
    /// replicas' (with `downstream`).
    fn write_replication(
        &self,
        upstream: Option<&UpstreamStatus>,
        (own_uuid, own_lsn): (&str, u64),
        out: &mut Vec<u8>,
    ) {
        let write_entry_head = |out: &mut Vec<u8>, id: u64, uuid: &str, lsn: u64, more: u32| {
            write_uint(out, id);
            write_map_len(out, 3 + more);
            write_str(out, b"id");
            write_uint(out, id);
            write_str(out, b"uuid");
            write_str(out, uuid.as_bytes());
            write_str(out, b"lsn");
            write_uint(out, lsn);
        };
        if let Some(upstream) = upstream {
            write_map_len(out, 2);
            let master_uuid = upstream.master_uuid.as_deref().unwrap_or("");
            let applied: u64 = upstream.applied.iter().flatten().sum();
            write_entry_head(out, MASTER_ID, master_uuid, applied, 1);
            write_str(out, b"upstream");
            write_upstream(out, upstream);
            write_entry_head(out, REPLICA_ID, own_uuid, 0, 0);
            return;
        }
        let downstreams = self.core.shared.replication.downstreams();
        write_map_len(out, 1 + downstreams.len() as u32);
        write_entry_head(out, MASTER_ID, own_uuid, own_lsn, 0);
        for (id, (peer, uuid, seen)) in (REPLICA_ID..).zip(downstreams) {
            write_entry_head(out, id, &uuid, 0, 1);
            write_str(out, b"downstream");
            match seen.state {
                DownstreamState::Follow => {
                    write_map_len(out, 3);
                    write_str(out, b"status");
                    write_str(out, b"follow");
                    write_str(out, b"idle");
                    write_f64(out, seen.last_ack.elapsed().as_secs_f64());
                    write_str(out, b"vclock");
                    write_vclock(out, &seen.acknowledged);
                }
                DownstreamState::Stopped => {
                    write_map_len(out, 2);
                    write_str(out, b"status");
                    write_str(out, b"stopped");
                    write_str(out, b"message");
                    write_str(
                        out,
                        format!("the replica at {peer} closed the connection").as_bytes(),
                    );
                }
            }
        }
    }
}

/// An upstream's `{status, idle, peer, lag[, message]}`.
fn write_upstream(out: &mut Vec<u8>, upstream: &UpstreamStatus) {
    let message = upstream.message.as_deref();
    write_map_len(out, 4 + u32::from(message.is_some()));
    write_str(out, b"status");
    write_str(out, upstream.status.as_bytes());
    write_str(out, b"idle");
    let idle = upstream
        .last_heard
        .map_or(0.0, |heard| heard.elapsed().as_secs_f64());
    write_f64(out, idle);
    write_str(out, b"peer");
    write_str(out, upstream.peer.as_bytes());
    write_str(out, b"lag");
    write_f64(out, upstream.lag().as_secs_f64());
    if let Some(message) = message {
        write_str(out, b"message");
        write_str(out, message.as_bytes());
    }
}

/// `{shard id + 1: lsn}`, components at 0 (or unknown) left out.
fn write_vclock(out: &mut Vec<u8>, vclock: &Vclock) {
    let known = || {
        vclock
            .iter()
            .enumerate()
            .filter_map(|(at, lsn)| lsn.filter(|lsn| *lsn > 0).map(|lsn| (at, lsn)))
    };
    write_map_len(out, known().count() as u32);
    for (shard, lsn) in known() {
        write_uint(out, shard as u64 + 1);
        write_uint(out, lsn);
    }
}
