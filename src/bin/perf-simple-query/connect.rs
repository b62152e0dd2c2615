//! `--connect HOST:PORT`: a network load generator for any IPROTO server.
//!
//! `--smp` glommio executors (unpinned: the server under test usually shares the machine),
//! each owning `conns / smp` connections (the first `conns % smp` one more). A connection
//! keeps `--pipeline` requests in flight: it writes every free slot's request in one write,
//! reads whatever replies arrived, frees their slots and writes again. Replies may come back
//! in any order, so the sync carries the slot: `sync = sequence << SLOT_BITS | slot`.
//!
//! Sizing: 16 connections x 128 in flight is 2048 slots, each a timestamp and a sync
//! (32 KiB); a connection's buffers start at 64 KiB and grow only for a reply larger than
//! that (a big --select-range). Steady state allocates nothing.
//!
//! Latency is from the moment a batch is written to the moment the read holding the reply
//! returns, so it includes the client's own queueing; it is recorded in a log-linear
//! histogram per executor and merged at the end.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use glommio::{LocalExecutorBuilder, Placement};
use tarn::protocol::client::{decode_reply, encode_auth, split_server_frame, Reply};
use tarn::protocol::greeting::{parse_greeting, GREETING_SIZE};

use crate::cli::{Budget, LoadConfig, Operation};
use crate::driver::{Driver, DriverError, LoadProgress, Outcome, Scope};
use crate::histogram::Histogram;
use crate::workload::{encode_customer_insert, encode_operation, encode_populate, KeyGenerator};

const SLOT_BITS: u32 = 16;
const MAX_PIPELINE: usize = 1 << SLOT_BITS;
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Requests in flight per connection while populating, whatever --pipeline says.
const POPULATE_PIPELINE: usize = 128;
const MEASURE_POLL: Duration = Duration::from_millis(1);
/// How often the driver thread looks for a silent server while measuring.
const SILENCE_POLL: Duration = Duration::from_millis(100);

/// Everything a connection needs to know, shared by the executors.
#[derive(Debug, Clone)]
struct NetworkRunPlan {
    addr: SocketAddr,
    threads: usize,
    conns: usize,
    pipeline: usize,
    operation: Operation,
    operations_per_thread: Option<u64>,
    partitions: u64,
    populate: bool,
    seed: u64,
    single_key: bool,
    user: Option<(String, String)>,
    /// A server silent for this long fails the run instead of hanging it.
    io_timeout: Duration,
}

pub struct Connect {
    plan: NetworkRunPlan,
}

impl Connect {
    pub fn new(config: &LoadConfig, addr: SocketAddr) -> Connect {
        let args = &config.args;
        Connect {
            plan: NetworkRunPlan {
                addr,
                threads: config.smp,
                conns: args.conns,
                pipeline: args.pipeline,
                operation: config.operation,
                operations_per_thread: match config.budget {
                    Budget::OperationsPerShard(n) => Some(n),
                    Budget::Duration(_) => None,
                },
                partitions: args.partitions,
                populate: !args.no_populate,
                seed: config.seed,
                single_key: args.query_single_key,
                user: args.user.clone().map(|u| (u, args.password.clone())),
                io_timeout: Duration::from_secs(args.io_timeout),
            },
        }
    }
}

impl Driver for Connect {
    fn workers(&self) -> usize {
        self.plan.threads
    }

    fn scope(&self) -> Scope {
        Scope::Client
    }

    fn run(self: Box<Self>, progress: Arc<LoadProgress>) -> Result<Outcome, DriverError> {
        let plan = Arc::new(self.plan);
        if plan.pipeline > MAX_PIPELINE {
            return Err(DriverError::Setup(format!(
                "--pipeline {} is above the limit of {MAX_PIPELINE}",
                plan.pipeline
            )));
        }
        let watchdog = Arc::new(Watchdog::default());
        let mut handles = Vec::with_capacity(plan.threads);
        for thread in 0..plan.threads {
            let (plan, progress, watchdog) = (plan.clone(), progress.clone(), watchdog.clone());
            let handle = LocalExecutorBuilder::new(Placement::Unbound)
                .name(&format!("client-{thread}"))
                .spawn(move || async move {
                    let result = worker(thread, &plan, &progress, &watchdog).await;
                    if result.is_err() {
                        progress.stop();
                    }
                    progress.worker_done();
                    result
                })
                .map_err(|e| DriverError::Setup(format!("client executor: {e}")))?;
            handles.push(handle);
        }
        let silent = watchdog.wait_for_workers(&plan, &progress);
        let mut outcome = Outcome {
            latency_ns: Some(Histogram::default()),
            populated_keys: if plan.populate { plan.partitions } else { 0 },
            mesh: None,
        };
        let mut first_error = None;
        for handle in handles {
            match handle.join() {
                Ok(Ok(histogram)) => outcome.latency_ns.as_mut().unwrap().merge(&histogram),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    first_error.get_or_insert(DriverError::Setup(format!("client executor: {e}")));
                }
            }
        }
        if silent {
            return Err(DriverError::Connection(format!(
                "{} sent no reply for {} s (--io-timeout)",
                plan.addr,
                plan.io_timeout.as_secs()
            )));
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(outcome),
        }
    }
}

