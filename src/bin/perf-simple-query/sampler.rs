//! The per-second sampler: runs on the main thread while the driver's workers run, reads
//! the shared progress at each whole second from the start of measuring (no drift), and
//! prints each line as it is taken.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cli::Budget;
use crate::driver::LoadProgress;
use crate::perf_counters::Readings;
use crate::report::{sample_line, Sample};
use tarn::counting_allocator::allocations_total;

const POLL: Duration = Duration::from_millis(10);

/// Waits until every worker is set up (true) or the driver thread has ended (false).
pub fn wait_until_ready<T>(progress: &LoadProgress, driver: &JoinHandle<T>) -> bool {
    loop {
        if progress.ready_workers() == progress.workers.len() && !progress.should_stop() {
            return true;
        }
        if driver.is_finished() || progress.should_stop() {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Totals at one instant.
#[derive(Clone, Copy)]
struct Snapshot {
    at: Instant,
    operations: u64,
    errors: u64,
    tasks: Option<u64>,
    arena_allocations: Option<u64>,
    allocations: u64,
    counters: Readings,
}

fn snapshot(progress: &LoadProgress) -> Snapshot {
    let counters = progress.read_counters();
    let totals = progress.totals();
    Snapshot {
        at: Instant::now(),
        operations: totals.operations,
        errors: totals.errors,
        tasks: totals.tasks,
        arena_allocations: totals.arena_allocations,
        allocations: allocations_total(),
        counters,
    }
}

fn finished(progress: &LoadProgress) -> bool {
    progress.should_stop() || progress.done_workers() == progress.workers.len()
}

/// Starts the measurement and samples until the budget is spent, every worker is done, or
/// the run is stopped (an error with --stop-on-error).
pub fn measure(progress: &LoadProgress, budget: Budget) -> Vec<Sample> {
    let seconds_limit = match budget {
        Budget::Duration(d) => Some(d.as_secs()),
        Budget::OperationsPerShard(_) => None,
    };
    let start = snapshot(progress);
    progress.start_measuring();
    let mut samples = Vec::new();
    let mut previous = start;
    for second in 1u64.. {
        let deadline = start.at + Duration::from_secs(second);
        while !finished(progress) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            std::thread::sleep(POLL.min(deadline - now));
        }
        let now = snapshot(progress);
        let interval = now.at.duration_since(previous.at).as_secs_f64();
        let sample = Sample {
            at_seconds: now.at.duration_since(start.at).as_secs_f64(),
            interval_seconds: interval,
            operations: now.operations - previous.operations,
            errors: now.errors - previous.errors,
            allocations: now.allocations - previous.allocations,
            arena_allocations: now
                .arena_allocations
                .zip(previous.arena_allocations)
                .map(|(now, then)| now - then),
            tasks: now.tasks.zip(previous.tasks).map(|(now, then)| now - then),
            counters: now.counters.since(&previous.counters),
            partial: interval < 0.99,
        };
        // A run that ends right on a tick leaves an empty sliver: not a sample.
        if !(sample.partial && sample.operations == 0 && !samples.is_empty()) {
            println!("{}", sample_line(&sample));
            samples.push(sample);
        }
        previous = now;
        if finished(progress) || seconds_limit.is_some_and(|limit| second >= limit) {
            break;
        }
    }
    samples
}
