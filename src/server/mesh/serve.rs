//! Serving a peer's batch on the owning core: run each request entry on this core's shard in
//! order, collect the writes whose replies must wait for the WAL, and answer with one reply
//! batch once they are committed (rebuilding the entries whose writes the log refused). Also
//! the other direction: spreading a reply batch into the waiting sessions' inboxes.
//!
//! What it must not know: how batches are queued and flushed, or the channel ends (that is
//! [`super::core`]); the byte layouts (that is [`super::batch`] and [`super::crud_payloads`]).

use crate::crud::{self, Answer, CrudConfig, Work};
use crate::placement::{self, Destination};
use crate::protocol::decode_packet;
use crate::protocol::header::decode_header;
use crate::protocol::request::{Call, Request};
use crate::server::decoded::{Decoded, DecodedAhead};
use crate::server::mesh::batch::{self, EntryTooLong, Kind};
use crate::server::mesh::core::{Core, Envelope};
use crate::server::mesh::crud_payloads;
use crate::server::moved_key;
use crate::shard::errors::encode_log_refused;
use crate::shard::prefetch::{Ahead, LookupPipeline, PointTarget};
use crate::shard::{Executed, MovedKey, Shard};
use std::rc::Rc;

impl Core {
    /// Runs every request of a peer's batch, in order, and answers with one reply batch,
    /// once the batch's writes are in the WAL (they share one WAL write).
    pub(super) fn serve_batch(self: &Rc<Core>, peer: usize, requests: Vec<u8>) {
        let mut replies = self.take_buffer();
        let mut unacknowledged = Vec::new();
        // UPDATEs whose new primary key another core must look up (rare: error replies).
        let mut key_checks: Vec<(u32, usize, MovedKey)> = Vec::new();
        {
            let mut shard = self.shard.borrow_mut();
            // Lookups are fetched a few requests ahead, as on a connection's reads.
            let mut pipeline = LookupPipeline::for_shard(&shard);
            // `before_running` asks for the targets in order, so one iterator walks ahead;
            // what it decodes is kept for the request's turn.
            let mut ahead = batch::requests(&requests).enumerate();
            let mut decoded_ahead = DecodedAhead::<Decoded<'_>>::default();
            for (at, entry) in batch::requests(&requests).enumerate() {
                let lookup = pipeline.before_running(&shard, at, |_| match ahead.next() {
                    None => Ahead::End,
                    // A scan: its walk fetches where the scan starts.
                    Some((_, entry)) if entry.kind == Kind::Scan => {
                        let part = batch::scan_part(&entry);
                        PointTarget::of_scan(&part).map_or(Ahead::Other, Ahead::Lookup)
                    }
                    Some((_, entry)) if entry.kind != Kind::Execute => Ahead::Other,
                    Some((entry_at, entry)) => {
                        let decoded = decode_packet(entry.packet);
                        let target = decoded
                            .as_ref()
                            .ok()
                            .and_then(|(_, r)| PointTarget::of(&r.target(), &shard.engine));
                        decoded_ahead.keep(at, entry_at, decoded);
                        target.map_or(Ahead::Other, Ahead::Lookup)
                    }
                });
                let mark = batch::begin_reply(&mut replies, entry.ticket);
                let decoded = decoded_ahead.take(at);
                let served = self.serve_entry(&mut shard, &entry, decoded, lookup, &mut replies);
                if let Some((sync, executed)) = served {
                    if let Some(commit) = executed.commit {
                        unacknowledged.push(ForwardedWrite {
                            ticket: entry.ticket,
                            kind: entry.kind,
                            sync,
                            commit,
                        });
                    }
                    if let Some(moved) = executed.moved_key {
                        if let Some(owner) = moved_key::owner_to_ask(self, &shard, &moved) {
                            key_checks.push((entry.ticket, owner, moved));
                        }
                    }
                }
                if let Err(too_long) = batch::finish_reply(&mut replies, mark) {
                    answer_too_long(&entry, too_long, self.schema_version(), &mut replies);
                }
            }
        }
        self.recycle(requests);
        self.count(|stats| stats.request_batches_served += 1);
        if unacknowledged.is_empty() && key_checks.is_empty() {
            self.send(peer, Envelope::Replies(replies));
            return;
        }
        let core = self.clone();
        glommio::spawn_local(async move {
            let mut failed = Vec::new();
            for write in unacknowledged {
                if let Err(error) = write.commit.await {
                    failed.push((write.ticket, write.kind, write.sync, error));
                }
            }
            let mut replaced = Vec::new();
            for (ticket, owner, moved) in &key_checks {
                if let Some(reply) = moved_key::reply_if_taken(&core, *owner, moved).await {
                    replaced.push((*ticket, reply));
                }
            }
            if !failed.is_empty() || !replaced.is_empty() {
                replies = core.replace_replies(&replies, &failed, &replaced);
            }
            core.send(peer, Envelope::Replies(replies));
        })
        .detach();
    }