/// Watches the measured phase for a server that stopped answering.
///
/// Before measuring, each connection's reads and writes carry glommio timeouts. While
/// measuring they do not: with a timer pending, every time an executor goes to sleep glommio
/// arms a kernel timeout and cancels it on waking, tens of thousands of times a second,
/// which was a tenth of the load generator's CPU at 16 x 128, taken from the server under
/// test on a shared machine. Instead the connections register their sockets here, and the
/// driver's thread, which otherwise only waits, shuts them all down once no operation has
/// completed for `--io-timeout`: every blocked read or write then fails, and the run ends.
#[derive(Default)]
struct Watchdog {
    sockets: Mutex<Vec<RawFd>>,
}

/// A socket registered with the [`Watchdog`] for as long as this lives.
struct Watched<'a> {
    watchdog: &'a Watchdog,
    socket: RawFd,
}

impl Drop for Watched<'_> {
    fn drop(&mut self) {
        let mut sockets = self.watchdog.sockets.lock().unwrap();
        if let Some(at) = sockets.iter().position(|&socket| socket == self.socket) {
            sockets.swap_remove(at);
        }
    }
}

impl Watchdog {
    /// Registers `socket` until the guard is dropped (before the socket is closed).
    fn watch(&self, socket: RawFd) -> Watched<'_> {
        self.sockets.lock().unwrap().push(socket);
        Watched {
            watchdog: self,
            socket,
        }
    }

    /// Blocks until every worker is done; returns true when that took shutting the sockets
    /// down because the server went silent.
    fn wait_for_workers(&self, plan: &NetworkRunPlan, progress: &LoadProgress) -> bool {
        let mut last_change: Option<(u64, Instant)> = None;
        while progress.done_workers() < plan.threads {
            std::thread::sleep(SILENCE_POLL);
            if !progress.is_measuring() {
                continue;
            }
            let operations = progress.totals().operations;
            match last_change {
                Some((seen, since)) if seen == operations => {
                    if since.elapsed() >= plan.io_timeout {
                        progress.stop();
                        self.shut_down_all();
                        return true;
                    }
                }
                _ => last_change = Some((operations, Instant::now())),
            }
        }
        false
    }

    fn shut_down_all(&self) {
        for &socket in self.sockets.lock().unwrap().iter() {
            // SAFETY: `shutdown` takes a descriptor by value and touches no memory of ours;
            // a registered descriptor is still open (its guard unregisters it first).
            unsafe { libc::shutdown(socket, libc::SHUT_RDWR) };
        }
    }
}

/// What `--load-customers` did.
#[derive(Debug, Clone, Copy)]
pub struct LoadReport {
    pub rows: u64,
    /// From the first connect to the last reply.
    pub elapsed: Duration,
}

