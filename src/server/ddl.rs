//! Schema changes while serving (`docs/ddl.md`): the coordinator that makes one change of
//! one space's definition on every shard, atomically and durably, and what each core does
//! of it.
//!
//! One change at a time in the whole server ([`Ddl`]). The accepting core plans it
//! (`crud::box_schema`); then a [`Round`] goes to every core, itself included, in an envelope
//! of its own, never inside a request batch (a batch is answered once its writes are
//! committed, which the change's fence holds: a deadlock). Each core follows the round's
//! phases:
//!
//! 1. **check**: whether its data allows the change, so that a duplicate or a tuple the
//!    new format refuses on any shard refuses the change before any shard has made it. A
//!    redefinition that keeps the primary index is prepared while the core serves
//!    (`storage::Space::prepare_redefinition`): new indexes built and tuples checked in
//!    slices of [`BUILD_SLICE`], the core serving requests between them, its writes kept in
//!    the new indexes; others are built aside once, in one step, and dropped;
//! 2. **switch**: the change made in one step of its thread ([`Shard::change_schema`]: the
//!    engine, the schema row, the fence), its system spaces and catalog refreshed; it
//!    answers once its schema row is durable;
//! 3. **commit**: once every row is durable the coordinator records the version in
//!    `schema.bin` (the commit point); every core then lifts its fence and its replies carry
//!    the new version. If a core refused or failed at the switch, the change is abandoned:
//!    the cores that made it fail what their fence holds and refuse writes until restart,
//!    whose recovery cuts the uncommitted change away on every shard.
//!
//! Cores poll the round's phase on a short timer rather than answer each other by message:
//! changes are rare, and a millisecond matters little next to the fsync each waits for.
//!
//! Owns the order of a change across cores and its commit point; the change itself is the
//! shard's, its planning crud's, its rows the schema's.

use crate::crud::box_schema::DdlReply;
use crate::msgpack::{write_str, write_uint};
use crate::protocol::ErrorCode;
use crate::server::data_dir::SchemaRecord;
use crate::server::mesh::core::Core;
use crate::server::schema;
use crate::shard::{DefinitionChange, SchemaChangeError};
use crate::storage::{Collation, Engine, StorageError};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often a core looks at a round's phase, and a change waits for the one before it.
const POLL: Duration = Duration::from_millis(1);

/// How long a core prepares a redefinition, at most, before it polls its network and
/// serves what arrived.
const BUILD_SLICE: Duration = Duration::from_micros(100);
/// The sleep between slices on a core that served nothing during the last one: the least
/// a timer takes (it fires on the core's next turn), so that a build alone takes the core.
const PAUSE_WHEN_IDLE: Duration = Duration::from_micros(1);
/// The sleep between slices on a core that served requests during the last one: as long as
/// a slice, so that requests keep about half of the core (at a 1 µs pause the build took
/// three quarters of the gets' throughput at 16 x 128; at this one, two fifths).
const PAUSE_WHEN_BUSY: Duration = BUILD_SLICE;
/// Tasks other than the build's own that ran during its last pause, above which the core
/// counts as busy (a few timers run on an idle core too).
const BUSY_TASKS: u64 = 2;
/// Tuples a preparation step takes (about 10 to 40 µs).
const STEP_TUPLES: usize = 32;
/// How often a long preparation says how far it is.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// The server's one change at a time, and the schema record it commits to.
pub struct Ddl {
    running: AtomicBool,
    /// `None` in a server without a data directory record (never, once started).
    record: Mutex<Option<SchemaRecord>>,
}

impl Ddl {
    pub fn new(record: Option<SchemaRecord>) -> Ddl {
        Ddl {
            running: AtomicBool::new(false),
            record: Mutex::new(record),
        }
    }

    fn record(&self) -> MutexGuard<'_, Option<SchemaRecord>> {
        self.record
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits for the change running, if any, then holds the turn until the guard drops: a
    /// change is planned and made under it, so that no other changes the schema between.
    pub async fn take_turn(&self) -> Turn<'_> {
        while self
            .running
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            glommio::timer::sleep(POLL).await;
        }
        Turn(self)
    }
}

/// The turn of one change (see [`Ddl::take_turn`]).
pub struct Turn<'d>(&'d Ddl);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
    }
}

/// Why a change was not made.
#[derive(Debug, thiserror::Error)]
pub enum DdlError {
    /// A shard's data does not allow it; nothing changed anywhere.
    #[error("{}", refusal_message(.0))]
    Refused(StorageError),
    /// A log refused its schema row, or `schema.bin` could not be written: the change is
    /// abandoned, and the shards that made it refuse writes until restart.
    #[error("Failed to write to disk: schema change: {0}")]
    NotDurable(String),
}

