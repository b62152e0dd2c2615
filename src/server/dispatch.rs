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

use crate::protocol::reply::{self, DataReply, ErrorEntry};
use crate::protocol::request::{Call, Request, Select};
use crate::protocol::{ErrorCode, PacketError, ProtocolError};
use crate::server::batch::Kind;
use crate::server::core::Core;
use crate::server::crud::{self, on_shard, wire, CrudReply, Plan};
use crate::server::decoded::{Decoded, DecodedAhead};
use crate::server::inbox::Inbox;
use crate::server::moved_key;
use crate::server::schema::{self, SpacePlacement, SCHEMA_VERSION};
use crate::server::session::{Access, AuthError};
use crate::shard::prefetch::{Ahead, LookupPipeline, PointTarget};
use crate::shard::{Awaiting, MovedKey};
use crate::storage::key::SearchKeyBuf;
use crate::storage::msgpack::{self, write_str, write_uint};
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
        splice_replies(out, &self.pending, &self.inbox);
        self.pending.clear();
        self.inbox.clear();
    }

    /// Waits until every local write of this round is in the WAL. A write whose row could
    /// not be written has its reply replaced by an error: it is never acknowledged.
    async fn wait_for_commits(&mut self, out: &mut Vec<u8>) {
        let mut failed = Vec::new();
        for write in self.unacknowledged.drain(..) {
            if let Err(error) = write.commit.await {
                failed.push((write.start, write.end, write.sync, error));
            }
        }
        // From the back, so earlier places in `out` stay where they are.
        for (start, end, sync, refusal) in failed.into_iter().rev() {
            let mut error = Vec::new();
            crate::shard::errors::encode_log_refused(&mut error, sync, SCHEMA_VERSION, &refusal);
            self.replace_reply(out, start, end, error);
        }
    }

    /// Asks the owners of the new keys of local UPDATEs answered 94 (one at most: each is
    /// run as [`Wait::KeyCheck`] before the next request), and turns each reply whose key is
    /// taken into Tarantool's 3. The ask is queued behind the requests queued to the same
    /// owner before it, so it sees their writes and none of a later request's.
    async fn run_key_checks(&mut self, out: &mut Vec<u8>) {
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
    fn replace_reply(&mut self, out: &mut Vec<u8>, start: usize, end: usize, reply: Vec<u8>) {
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
        self.inbox.shrink(kept_bytes);
    }

    fn authenticate(
        &mut self,
        auth: &crate::protocol::request::Auth<'_>,
        sync: u64,
        out: &mut Vec<u8>,
    ) {
        match self.core.shared.users.authenticate(auth, &self.salt) {
            Ok(user_id) => {
                self.user_id = user_id;
                reply::encode_ok(out, sync, SCHEMA_VERSION);
            }
            Err(AuthError::Protocol(error)) => {
                reply::encode_protocol_error(out, sync, SCHEMA_VERSION, &error)
            }
            Err(AuthError::CredentialsMismatch) => reply::encode_error(
                out,
                sync,
                SCHEMA_VERSION,
                ErrorCode::ER_CREDS_MISMATCH,
                "User not found or supplied credentials are invalid",
            ),
        }
    }

    fn user_name(&self) -> &str {
        &self.core.shared.users.get(self.user_id).name
    }

    fn grants(&self) -> &crate::config::Grants {
        &self.core.shared.users.get(self.user_id).grants
    }

    /// Checks a grant; on refusal writes Tarantool's 42 reply and returns false. Everyone
    /// may read the views (`_vspace`, `_vindex`), as Tarantool's `public` role allows:
    /// connectors read them to resolve names, and they show each user only what it may
    /// use ([`Session::select_view`]). `_space` and `_index` need the read grant. A space
    /// that does not exist is 36 before any grant is looked at, as in Tarantool (which
    /// finds the space first); a granted request learns that where it runs.
    fn check_access(&self, access: Access, space_id: u32, sync: u64, out: &mut Vec<u8>) -> bool {
        if access.granted(self.grants()) || (access == Access::Read && schema::is_view(space_id)) {
            return true;
        }
        let space_name = match self.core.shard.borrow().engine.space(space_id) {
            Ok(space) => space.name.to_string(),
            Err(missing) => match schema::tarantool_system_space(space_id) {
                // It exists in Tarantool, which refuses the grant first.
                Some((name, _)) => name.to_string(),
                None => {
                    crate::shard::errors::encode_storage_error(out, sync, SCHEMA_VERSION, &missing);
                    return false;
                }
            },
        };
        access_denied(out, sync, access, "space", &space_name, self.user_name());
        false
    }

    /// A select from `_vspace` or `_vindex` by a user without the read grant, answered
    /// here (every core holds the views) with only the rows Tarantool's views show it: the
    /// views themselves, and the user spaces when it may write them. Offset and limit count
    /// the rows shown.
    fn select_view(&self, select: &Select<'_>, sync: u64, out: &mut Vec<u8>) {
        let may_write = self.grants().write;
        let shown = |space_id: u64| match u32::try_from(space_id) {
            Ok(id) if schema::is_system_space(id) => schema::is_view(id),
            _ => may_write,
        };
        let shard = self.core.shard.borrow();
        let entries = shard
            .engine
            .space(select.space_id)
            .and_then(|space| space.select(select.index_id, select.iterator, select.key));
        let entries = match entries {
            Ok(entries) => entries,
            Err(error) => {
                return crate::shard::errors::encode_storage_error(
                    out,
                    sync,
                    SCHEMA_VERSION,
                    &error,
                )
            }
        };
        let mut data = reply::DataReply::begin(out, sync, SCHEMA_VERSION);
        let rows = entries
            .map(|(_, tuple)| tuple)
            .filter(|tuple| first_uint_field(tuple.data()).is_some_and(shown))
            .skip(select.offset as usize)
            .take(select.limit as usize);
        for tuple in rows {
            data.push_raw(out, tuple.data());
        }
        data.finish(out);
    }

    async fn call(&mut self, packet: &[u8], call: &Call<'_>, sync: u64, out: &mut Vec<u8>) {
        let function_name = call.function_name;
        let grants = &self.core.shared.users.get(self.user_id).grants;
        if !grants.execute {
            if crud::fast_call::is_torn(call.args) {
                // The general decoder would have refused the packet before this check.
                let error = crud::fast_call::torn_args_error();
                return reply::encode_protocol_error(out, sync, SCHEMA_VERSION, &error);
            }
            return access_denied(
                out,
                sync,
                Access::Execute,
                "function",
                function_name,
                self.user_name(),
            );
        }
        if crud::is_crud_function(function_name) {
            // crud runs its box operations as vshard's storage user, not the caller: the
            // execute grant is the only check, as on a Tarantool router.
            return self.crud(packet, call, sync, out).await;
        }
        match function_name {
            "box.info" | "box.info.call" => self.box_info(sync, out),
            "box.snapshot" => {
                // Writes acknowledged so far are in the snapshot's LSN range.
                self.finish(out).await;
                match crate::server::durability::request_snapshot(&self.core.shared).await {
                    Ok(()) => {
                        let mark = reply::begin_data_reply(out, sync, SCHEMA_VERSION, 1);
                        write_str(out, b"ok");
                        reply::finish_packet(out, mark);
                    }
                    Err(reason) => reply::encode_error(
                        out,
                        sync,
                        SCHEMA_VERSION,
                        ErrorCode::ER_WAL_IO,
                        &format!("Failed to write to disk: snapshot: {reason}"),
                    ),
                }
            }
            _ => reply::encode_error(
                out,
                sync,
                SCHEMA_VERSION,
                ErrorCode::ER_NO_SUCH_PROC,
                &format!("Procedure '{function_name}' is not defined"),
            ),
        }
    }

    /// A crud CALL (spec §18): planned here, then run where its data is (see `server::crud`).
    async fn crud(&mut self, packet: &[u8], call: &Call<'_>, sync: u64, out: &mut Vec<u8>) {
        let planned = {
            let shard = self.core.shard.borrow();
            crud::plan(
                &shard.engine,
                &self.core.crud,
                call.function_name,
                call.args,
            )
        };
        let plan = match planned {
            Ok(plan) => plan,
            Err(raised) => {
                return crud::encode_reply(out, sync, SCHEMA_VERSION, &CrudReply::Raised(raised))
            }
        };
        match &plan {
            Plan::Reply(_) => self.crud_here(&plan, sync, out),
            Plan::Point(point) => {
                let owner = self.crud_owner(point.space_id, &point.op);
                if owner == self.core.id() {
                    self.crud_here(&plan, sync, out);
                } else {
                    let slot = self
                        .core
                        .queue(owner, Kind::CrudCall, 0, packet, &self.inbox);
                    self.pending.push(Pending {
                        at: out.len(),
                        slot,
                    });
                }
            }
            _ if self.core.shard_count == 1 => self.crud_here(&plan, sync, out),
            Plan::Many(_) => self.crud_many(&plan, sync, out).await,
            _ => self.crud_fan_out(packet, &plan, sync, out).await,
        }
    }

    /// Runs a crud plan wholly on this core's shard; the reply waits for its commit like a
    /// local IPROTO write.
    fn crud_here(&mut self, plan: &Plan, sync: u64, out: &mut Vec<u8>) {
        let start = out.len();
        let commit = {
            let mut shard = self.core.shard.borrow_mut();
            on_shard::run_planned_into(
                &mut shard,
                &self.core.crud,
                plan,
                sync,
                SCHEMA_VERSION,
                out,
            );
            shard.take_commit()
        };
        if let Some(commit) = commit {
            self.unacknowledged.push(Unacknowledged {
                commit,
                start,
                end: out.len(),
                sync,
            });
        }
    }

    /// The core that owns a crud point op's key; this one when the key does not parse (the
    /// local shard then reports the error).
    fn crud_owner(&self, space_id: u32, op: &crud::write::PointOp) -> usize {
        if self.core.shard_count == 1 {
            return 0;
        }
        match schema::placement_of(&self.core.shared.config, space_id) {
            SpacePlacement::Shard0 => return 0,
            SpacePlacement::Everywhere => return self.core.id(),
            SpacePlacement::ByPrimaryKey => {}
        }
        let shard = self.core.shard.borrow();
        let Ok(space) = shard.engine.space(space_id) else {
            return self.core.id();
        };
        let mut key = SearchKeyBuf::new();
        match op.placement_key(space, &mut key) {
            Ok(()) => crate::server::shard_of_key(&key, self.core.shard_count),
            Err(_) => self.core.id(),
        }
    }

    /// A `*_many` call on several cores: each owner gets its ops, in order, in one message
    /// (`Kind::CrudOps`); the outcomes go back to their positions and are finished here.
    /// Earlier queued requests finish first, so the reply keeps its place.
    async fn crud_many(&mut self, plan: &Plan<'_>, sync: u64, out: &mut Vec<u8>) {
        let Plan::Many(many) = plan else {
            unreachable!("crud_many takes a Many plan")
        };
        self.finish(out).await;
        let shard_count = self.core.shard_count;
        let me = self.core.id();
        // positions[core] = the indexes into `many.ops` that core owns, in order.
        let mut positions: Vec<Vec<usize>> = vec![Vec::new(); shard_count];
        for (at, op) in many.ops.iter().enumerate() {
            positions[self.crud_owner(many.space_id, op)].push(at);
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
        let (local, commit) = {
            let mut shard = self.core.shard.borrow_mut();
            let ops: Vec<_> = positions[me]
                .iter()
                .map(|&at| many.ops[at].clone())
                .collect();
            let local = on_shard::run_ops(
                &mut shard,
                many.space_id,
                &ops,
                many.stop_on_error,
                many.rollback_on_error,
            );
            (local, shard.take_commit())
        };
        let mut refusal = Refusal::default();
        match local {
            Ok(local) => place(&mut items, &positions[me], local),
            Err(error) => refusal.here(error),
        }
        if !slots.is_empty() {
            self.inbox.wait().await;
            for &(peer, slot) in &slots {
                match wire::decode_items(self.inbox.replies().get(slot)) {
                    Some(remote) => place(&mut items, &positions[peer], remote),
                    None => refusal.elsewhere(),
                }
            }
            self.inbox.clear();
        }
        if let Some(commit) = commit {
            if let Err(error) = commit.await {
                refusal.here(error);
            }
        }
        let reply = match refusal.reply() {
            Some(refused) => refused,
            None => {
                let shard = self.core.shard.borrow();
                let space = shard.engine.space(many.space_id).expect("planned");
                CrudReply::Values(crud::finish_many(space, &self.core.crud, many, &items))
            }
        };
        crud::encode_reply(out, sync, SCHEMA_VERSION, &reply);
    }

    /// A crud call on every core (select, count, min/max, len, truncate): each runs its part
    /// of the CALL packet (`Kind::CrudPart`), this core merges. Earlier queued requests
    /// finish first, so the call sees their writes and the reply keeps its place.
    async fn crud_fan_out(&mut self, packet: &[u8], plan: &Plan<'_>, sync: u64, out: &mut Vec<u8>) {
        self.finish(out).await;
        let me = self.core.id();
        for peer in (0..self.core.shard_count).filter(|&peer| peer != me) {
            // Slots are 0.. in peer order: the inbox was empty after `finish`.
            self.core
                .queue(peer, Kind::CrudPart, 0, packet, &self.inbox);
        }
        let (local, commit) = {
            let mut shard = self.core.shard.borrow_mut();
            let local = on_shard::run_part(&mut shard, plan);
            (local, shard.take_commit())
        };
        self.inbox.wait().await;
        let mut parts = Vec::with_capacity(self.core.shard_count);
        let mut refusal = Refusal::default();
        match local {
            Ok(part) => parts.push(part),
            Err(error) => refusal.here(error),
        }
        for slot in 0..(self.core.shard_count - 1) as u32 {
            match wire::decode_part(self.inbox.replies().get(slot)) {
                Some(part) => parts.push(part),
                None => refusal.elsewhere(),
            }
        }
        self.inbox.clear();
        if let Some(commit) = commit {
            if let Err(error) = commit.await {
                refusal.here(error);
            }
        }
        let reply = match refusal.reply() {
            Some(refused) => refused,
            None => {
                let shard = self.core.shard.borrow();
                CrudReply::Values(on_shard::finish_parts(
                    &shard.engine,
                    &self.core.crud,
                    plan,
                    parts,
                ))
            }
        };
        crud::encode_reply(out, sync, SCHEMA_VERSION, &reply);
    }

    /// `box.info` as connection pools read it: `ro` false, `status` "running"; and tarn's
    /// own `net`: client connections open and the memory they hold (see `NetStats`).
    fn box_info(&self, sync: u64, out: &mut Vec<u8>) {
        let mark = reply::begin_data_reply(out, sync, SCHEMA_VERSION, 1);
        out.push(0x88);
        write_str(out, b"id");
        write_uint(out, 1);
        write_str(out, b"uuid");
        write_str(out, self.core.shared.instance_uuid.to_string().as_bytes());
        write_str(out, b"ro");
        out.push(0xc2);
        write_str(out, b"status");
        write_str(out, b"running");
        write_str(out, b"version");
        write_str(out, crate::server::ADVERTISED_VERSION.as_bytes());
        write_str(out, b"pid");
        write_uint(out, std::process::id() as u64);
        write_str(out, b"lsn");
        write_uint(out, 0);
        let net = &self.core.shared.net;
        write_str(out, b"net");
        out.push(0x82);
        write_str(out, b"connections");
        write_uint(out, net.connections() as u64);
        write_str(out, b"memory");
        write_uint(out, net.memory_bytes() as u64);
        reply::finish_packet(out, mark);
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

    /// The core that runs a write request.
    fn write_owner(&self, request: &Request<'_>) -> usize {
        // One core owns everything: no placement to look up.
        if self.core.shard_count == 1 {
            return 0;
        }
        let (space_id, index_id, key, tuple) = match request {
            Request::Insert(r) | Request::Replace(r) => (r.space_id, 0, None, Some(r.tuple)),
            Request::Upsert(r) => (r.space_id, 0, None, Some(r.tuple)),
            Request::Update(r) => (r.space_id, r.index_id, Some(r.key), None),
            Request::Delete(r) => (r.space_id, r.index_id, Some(r.key), None),
            _ => return self.core.id(),
        };
        match schema::placement_of(&self.core.shared.config, space_id) {
            SpacePlacement::Shard0 => 0,
            _ if index_id != 0 => self.core.id(),
            _ => self
                .owner_of(space_id, key, tuple)
                .unwrap_or(self.core.id()),
        }
    }

    /// Where a decoded point request runs, and where its lookup will go when it runs here,
    /// so that a pipelined run of requests can prefetch it a few requests ahead
    /// ([`LookupPipeline`]). The lookup is `None` for anything else: a request another core
    /// runs, a scan, a packet that did not decode; the owner is `None` where it is not
    /// worked out here (any request but a point select or a write).
    fn place(&self, decoded: &Decoded<'_>) -> (Option<usize>, Option<PointTarget>) {
        let Ok((_, request)) = decoded else {
            return (None, None);
        };
        let owner = match request {
            Request::Select(select) => match self.select_owner(select) {
                Some(owner) => owner,
                None => return (None, None),
            },
            Request::Insert(_)
            | Request::Replace(_)
            | Request::Update(_)
            | Request::Delete(_)
            | Request::Upsert(_) => self.write_owner(request),
            _ => return (None, None),
        };
        if owner != self.core.id() {
            return (Some(owner), None);
        }
        (Some(owner), self.core.shard.borrow().point_target(request))
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

    /// The core that owns the primary key given as a search key or inside a tuple; `None`
    /// when the key does not parse (then the local shard reports the error).
    fn owner_of(&self, space_id: u32, key: Option<&[u8]>, tuple: Option<&[u8]>) -> Option<usize> {
        if self.core.shard_count == 1 {
            return Some(0);
        }
        let shard = self.core.shard.borrow();
        let space = shard.engine.find_space(space_id)?;
        let key_def = &space.indexes()[0].def.key_def;
        let mut encoded = SearchKeyBuf::new();
        // The usual primary key, one unsigned part, encodes to its 8 big-endian bytes: no
        // need for the general encoder (the same bytes, so the same owner).
        if let [part] = key_def.parts.as_slice() {
            if part.field_type == FieldType::Unsigned && !part.is_nullable {
                let id = match (key, tuple) {
                    (Some(key), _) => msgpack::single_uint_array(key),
                    (None, Some(tuple)) => space.leading_primary_key(tuple),
                    (None, None) => None,
                };
                if let Some(id) = id {
                    return Some(crate::server::shard_of_key(
                        &id.to_be_bytes(),
                        self.core.shard_count,
                    ));
                }
            }
        }
        match (key, tuple) {
            (Some(key), _) => {
                let parts = key_def.encode_search_key(key, &mut encoded).ok()?;
                if parts != key_def.part_count() {
                    return None;
                }
            }
            (None, Some(tuple)) => key_def.encode_from_tuple_data(tuple, &mut encoded).ok()?,
            (None, None) => return None,
        }
        Some(crate::server::shard_of_key(&encoded, self.core.shard_count))
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

    /// The one core that can answer `select`, or `None` when every core must scan.
    fn select_owner(&self, select: &Select<'_>) -> Option<usize> {
        if self.core.shard_count == 1 {
            return Some(0);
        }
        let placement = schema::placement_of(&self.core.shared.config, select.space_id);
        let is_point = select.index_id == 0 && select.iterator == IteratorType::Eq as u32;
        match placement {
            SpacePlacement::Everywhere => Some(self.core.id()),
            SpacePlacement::Shard0 => Some(0),
            SpacePlacement::ByPrimaryKey if is_point => {
                self.owner_of(select.space_id, Some(select.key), None)
            }
            SpacePlacement::ByPrimaryKey => None,
        }
    }

    /// Runs the scan on every core (each returns at most offset + limit entries in index
    /// order), merges by encoded key, then applies offset and limit. Earlier queued requests
    /// finish first, so the scan sees their writes and the reply keeps its place.
    async fn fan_out_select(
        &mut self,
        packet: &[u8],
        select: &Select<'_>,
        sync: u64,
        out: &mut Vec<u8>,
    ) {
        self.finish(out).await;
        if let Err(error) = self.core.shard.borrow().check_scan(select) {
            return crate::shard::errors::encode_storage_error(out, sync, SCHEMA_VERSION, &error);
        }
        let wanted = select.offset.saturating_add(select.limit);
        let me = self.core.id();
        for peer in (0..self.core.shard_count).filter(|&peer| peer != me) {
            // Slots are 0.. in peer order: the inbox was empty after `finish`.
            self.core
                .queue(peer, Kind::Scan, wanted, packet, &self.inbox);
        }
        self.inbox.wait().await;
        {
            let shard = self.core.shard.borrow();
            let replies = self.inbox.replies();
            let arena = &shard.arena;
            // Sized for typical tuples, so a scan seldom grows it; bump space is cheap.
            let typical_entry_bytes = 256;
            let capacity = (wanted as usize)
                .saturating_mul(typical_entry_bytes)
                .min(64 << 10);
            let mut local = arena.bytes_with_capacity(capacity);
            let scanned = shard.scan(select, wanted as usize, &mut local);
            debug_assert!(scanned.is_ok(), "checked above");
            let mut streams = arena.vec_with_capacity(self.core.shard_count);
            streams.push(ScanEntries::new(&local));
            for slot in 0..(self.core.shard_count - 1) as u32 {
                streams.push(ScanEntries::new(replies.get(slot)));
            }
            merge(select, &mut streams, sync, out);
        }
        self.inbox.clear();
        self.core.shard.borrow_mut().arena.reset();
    }
}

/// Writes the merged reply: entries in index order (descending for LT/LE/REQ iterators),
/// `offset` skipped, at most `limit` written.
fn merge(select: &Select<'_>, streams: &mut [ScanEntries<'_>], sync: u64, out: &mut Vec<u8>) {
    let descending =
        IteratorType::from_code(select.iterator).is_ok_and(IteratorType::is_descending);
    let mut data = DataReply::begin(out, sync, SCHEMA_VERSION);
    let mut skipped = 0u32;
    while data.count() < select.limit {
        let best = streams
            .iter()
            .enumerate()
            .filter_map(|(at, stream)| stream.peek().map(|(key, _)| (at, key)))
            .reduce(|a, b| {
                if (b.1 < a.1) != descending && b.1 != a.1 {
                    b
                } else {
                    a
                }
            });
        let Some((at, _)) = best else { break };
        let Some((_, tuple)) = streams[at].next() else {
            break;
        };
        if skipped < select.offset {
            skipped += 1;
            continue;
        }
        data.push_raw(out, tuple);
    }
    data.finish(out);
}

/// Puts one core's outcomes (in the order of its ops) back at the ops' positions.
fn place(
    items: &mut [crud::write::BatchItem],
    positions: &[usize],
    outcomes: Vec<crud::write::BatchItem>,
) {
    assert_eq!(positions.len(), outcomes.len(), "one outcome per op sent");
    for (&at, outcome) in positions.iter().zip(outcomes) {
        items[at] = outcome;
    }
}

/// Moves the bytes of `out` apart so that each pending reply lands at its `at`, in one pass
/// from the end (no second buffer): segment `i` (from `at[i]` to `at[i+1]`) moves right by
/// the total length of replies `0..=i`.
fn splice_replies(out: &mut Vec<u8>, pending: &[Pending], inbox: &Inbox) {
    let replies = inbox.replies();
    let added: usize = pending.iter().map(|p| replies.get(p.slot).len()).sum();
    let old_len = out.len();
    out.resize(old_len + added, 0);
    let mut shift = added;
    let mut segment_end = old_len;
    for pending in pending.iter().rev() {
        assert!(pending.at <= segment_end, "pending replies out of order");
        out.copy_within(pending.at..segment_end, pending.at + shift);
        let reply = replies.get(pending.slot);
        shift -= reply.len();
        out[pending.at + shift..pending.at + shift + reply.len()].copy_from_slice(reply);
        segment_end = pending.at;
    }
    assert_eq!(shift, 0);
}

/// Reads `[key length u32 LE][key][tuple]` entries written by `Shard::scan`.
struct ScanEntries<'a> {
    rest: &'a [u8],
}

impl<'a> ScanEntries<'a> {
    fn new(bytes: &'a [u8]) -> ScanEntries<'a> {
        ScanEntries { rest: bytes }
    }

    fn peek(&self) -> Option<(&'a [u8], &'a [u8])> {
        let mut probe = ScanEntries { rest: self.rest };
        probe.next()
    }
}

impl<'a> Iterator for ScanEntries<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let len_bytes = self.rest.get(..4)?;
        let key_len =
            u32::from_le_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]) as usize;
        let key = self.rest.get(4..4 + key_len)?;
        let mut cursor = &self.rest[4 + key_len..];
        let tuple = msgpack::take_value(&mut cursor).ok()?;
        self.rest = cursor;
        Some((key, tuple))
    }
}