    /// Runs one request entry on this core's shard and appends its reply bytes; returns the
    /// sync its reply answers for and what the reply waits on (`None`: nothing, as for a
    /// scan part). `decoded` is its packet, if
    /// decoded already; `fetched`, its lookup walked ahead.
    fn serve_entry<'p>(
        &self,
        shard: &mut Shard,
        entry: &batch::RequestEntry<'p>,
        decoded: Option<Decoded<'p>>,
        fetched: Option<PointTarget>,
        replies: &mut Vec<u8>,
    ) -> Option<(u64, Executed)> {
        match entry.kind {
            Kind::CrudOps => {
                return Some((0, serve_crud_ops(shard, &self.crud, entry.packet, replies)))
            }
            Kind::CrudPoint => return Some(self.serve_crud_point(shard, entry.packet, replies)),
            Kind::Scan => {
                // The accepting core scanned the same part, so it cannot fail here.
                let _ = shard.scan(&batch::scan_part(entry), replies);
                return None;
            }
            Kind::Execute | Kind::CrudPart => {}
        }
        let decoded = decoded.unwrap_or_else(|| decode_packet(entry.packet));
        // The accepting core decoded the same bytes before sending them.
        debug_assert!(decoded.is_ok(), "a forwarded packet does not decode");
        // By reference: moving the request out of the decoding just made read its bytes
        // back right after narrower stores wrote them (a store-forwarding stall, most of
        // this function's time on cross-core gets).
        let (header, request) = decoded.as_ref().ok()?;
        let executed = match (entry.kind, request) {
            (Kind::Execute, request) => {
                self.debug_assert_owned(request);
                shard.execute(
                    header.sync,
                    self.schema_version(),
                    request,
                    fetched,
                    replies,
                )
            }
            (Kind::CrudPart, Request::Call(call)) => self.serve_crud_part(shard, call, replies),
            _ => {
                debug_assert!(
                    false,
                    "request kind {:?} does not fit its packet",
                    entry.kind
                );
                Executed::default()
            }
        };
        Some((header.sync, executed))
    }

    /// A crud point op the accepting core planned and routed here, run as planned; answered
    /// with its whole IPROTO reply, for the sync returned.
    fn serve_crud_point(
        &self,
        shard: &mut Shard,
        payload: &[u8],
        replies: &mut Vec<u8>,
    ) -> (u64, Executed) {
        let (sync, point) = crud_payloads::decode_point(payload);
        debug_assert_eq!(
            point
                .op
                .route(&self.catalog(), &shard.engine, point.space_id, self.id()),
            Destination::Here,
            "a crud point op another core owns was sent here"
        );
        let plan = crud::Plan::Point(point);
        let work = Work::Call {
            plan: &plan,
            sync,
            schema_version: self.schema_version(),
            out: replies,
        };
        let ran = crud::run(shard, &self.crud, work);
        (sync, Executed::waiting_for(ran.commit))
    }

    /// This core's part of a fanned-out crud call, answered with its `crud_payloads` part.
    fn serve_crud_part(
        &self,
        shard: &mut Shard,
        call: &Call<'_>,
        replies: &mut Vec<u8>,
    ) -> Executed {
        // The accepting core planned the same call, so it plans here too.
        let ran = match crud::plan(&shard.engine, &self.crud, call.function_name, call.args) {
            Ok(plan) => crud::run(shard, &self.crud, Work::Part(&plan)),
            Err(_) => crud::Ran {
                answer: Answer::Part(crud::Part::Done),
                commit: None,
            },
        };
        match &ran.answer {
            Answer::Part(part) => crud_payloads::encode_part(replies, Some(part)),
            answer => refused(shard, answer, |refused| {
                crud_payloads::encode_part(replies, refused)
            }),
        }
        Executed::waiting_for(ran.commit)
    }

    /// The sending core routed `request` here: this core owns its data. Checked in debug
    /// builds only: a release build routes each request once, where it was decoded.
    fn debug_assert_owned(&self, request: &Request<'_>) {
        debug_assert_eq!(
            placement::route_request(request, &self.catalog(), self.id()),
            Destination::Here,
            "a request another core owns was sent here"
        );
    }

    /// A copy of a reply batch where the replies of `failed` writes (by ticket) say that the
    /// WAL refused them instead, and those of `replaced` (by ticket) are the given bytes.
    fn replace_replies(
        &self,
        replies: &[u8],
        failed: &[FailedWrite],
        replaced: &[(u32, Vec<u8>)],
    ) -> Vec<u8> {
        let mut rebuilt = self.take_buffer();
        for (ticket, bytes) in batch::replies(replies) {
            let mark = batch::begin_reply(&mut rebuilt, ticket);
            let failure = failed
                .iter()
                .find(|(failed_ticket, _, _, _)| *failed_ticket == ticket);
            let replacement = replaced
                .iter()
                .find(|(replaced_ticket, _)| *replaced_ticket == ticket);
            match (failure, replacement) {
                (Some((_, Kind::CrudOps | Kind::CrudPart, _, _)), _) => {
                    rebuilt.push(crud_payloads::WAL_REFUSED)
                }
                (Some((_, _, sync, error)), _) => {
                    encode_log_refused(&mut rebuilt, *sync, self.schema_version(), Some(error))
                }
                (None, Some((_, reply))) => rebuilt.extend_from_slice(reply),
                (None, None) => match bytes {
                    Ok(bytes) => rebuilt.extend_from_slice(bytes),
                    // Kept as the marker: the accepting core answers it with an error.
                    Err(too_long) => {
                        batch::finish_too_long(&mut rebuilt, mark, too_long);
                        continue;
                    }
                },
            }
            if let Err(too_long) = batch::finish_reply(&mut rebuilt, mark) {
                // Only a copy of an entry that fitted, or a short error reply, is here.
                debug_assert!(false, "a rebuilt reply grew too long: {too_long}");
            }
        }
        rebuilt
    }

    pub(super) fn deliver_replies(&self, replies: Vec<u8>) {
        {
            let mut waiters = self.waiters.borrow_mut();
            for (ticket, reply) in batch::replies(&replies) {
                let (inbox, slot) = waiters.remove(ticket);
                match reply {
                    Ok(bytes) => inbox.deliver(slot, bytes),
                    Err(too_long) => inbox.deliver_too_long(slot, too_long),
                }
            }
        }
        self.recycle(replies);
    }
}