impl DdlError {
    pub fn code(&self) -> ErrorCode {
        match self {
            DdlError::Refused(error) => crate::shard::errors::storage_error_code(error),
            DdlError::NotDurable(_) => ErrorCode::ER_WAL_IO,
        }
    }
}

/// A refusal as Tarantool words it for a DDL: a duplicate found while building a unique
/// index names the index and space only.
fn refusal_message(error: &StorageError) -> String {
    match error {
        StorageError::TupleFound { index, space, .. } => {
            format!("Duplicate key exists in unique index '{index}' in space '{space}'")
        }
        other => other.to_string(),
    }
}

const PHASE_CHECK: u8 = 0;
const PHASE_SWITCH: u8 = 1;
const PHASE_COMMIT: u8 = 2;
const PHASE_ABANDON: u8 = 3;

const ANSWER_NONE: u8 = 0;
const ANSWER_CHECKED: u8 = 1;
const ANSWER_SWITCHED: u8 = 2;
const ANSWER_DONE: u8 = 3;
const ANSWER_REFUSED: u8 = 4;
const ANSWER_FAILED: u8 = 5;

/// One change on its way through every core.
pub struct Round {
    /// The schema version it makes.
    version: u64,
    change: DefinitionChange,
    /// The space's recorded rows (`_space` then `_index`), empty for a drop: what the schema
    /// row and `schema.bin` hold.
    rows: Vec<u8>,
    phase: AtomicU8,
    /// Per core, the last step it finished (`ANSWER_*`).
    answers: Vec<AtomicU8>,
    /// The first refusal or failure, for the caller.
    failure: Mutex<Option<DdlError>>,
}

impl Round {
    fn answer(&self, core: usize, answer: u8) {
        self.answers[core].store(answer, Ordering::Release);
    }

    fn fail(&self, core: usize, answer: u8, error: DdlError) {
        let mut failure = self
            .failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        failure.get_or_insert(error);
        self.answer(core, answer);
    }

    fn take_failure(&self) -> Option<DdlError> {
        self.failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }

    /// Waits until every core has answered at least `step` (a refusal or failure counts),
    /// or, with `until_failed`, until one has refused or failed.
    async fn all_answered(&self, step: u8, until_failed: bool) {
        while self
            .answers
            .iter()
            .any(|answer| answer.load(Ordering::Acquire) < step)
            && !(until_failed && self.any_failed())
        {
            glommio::timer::sleep(POLL).await;
        }
    }

    fn any_failed(&self) -> bool {
        self.answers
            .iter()
            .any(|answer| answer.load(Ordering::Acquire) >= ANSWER_REFUSED)
    }

    /// Waits for the coordinator to move past `phase`; the phase it moved to.
    async fn past(&self, phase: u8) -> u8 {
        loop {
            let now = self.phase.load(Ordering::Acquire);
            if now != phase {
                return now;
            }
            glommio::timer::sleep(POLL).await;
        }
    }
}

/// Makes `change` on every shard (see the module doc), in `turn`: `Ok` once it is committed
/// and every core serves the new schema.
pub async fn change(
    core: &Rc<Core>,
    turn: &Turn<'_>,
    change: DefinitionChange,
) -> Result<(), DdlError> {
    let ddl = turn.0;
    let version = ddl.record().as_ref().map_or(0, |record| record.version) + 1;
    let rows = match &change {
        DefinitionChange::Create(def) | DefinitionChange::Redefine(def) => schema::space_rows(def),
        DefinitionChange::Drop(_) => Vec::new(),
    };
    let space_id = change.space_id();
    let round = Arc::new(Round {
        version,
        change,
        rows,
        phase: AtomicU8::new(PHASE_CHECK),
        answers: (0..core.shard_count)
            .map(|_| AtomicU8::new(ANSWER_NONE))
            .collect(),
        failure: Mutex::new(None),
    });
    for peer in (0..core.shard_count).filter(|&peer| peer != core.id()) {
        core.send_schema_round(peer, round.clone());
    }
    glommio::spawn_local(follow(core.clone(), round.clone())).detach();
    let abandon = |round: &Round| {
        round.phase.store(PHASE_ABANDON, Ordering::Release);
        round.take_failure()
    };
    // A refusal ends the wait: the others stop preparing once the round is abandoned.
    round.all_answered(ANSWER_CHECKED, true).await;
    if round.any_failed() {
        return Err(abandon(&round).expect("a refusal says why"));
    }
    round.phase.store(PHASE_SWITCH, Ordering::Release);
    round.all_answered(ANSWER_SWITCHED, false).await;
    if round.any_failed() {
        let failure = abandon(&round).expect("a failure says why");
        tracing::error!(version, space = space_id, %failure, "schema change abandoned");
        return Err(failure);
    }
    debug_assert!(
        std::ptr::eq(ddl, &core.shared.ddl),
        "the turn is the server's"
    );
    // Written and fsynced on glommio's thread for blocking calls: an fsync under load takes
    // tens of milliseconds, which this core's requests would wait out.
    let (shared, written) = (core.shared.clone(), round.clone());
    let recorded = glommio::executor()
        .spawn_blocking(move || {
            let rows = (!written.rows.is_empty()).then_some(&written.rows[..]);
            match shared.ddl.record().as_mut() {
                Some(record) => record.write(version, space_id, rows),
                None => Ok(()),
            }
        })
        .await;
    if let Err(reason) = recorded {
        abandon(&round);
        tracing::error!(version, space = space_id, %reason, "schema change abandoned");
        return Err(DdlError::NotDurable(reason));
    }
    round.phase.store(PHASE_COMMIT, Ordering::Release);
    round.all_answered(ANSWER_DONE, false).await;
    tracing::info!(version, space = space_id, "schema change committed");
    Ok(())
}

