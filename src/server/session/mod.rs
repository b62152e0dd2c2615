//! One client's request path, without sockets: the session state (user, greeting salt) and
//! the dispatch of each request to where it runs — here, the owner core, or every core with
//! a merge. [`Connection`](crate::server::connection::Connection) feeds it packets from a
//! socket; a benchmark can feed it packets directly (see [`crate::server::start_cores`]).
//!
//! This file is the decision tree, `Session::start`: admit (`admit`) -> route (`route`,
//! computed once per packet by [`placement::route`](crate::placement::route)) -> here,
//! hop to the owner, or fan out (`fan_out`) -> finish (`order`). CALL is `call`. The
//! branches compute and return; none decides where a request runs.
//!
//! Replies keep request order. A point request owned by this core is executed at once and
//! its reply written straight into `out`; one owned by another core is queued in this tick's
//! batch for that core, and its place in `out` remembered: [`Session::finish`] waits for all
//! of them at once and splices each reply into its place. A select that every core scans is
//! pipelined the same way: its part on each peer is queued behind that peer's earlier
//! requests (so it sees their writes), its part here scanned at once, and `finish` merges
//! the parts into the reply's place (`fan_out`): a connection has many scans in flight.
//!
//! A crud CALL (`crud.*`) is planned here and routed the same way: a point op to its owner
//! as its plan (which the owner runs without planning again; its reply is spliced like any
//! forwarded request's), a call every core answers without writing (select, count, min/max,
//! len) pipelined like a scan (`crud_fan_out`), and a `*_many` call and a truncate awaited in
//! place after the queued requests finish.
//!
//! The packets of one socket read go through as a [`Run`]: each is decoded and routed once,
//! a few packets before its turn, so that its lookup is fetched ahead
//! ([`Session::prefetch_before`]); [`Session::submit_in`] then runs it without an await,
//! except the few requests that must wait ([`Deferred`]: a CALL, and on several shards an
//! UPDATE that may move its primary key to another shard, which must learn
//! whether the new key is taken before the client's next request runs: see [`moved_key`]).
//!
//! On the local path nothing allocates: decoding borrows from the packet, keys are encoded
//! on the stack, the reply is written in place. Only error replies format their messages.

mod admit;
mod box_info;
mod call;
mod crud_fan_out;
mod fan_out;
mod order;
mod route;
mod subscribe;

use admit::Admission;

use crate::placement::{self, Destination};
use crate::protocol::reply;
use crate::protocol::request::Request;
use crate::protocol::PacketError;
use crate::server::decoded::{Decoded, DecodedAhead, Routed};
use crate::server::mesh::batch::Kind;
use crate::server::mesh::core::Core;
use crate::server::mesh::inbox::Inbox;
use crate::server::moved_key;
use crate::shard::prefetch::{Ahead, LookupPipeline, PointTarget};
use crate::shard::MovedKey;
use crate::wal::Commit;
use std::rc::Rc;

/// A local write whose reply, already in `out` at `start..end`, waits for its WAL commit.
struct Unacknowledged {
    commit: Commit,
    start: usize,
    end: usize,
    sync: u64,
}

/// An UPDATE run here whose 94 reply, in `out` at `start..end`, may have to become a 3: the
/// shard `owner` holds its new primary key (see [`moved_key`]).
struct KeyCheck {
    owner: usize,
    moved: MovedKey,
    start: usize,
    end: usize,
}

/// A run of pipelined packets (what one socket read brings), submitted in order with
/// [`Session::submit_in`] after [`Session::prefetch_before`]: the lookups fetched ahead, and
/// the packets decoded on the way, so that each packet is decoded once.
pub struct Run<'p> {
    pipeline: LookupPipeline,
    /// Each packet decoded and routed ahead.
    decoded: DecodedAhead<Routed<'p>>,
    /// The fetch-ahead lookup of the packet submitted next, for `Shard::execute`.
    fetched: Option<PointTarget>,
}

/// A request that waits before its reply is complete: a CALL, or an UPDATE that may move its
/// tuple's primary key to another shard (see [`moved_key`]); or any request after which the
/// session holds enough queued scan parts that they are merged before the next.
/// Run it with [`Session::run_deferred`] before the next packet of the run.
#[must_use = "a deferred request has no reply until it is run"]
pub struct Deferred<'p> {
    sync: u64,
    request: Request<'p>,
    wait: Wait,
}

