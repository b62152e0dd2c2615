//! One client's request path, without sockets: the session state (user, greeting salt) and
//! the dispatch of each request to where it runs — here, the owner core, or every core with
//! a merge. [`Connection`](crate::server::connection::Connection) feeds it packets from a
//! socket; a benchmark can feed it packets directly (see [`crate::server::start_cores`]).
//!
//! Replies keep request order. A point request owned by this core is executed at once and
//! its reply written straight into `out`; one owned by another core is queued in this tick's
//! batch for that core, and its place in `out` remembered: [`Session::finish`] waits for all
//! of them at once and splices each reply into its place. A request that must see every
//! earlier reply first (a fan-out select) finishes the queued ones before it starts.
//!
//! A crud CALL (`crud.*`) is planned here and routed the same way: a point op to its owner
//! (spliced like any forwarded request), a `*_many` call and a fan-out (select, count, ...)
//! awaited in place after the queued requests finish.
//!
//! The packets of one socket read go through as a [`Run`]: each is decoded and placed once,
//! a few packets before its turn, so that its lookup is fetched ahead
//! ([`Session::prefetch_before`]); [`Session::submit_in`] then runs it without an await,
//! except the few requests that must wait ([`Deferred`]: a CALL, a fan-out select, and on
//! several shards an UPDATE that may move its primary key to another shard, which must learn
//! whether the new key is taken before the client's next request runs: see [`moved_key`]).
//!
//! On the local path nothing allocates: decoding borrows from the packet, keys are encoded
//! on the stack, the reply is written in place. Only error replies format their messages.

mod admit;
mod call;
mod fan_out;
mod order;
mod route;

use admit::{access_denied, invalid_iterator, unsupported};

use crate::crud::{self, on_shard, CrudReply, Plan};
use crate::msgpack::{self, write_str, write_uint};
use crate::protocol::reply::{self, DataReply, ErrorEntry};
use crate::protocol::request::{Call, Request, Select};
use crate::protocol::{ErrorCode, PacketError, ProtocolError};
use crate::server::decoded::{Decoded, DecodedAhead};
use crate::server::mesh::batch::Kind;
use crate::server::mesh::core::Core;
use crate::server::mesh::crud_payloads as wire;
use crate::server::mesh::inbox::Inbox;
use crate::server::moved_key;
use crate::server::schema::{self, SpacePlacement, SCHEMA_VERSION};
use crate::server::users::{Access, AuthError};
use crate::shard::prefetch::{Ahead, LookupPipeline, PointTarget};
use crate::shard::{Awaiting, MovedKey};
use crate::storage::key::SearchKeyBuf;
use crate::storage::{FieldType, IteratorType};
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
    /// Each packet decoded ahead, with the core that runs it where that was worked out.
    decoded: DecodedAhead<(Decoded<'p>, Option<usize>)>,
}

/// A request that waits before its reply is complete: a CALL, a select every core scans, or
/// an UPDATE that may move its tuple's primary key to another shard (see [`moved_key`]).
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
    /// Nothing ran yet: a CALL or a fan-out select, run in [`Session::run_deferred`].
    Run,
    /// An UPDATE ran here and answered 94; the owner of its new key is asked (its
    /// [`KeyCheck`]) before the next request, so that no later one runs first.
    KeyCheck,
    /// An UPDATE for core `owner` that may move its key: it runs alone, after the requests
    /// queued before it and before the next, so that its key check sees exactly theirs.
    Alone { owner: usize },
}

/// Decodes a packet: crud calls in one pass; every other packet the protocol's way.
#[inline(always)]
fn decode(packet: &[u8]) -> Decoded<'_> {
    crud::fast_call::decode_packet(packet)
}

