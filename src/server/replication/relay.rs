//! The master's side of a replica's subscription: a thread per replica that streams every
//! shard's snapshot (when the replica has none of the shard yet) and then its WAL, batch by
//! batch as the files hold them, following each shard's writer as it appends.
//!
//! A thread, not a task on a shard's core: it reads files and waits on a socket, and a
//! shard's core must do neither. It reads only what each writer has reported written (the
//! LSN the writer publishes), so it never sees a batch half copied. What the replica
//! acknowledges is read by a second thread, which also notices the replica leaving.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::protocol::client::split_server_frame;
use crate::protocol::replication::{self as wire, Streamed, Subscribed};
use crate::protocol::ErrorCode;
use crate::server::Shared;
use crate::wal::follow::{newest_snapshot, WalFollower};
use crate::wal::{SnapshotReader, WalError};

use super::schema_gate::SchemaGate;
use super::status::Downstream;
use super::Subscription;

/// How long the relay sleeps when no shard has anything new: briefly while synchronous
/// writes are held and rows came recently (a sync write waits for the replica's
/// acknowledgement, so for this relay to notice its row), else 1 ms (an idle relay costs
/// ~1,000 wake-ups a second, not 20,000; and under an asynchronous load it sends a
/// millisecond's rows at a time, in fewer and larger writes, which the master's own writes
/// feel on a machine with few cores).
const IDLE_SLEEP_BUSY: Duration = Duration::from_micros(50);
const IDLE_SLEEP_QUIET: Duration = Duration::from_millis(1);
/// How long after the last row the relay keeps the short sleep.
const BUSY_FOR: Duration = Duration::from_millis(200);
/// How often the master says what its shards have written.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// The bytes of packets gathered before they are written.
const SEND_BYTES: usize = 1 << 20;
/// The longest partial packet the acknowledgement reader keeps.
const ACK_BYTES_MAX: usize = 64 * 1024;
/// Tuples per snapshot packet, at most.
const SNAPSHOT_TUPLES_PER_PACKET: usize = 4096;

/// Why a relay stopped.
#[derive(Debug, thiserror::Error)]
enum RelayError {
    #[error("the replica's socket: {0}")]
    Socket(#[from] std::io::Error),
    #[error("{0}")]
    Wal(#[from] WalError),
    #[error("{0}")]
    Refused(String),
}

/// Where one master shard's stream is.
enum Source {
    /// Its snapshot's schema (until sent), then its tuples block by block; then the WAL (in
    /// `dir`) after `lsn`.
    Snapshot {
        reader: Box<SnapshotReader>,
        schema: Option<Vec<u8>>,
        lsn: u64,
        dir: PathBuf,
    },
    /// No snapshot on disk yet: the WAL from its first row.
    Empty {
        dir: PathBuf,
    },
    Wal(WalFollower),
}

impl Source {
    /// The schema version the stream starts at: its snapshot's, or (from a position) the
    /// version the replica has.
    fn schema_version(&self, subscription: &Subscription) -> u64 {
        match self {
            Source::Snapshot { reader, .. } => reader
                .schema
                .as_deref()
                .and_then(crate::server::schema::read_entries)
                .map_or(0, |(version, _)| version),
            Source::Empty { .. } => 0,
            Source::Wal(_) => subscription.schema_version,
        }
    }

    /// The last LSN of its shard the replica has or is being sent in a snapshot: the WAL
    /// after it must stay.
    fn needs_after(&self) -> Option<u64> {
        Some(match self {
            Source::Snapshot { lsn, .. } => *lsn,
            Source::Empty { .. } => 0,
            Source::Wal(follower) => follower.lsn_next() - 1,
        })
    }
}

/// Starts the relay of a subscription answered on `socket`.
pub fn spawn(shared: Arc<Shared>, mut socket: TcpStream, subscription: Subscription) {
    let name = format!("relay-{}", subscription.peer);
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        let peer = subscription.peer.clone();
        if subscription.writable {
            // A master watching this instance's term: not a replica (nothing to keep for it,
            // nothing it acknowledges counts).
            let outcome = watch_term(&shared, &mut socket, &subscription);
            let _ = socket.shutdown(std::net::Shutdown::Both);
            tracing::debug!(%peer, ?outcome, "a master stopped watching this instance's term");
            return;
        }
        let downstream = shared.replication.add_downstream(&subscription);
        let outcome = relay(&shared, &mut socket, &subscription, &downstream);
        // The acknowledgement reader holds the socket too: ends its read, and the link.
        let _ = socket.shutdown(std::net::Shutdown::Both);
        match outcome {
            Ok(()) => tracing::info!(%peer, "replica left"),
            Err(error) => tracing::warn!(%peer, %error, "relay stopped"),
        }
        downstream.stop();
    });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start a relay thread");
    }
}