fn unsupported(out: &mut Vec<u8>, sync: u64, what: &str) {
    reply::encode_error(
        out,
        sync,
        SCHEMA_VERSION,
        ErrorCode::ER_UNSUPPORTED,
        &format!("tarn does not support {what}"),
    );
}

/// The reply to a select whose iterator Tarantool does not know.
#[cold]
fn invalid_iterator(out: &mut Vec<u8>, sync: u64, iterator: u32) {
    if let Err(error) = IteratorType::from_code(iterator) {
        crate::shard::errors::encode_storage_error(out, sync, SCHEMA_VERSION, &error);
    }
}

fn access_denied(
    out: &mut Vec<u8>,
    sync: u64,
    access: Access,
    object_type: &str,
    object_name: &str,
    user: &str,
) {
    let message = format!(
        "{} access to {object_type} '{object_name}' is denied for user '{user}'",
        access.name()
    );
    let mut fields = Vec::new();
    fields.push(0x83);
    write_str(&mut fields, b"object_type");
    write_str(&mut fields, object_type.as_bytes());
    write_str(&mut fields, b"object_name");
    write_str(&mut fields, object_name.as_bytes());
    write_str(&mut fields, b"access_type");
    write_str(&mut fields, access.name().as_bytes());
    let entry = ErrorEntry {
        fields: Some(&fields),
        ..ErrorEntry::new(ErrorCode::ER_ACCESS_DENIED, &message)
    };
    reply::encode_error_stack(out, sync, SCHEMA_VERSION, &[entry]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_spliced_into_their_places() {
        let inbox = Inbox::default();
        let mut pending = Vec::new();
        // out: "A" [r0] "BC" [r1] [r2] "D" [r3]
        let mut out = b"ABCD".to_vec();
        for (at, reply) in [(1, "x"), (3, "yy"), (3, ""), (4, "zzz")] {
            let slot = inbox.reserve();
            pending.push(Pending { at, slot });
            inbox.deliver(slot, reply.as_bytes());
        }
        splice_replies(&mut out, &pending, &inbox);
        assert_eq!(std::str::from_utf8(&out).unwrap(), "AxBCyyDzzz");
    }
}

/// Whether the WAL of some shard refused a part of a crud call that spans shards, and why
/// when it was this core's (another core logs its own reason; its part only says refused).
#[derive(Default)]
struct Refusal {
    refused: bool,
    here: Option<crate::wal::WalError>,
}

impl Refusal {
    fn here(&mut self, error: crate::wal::WalError) {
        self.refused = true;
        self.here.get_or_insert(error);
    }

    fn elsewhere(&mut self) {
        self.refused = true;
    }

    /// The call's answer if a part was refused: never an acknowledgement.
    fn reply(&self) -> Option<CrudReply> {
        match (&self.here, self.refused) {
            (Some(error), _) => Some(on_shard::wal_refused(error)),
            (None, true) => Some(on_shard::wal_refused_elsewhere()),
            (None, false) => None,
        }
    }
}

/// The first field of a tuple when it is an unsigned integer (a view row's space id).
fn first_uint_field(tuple: &[u8]) -> Option<u64> {
    let mut fields = tuple;
    match crate::storage::msgpack::read_value(&mut fields) {
        Ok(crate::storage::msgpack::Value::Array(count)) if count > 0 => {}
        _ => return None,
    }
    match crate::storage::msgpack::read_value(&mut fields) {
        Ok(crate::storage::msgpack::Value::Uint(id)) => Some(id),
        _ => None,
    }
}