/// A reply that another core will send: it goes into `out` at `at`.
#[derive(Debug, Clone, Copy)]
struct Pending {
    at: usize,
    slot: u32,
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
        }
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
        if let Some(deferred) = self.start(packet, &decode(packet), None, out) {
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
        match run.decoded.get(at) {
            Some((decoded, owner)) => self.start(packet, decoded, *owner, out),
            None => self.start(packet, &decode(packet), None, out),
        }
    }

    /// Runs a request [`Session::submit_in`] left to wait: a CALL, or a select that every
    /// core scans.
    pub async fn run_deferred(&mut self, packet: &[u8], deferred: Deferred<'_>, out: &mut Vec<u8>) {
        let sync = deferred.sync;
        match (deferred.wait, &deferred.request) {
            (Wait::Run, Request::Call(call)) => self.call(packet, call, sync, out).await,
            (Wait::Run, Request::Select(select)) => {
                self.fan_out_select(packet, select, sync, out).await
            }
            (Wait::Run, _) => unreachable!("only calls and fan-out selects are run deferred"),
            (Wait::KeyCheck, _) => self.finish(out).await,
            (Wait::Alone { owner }, request) => {
                self.finish(out).await;
                self.run_on(owner, packet, request, sync, out);
                self.finish(out).await;
            }
        }
    }

    /// Runs a decoded packet as far as it goes without waiting; returns the request when it
    /// must wait (see [`Session::run_deferred`]). `known_owner` is the core that runs it,
    /// when already worked out (the same answer [`Session::select_owner`] or
    /// [`Session::write_owner`] gives).
    // Inlined into its callers, so that the path of a packet decoded here gets the decoder
    // inlined too: gets 5-7% faster at 10,000 keys in process, 2-3% at a million.
    #[inline]
    fn start<'p>(
        &mut self,
        packet: &'p [u8],
        decoded: &Decoded<'p>,
        known_owner: Option<usize>,
        out: &mut Vec<u8>,
    ) -> Option<Deferred<'p>> {
        // By reference: decoded where it lies, in the run or on the stack, never moved.
        let (header, request) = match decoded {
            Ok((header, request)) => (header, request),
            Err(PacketError { sync, error }) => {
                reply::encode_protocol_error(out, *sync, SCHEMA_VERSION, error);
                return None;
            }
        };
        let sync = header.sync;
        let wrong_schema = header.schema_version != 0 && header.schema_version != SCHEMA_VERSION;
        let in_stream = header.stream_id != 0 && !matches!(request, Request::Ping);
        if (wrong_schema || in_stream) && crud::fast_call::has_torn_args(request) {
            // The general decoder would have refused the packet before either check.
            let error = crud::fast_call::torn_args_error();
            reply::encode_protocol_error(out, sync, SCHEMA_VERSION, &error);
            return None;
        }
        if wrong_schema {
            let error = ProtocolError::WrongSchemaVersion {
                server_version: SCHEMA_VERSION,
                request_version: header.schema_version,
            };
            reply::encode_protocol_error(out, sync, SCHEMA_VERSION, &error);
            return None;
        }
        if in_stream {
            unsupported(out, sync, "streams");
            return None;
        }
        match request {
            Request::Ping => reply::encode_ok(out, sync, SCHEMA_VERSION),
            Request::Id(_) => reply::encode_id_reply(out, sync, SCHEMA_VERSION, 3, &[], None),
            Request::Auth(auth) => self.authenticate(auth, sync, out),
            Request::Call(_) => {
                return Some(Deferred {
                    sync,
                    request: *request,
                    wait: Wait::Run,
                })
            }
            Request::Eval(_) => unsupported(out, sync, "Lua (EVAL)"),
            Request::Execute(_) | Request::Prepare(_) => unsupported(out, sync, "SQL"),
            Request::Begin(_) | Request::Commit | Request::Rollback => {
                let name = match request {
                    Request::Begin(_) => "BEGIN",
                    Request::Commit => "COMMIT",
                    _ => "ROLLBACK",
                };
                reply::encode_protocol_error(
                    out,
                    sync,
                    SCHEMA_VERSION,
                    &ProtocolError::OutOfStream(name),
                );
            }
            // Watchers are not offered in IPROTO_ID; a WATCH gets no reply by definition.
            Request::Watch(_) | Request::Unwatch(_) => {}
            Request::Select(select) => {
                // Tarantool's `box_select` checks the iterator before it looks for the space.
                if !IteratorType::is_known_code(select.iterator) {
                    invalid_iterator(out, sync, select.iterator);
                    return None;
                }
                if !self.check_access(Access::Read, select.space_id, sync, out) {
                    return None;
                }
                if schema::is_view(select.space_id) && !self.grants().read {
                    self.select_view(select, sync, out);
                } else {
                    match known_owner.or_else(|| self.select_owner(select)) {
                        Some(owner) => self.run_on(owner, packet, request, sync, out),
                        None => {
                            return Some(Deferred {
                                sync,
                                request: *request,
                                wait: Wait::Run,
                            })
                        }
                    }
                }
            }
            Request::Insert(_)
            | Request::Replace(_)
            | Request::Update(_)
            | Request::Delete(_)
            | Request::Upsert(_) => {
                if let Some(wait) = self.write(packet, request, known_owner, sync, out) {
                    return Some(Deferred {
                        sync,
                        request: *request,
                        wait,
                    });
                }
            }
        }
        None
    }

    /// Runs or queues a write; what it must wait for before the next request when it is an
    /// UPDATE that may move its primary key to another shard (see [`Wait`]).
    fn write(
        &mut self,
        packet: &[u8],
        request: &Request<'_>,
        known_owner: Option<usize>,
        sync: u64,
        out: &mut Vec<u8>,
    ) -> Option<Wait> {
        let space_id = match request {
            Request::Insert(r) | Request::Replace(r) => r.space_id,
            Request::Upsert(r) => r.space_id,
            Request::Update(r) => r.space_id,
            Request::Delete(r) => r.space_id,
            _ => return None,
        };
        if !self.check_access(Access::Write, space_id, sync, out) {
            return None;
        }
        if schema::is_system_space(space_id) {
            // As Tarantool 2.6 answers: a view refuses writes (113); an id below 512 that
            // names no system space is a missing space (36). A write to any other system
            // space would change the schema, which tarn takes from its config only.
            match schema::tarantool_system_space(space_id) {
                Some((name, true)) => reply::encode_error(
                    out,
                    sync,
                    SCHEMA_VERSION,
                    ErrorCode::ER_VIEW_IS_RO,
                    &format!("View '{name}' is read-only"),
                ),
                Some((_, false)) => unsupported(
                    out,
                    sync,
                    "schema changes over IPROTO (edit the config file)",
                ),
                None => crate::shard::errors::encode_storage_error(
                    out,
                    sync,
                    SCHEMA_VERSION,
                    &crate::storage::StorageError::NoSuchSpace(space_id.to_string().into()),
                ),
            }
            return None;
        }
        let owner = known_owner.unwrap_or_else(|| self.write_owner(request));
        if let Request::Update(update) = request {
            // Another core's update that may move the key runs alone; the ops of every other
            // one are read only here, and only when it goes to another core.
            if owner != self.core.id() && moved_key::may_move_key(&self.core, update) {
                return Some(Wait::Alone { owner });
            }
            self.run_on(owner, packet, request, sync, out);
            // Only an update run here that answered 94 leaves a key check (and each is
            // finished before the next request starts).
            return (!self.key_checks.is_empty()).then_some(Wait::KeyCheck);
        }
        self.run_on(owner, packet, request, sync, out);
        None
    }

    /// Starts a run of this session's requests (the packets of one read, see [`Run`]).
    pub fn start_run<'p>(&self) -> Run<'p> {
        Run {
            pipeline: LookupPipeline::for_shard(&self.core.shard.borrow()),
            decoded: DecodedAhead::default(),
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
        let Run { pipeline, decoded } = run;
        let lookup = pipeline.before_running(&self.core.shard.borrow(), running, |at| {
            let Some(packet) = packet_at(at) else {
                return Ahead::End;
            };
            let packet_decoded = decode(packet);
            let (owner, lookup) = self.place(&packet_decoded);
            decoded.keep(running, at, (packet_decoded, owner));
            lookup.map_or(Ahead::Other, Ahead::Lookup)
        });
        // Packet `running` is submitted next and, when it is this lookup's request,
        // executed here before any await: its select reads the entry where the walk found it.
        self.core.shard.borrow_mut().set_fetched(lookup);
    }

    /// Executes here, or queues for `owner` with the reply's place remembered.
    fn run_on(
        &mut self,
        owner: usize,
        packet: &[u8],
        request: &Request<'_>,
        sync: u64,
        out: &mut Vec<u8>,
    ) {
        if owner == self.core.id() {
            let start = out.len();
            let mut shard = self.core.shard.borrow_mut();
            shard.execute(sync, SCHEMA_VERSION, request, out);
            // Every arm moves its value out, so nothing is left to drop.
            match shard.take_awaiting() {
                Awaiting::Nothing => {}
                Awaiting::Commit(commit) => self.unacknowledged.push(Unacknowledged {
                    commit,
                    start,
                    end: out.len(),
                    sync,
                }),
                Awaiting::MovedKey(moved) => {
                    if let Some(owner) = moved_key::owner_to_ask(&self.core, &shard, &moved) {
                        self.key_checks.push(KeyCheck {
                            owner,
                            moved,
                            start,
                            end: out.len(),
                        });
                    }
                }
            }
            return;
        }
        let slot = self
            .core
            .queue(owner, Kind::Execute, 0, packet, &self.inbox);
        self.pending.push(Pending {
            at: out.len(),
            slot,
        });
    }
}