fn relay(
    shared: &Shared,
    socket: &mut TcpStream,
    subscription: &Subscription,
    downstream: &Arc<Downstream>,
) -> Result<(), RelayError> {
    answer(shared, socket, subscription)?;
    let mut sources = open_sources(shared, subscription)?;
    downstream.starts_from(sources.iter().map(Source::needs_after).collect());
    let versions_at = sources
        .iter()
        .map(|source| source.schema_version(subscription))
        .collect();
    let mut gate = SchemaGate::new(versions_at, subscription.schema_version);
    tracing::info!(peer = %subscription.peer, replica = %subscription.instance_uuid,
        from = ?subscription.vclock, "replica subscribed");
    watch_acks(socket.try_clone()?, downstream.clone());
    let mut out = Vec::with_capacity(SEND_BYTES + 64 * 1024);
    let mut last_heartbeat = Instant::now();
    let mut last_progress = Instant::now();
    while !downstream.is_gone() {
        let mut streams = (sources.as_mut_slice(), &mut gate);
        let progress = fill_all(shared, socket, subscription.sync, &mut streams, &mut out)?;
        gate.release((subscription.sync, &mut out));
        // Also while rows flow: the replica measures its lag against what it says.
        if last_heartbeat.elapsed() >= HEARTBEAT_EVERY {
            encode_heartbeat(shared, subscription.sync, &mut out);
            last_heartbeat = Instant::now();
        }
        if !out.is_empty() {
            socket.write_all(&out)?;
            out.clear();
        }
        if progress {
            last_progress = Instant::now();
        } else if last_progress.elapsed() < BUSY_FOR && shared.sync_writes.load(Ordering::Relaxed) {
            std::thread::sleep(IDLE_SLEEP_BUSY);
        } else {
            std::thread::sleep(IDLE_SLEEP_QUIET);
        }
    }
    Ok(())
}

/// What this instance's shards have written, and its term.
fn encode_heartbeat(shared: &Shared, sync: u64, out: &mut Vec<u8>) {
    let vclock = shared.wal_written_vclock();
    wire::encode_heartbeat(sync, &vclock, shared.terms.current(), out);
}

/// For a subscriber that is a master itself: the answer, then a heartbeat a second (each
/// with the term) until it leaves; a newer term it hears fences it.
fn watch_term(
    shared: &Shared,
    socket: &mut TcpStream,
    subscription: &Subscription,
) -> Result<(), RelayError> {
    answer(shared, socket, subscription)?;
    let mut out = Vec::new();
    loop {
        std::thread::sleep(HEARTBEAT_EVERY);
        out.clear();
        encode_heartbeat(shared, subscription.sync, &mut out);
        socket.write_all(&out)?;
    }
}