/// What a [`Deferred`] request waits for.
#[derive(Clone, Copy)]
enum Wait {
    /// Nothing ran yet: a CALL, run in [`Session::run_deferred`].
    Run,
    /// The request ran; what is queued is finished before the next request: an UPDATE that
    /// answered 94 and whose new key's owner is asked (its [`KeyCheck`]) so that no later
    /// request runs first, or a fan-out after which the scan parts held grew large.
    Finish,
    /// An UPDATE for core `owner` that may move its key: it runs alone, after the requests
    /// queued before it and before the next, so that its key check sees exactly theirs.
    Alone { owner: usize },
}

/// Decodes a packet: crud calls in one pass; every other packet the protocol's way.
#[inline(always)]
fn decode(packet: &[u8]) -> Decoded<'_> {
    crate::protocol::crud_call::decode_packet(packet)
}

/// A reply that is not complete yet: it goes into `out` at `at`.
#[derive(Debug, Clone, Copy)]
struct Pending {
    at: usize,
    reply: PendingReply,
}

#[derive(Debug, Clone, Copy)]
enum PendingReply {
    /// Another core sends it, to this inbox slot.
    Slot(u32),
    /// The merge of a fan-out's parts: `fan_outs[i]`.
    FanOut(u32),
    /// The merge of a crud read's parts: `crud_reads[i]`.
    CrudRead(u32),
}

pub struct Session {
    core: Rc<Core>,
    salt: [u8; 32],
    user_id: usize,
    inbox: Rc<Inbox>,
    /// In request order, so `at` never decreases.
    pending: Vec<Pending>,
    /// Local writes not yet durable, in request order; [`Session::finish`] waits for them
    /// together, so a pipeline of writes shares one WAL write (and fsync).
    unacknowledged: Vec<Unacknowledged>,
    /// Replies of local UPDATEs that wait on another core's word, in request order.
    key_checks: Vec<KeyCheck>,
    /// Selects every core scans, in flight, in request order.
    fan_outs: Vec<fan_out::FanOut>,
    /// This core's parts of `fan_outs`.
    scans: Vec<u8>,
    /// crud calls every core answers a part of without writing, in flight, in request
    /// order.
    crud_reads: Vec<crud_fan_out::CrudRead>,
    /// About the bytes the local parts of `crud_reads` hold.
    crud_read_bytes: usize,
    /// The merged replies of `fan_outs` and `crud_reads`, in `finish`.
    merged: Vec<u8>,
    /// A replica's SUBSCRIBE, accepted: the connection becomes a relay's.
    subscription: Option<Box<crate::server::replication::Subscription>>,
    /// Whether this session writes on a read-only instance: false for clients (their writes
    /// are refused with ER_READONLY, see [`Session::writes_refused`]); true for a replica's
    /// own applier, which writes what its master sent. Set with
    /// [`Session::set_writes_despite_read_only`].
    writes_despite_read_only: bool,
}

impl Session {
    /// A guest session with a fresh random salt.
    pub fn new(core: Rc<Core>) -> Session {
        Session {
            core,
            salt: rand::random(),
            user_id: 0,
            inbox: Rc::default(),
            pending: Vec::new(),
            unacknowledged: Vec::new(),
            key_checks: Vec::new(),
            fan_outs: Vec::new(),
            scans: Vec::new(),
            crud_reads: Vec::new(),
            crud_read_bytes: 0,
            merged: Vec::new(),
            subscription: None,
            writes_despite_read_only: false,
        }
    }

    /// The session a replica's applier writes through: every grant, whoever the config's
    /// users are (it is no client's: nobody can log in as it), and writes on a read-only
    /// instance (what its master sent).
    pub fn for_applier(core: Rc<Core>) -> Session {
        let mut session = Session::new(core);
        session.user_id = session.core.shared.users.applier_id();
        session.set_writes_despite_read_only(true);
        session
    }

    /// Exempts this session (or not) from the read-only state: a replica's applier writes
    /// through a session of its own on a read-only instance. Never set for a client's.
    pub fn set_writes_despite_read_only(&mut self, writes_despite_read_only: bool) {
        self.writes_despite_read_only = writes_despite_read_only;
    }

    /// Whether this session's writes are refused now: the instance is read-only and the
    /// session is not exempt. One relaxed load; asked of writes only.
    #[inline(always)]
    fn writes_refused(&self) -> bool {
        !self.writes_despite_read_only && self.core.shared.is_read_only()
    }

    pub fn core(&self) -> &Rc<Core> {
        &self.core
    }