/// After `entry`'s reply came out too long for its batch entry: a whole IPROTO reply
/// (`Execute`, `CrudPoint`) becomes the ER_MEMORY_ISSUE error reply for the request's sync;
/// a part (`Scan`, `CrudOps`, `CrudPart`) stays the too-long marker, which the accepting
/// core answers the client for.
#[cold]
#[inline(never)]
fn answer_too_long(
    entry: &batch::RequestEntry<'_>,
    too_long: EntryTooLong,
    schema_version: u64,
    replies: &mut Vec<u8>,
) {
    tracing::warn!(kind = ?entry.kind, %too_long, "a reply between cores is too long");
    // The request says whose reply it is; the schema version is this server's, as in every
    // other reply.
    let sync = match entry.kind {
        Kind::Execute => match decode_header(entry.packet) {
            Ok((header, _)) => header.sync,
            Err(error) => error.sync,
        },
        Kind::CrudPoint => crud_payloads::point_sync(entry.packet),
        Kind::Scan | Kind::CrudOps | Kind::CrudPart => return,
    };
    let mark = batch::reopen_too_long(replies);
    too_long.encode_reply(replies, sync, schema_version);
    if let Err(error) = batch::finish_reply(replies, mark) {
        debug_assert!(false, "an error reply is short: {error}");
    }
}

/// A forwarded write whose reply waits for its WAL commit.
struct ForwardedWrite {
    ticket: u32,
    kind: Kind,
    sync: u64,
    commit: crate::wal::Commit,
}

/// A forwarded write the log refused: its ticket, kind and sync, and why.
type FailedWrite = (u32, Kind, u64, crate::wal::WalError);

/// This core's share of a `*_many` crud call (its `crud_payloads` ops), answered with the
/// ops' outcomes.
fn serve_crud_ops(
    shard: &mut Shard,
    config: &CrudConfig,
    packet: &[u8],
    replies: &mut Vec<u8>,
) -> Executed {
    let ops = crud_payloads::decode_ops(packet);
    let ran = crud::run(shard, config, Work::Ops(&ops));
    match &ran.answer {
        Answer::Items(items) => crud_payloads::encode_items(replies, Some(items)),
        answer => refused(shard, answer, |refused| {
            crud_payloads::encode_items(replies, refused)
        }),
    }
    Executed::waiting_for(ran.commit)
}

/// Answers a crud share that did not run with the payload's refusal (`encode(None)`),
/// logging why when the WAL refused it.
fn refused<T: ?Sized>(shard: &Shard, answer: &Answer, encode: impl FnOnce(Option<&T>)) {
    match answer {
        Answer::Refused(error) => {
            tracing::error!(shard = shard.id, %error, "WAL write refused; the crud call fails");
        }
        other => debug_assert!(false, "a crud share answered {other:?}"),
    }
    encode(None);
}