/// What one core does of a round (see the module doc).
pub async fn follow(core: Rc<Core>, round: Arc<Round>) {
    let me = core.id();
    let cancel = || {
        let space_id = round.change.space_id();
        core.shard.borrow_mut().engine.cancel_redefinition(space_id);
    };
    match prepare(&core, &round).await {
        Ok(()) => round.answer(me, ANSWER_CHECKED),
        Err(error) => {
            cancel();
            return round.fail(me, ANSWER_REFUSED, DdlError::Refused(error));
        }
    }
    if round.past(PHASE_CHECK).await != PHASE_SWITCH {
        return cancel();
    }
    let switched = switch(&core, &round);
    let commit = match switched {
        Ok(commit) => commit,
        Err(SchemaChangeError::Refused(error)) => {
            cancel();
            return round.fail(me, ANSWER_REFUSED, DdlError::Refused(error));
        }
        Err(SchemaChangeError::NotLogged(error)) => {
            return round.fail(me, ANSWER_FAILED, DdlError::NotDurable(error.to_string()))
        }
    };
    let durable = match commit {
        Some(commit) => commit.ignoring_fence().await.map(drop),
        None => Ok(()),
    };
    match durable {
        Ok(()) => round.answer(me, ANSWER_SWITCHED),
        Err(error) => round.fail(me, ANSWER_FAILED, DdlError::NotDurable(error.to_string())),
    }
    let committed = round.past(PHASE_SWITCH).await == PHASE_COMMIT;
    let shard = core.shard.borrow();
    if committed {
        core.set_schema_version(schema::SCHEMA_VERSION_BASE + round.version);
    }
    if let Some(wal) = &shard.wal {
        if committed {
            wal.lift_fence();
        } else {
            wal.abandon_fence(format!(
                "schema change {} was abandoned; restart the server to recover the schema \
                 before it",
                round.version
            ));
        }
    }
    if committed {
        round.answer(me, ANSWER_DONE);
    }
}

/// Whether this core's data allows the round's change, answered once it is ready to switch:
/// a redefinition prepared in slices while the core serves, or, where it cannot be
/// (another primary index), built aside in one step and dropped. Stops early, answering
/// `Ok`, when the round is abandoned (another core refused it).
async fn prepare(core: &Rc<Core>, round: &Arc<Round>) -> Result<(), StorageError> {
    let DefinitionChange::Redefine(def) = &round.change else {
        return Ok(());
    };
    let online = core.shard.borrow_mut().engine.prepare_redefinition(def)?;
    if !online {
        return core.shard.borrow().engine.check_redefinition(def);
    }
    build_in_slices(core, round, def.id, &def.name).await
}

/// Walks space `space_id`'s prepared redefinition to its end, a step at a time, for
/// [`BUILD_SLICE`] at most before it lets the core serve, saying how far it is every
/// [`PROGRESS_EVERY`].
///
/// Between slices it sleeps on a timer, for as long as a slice when the core served
/// requests during the last pause (they keep about half of it), for a timer's turn when it
/// did not (a build alone takes the core). A timer rather than a yield: a yielding task keeps its queue
/// running, and the network is polled only once the queue is empty (or glommio's 100 ms
/// preemption timer fires). A task queue of its own with a latency of its own, which has
/// glommio preempt every queue that often, lost the build's wake-up now and then (a build
/// stalled until the thread was interrupted), so timers it is: the timer fires on the
/// core's next turn, after the requests that arrived are served.
async fn build_in_slices(
    core: &Rc<Core>,
    round: &Round,
    space_id: u32,
    name: &str,
) -> Result<(), StorageError> {
    let tuples = core
        .shard
        .borrow()
        .engine
        .space(space_id)
        .map_or(0, |space| space.len());
    let started = Instant::now();
    let mut reported = started;
    let mut steps = 0usize;
    let tasks_executed = || glommio::executor().executor_stats().tasks_executed();
    let mut others = 0;
    loop {
        let slice = Instant::now();
        while slice.elapsed() < BUILD_SLICE {
            steps += 1;
            if core
                .shard
                .borrow_mut()
                .engine
                .redefinition_step(space_id, STEP_TUPLES)?
            {
                if steps > 1 && tuples >= 100_000 {
                    let seconds = started.elapsed().as_secs_f64();
                    tracing::info!(space = %name, tuples, seconds, "schema change prepared");
                }
                return Ok(());
            }
        }
        if round.phase.load(Ordering::Acquire) == PHASE_ABANDON {
            return Ok(());
        }
        if reported.elapsed() >= PROGRESS_EVERY {
            reported = Instant::now();
            let walked = (steps * STEP_TUPLES).min(tuples);
            tracing::info!(space = %name, walked, tuples, "preparing a schema change");
        }
        let pause = if others > BUSY_TASKS {
            PAUSE_WHEN_BUSY
        } else {
            PAUSE_WHEN_IDLE
        };
        let before = tasks_executed();
        glommio::timer::sleep(pause).await;
        // The build's own run that ended before the pause counts once.
        others = tasks_executed().saturating_sub(before + 1);
    }
}