    /// The 128-byte greeting a client reads first; it carries this session's salt.
    pub fn greeting(&self) -> [u8; 128] {
        crate::protocol::greeting::encode_greeting(
            crate::server::ADVERTISED_VERSION,
            &self.core.shared.instance_uuid,
            &self.salt,
        )
    }

    /// Handles one IPROTO packet (header + body, without the size prefix) and appends its
    /// whole reply to `out` (nothing for the requests that have no reply, e.g. WATCH).
    pub async fn handle_packet(&mut self, packet: &[u8], out: &mut Vec<u8>) {
        self.submit(packet, out).await;
        self.finish(out).await;
    }

    /// Starts one packet: a reply computed here is appended to `out`; a request for another
    /// core is queued and its reply arrives with [`Session::finish`], which must run before
    /// `out` is read, cleared or handed to another session. Pipelining many packets through
    /// `submit` and then one `finish` batches their trips to other cores.
    pub async fn submit(&mut self, packet: &[u8], out: &mut Vec<u8>) {
        if let Some(deferred) = self.start(packet, &decode(packet), None, None, out) {
            self.run_deferred(packet, deferred, out).await;
        }
    }

    /// [`Session::submit`] for packet `at` of `run`, decoded once (see [`Run`]), and without
    /// an await: most requests are done (or queued for another core) when it returns; one
    /// that must wait first is returned, for [`Session::run_deferred`] before the next.
    ///
    /// Why not an `async fn`: a session's future is over a kilobyte (the crud and fan-out
    /// paths), and creating one per request copies it whole, which cost a get at 10,000
    /// keys a fifth of its time in process.
    pub fn submit_in<'p>(
        &mut self,
        run: &mut Run<'p>,
        at: usize,
        packet: &'p [u8],
        out: &mut Vec<u8>,
    ) -> Option<Deferred<'p>> {
        // Taken whatever the packet: a lookup walked ahead is for this packet only.
        let fetched = run.fetched.take();
        match run.decoded.get(at) {
            Some(routed) => self.start(packet, &routed.decoded, Some(routed.route), fetched, out),
            None => self.start(packet, &decode(packet), None, fetched, out),
        }
    }

    /// Runs a request [`Session::submit_in`] left to wait (see [`Wait`]).
    pub async fn run_deferred(&mut self, packet: &[u8], deferred: Deferred<'_>, out: &mut Vec<u8>) {
        match (deferred.wait, &deferred.request) {
            (Wait::Run, Request::Call(call)) => self.call(packet, call, deferred.sync, out).await,
            (wait, _) => self.wait(packet, wait, out).await,
        }
    }

    /// Runs a data request that must wait (see [`Wait`]); a CALL is never one.
    async fn wait(&mut self, packet: &[u8], wait: Wait, out: &mut Vec<u8>) {
        match wait {
            Wait::Run => unreachable!("only calls are run deferred"),
            Wait::Finish => self.finish(out).await,
            Wait::Alone { owner } => {
                self.finish(out).await;
                self.forward(owner, packet, out);
                self.finish(out).await;
            }
        }
    }

    /// Runs a decoded packet as far as it goes without waiting: admit -> route -> here, hop
    /// or fan out. Returns the request when it must wait (see [`Session::run_deferred`]).
    /// `routed` is its route when the run worked it out ahead (see [`Run`]); otherwise it
    /// is worked out here, once the request is admitted; `fetched`, its lookup walked ahead.
    // Inlined into its callers, so that the path of a packet decoded here gets the decoder
    // inlined too: gets 5-7% faster at 10,000 keys in process, 2-3% at a million.
    #[inline]
    fn start<'p>(
        &mut self,
        packet: &'p [u8],
        decoded: &Decoded<'p>,
        routed: Option<Destination>,
        fetched: Option<PointTarget>,
        out: &mut Vec<u8>,
    ) -> Option<Deferred<'p>> {
        // By reference: decoded where it lies, in the run or on the stack, never moved.
        let (header, request) = match decoded {
            Ok((header, request)) => (header, request),
            Err(PacketError { sync, error }) => {
                reply::encode_protocol_error(out, *sync, self.core.schema_version(), error);
                return None;
            }
        };
        let sync = header.sync;
        // `box.stat()`'s count of this operation, on this core's own counters.
        self.core.metrics.count_request_type(header.request_type);
        let wait = match self.admit(header, request, out) {
            Admission::Answered => return None,
            Admission::Call => Some(Wait::Run),
            Admission::Data => {
                // Worked out once: ahead in the run, or here.
                let route = match routed {
                    Some(route) => route,
                    None => {
                        let catalog = &self.core.catalog();
                        placement::route_request(request, catalog, self.core.id())
                    }
                };
                match route {
                    Destination::Here => self.here(request, sync, fetched, out),
                    Destination::Owner(owner) => self.hop(owner, packet, request, out),
                    Destination::EveryCore => match request {
                        Request::Select(select) => self.fan_out_select(select, sync, out),
                        _ => {
                            debug_assert!(false, "only a select is routed to every core");
                            self.here(request, sync, fetched, out)
                        }
                    },
                }
            }
        };
        wait.map(|wait| Deferred {
            sync,
            request: *request,
            wait,
        })
    }

    /// Executes a request here, its reply into `out` (a write's waits for its commit in
    /// [`Session::finish`]); what it must wait for before the next request: an UPDATE that
    /// answered 94 and leaves a key check (see [`moved_key`]).
    fn here(
        &mut self,
        request: &Request<'_>,
        sync: u64,
        fetched: Option<PointTarget>,
        out: &mut Vec<u8>,
    ) -> Option<Wait> {
        let start = out.len();
        let mut shard = self.core.shard.borrow_mut();
        let executed = shard.execute(sync, self.core.schema_version(), request, fetched, out);
        if let Some(commit) = executed.commit {
            self.unacknowledged.push(Unacknowledged {
                commit,
                start,
                end: out.len(),
                sync,
            });
        }
        let moved = executed.moved_key?;
        let owner = moved_key::owner_to_ask(&self.core, &shard, &moved)?;
        self.key_checks.push(KeyCheck {
            owner,
            moved,
            start,
            end: out.len(),
        });
        Some(Wait::Finish)
    }

    /// A request for core `owner`: queued (see [`Session::forward`]), unless it is an UPDATE
    /// that may move its primary key, which runs alone (see [`Wait::Alone`]).
    fn hop(
        &mut self,
        owner: usize,
        packet: &[u8],
        request: &Request<'_>,
        out: &[u8],
    ) -> Option<Wait> {
        // The ops of an update are read only here, and only when it goes to another core.
        if let Request::Update(update) = request {
            if moved_key::may_move_key(&self.core, update) {
                return Some(Wait::Alone { owner });
            }
        }
        self.forward(owner, packet, out);
        None
    }

    /// Starts a run of this session's requests (the packets of one read, see [`Run`]).
    pub fn start_run<'p>(&self) -> Run<'p> {
        Run {
            pipeline: LookupPipeline::for_shard(&self.core.shard.borrow()),
            decoded: DecodedAhead::default(),
            fetched: None,
        }
    }

    /// Issues the prefetches due before packet `running` of `run` is submitted
    /// ([`LookupPipeline::before_running`]); `packet_at(i)` is the run's packet `i`, `None`
    /// past its end. The packets it decodes on the way are kept for their turn.
    pub fn prefetch_before<'p>(
        &self,
        run: &mut Run<'p>,
        running: usize,
        packet_at: impl Fn(usize) -> Option<&'p [u8]>,
    ) {
        if !run.pipeline.is_enabled() {
            return;
        }
        let Run {
            pipeline,
            decoded,
            fetched,
        } = run;
        let shard = self.core.shard.borrow();
        let lookup = pipeline.before_running(&shard, running, |at| {
            let Some(packet) = packet_at(at) else {
                return Ahead::End;
            };
            let packet_decoded = decode(packet);
            let (route, target) = self.route(&packet_decoded);
            // Only a request run here looks up this core's shard: a point request, or this
            // core's part of a scan every core runs (its walk fetches the path to where the
            // scan starts).
            let lookup = match route {
                Destination::Here | Destination::EveryCore => {
                    PointTarget::of(&target, &shard.engine)
                }
                Destination::Owner(_) => None,
            };
            let routed = Routed {
                decoded: packet_decoded,
                route,
            };
            decoded.keep(running, at, routed);
            lookup.map_or(Ahead::Other, Ahead::Lookup)
        });
        // Packet `running` is submitted next and, when it is this lookup's request,
        // executed there before any await: its select reads the entry where the walk found it.
        *fetched = lookup;
    }

    /// Queues a request for core `owner`, another one, with its reply's place in `out`
    /// remembered ([`Session::finish`] puts it there).
    fn forward(&mut self, owner: usize, packet: &[u8], out: &[u8]) {
        let slot = self
            .core
            .queue(owner, Kind::Execute, 0, packet, &self.inbox);
        self.pending.push(Pending {
            at: out.len(),
            reply: PendingReply::Slot(slot),
        });
    }
}
