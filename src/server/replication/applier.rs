//! The replica's side: a task on core 0 that connects to the master, subscribes from the
//! replica's position, and applies what the master streams — snapshot tuples while it
//! copies, then WAL rows — through a session of its own, as a client's replaces and deletes
//! would be: each row is placed by its key on this instance's shards (whatever their count),
//! logged in their WALs, and counted applied only once those are durable.
//!
//! A copy that did not finish is not resumed: without a position the replica empties its
//! spaces and copies again (rows the master deleted since would otherwise stay). The link
//! is retried with a growing pause; what cannot be retried (the master refused, a row did
//! not apply) stops the applier with its reason in `box.info.replication`.

use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;

use crate::config::Upstream as UpstreamConfig;
use crate::msgpack::{read_value, take_value, Value};
use crate::protocol::client::{self, decode_reply, split_server_frame};
use crate::protocol::greeting::parse_greeting;
use crate::protocol::replication::{self as wire, stream_type, Streamed, Subscribe, Vclock};
use crate::server::mesh::core::Core;
use crate::server::session::Session;
use crate::shard::DefinitionChange;
use crate::wal::format::{decode_batch, RowKind, SchemaRow};

use super::position::{Position, PositionError};
use super::status::UpstreamStatus;

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How often the position is written and acknowledged while rows flow.
const POSITION_EVERY: Duration = Duration::from_millis(100);
/// The upstream's status while the replica copies its master: Tarantool's word for a
/// bootstrap's copy (`box.info.status` is "loading" meanwhile).
pub const COPYING: &str = "initial_join";
/// How often a long copy says how far it is.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Bytes read from the master at a time.
const READ_BYTES: usize = 1 << 20;
/// The longest packet the master may send (a WAL batch is at most 16 MiB).
const PACKET_BYTES_MAX: usize = 64 << 20;

/// Why following stopped: `fatal` ones stop the applier, the others are retried.
#[derive(Debug, thiserror::Error)]
enum ApplyError {
    #[error("{0}")]
    Link(#[from] std::io::Error),
    #[error("the master refused: {0}")]
    Refused(String),
    /// The master no longer has rows this replica needs: it copies the master again.
    #[error("the master no longer has rows this replica needs ({0}): copying it again")]
    RowsGone(String),
    #[error("{0}")]
    Protocol(String),
    #[error("{0}")]
    Position(#[from] PositionError),
    #[error("{0}")]
    Apply(String),
    /// The data directory holds rows of its own: it is not emptied for a copy.
    #[error(
        "this instance holds {0} rows and has no position of a master: it was never a \
         replica (or its position was removed); to make it one, empty its data directory"
    )]
    LocalData(u64),
    /// The upstream is a former master: this instance knows of a newer term.
    #[error(
        "the master's term {upstream} is older than this instance's {own}: it is a former \
         master, not followed"
    )]
    OlderTerm { upstream: u64, own: u64 },
    /// A promotion stopped the applier, or the instance became writable: it only watches
    /// the upstream's term from now on.
    #[error("this instance accepts writes now: it no longer follows")]
    Promoted,
}

impl ApplyError {
    fn is_fatal(&self) -> bool {
        !matches!(
            self,
            ApplyError::Link(_)
                | ApplyError::RowsGone(_)
                | ApplyError::OlderTerm { .. }
                | ApplyError::Promoted
        )
    }
}

