//! The seam between the measuring machinery and what generates the operations.
//!
//! A [`Driver`] runs on its own thread and blocks until done. It reports through the shared
//! [`LoadProgress`]: per-shard completed operations and errors (atomics the sampler reads every
//! second), the perf counters of each worker thread, and a readiness count. The protocol:
//!
//! 1. Each worker sets itself up (connects, populates), registers its counters, then calls
//!    [`LoadProgress::worker_ready`] and waits for [`LoadProgress::is_measuring`].
//! 2. The sampler starts measuring once every worker is ready.
//! 3. Workers count operations until [`LoadProgress::should_stop`] or their own budget ends, then
//!    [`LoadProgress::worker_done`].
//!
//! Two drivers: `--connect` (a network client, `connect.rs`) and in-process (tarn's shards
//! in this process, `inprocess.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::cli::{LoadConfig, Mode};
use crate::histogram::Histogram;
use crate::perf_counters::{Availability, Readings, ThreadCounters};

/// What the sampler knows about where the counters are and what allocs/op counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Counters and allocations belong to the load generator only (server elsewhere).
    Client,
    /// Counters and allocations include the server's work (in-process).
    Process,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Client => "client",
            Scope::Process => "process",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("{0}")]
    Setup(String),
    #[error("{0}")]
    Connection(String),
}

/// What a driver hands back at the end.
#[derive(Default)]
pub struct Outcome {
    /// Request latency over the measured part of the run, if the driver measures it.
    pub latency_ns: Option<Histogram>,
    /// Operations completed before measuring started (population), for the report.
    pub populated_keys: u64,
    /// Cross-core traffic during the measurement, summed over shards (in-process only).
    pub mesh: Option<MeshReport>,
}

/// Cross-core traffic summed over shards, and the operations run in the same window.
#[derive(Debug, Clone, Copy, Default)]
pub struct MeshReport {
    pub stats: tarn::server::mesh::core::MeshStats,
    pub operations: u64,
}

pub trait Driver: Send {
    /// How many workers (shards or client threads) will report.
    fn workers(&self) -> usize;
    fn scope(&self) -> Scope;
    /// Runs to completion; called on a thread of its own.
    fn run(self: Box<Self>, progress: Arc<LoadProgress>) -> Result<Outcome, DriverError>;
}

/// The driver for the chosen mode.
pub fn driver_for(config: &LoadConfig) -> Box<dyn Driver> {
    match &config.mode {
        Mode::InProcess => Box::new(crate::inprocess::InProcess::new(config)),
        Mode::Connect { addr } => Box::new(crate::connect::Connect::new(config, *addr)),
    }
}

/// One worker's counts, on a cache line of its own.
#[repr(align(128))]
#[derive(Default)]
pub struct WorkerProgress {
    pub operations: AtomicU64,
    pub errors: AtomicU64,
    /// Glommio task runs on this worker's executor (in-process only).
    pub tasks: AtomicU64,
    /// Objects allocated in this worker's shard's tuple arena (in-process only).
    pub arena_allocations: AtomicU64,
}

/// What all workers have done so far; the in-process counts are `None` over the network.
#[derive(Debug, Clone, Copy)]
pub struct Totals {
    pub operations: u64,
    pub errors: u64,
    pub tasks: Option<u64>,
    pub arena_allocations: Option<u64>,
}

#[derive(Default)]
pub struct LoadProgress {
    pub workers: Vec<WorkerProgress>,
    ready: AtomicUsize,
    done: AtomicUsize,
    measuring: AtomicBool,
    stop: AtomicBool,
    /// Set (and notified) when measuring starts or the run stops, for blocked workers.
    released: (Mutex<bool>, Condvar),
    stop_on_error: bool,
    /// Whether workers count glommio tasks (else tasks/op is n/a).
    counts_tasks: bool,
    has_error: AtomicBool,
    counters: Mutex<Vec<ThreadCounters>>,
    availability: Mutex<Option<Availability>>,
    first_error: Mutex<Option<String>>,
}

impl LoadProgress {
    pub fn new(workers: usize, stop_on_error: bool, counts_tasks: bool) -> LoadProgress {
        LoadProgress {
            workers: (0..workers).map(|_| WorkerProgress::default()).collect(),
            stop_on_error,
            counts_tasks,
            ..LoadProgress::default()
        }
    }

    /// Opens the calling thread's counters and hands them to the sampler.
    pub fn register_current_thread(&self) {
        let (counters, availability) = ThreadCounters::open_for_current_thread();
        self.counters.lock().unwrap().push(counters);
        self.availability
            .lock()
            .unwrap()
            .get_or_insert(availability);
    }

    pub fn availability(&self) -> Option<Availability> {
        self.availability.lock().unwrap().clone()
    }

    pub fn read_counters(&self) -> Readings {
        let counters = self.counters.lock().unwrap();
        let readings: Vec<Readings> = counters.iter().map(ThreadCounters::read).collect();
        Readings::sum(&readings)
    }

    pub fn worker_ready(&self) {
        self.ready.fetch_add(1, Ordering::AcqRel);
    }

    pub fn ready_workers(&self) -> usize {
        self.ready.load(Ordering::Acquire)
    }

    pub fn worker_done(&self) {
        self.done.fetch_add(1, Ordering::AcqRel);
    }

    pub fn done_workers(&self) -> usize {
        self.done.load(Ordering::Acquire)
    }

    pub fn start_measuring(&self) {
        self.measuring.store(true, Ordering::Release);
        self.release_workers();
    }

    fn release_workers(&self) {
        let (released, condvar) = &self.released;
        *released.lock().unwrap() = true;
        condvar.notify_all();
    }

    /// Blocks the calling thread until measuring starts or the run stops. A worker whose
    /// executor has nothing else to do blocks here rather than polling a timer, so the work
    /// done while waiting does not depend on how long the wait is (`insns-per-op.sh`
    /// subtracts two runs and relies on that).
    pub fn block_until_released(&self) {
        let (released, condvar) = &self.released;
        let mut guard = released.lock().unwrap();
        while !*guard {
            guard = condvar.wait(guard).unwrap();
        }
    }

    pub fn is_measuring(&self) -> bool {
        self.measuring.load(Ordering::Acquire)
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.release_workers();
    }

    pub fn should_stop(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Records an error reply; with `--stop-on-error` the first one stops the run.
    pub fn record_error(&self, describe: impl FnOnce() -> String) {
        if self.stop_on_error {
            self.stop();
        }
        if self.has_error.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut first = self.first_error.lock().unwrap();
        if first.is_none() {
            *first = Some(describe());
        }
    }

    pub fn first_error(&self) -> Option<String> {
        self.first_error.lock().unwrap().clone()
    }

    /// Totals over all workers.
    pub fn totals(&self) -> Totals {
        let sum = |field: fn(&WorkerProgress) -> &AtomicU64| {
            self.workers
                .iter()
                .map(|worker| field(worker).load(Ordering::Relaxed))
                .sum::<u64>()
        };
        Totals {
            operations: sum(|w| &w.operations),
            errors: sum(|w| &w.errors),
            tasks: self.counts_tasks.then(|| sum(|w| &w.tasks)),
            arena_allocations: self.counts_tasks.then(|| sum(|w| &w.arena_allocations)),
        }
    }
}