/// Answers the SUBSCRIBE: a refusal (then the relay ends), or what this master is. A newer
/// term the subscriber brings is taken first, so the answer says whether this instance
/// still accepts writes.
fn answer(
    shared: &Shared,
    socket: &mut TcpStream,
    subscription: &Subscription,
) -> Result<(), RelayError> {
    shared.observe_term(subscription.term, &subscription.peer);
    let shard_count = shared.wal_written.len();
    let mut out = Vec::new();
    if let Some(message) = refuse(shared, subscription, shard_count) {
        let code = ErrorCode::ER_UNSUPPORTED;
        crate::protocol::reply::encode_error(&mut out, subscription.sync, 0, code, &message);
        socket.write_all(&out)?;
        return Err(RelayError::Refused(message));
    }
    Subscribed {
        protocol: wire::PROTOCOL_VERSION,
        instance_uuid: &shared.instance_uuid.to_string(),
        fingerprint: shared.fingerprint,
        shard_count: shard_count as u32,
        vclock: shared.wal_written_vclock(),
        term: shared.terms.current(),
        writable: !shared.is_read_only(),
    }
    .encode(subscription.sync, &mut out);
    socket.write_all(&out)?;
    Ok(())
}

/// One round over the shards' streams into `out`; whether any had something. Rows the
/// master no longer has end the relay with ER_XLOG_GAP sent.
fn fill_all(
    shared: &Shared,
    socket: &mut TcpStream,
    sync: u64,
    (sources, gate): &mut (&mut [Source], &mut SchemaGate),
    out: &mut Vec<u8>,
) -> Result<bool, RelayError> {
    let mut progress = false;
    // Each shard a share of a write's bytes: a busy shard does not hold the others back.
    let share = SEND_BYTES / sources.len();
    for (shard, source) in sources.iter_mut().enumerate() {
        let written = shared.wal_written[shard].load(Ordering::Acquire);
        let budget = out.len() + share;
        match fill((shard as u32, sync), source, (written, budget), gate, out) {
            Ok(filled) => progress |= filled,
            Err(RelayError::Wal(gap @ WalError::MissingRows { .. })) => {
                return Err(refuse_gap(socket, sync, shard, gap))
            }
            Err(error) => return Err(error),
        }
    }
    Ok(progress)
}

/// Tells the replica that rows it needs are gone (ER_XLOG_GAP): it copies the master again.
fn refuse_gap(socket: &mut TcpStream, sync: u64, shard: usize, gap: WalError) -> RelayError {
    let message = format!(
        "master shard {shard}: {gap}; the replica fell behind what this master keeps (wal_cleanup_delay, checkpoint_count) and must copy it again"
    );
    let mut out = Vec::new();
    crate::protocol::reply::encode_error(&mut out, sync, 0, ErrorCode::ER_XLOG_GAP, &message);
    match socket.write_all(&out) {
        Ok(()) => RelayError::Refused(message),
        Err(error) => RelayError::Socket(error),
    }
}

/// Why this master cannot serve the subscription, if it cannot.
fn refuse(shared: &Shared, subscription: &Subscription, shard_count: usize) -> Option<String> {
    if shared.config.durability.wal_mode == crate::config::WalMode::None {
        return Some("replication needs the master's WAL; this master runs wal_mode = none".into());
    }
    if subscription.fingerprint != 0 && subscription.fingerprint != shared.fingerprint {
        return Some(format!(
            "the replica's position is of another master (data directory {:#018x}, this one is \
             {:#018x}): empty the replica's data directory to copy this master",
            subscription.fingerprint, shared.fingerprint
        ));
    }
    if subscription.vclock.len() > shard_count {
        return Some(format!(
            "the replica's position names {} master shards; this master has {shard_count}",
            subscription.vclock.len()
        ));
    }
    None
}

/// Whether `subscription` copies a shard that has no snapshot on disk yet: a copy starts
/// from a snapshot, whose schema section tells the replica what spaces to make, so the
/// caller takes one first (`box.snapshot()`).
pub fn copies_without_snapshot(shared: &Shared, subscription: &Subscription) -> bool {
    if subscription.writable {
        return false;
    }
    (0..shared.wal_written.len()).any(|shard| {
        let dir = crate::wal::dir::shard_dir(&shared.config.data_dir, shard as u32);
        let copies = subscription.vclock.get(shard).copied().flatten().is_none();
        copies && matches!(newest_snapshot(&dir), Ok(None))
    })
}