/// Follows `upstream` for as long as the server runs.
pub async fn follow(core: Rc<Core>, upstream: UpstreamConfig) {
    let mut backoff = BACKOFF_MIN;
    set_status(&core, &upstream, "connect", None);
    loop {
        let mut link = Link::new(core.clone(), &upstream);
        let outcome = link.run().await;
        core.shared.promotion.end_applying();
        if link.subscribed {
            backoff = BACKOFF_MIN;
        }
        let error = match outcome {
            Ok(()) => ApplyError::Link(std::io::ErrorKind::UnexpectedEof.into()),
            Err(ApplyError::RowsGone(reason)) => {
                let data_dir = &core.shared.config.data_dir;
                match Position::mark_copying(data_dir).and_then(|()| Position::remove(data_dir)) {
                    Ok(()) => ApplyError::RowsGone(reason),
                    Err(error) => ApplyError::Position(error),
                }
            }
            Err(error) => error,
        };
        let (status, level_warn) = match error.is_fatal() {
            true => ("stopped", true),
            false => ("disconnected", link.subscribed),
        };
        if level_warn {
            tracing::warn!(master = %upstream, %error, status, "replication");
        } else {
            tracing::debug!(master = %upstream, %error, "replication: connecting");
        }
        set_status(&core, &upstream, status, Some(error.to_string()));
        if error.is_fatal() {
            return;
        }
        glommio::timer::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

fn set_status(
    core: &Core,
    upstream: &UpstreamConfig,
    status: &'static str,
    message: Option<String>,
) {
    let mut state = core.shared.replication.upstream();
    let entry = state.get_or_insert_with(|| UpstreamStatus::new(upstream.to_string(), status));
    entry.status = status;
    entry.message = message;
}

/// One connection to the master, from connect to its end.
struct Link<'u> {
    core: Rc<Core>,
    upstream: &'u UpstreamConfig,
    session: Session,
    /// Per master shard, the last LSN applied (and durable) here.
    applied: Vclock,
    /// Copying the master: no position is written until every shard's snapshot is applied.
    copying: Option<Instant>,
    master_fingerprint: u64,
    /// The master's last schema change made here, and the one taken to make next.
    master_schema_version: u64,
    schema_version_taken: u64,
    /// Schema changes among `requests`: each made once the requests before it are applied.
    changes: Vec<SchemaStep>,
    subscribed: bool,
    /// Requests to run for the packets read, and what they applied once durable.
    requests: Vec<u8>,
    replies: Vec<u8>,
    reached: Vec<(usize, u64)>,
    copied_tuples: u64,
    progress_reported: Instant,
    /// The master's term, as its answer to SUBSCRIBE said.
    master_term: u64,
}

impl<'u> Link<'u> {
    fn new(core: Rc<Core>, upstream: &'u UpstreamConfig) -> Link<'u> {
        Link {
            session: Session::for_applier(core.clone()),
            core,
            upstream,
            applied: Vclock::new(),
            copying: None,
            master_fingerprint: 0,
            master_schema_version: 0,
            schema_version_taken: 0,
            changes: Vec::new(),
            subscribed: false,
            requests: Vec::new(),
            replies: Vec::new(),
            reached: Vec::new(),
            copied_tuples: 0,
            progress_reported: Instant::now(),
            master_term: 0,
        }
    }

    async fn run(&mut self) -> Result<(), ApplyError> {
        let mut stream = TcpStream::connect(self.upstream.address)
            .await
            .map_err(std::io::Error::from)?;
        stream.set_nodelay(true).map_err(std::io::Error::from)?;
        let mut greeting = [0u8; 128];
        stream.read_exact(&mut greeting).await?;
        let salt = parse_greeting(&greeting)
            .map(|greeting| greeting.salt().to_vec())
            .ok_or_else(|| {
                ApplyError::Refused("the master's greeting is not Tarantool's".into())
            })?;
        let mut buffer = Vec::with_capacity(READ_BYTES);
        if let Some(user) = &self.upstream.user {
            set_status(&self.core, self.upstream, "auth", None);
            let mut auth = Vec::new();
            client::encode_auth(&mut auth, 1, user, &salt, self.upstream.password.as_bytes());
            stream.write_all(&auth).await?;
            let packet = read_packet(&mut stream, &mut buffer).await?;
            check_reply(&packet)?;
        }
        if self.core.shared.leads_term() {
            return self.watch_term(&mut stream, &mut buffer).await;
        }
        let position = Position::read(&self.core.shared.config.data_dir)?;
        let copy = position.is_none();
        self.subscribe(&mut stream, &mut buffer, position).await?;
        if !self.core.shared.promotion.begin_applying() {
            return Err(ApplyError::Promoted);
        }
        if copy {
            self.empty_spaces().await?;
        }
        self.stream(&mut stream, &mut buffer).await
    }

    /// The master of the current term takes no rows: it subscribes only to tell its
    /// upstream its term and to hear the upstream's, until a newer term makes this one
    /// read-only (then the link ends, and the next one follows).
    async fn watch_term(
        &mut self,
        stream: &mut TcpStream,
        buffer: &mut Vec<u8>,
    ) -> Result<(), ApplyError> {
        let packet = self.send_subscribe(stream, buffer, None, true).await?;
        let answer = decode_answer(&packet)?;
        self.subscribed = true;
        set_status(&self.core, self.upstream, "follow", None);
        let mut term = answer.term;
        loop {
            self.core
                .shared
                .observe_term(term, &self.upstream.to_string());
            if !self.core.shared.leads_term() {
                return Ok(());
            }
            let packet = read_packet(stream, buffer).await?;
            match wire::decode_streamed(&packet) {
                Ok(Streamed::Heartbeat { term: said, .. }) => term = said,
                Ok(Streamed::Error { code, message }) => return Err(refusal(code, message)),
                _ => return Err(ApplyError::Protocol("a row sent to a master".into())),
            }
        }
    }

    /// Sends SUBSCRIBE (from `position`; `writable`: to watch the term only) and reads the
    /// packet that answers it.
    async fn send_subscribe(
        &self,
        stream: &mut TcpStream,
        buffer: &mut Vec<u8>,
        position: Option<&Position>,
        writable: bool,
    ) -> Result<Vec<u8>, ApplyError> {
        let uuid = self.core.shared.instance_uuid.to_string();
        let mut request = Vec::new();
        Subscribe {
            protocol: wire::PROTOCOL_VERSION,
            instance_uuid: &uuid,
            fingerprint: position.map_or(0, |p| p.master_fingerprint),
            vclock: position.map(Position::vclock).unwrap_or_default(),
            schema_version: position.map_or(0, |p| p.master_schema_version),
            term: self.core.shared.terms.current(),
            writable,
        }
        .encode(1, &mut request);
        stream.write_all(&request).await?;
        read_packet(stream, buffer).await
    }

    /// Sends SUBSCRIBE from `position` and reads the master's answer.
    async fn subscribe(
        &mut self,
        stream: &mut TcpStream,
        buffer: &mut Vec<u8>,
        position: Option<Position>,
    ) -> Result<(), ApplyError> {
        let packet = self
            .send_subscribe(stream, buffer, position.as_ref(), false)
            .await?;
        let subscribed = decode_answer(&packet)?;
        let shared = &self.core.shared;
        shared.observe_term(subscribed.term, &self.upstream.to_string());
        let own = shared.terms.current();
        if subscribed.term < own {
            return Err(ApplyError::OlderTerm {
                upstream: subscribed.term,
                own,
            });
        }
        self.master_term = subscribed.term;
        let shards = subscribed.shard_count as usize;
        if let Some(position) = &position {
            if position.applied.len() != shards {
                return Err(ApplyError::Refused(format!(
                    "the master has {shards} shards; this replica's position names {}: empty its \
                     data directory to copy the master again",
                    position.applied.len()
                )));
            }
        }
        self.applied = position.as_ref().map(Position::vclock).unwrap_or_default();
        self.applied.resize(shards, None);
        self.master_fingerprint = subscribed.fingerprint;
        self.master_schema_version = position.as_ref().map_or(0, |p| p.master_schema_version);
        self.copying = position.is_none().then(Instant::now);
        self.subscribed = true;
        let status = if position.is_none() {
            COPYING
        } else {
            "follow"
        };
        tracing::info!(master = %self.upstream, master_uuid = subscribed.instance_uuid, shards,
            from = ?self.applied, "replication: subscribed");
        let mut state = self.core.shared.replication.upstream();
        if let Some(upstream) = state.as_mut() {
            upstream.status = status;
            upstream.message = None;
            upstream.master_uuid = Some(subscribed.instance_uuid.to_owned());
            upstream.progress(Some(&self.applied), Some(&subscribed.vclock));
        }
        Ok(())
    }

    /// Applies what the master streams until the link ends.
    async fn stream(
        &mut self,
        stream: &mut TcpStream,
        buffer: &mut Vec<u8>,
    ) -> Result<(), ApplyError> {
        let mut last_position = Instant::now();
        let mut chunk = vec![0u8; READ_BYTES];
        // What came with the answer to SUBSCRIBE is in `buffer` already: taken before the
        // first read (which would wait for more).
        let mut read_first = buffer.is_empty();
        loop {
            if read_first {
                let read = stream.read(&mut chunk).await?;
                if read == 0 {
                    return Ok(());
                }
                buffer.extend_from_slice(&chunk[..read]);
            }
            // Every whole packet is taken below: what stays is part of one.
            read_first = true;
            let consumed = self.take_packets(buffer)?;
            buffer.drain(..consumed);
            if buffer.len() > PACKET_BYTES_MAX {
                return Err(ApplyError::Protocol("a packet over 64 MiB".into()));
            }
            let version = self.master_schema_version;
            let advanced = self.apply().await?;
            // Everything received is applied: a promotion may go on.
            if self.core.shared.promotion.is_requested() {
                return Err(ApplyError::Promoted);
            }
            // A schema change made is recorded at once: made again after a crash, it would
            // be redone (it changes nothing then, but costs a rebuild).
            let changed = self.master_schema_version != version;
            self.report_progress();
            let position_due =
                last_position.elapsed() >= POSITION_EVERY || self.copy_finished() || changed;
            if position_due {
                last_position = Instant::now();
                self.record_position().await?;
            }
            // What is applied is durable here: acknowledged at once, since the master's
            // synchronous writes wait for it (the position file may lag; rows are idempotent).
            if position_due || advanced {
                let mut ack = Vec::new();
                wire::encode_vclock_packet(stream_type::ACK, 0, &self.applied, &mut ack);
                stream.write_all(&ack).await?;
            }
        }
    }

    /// Turns every whole packet at the front of `buffer` into requests; the bytes taken.
    fn take_packets(&mut self, buffer: &[u8]) -> Result<usize, ApplyError> {
        let mut consumed = 0;
        while let Some((packet, taken)) = split_server_frame(&buffer[consumed..])
            .map_err(|e| ApplyError::Protocol(e.to_string()))?
        {
            let streamed =
                wire::decode_streamed(packet).map_err(|e| ApplyError::Protocol(e.to_string()))?;
            self.take(streamed)?;
            consumed += taken;
        }
        Ok(consumed)
    }

    fn take(&mut self, streamed: Streamed<'_>) -> Result<(), ApplyError> {
        match streamed {
            Streamed::SnapshotTuples {
                shard,
                space_id,
                tuples,
            } => {
                self.known_shard(shard)?;
                let mut rest = tuples;
                let Ok(Value::Array(count)) = read_value(&mut rest) else {
                    return Err(ApplyError::Protocol(
                        "snapshot tuples are not an array".into(),
                    ));
                };
                for _ in 0..count {
                    let tuple = take_value(&mut rest).map_err(|_| {
                        ApplyError::Protocol("a snapshot tuple is cut short".into())
                    })?;
                    client::encode_replace(&mut self.requests, 0, space_id, tuple);
                    self.copied_tuples += 1;
                }
            }
            Streamed::SnapshotSchema { shard, schema } => {
                self.known_shard(shard)?;
                self.take_snapshot_schema(schema)?;
            }
            Streamed::SnapshotEnd { shard, lsn } => {
                self.known_shard(shard)?;
                self.reached.push((shard as usize, lsn));
            }
            Streamed::WalBatch { shard, batch } => self.take_batch(shard, batch)?,
            Streamed::Heartbeat { vclock, term } => {
                if let Some(upstream) = self.core.shared.replication.upstream().as_mut() {
                    upstream.progress(None, Some(&vclock));
                }
                // Rare: the master was promoted while this replica followed it.
                if term > self.master_term {
                    self.master_term = term;
                    let peer = self.upstream.to_string();
                    self.core.shared.observe_term(term, &peer);
                }
            }
            Streamed::Ack { .. } => {
                return Err(ApplyError::Protocol("an ACK from the master".into()))
            }
            Streamed::Error { code, message } => return Err(refusal(code, message)),
        }
        Ok(())
    }

    fn known_shard(&self, shard: u32) -> Result<(), ApplyError> {
        match (shard as usize) < self.applied.len() {
            true => Ok(()),
            false => Err(ApplyError::Protocol(format!(
                "a packet of master shard {shard}, which it does not have"
            ))),
        }
    }

    /// The rows of a WAL batch after what shard `shard` has applied, as requests.
    fn take_batch(&mut self, shard: u32, batch: &[u8]) -> Result<(), ApplyError> {
        self.known_shard(shard)?;
        let batch =
            decode_batch(batch).map_err(|e| ApplyError::Protocol(format!("a WAL batch: {e}")))?;
        let pending = self
            .reached
            .iter()
            .rev()
            .find(|(at, _)| *at == shard as usize);
        let Some(after) = pending
            .map(|(_, lsn)| *lsn)
            .or(self.applied[shard as usize])
        else {
            return Err(ApplyError::Protocol(
                "WAL rows before the shard's snapshot ended".into(),
            ));
        };
        for row in batch.rows().filter(|row| row.lsn > after) {
            match row.kind {
                RowKind::Replace => {
                    client::encode_replace(&mut self.requests, row.lsn, row.space_id, row.body)
                }
                RowKind::Delete => {
                    client::encode_delete(&mut self.requests, row.lsn, row.space_id, 0, row.body)
                }
                RowKind::Schema => self.take_change(row.space_id, row.body)?,
            }
        }
        self.reached.push((shard as usize, batch.lsn_last()));
        Ok(())
    }

    /// A master's schema change, in order with the rows: one the replica has (each shard's
    /// stream carries the same change) is skipped.
    fn take_change(&mut self, space_id: u32, body: &[u8]) -> Result<(), ApplyError> {
        let row = SchemaRow::decode(body)
            .ok_or_else(|| ApplyError::Protocol("a schema row without its version".into()))?;
        let known = self.master_schema_version.max(self.schema_version_taken);
        if row.version <= known {
            return Ok(());
        }
        self.schema_version_taken = row.version;
        self.changes.push(SchemaStep {
            at: self.requests.len(),
            space_id,
            version: row.version,
            definition: row.definition.to_vec(),
        });
        Ok(())
    }

    /// The schema a master shard's snapshot was taken at, before its tuples: every space in
    /// it is made (or redefined) here as the master has it, so a replica's config need not
    /// name the master's spaces. One older than a schema already taken is skipped (another
    /// shard's newer snapshot, or a change streamed since, has it).
    fn take_snapshot_schema(&mut self, schema: &[u8]) -> Result<(), ApplyError> {
        let (version, spaces) = crate::server::schema::read_entries(schema)
            .ok_or_else(|| ApplyError::Protocol("a snapshot schema that does not read".into()))?;
        if version < self.master_schema_version.max(self.schema_version_taken) {
            return Ok(());
        }
        self.schema_version_taken = version;
        for (space_id, definition) in spaces {
            self.changes.push(SchemaStep {
                at: self.requests.len(),
                space_id,
                version,
                definition,
            });
        }
        Ok(())
    }

    /// Makes a master's schema change here, through this instance's DDL coordinator; one
    /// whose definition this instance has already (made before a crash, then sent again)
    /// changes nothing.
    async fn make_change(&mut self, step: SchemaStep) -> Result<(), ApplyError> {
        let change = if step.definition.is_empty() {
            DefinitionChange::Drop(step.space_id)
        } else {
            let def = crate::server::schema_change::decode_space_rows(&step.definition).map_err(
                |reason| ApplyError::Apply(format!("the master's schema change: {reason}")),
            )?;
            let current = self.core.shard.borrow().engine.space_def(def.id);
            match current {
                Some(current) if crate::server::schema::space_rows(&current) == step.definition => {
                    self.master_schema_version = step.version;
                    return Ok(());
                }
                Some(_) => DefinitionChange::Redefine(def),
                None => DefinitionChange::Create(def),
            }
        };
        let turn = self.core.shared.ddl.take_turn().await;
        crate::server::ddl::change(&self.core, &turn, change)
            .await
            .map_err(|error| {
                ApplyError::Apply(format!(
                    "the master's schema change {}: {error}",
                    step.version
                ))
            })?;
        self.master_schema_version = step.version;
        tracing::info!(master = %self.upstream, version = step.version, space = step.space_id,
            "replication: made the master's schema change");
        Ok(())
    }

    /// Runs the requests taken and waits until they are durable; then what they reached is
    /// applied. Whether that moved any master shard's applied LSN.
    async fn apply(&mut self) -> Result<bool, ApplyError> {
        let requests = std::mem::take(&mut self.requests);
        let mut changes = std::mem::take(&mut self.changes).into_iter().peekable();
        let mut at = 0;
        self.replies.clear();
        loop {
            while let Some(step) = changes.next_if(|step| step.at <= at) {
                self.session.finish(&mut self.replies).await;
                check_replies(&self.replies)?;
                self.replies.clear();
                self.make_change(step).await?;
            }
            let Ok(Some((packet, taken))) = split_server_frame(&requests[at..]) else {
                break;
            };
            self.session.submit(packet, &mut self.replies).await;
            at += taken;
        }
        self.session.finish(&mut self.replies).await;
        self.requests = requests;
        self.requests.clear();
        check_replies(&self.replies)?;
        let mut advanced = false;
        for (shard, lsn) in self.reached.drain(..) {
            advanced |= self.applied[shard] != Some(lsn);
            self.applied[shard] = Some(lsn);
        }
        if let Some(upstream) = self.core.shared.replication.upstream().as_mut() {
            upstream.progress(Some(&self.applied), None);
        }
        Ok(advanced)
    }

    /// While copying, every [`PROGRESS_EVERY`]: the tuples copied so far.
    fn report_progress(&mut self) {
        let Some(started) = self.copying else {
            return;
        };
        if self.progress_reported.elapsed() < PROGRESS_EVERY {
            return;
        }
        self.progress_reported = Instant::now();
        let copied = self.applied.iter().filter(|lsn| lsn.is_some()).count();
        tracing::info!(master = %self.upstream, tuples = self.copied_tuples,
            shards_copied = copied, shards = self.applied.len(),
            seconds = started.elapsed().as_secs_f64(), "replication: copying the master");
    }

    fn copy_finished(&self) -> bool {
        self.copying.is_some() && self.applied.iter().all(Option::is_some)
    }

    /// Writes the position (not while copying: a copy that stops is started over).
    async fn record_position(&mut self) -> Result<(), ApplyError> {
        let copy_ended = match self.copying {
            Some(_) if !self.copy_finished() => return Ok(()),
            copying => copying,
        };
        let position = Position {
            master_fingerprint: self.master_fingerprint,
            applied: self.applied.iter().map(|lsn| lsn.unwrap_or(0)).collect(),
            master_schema_version: self.master_schema_version,
        };
        let sync = self.core.shared.config.durability.wal_mode == crate::config::WalMode::Fsync;
        // On glommio's thread for blocking calls: an fsync under load takes tens of
        // milliseconds, which this core's requests would wait out.
        let data_dir = self.core.shared.config.data_dir.clone();
        glommio::executor()
            .spawn_blocking(move || position.write(&data_dir, sync))
            .await?;
        // Said once the position is on disk: from then on the copy is whole (a promotion
        // may proceed, a restart resumes instead of copying again).
        if let Some(started) = copy_ended {
            self.copying = None;
            tracing::info!(master = %self.upstream, tuples = self.copied_tuples,
                seconds = started.elapsed().as_secs_f64(), at = ?self.applied,
                "replication: copied the master; following its WAL");
            if let Some(upstream) = self.core.shared.replication.upstream().as_mut() {
                upstream.status = "follow";
            }
        }
        Ok(())
    }

    /// Before a copy: removes whatever an earlier copy that did not finish left. A data
    /// directory that holds rows and was never a replica's is refused, not emptied.
    async fn empty_spaces(&mut self) -> Result<(), ApplyError> {
        let data_dir = self.core.shared.config.data_dir.clone();
        let names: Vec<String> = {
            let shard = self.core.shard.borrow();
            let spaces = shard.engine.spaces();
            spaces
                .iter()
                .filter(|space| space.id >= crate::config::space::SPACE_ID_MIN)
                .map(|space| space.name.to_string())
                .collect()
        };
        if !Position::copying(&data_dir) {
            let rows = self.count_rows(&names).await?;
            if rows > 0 {
                self.may_discard(rows)?;
            }
            Position::mark_copying(&data_dir)?;
        }
        for name in &names {
            let function = format!("box.space.{name}:truncate");
            client::encode_call(&mut self.requests, 0, &function, &[0x90]);
        }
        self.apply().await?;
        tracing::info!(master = %self.upstream, spaces = names.len(),
            "replication: no position recorded; spaces emptied before copying the master");
        Ok(())
    }

    /// Whether this instance's own `rows` may be discarded to copy the master: only those
    /// of a former master, whose upstream leads a newer term than the last it led (the new
    /// master may not have all of them: with synchronous replication none of those it lacks
    /// was acknowledged; with asynchronous replication some may have been).
    fn may_discard(&self, rows: u64) -> Result<(), ApplyError> {
        let led = self.core.shared.terms.record().led;
        if led == 0 || self.master_term <= led {
            return Err(ApplyError::LocalData(rows));
        }
        tracing::warn!(master = %self.upstream, rows, led, master_term = self.master_term,
            "replication: this instance was the master of an older term; its rows are \
             discarded and the master of the newer term copied (docs/replication.md, promotion)");
        Ok(())
    }

    /// The rows of the spaces named, on every shard (`box.space.NAME:len()`).
    async fn count_rows(&mut self, names: &[String]) -> Result<u64, ApplyError> {
        for name in names {
            let function = format!("box.space.{name}:len");
            client::encode_call(&mut self.requests, 0, &function, &[0x90]);
        }
        self.apply().await?;
        let mut rows = 0;
        let mut rest = self.replies.as_slice();
        while let Ok(Some((packet, taken))) = split_server_frame(rest) {
            let reply = decode_reply(packet).map_err(|e| ApplyError::Protocol(e.to_string()))?;
            let mut data = reply.data().unwrap_or(&[]);
            if let (Ok(Value::Array(1)), Ok(Value::Uint(len))) =
                (read_value(&mut data), read_value(&mut data))
            {
                rows += len;
            }
            rest = &rest[taken..];
        }
        Ok(rows)
    }
}

/// A master's schema change among the requests taken: made before the request at `at`.
struct SchemaStep {
    at: usize,
    space_id: u32,
    version: u64,
    /// The space's `_space` and `_index` rows; none: the space is dropped.
    definition: Vec<u8>,
}

/// The master's error reply as the applier takes it.
fn refusal(code: u64, message: &str) -> ApplyError {
    match code == u64::from(crate::protocol::ErrorCode::ER_XLOG_GAP.0) {
        true => ApplyError::RowsGone(message.to_owned()),
        false => ApplyError::Refused(format!("{message} (error {code})")),
    }
}

/// The master's answer to SUBSCRIBE, or its refusal.
fn decode_answer(packet: &[u8]) -> Result<wire::Subscribed<'_>, ApplyError> {
    let answer =
        wire::decode_subscribed(packet).map_err(|e| ApplyError::Protocol(e.to_string()))?;
    answer.map_err(|(code, message)| ApplyError::Refused(format!("{message} (error {code})")))
}

/// Reads one whole packet (buffered in `buffer`).
async fn read_packet(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<Vec<u8>, ApplyError> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((packet, taken)) =
            split_server_frame(buffer).map_err(|e| ApplyError::Protocol(e.to_string()))?
        {
            let packet = packet.to_vec();
            buffer.drain(..taken);
            return Ok(packet);
        }
        if buffer.len() > PACKET_BYTES_MAX {
            return Err(ApplyError::Protocol("a packet over 64 MiB".into()));
        }
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(ApplyError::Link(std::io::ErrorKind::UnexpectedEof.into()));
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

fn check_reply(packet: &[u8]) -> Result<(), ApplyError> {
    let reply = decode_reply(packet).map_err(|e| ApplyError::Protocol(e.to_string()))?;
    match reply.is_error() {
        true => Err(ApplyError::Refused(format!(
            "{} (error {})",
            reply.error_message().unwrap_or(""),
            reply.status() & 0x7fff
        ))),
        false => Ok(()),
    }
}

/// The first error among the replies to the applied rows, if any: a row the replica could
/// not apply stops it (its data would differ from the master's from then on).
fn check_replies(replies: &[u8]) -> Result<(), ApplyError> {
    let mut rest = replies;
    while let Ok(Some((packet, taken))) = split_server_frame(rest) {
        let reply = decode_reply(packet).map_err(|e| ApplyError::Protocol(e.to_string()))?;
        if reply.is_error() {
            return Err(ApplyError::Apply(format!(
                "a row did not apply (sync {}): {} (error {})",
                reply.sync(),
                reply.error_message().unwrap_or(""),
                reply.status() & 0x7fff
            )));
        }
        rest = &rest[taken..];
    }
    Ok(())
}