/// The switch on this core: the shard's change, then what this core derives from its
/// schema (system spaces, catalog).
fn switch(core: &Core, round: &Round) -> Result<Option<crate::wal::Commit>, SchemaChangeError> {
    let mut body = Vec::with_capacity(8 + round.rows.len());
    crate::wal::format::SchemaRow {
        version: round.version,
        definition: &round.rows,
    }
    .encode(&mut body);
    let mut shard = core.shard.borrow_mut();
    let commit = shard.change_schema(round.change.clone(), &body)?;
    let config = &core.shared.config;
    if let Err(error) = schema::refresh_system_spaces(&mut shard.engine, config) {
        tracing::error!(%error, "refreshing the system spaces after a schema change");
    }
    core.set_catalog(schema::catalog_of(&shard.engine, config, core.shard_count));
    Ok(commit)
}

/// Writes what a DDL call answers (a CALL reply's values), from `engine`'s schema.
pub fn encode_reply(engine: &Engine, reply: DdlReply, out: &mut Vec<u8>) -> u32 {
    match reply {
        DdlReply::Nothing => 0,
        DdlReply::SpaceRow { space_id } => {
            let key = {
                let mut key = vec![0x91];
                write_uint(&mut key, u64::from(space_id));
                key
            };
            let row = engine
                .space(schema::SPACE_ID_SPACE)
                .ok()
                .and_then(|space| space.get(0, &key).ok().flatten());
            match row {
                Some(row) => {
                    out.extend_from_slice(row.data());
                    1
                }
                None => 0,
            }
        }
        DdlReply::Index {
            space_id,
            index_id,
            not_created,
        } => {
            let Some(index) = engine.find_space(space_id).and_then(|space| {
                space
                    .indexes()
                    .iter()
                    .find(|index| index.def.id == index_id)
            }) else {
                return 0;
            };
            encode_index_object(space_id, &index.def, out);
            if not_created {
                write_str(out, b"not created");
                return 2;
            }
            1
        }
    }
}

/// The index object's data fields as Tarantool 2.6 encodes them (in its order): unique,
/// parts (`fieldno` from 1), id, space_id, type, name.
fn encode_index_object(space_id: u32, def: &crate::storage::IndexDef, out: &mut Vec<u8>) {
    out.push(0x86);
    write_str(out, b"unique");
    out.push(if def.unique { 0xc3 } else { 0xc2 });
    write_str(out, b"parts");
    crate::msgpack::write_array_len(out, def.key_def.parts.len() as u32);
    for part in &def.key_def.parts {
        let collation = match part.collation {
            Collation::None => None,
            Collation::Binary => Some("binary"),
            Collation::Unicode => Some("unicode"),
            Collation::UnicodeCi => Some("unicode_ci"),
        };
        out.push(0x80 | (3 + collation.is_some() as u8));
        write_str(out, b"type");
        write_str(out, part.field_type.name().as_bytes());
        write_str(out, b"is_nullable");
        out.push(if part.is_nullable { 0xc3 } else { 0xc2 });
        if let Some(collation) = collation {
            write_str(out, b"collation");
            write_str(out, collation.as_bytes());
        }
        write_str(out, b"fieldno");
        write_uint(out, u64::from(part.field_no) + 1);
    }
    write_str(out, b"id");
    write_uint(out, u64::from(def.id));
    write_str(out, b"space_id");
    write_uint(out, u64::from(space_id));
    write_str(out, b"type");
    write_str(out, def.kind.name().to_ascii_uppercase().as_bytes());
    write_str(out, b"name");
    write_str(out, def.name.as_bytes());
}