/// Each shard's stream: from after the replica's LSN, or its snapshot first.
fn open_sources(shared: &Shared, subscription: &Subscription) -> Result<Vec<Source>, RelayError> {
    (0..shared.wal_written.len())
        .map(|shard| {
            let dir = crate::wal::dir::shard_dir(&shared.config.data_dir, shard as u32);
            match subscription.vclock.get(shard).copied().flatten() {
                Some(lsn) => Ok(Source::Wal(WalFollower::new(dir, shard as u32, lsn + 1))),
                None => match newest_snapshot(&dir)? {
                    Some((lsn, path)) => {
                        let reader = Box::new(SnapshotReader::open(&path)?);
                        Ok(Source::Snapshot {
                            schema: reader.schema.clone(),
                            reader,
                            lsn,
                            dir,
                        })
                    }
                    None => Ok(Source::Empty { dir }),
                },
            }
        })
        .collect()
}

/// Appends what `source` has next to `out`: WAL batches until `out` passes `budget` bytes
/// (rows up to `written`), or one snapshot block; whether anything was.
fn fill(
    (shard, sync): (u32, u64),
    source: &mut Source,
    (written, budget): (u64, usize),
    gate: &mut SchemaGate,
    out: &mut Vec<u8>,
) -> Result<bool, RelayError> {
    match source {
        Source::Empty { dir } => {
            wire::encode_snapshot_end(sync, shard, 0, out);
            *source = Source::Wal(WalFollower::new(dir.clone(), shard, 1));
            Ok(true)
        }
        Source::Snapshot {
            reader,
            schema,
            lsn,
            dir,
        } => {
            if let Some(schema) = schema.take() {
                wire::encode_snapshot_schema(sync, shard, &schema, out);
                return Ok(true);
            }
            match reader.next_block()? {
                Some(block) => {
                    let tuples: Vec<&[u8]> = block.tuples().collect();
                    for chunk in tuples.chunks(SNAPSHOT_TUPLES_PER_PACKET) {
                        let key = (sync, shard, block.space_id);
                        wire::encode_snapshot_tuples(key, chunk.iter().copied(), out);
                    }
                }
                None => {
                    wire::encode_snapshot_end(sync, shard, *lsn, out);
                    *source = Source::Wal(WalFollower::new(dir.clone(), shard, *lsn + 1));
                }
            }
            Ok(true)
        }
        Source::Wal(follower) => {
            let mut any = false;
            while out.len() < budget && !gate.is_held(shard as usize) {
                let Some(batch) = follower.next_batch(written)? else {
                    break;
                };
                if let Some(batch) = gate.admit(shard as usize, batch) {
                    wire::encode_wal_batch(sync, shard, batch.lsn_first, &batch.bytes, out);
                }
                any = true;
            }
            Ok(any)
        }
    }
}

/// Reads the replica's acknowledgements until it leaves (then marks it gone).
fn watch_acks(mut socket: TcpStream, downstream: Arc<Downstream>) {
    let spawned = std::thread::Builder::new()
        .name("relay-acks".into())
        .spawn(move || {
            let mut buffer = Vec::with_capacity(4096);
            let mut chunk = [0u8; 4096];
            loop {
                let read = match socket.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(read) => read,
                };
                buffer.extend_from_slice(&chunk[..read]);
                if !take_acks(&mut buffer, &downstream) {
                    break;
                }
            }
            downstream.set_gone();
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start a relay's acknowledgement thread");
    }
}

/// Takes the whole ACK packets off the front of `buffer`; false on bytes that are not one.
fn take_acks(buffer: &mut Vec<u8>, downstream: &Downstream) -> bool {
    let mut consumed = 0;
    loop {
        let (packet, taken) = match split_server_frame(&buffer[consumed..]) {
            Ok(Some(split)) => split,
            Ok(None) => break,
            Err(_) => return false,
        };
        match wire::decode_streamed(packet) {
            Ok(Streamed::Ack { vclock }) => downstream.acknowledged(&vclock),
            _ => return false,
        }
        consumed += taken;
    }
    buffer.drain(..consumed);
    // An acknowledgement is a few bytes: a longer partial packet is not one.
    buffer.len() <= ACK_BYTES_MAX
}