/// `--load-customers ROWS`: INSERTs the `customers` rows with ids `0..rows` (see
/// [`crate::workload::write_customer`]); each of the `--conns` connections sends a contiguous
/// id range with `--pipeline` requests in flight. Any error reply fails the load.
pub fn load_customers(
    config: &LoadConfig,
    addr: SocketAddr,
    rows: u64,
) -> Result<LoadReport, DriverError> {
    let mut plan = Connect::new(config, addr).plan;
    plan.partitions = rows;
    plan.populate = false;
    let plan = Arc::new(plan);
    if plan.pipeline > MAX_PIPELINE {
        return Err(DriverError::Setup(format!(
            "--pipeline {} is above the limit of {MAX_PIPELINE}",
            plan.pipeline
        )));
    }
    let started = Instant::now();
    let mut handles = Vec::with_capacity(plan.threads);
    for thread in 0..plan.threads {
        let plan = plan.clone();
        let handle = LocalExecutorBuilder::new(Placement::Unbound)
            .name(&format!("loader-{thread}"))
            .spawn(move || async move { load_worker(thread, &plan).await })
            .map_err(|e| DriverError::Setup(format!("client executor: {e}")))?;
        handles.push(handle);
    }
    let mut first_error = None;
    for handle in handles {
        let result = handle
            .join()
            .map_err(|e| DriverError::Setup(format!("client executor: {e}")))
            .and_then(|result| result);
        if let Err(e) = result {
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(LoadReport {
            rows,
            elapsed: started.elapsed(),
        }),
    }
}

/// One loader executor: its connections, each inserting its id range concurrently.
async fn load_worker(thread: usize, plan: &Arc<NetworkRunPlan>) -> Result<(), DriverError> {
    let indexes = connections_of(thread, plan.threads, plan.conns);
    let mut tasks = Vec::with_capacity(indexes.len());
    for index in indexes {
        let mut connection = LoadConnection::open(plan).await?;
        let ids = populate_range(index, plan.conns, plan.partitions);
        let (pipeline, seed) = (plan.pipeline, plan.seed);
        tasks.push(glommio::spawn_local(async move {
            connection
                .send_each(ids, pipeline, "loading customers", |out, scratch, id| {
                    encode_customer_insert(out, scratch, seed, id)
                })
                .await
        }));
    }
    for task in tasks {
        task.await?;
    }
    Ok(())
}

/// Connection indexes (global, 0..conns) owned by `thread`.
fn connections_of(thread: usize, threads: usize, conns: usize) -> std::ops::Range<usize> {
    let base = conns / threads;
    let extra = conns % threads;
    let start = thread * base + thread.min(extra);
    start..start + base + usize::from(thread < extra)
}

/// Keys of `0..partitions` populated by connection `index` of `conns`: a contiguous range.
fn populate_range(index: usize, conns: usize, partitions: u64) -> std::ops::Range<u64> {
    let per = partitions.div_ceil(conns as u64);
    let start = (index as u64 * per).min(partitions);
    start..(start + per).min(partitions)
}

async fn worker(
    thread: usize,
    plan: &Arc<NetworkRunPlan>,
    progress: &Arc<LoadProgress>,
    watchdog: &Arc<Watchdog>,
) -> Result<Histogram, DriverError> {
    progress.register_current_thread();
    let indexes = connections_of(thread, plan.threads, plan.conns);
    let mut connections = Vec::with_capacity(indexes.len());
    for index in indexes.clone() {
        connections.push(LoadConnection::open(plan).await?);
        debug_assert!(index < plan.conns);
    }
    if plan.populate {
        let tasks: Vec<_> = connections
            .into_iter()
            .zip(indexes.clone())
            .map(|(mut connection, index)| {
                let keys = populate_range(index, plan.conns, plan.partitions);
                let (operation, seed) = (plan.operation, plan.seed);
                glommio::spawn_local(async move {
                    connection
                        .populate(keys, operation, seed)
                        .await
                        .map(|()| connection)
                })
            })
            .collect();
        connections = Vec::with_capacity(tasks.len());
        for task in tasks {
            connections.push(task.await?);
        }
    }
    progress.worker_ready();
    while !progress.is_measuring() {
        if progress.should_stop() {
            return Ok(Histogram::default());
        }
        glommio::timer::sleep(MEASURE_POLL).await;
    }
    let shared = Rc::new(WorkerState {
        thread,
        histogram: RefCell::new(Histogram::default()),
        budget: Cell::new(plan.operations_per_thread),
    });
    let tasks: Vec<_> = connections
        .into_iter()
        .zip(indexes)
        .map(|(mut connection, index)| {
            let (plan, progress, shared) = (plan.clone(), progress.clone(), shared.clone());
            let watchdog = watchdog.clone();
            glommio::spawn_local(async move {
                let keys =
                    KeyGenerator::new(plan.seed, index as u64, plan.partitions, plan.single_key);
                connection
                    .load(&plan, keys, &progress, &shared, &watchdog)
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    let histogram = shared.histogram.borrow().clone();
    Ok(histogram)
}

/// State the connections of one executor share.
struct WorkerState {
    thread: usize,
    histogram: RefCell<Histogram>,
    /// Operations this executor may still start; `None` = until stopped.
    budget: Cell<Option<u64>>,
}

impl WorkerState {
    fn claim(&self) -> bool {
        match self.budget.get() {
            None => true,
            Some(0) => false,
            Some(n) => {
                self.budget.set(Some(n - 1));
                true
            }
        }
    }
}

struct LoadConnection {
    addr: SocketAddr,
    stream: TcpStream,
    read_buf: Vec<u8>,
    filled: usize,
    write_buf: Vec<u8>,
    scratch: Vec<u8>,
    sequence: u64,
}

fn io_error(what: &str, addr: SocketAddr, e: impl std::fmt::Display) -> DriverError {
    DriverError::Connection(format!("{what} {addr}: {e}"))
}

impl LoadConnection {
    async fn open(plan: &NetworkRunPlan) -> Result<LoadConnection, DriverError> {
        let addr = plan.addr;
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| io_error("connect to", addr, e))?;
        stream
            .set_nodelay(true)
            .and_then(|()| stream.set_read_timeout(Some(plan.io_timeout)))
            .and_then(|()| stream.set_write_timeout(Some(plan.io_timeout)))
            .map_err(|e| io_error("socket options for", addr, e))?;
        let mut connection = LoadConnection {
            addr,
            stream,
            read_buf: vec![0; READ_BUFFER_BYTES],
            filled: 0,
            write_buf: Vec::with_capacity(READ_BUFFER_BYTES),
            scratch: Vec::with_capacity(64),
            sequence: 0,
        };
        let mut greeting = [0u8; GREETING_SIZE];
        connection
            .stream
            .read_exact(&mut greeting)
            .await
            .map_err(|e| io_error("greeting from", addr, e))?;
        let greeting = parse_greeting(&greeting)
            .ok_or_else(|| DriverError::Connection(format!("{addr} sent no IPROTO greeting")))?;
        if let Some((user, password)) = &plan.user {
            let mut out = Vec::new();
            encode_auth(&mut out, 1, user, greeting.salt(), password.as_bytes());
            connection.send(&out, addr).await?;
            let mut failure = None;
            connection
                .receive(addr, |reply, _| {
                    if reply.is_error() {
                        failure = Some(describe(&reply));
                    }
                    Ok(())
                })
                .await?;
            if let Some(text) = failure {
                return Err(DriverError::Setup(format!("auth as {user}: {text}")));
            }
        }
        Ok(connection)
    }

    async fn send(&mut self, bytes: &[u8], addr: SocketAddr) -> Result<(), DriverError> {
        self.stream
            .write_all(bytes)
            .await
            .map_err(|e| io_error("write to", addr, e))
    }

    /// Reads once (more if a reply is only partly there) and hands every whole reply to
    /// `on_reply`, with the moment the read holding it returned; returns how many there were.
    /// One clock reading per read, not per reply: at millions of replies a second the clock
    /// was a tenth of the client's CPU, taken from the server under test on a shared machine.
    async fn receive(
        &mut self,
        addr: SocketAddr,
        mut on_reply: impl FnMut(Reply<'_>, Instant) -> Result<(), DriverError>,
    ) -> Result<usize, DriverError> {
        loop {
            if self.filled == self.read_buf.len() {
                self.read_buf.resize(self.read_buf.len() * 2, 0);
            }
            let read = self
                .stream
                .read(&mut self.read_buf[self.filled..])
                .await
                .map_err(|e| io_error("read from", addr, e))?;
            if read == 0 {
                return Err(DriverError::Connection(format!(
                    "{addr} closed the connection"
                )));
            }
            let arrived = Instant::now();
            self.filled += read;
            let mut consumed = 0;
            let mut replies = 0;
            while let Some((packet, used)) =
                split_server_frame(&self.read_buf[consumed..self.filled])
                    .map_err(|e| io_error("bad frame from", addr, e))?
            {
                let reply =
                    decode_reply(packet).map_err(|e| io_error("bad reply from", addr, e))?;
                on_reply(reply, arrived)?;
                consumed += used;
                replies += 1;
            }
            self.read_buf.copy_within(consumed..self.filled, 0);
            self.filled -= consumed;
            if replies > 0 {
                return Ok(replies);
            }
        }
    }

    /// REPLACEs every key of `keys` for `operation` (see [`encode_populate`]),
    /// `POPULATE_PIPELINE` in flight; any error reply fails.
    async fn populate(
        &mut self,
        keys: std::ops::Range<u64>,
        operation: Operation,
        seed: u64,
    ) -> Result<(), DriverError> {
        self.send_each(
            keys,
            POPULATE_PIPELINE,
            "populating keys",
            |out, scratch, key| encode_populate(out, scratch, operation, seed, key),
        )
        .await
    }

    /// Sends the request `encode` appends for each id of `ids`, `in_flight_max` in flight,
    /// until all are answered; the first error reply fails with `what` in its text.
    async fn send_each(
        &mut self,
        ids: std::ops::Range<u64>,
        in_flight_max: usize,
        what: &str,
        mut encode: impl FnMut(&mut Vec<u8>, &mut Vec<u8>, u64),
    ) -> Result<(), DriverError> {
        assert!(in_flight_max > 0);
        let addr = self.addr;
        let mut next = ids.start;
        let mut in_flight = 0usize;
        while next < ids.end || in_flight > 0 {
            while next < ids.end && in_flight < in_flight_max {
                encode(&mut self.write_buf, &mut self.scratch, next);
                next += 1;
                in_flight += 1;
            }
            if !self.write_buf.is_empty() {
                let out = std::mem::take(&mut self.write_buf);
                self.send(&out, addr).await?;
                self.write_buf = out;
                self.write_buf.clear();
            }
            let mut failure = None;
            let answered = self
                .receive(addr, |reply, _| {
                    if reply.is_error() && failure.is_none() {
                        failure = Some(describe(&reply));
                    }
                    Ok(())
                })
                .await?;
            assert!(answered <= in_flight, "more replies than requests");
            in_flight -= answered;
            if let Some(text) = failure {
                return Err(DriverError::Setup(format!("{what}: {text}")));
            }
        }
        Ok(())
    }

    /// The measured loop: keep `pipeline` requests in flight until stopped or out of budget.
    async fn load(
        &mut self,
        plan: &NetworkRunPlan,
        mut keys: KeyGenerator,
        progress: &LoadProgress,
        worker: &WorkerState,
        watchdog: &Watchdog,
    ) -> Result<(), DriverError> {
        let addr = plan.addr;
        // The watchdog takes over from the per-operation timeouts (see `Watchdog`).
        let _watched = watchdog.watch(self.stream.as_raw_fd());
        self.stream
            .set_read_timeout(None)
            .and_then(|()| self.stream.set_write_timeout(None))
            .map_err(|e| io_error("socket options for", addr, e))?;
        let pipeline = plan.pipeline;
        let mut free: Vec<usize> = (0..pipeline).rev().collect();
        let mut started = vec![Instant::now(); pipeline];
        let mut slot_sync = vec![0u64; pipeline];
        let counts = &progress.workers[worker.thread];
        loop {
            let stopping = progress.should_stop();
            let now = Instant::now();
            while !stopping && !free.is_empty() && worker.claim() {
                let slot = free.pop().unwrap();
                self.sequence += 1;
                let sync = self.sequence << SLOT_BITS | slot as u64;
                encode_operation(
                    &mut self.write_buf,
                    &mut self.scratch,
                    plan.operation,
                    plan.seed,
                    sync,
                    keys.next_key(),
                );
                started[slot] = now;
                slot_sync[slot] = sync;
            }
            if !self.write_buf.is_empty() {
                let out = std::mem::take(&mut self.write_buf);
                self.send(&out, addr).await?;
                self.write_buf = out;
                self.write_buf.clear();
            }
            if free.len() == pipeline {
                return Ok(());
            }
            let mut errors = 0u64;
            let received = self
                .receive(addr, |reply, done| {
                    let slot = (reply.sync() & (MAX_PIPELINE as u64 - 1)) as usize;
                    if slot >= pipeline || slot_sync[slot] != reply.sync() {
                        return Err(DriverError::Connection(format!(
                            "{addr} answered sync {} which is not in flight",
                            reply.sync()
                        )));
                    }
                    slot_sync[slot] = 0;
                    free.push(slot);
                    let latency = done.duration_since(started[slot]).as_nanos() as u64;
                    worker.histogram.borrow_mut().record(latency);
                    if reply.is_error() {
                        errors += 1;
                        progress.record_error(|| describe(&reply));
                    }
                    Ok(())
                })
                .await?;
            counts
                .operations
                .fetch_add(received as u64, std::sync::atomic::Ordering::Relaxed);
            if errors > 0 {
                counts
                    .errors
                    .fetch_add(errors, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

pub(crate) fn describe(reply: &Reply<'_>) -> String {
    let code = reply.error_code().map_or(0, |c| c.0);
    let message = reply.error_message().unwrap_or("(no message)");
    format!("error {code}: {message}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_split_evenly_and_cover_all() {
        for (threads, conns) in [(1, 1), (2, 16), (3, 16), (4, 5), (16, 16)] {
            let mut next = 0;
            for thread in 0..threads {
                let range = connections_of(thread, threads, conns);
                assert_eq!(range.start, next);
                assert!(range.len() == conns / threads || range.len() == conns / threads + 1);
                next = range.end;
            }
            assert_eq!(next, conns);
        }
    }

    #[test]
    fn populate_ranges_cover_all_keys_once() {
        for (conns, partitions) in [(1, 10), (16, 1_000_000), (3, 10), (16, 5)] {
            let mut next = 0;
            for index in 0..conns {
                let range = populate_range(index, conns, partitions);
                assert_eq!(range.start, next.min(partitions));
                next = range.end.max(next);
            }
            assert_eq!(next, partitions);
        }
    }
}
