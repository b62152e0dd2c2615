//! perf-simple-query: tarn's load generator and micro-benchmark, modelled on ScyllaDB's tool.
//!
//! | module | owns |
//! | --- | --- |
//! | [`cli`] | options, defaults, contradictions |
//! | [`driver`] | the seam: a [`driver::Driver`] generates operations, [`driver::LoadProgress`] is what the sampler reads |
//! | [`inprocess`] | the default: tarn's shards in this process, fed through `Session` |
//! | [`connect`] | `--connect`: IPROTO over TCP against any server |
//! | [`workload`] | keys and request encoding, shared by every driver |
//! | [`sampler`] | the per-second samples |
//! | [`stats`] | mean, stddev, median, MAD, max, min |
//! | [`histogram`] | latency histogram |
//! | [`perf_counters`] | perf_event_open counters, `None` where refused |
//! | [`report`] | lines, table, JSON document |
//! | [`json`] | a tiny JSON writer |

mod cli;
mod connect;
mod driver;
mod histogram;
mod inprocess;
mod json;
mod perf_counters;
mod report;
mod sampler;
mod stats;
mod workload;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

use crate::cli::{LoadArguments, LoadConfig, Mode};
use crate::driver::{driver_for, LoadProgress, Scope};
use crate::report::{latency_line, mesh_line, result_json, summary_table, RunFacts};

/// Counts the allocations of the whole process (the `allocs/op` column); with `--connect`,
/// the load generator's own.
#[global_allocator]
static ALLOCATOR: tarn::counting_allocator::CountingAllocator =
    tarn::counting_allocator::CountingAllocator::CALLS;

fn main() -> ExitCode {
    // Executors on different cores count on different cache lines.
    tarn::counting_allocator::give_each_thread_its_own_slot();
    // The shards in this process get the heap the server gives them.
    tarn::server::os::heap::restart_with_huge_pages();
    tarn::server::os::heap::grow_in_large_steps();
    tarn::server::os::heap::tuple_regions_from_the_kernel();
    let config = match LoadArguments::parse().resolve() {
        Ok(config) => config,
        Err(text) => {
            eprintln!("perf-simple-query: {text}");
            return ExitCode::from(2);
        }
    };
    match run(&config) {
        Ok(code) => code,
        Err(text) => {
            eprintln!("perf-simple-query: {text}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: &LoadConfig) -> Result<ExitCode, String> {
    for note in &config.notes {
        eprintln!("note: {note}");
    }
    if let (Some(rows), Mode::Connect { addr }) = (config.args.load_customers, &config.mode) {
        return load_customers(config, *addr, rows);
    }
    let driver = driver_for(config);
    let scope = driver.scope();
    let counts_tasks = scope == Scope::Process;
    let progress = Arc::new(LoadProgress::new(
        driver.workers(),
        config.args.stop_on_error,
        counts_tasks,
    ));
    print_header(config);
    let driver_thread = {
        let progress = progress.clone();
        std::thread::Builder::new()
            .name("driver".into())
            .spawn(move || driver.run(progress))
            .map_err(|e| format!("driver thread: {e}"))?
    };
    let samples = match sampler::wait_until_ready(&progress, &driver_thread) {
        true => {
            print_counter_notes(&progress, scope);
            sampler::measure(&progress, config.budget)
        }
        false => Vec::new(),
    };
    progress.stop();
    let outcome = driver_thread
        .join()
        .map_err(|_| "the driver panicked".to_string())?
        .map_err(|e| e.to_string())?;

    println!();
    print!("{}", summary_table(&samples));
    if let Some(histogram) = &outcome.latency_ns {
        println!("{}", latency_line(histogram));
    }
    let (operations, errors) = samples
        .iter()
        .fold((0, 0), |(o, e), s| (o + s.operations, e + s.errors));
    if let Some(mesh) = &outcome.mesh {
        println!("{}", mesh_line(mesh));
    }
    println!("{operations} operations, {errors} errors");
    let first_error = progress.first_error();
    if let Some(text) = &first_error {
        println!("first error: {text}");
    }
    if let Some(path) = &config.args.json_result {
        let facts = RunFacts {
            config,
            scope,
            availability: progress.availability(),
            populated_keys: outcome.populated_keys,
            latency_ns: outcome.latency_ns.as_ref(),
            mesh: outcome.mesh.as_ref(),
            first_error,
        };
        let text = result_json(&samples, &facts).to_pretty_string();
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    let stopped_on_error = config.args.stop_on_error && errors > 0;
    Ok(if stopped_on_error {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `--load-customers ROWS`: loads, prints one line (and the JSON document) and exits.
fn load_customers(
    config: &LoadConfig,
    addr: std::net::SocketAddr,
    rows: u64,
) -> Result<ExitCode, String> {
    let (conns, pipeline) = (config.args.conns, config.args.pipeline);
    println!(
        "perf-simple-query: loading {rows} customers rows into {addr}, {conns} connections x \
         {pipeline} in flight, smp {}, seed {}",
        config.smp, config.seed
    );
    let loaded = connect::load_customers(config, addr, rows).map_err(|e| e.to_string())?;
    let seconds = loaded.elapsed.as_secs_f64();
    let rows_per_second = loaded.rows as f64 / seconds.max(1e-9);
    println!(
        "loaded {} rows in {seconds:.3} s: {rows_per_second:.0} rows/s",
        loaded.rows
    );
    if let Some(path) = &config.args.json_result {
        let json = json::Json::object()
            .with("operation", "load-customers")
            .with("server", addr.to_string())
            .with("connections", conns as u64)
            .with("pipeline", pipeline as u64)
            .with("seed", config.seed)
            .with("rows", loaded.rows)
            .with("elapsed_seconds", seconds)
            .with("rows_per_second", rows_per_second);
        std::fs::write(path, json.to_pretty_string())
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn print_header(config: &LoadConfig) {
    let target = match &config.mode {
        Mode::InProcess => "in-process".to_string(),
        Mode::Connect { addr } => format!(
            "{addr}, {} connections x {} in flight",
            config.args.conns, config.args.pipeline
        ),
    };
    let wal = match config.in_process_wal() {
        Some(mode) => format!("wal_mode {}", mode.name()),
        None => "wal_mode: the server's own".to_string(),
    };
    println!(
        "perf-simple-query: {} on {target}, smp {}, {} partitions, seed {}, {wal}",
        config.operation.name(),
        config.smp,
        config.args.partitions,
        config.seed
    );
}

fn print_counter_notes(progress: &LoadProgress, scope: Scope) {
    let availability = progress.availability().unwrap_or_default();
    if let Some(error) = &availability.hardware_error {
        println!(
            "hardware counters unavailable ({error}): insns/op and cycles/op are n/a; \
             cpu-ns/op (task-clock) is printed instead"
        );
    }
    if let Some(error) = &availability.task_clock_error {
        println!("task-clock unavailable ({error}): cpu-ns/op is n/a");
    }
    if scope == Scope::Process {
        println!(
            "arena-allocs/op counts objects allocated in the shards' tuple arenas (a tuple \
             each, in its space's slab; ScyllaDB's logallocs/op): 0 for a get, 1 for a replace"
        );
        println!(
            "tasks/op counts glommio task runs on the shard executors (executor_stats); \
             allocs/op counts every thread of this process"
        );
    }
    if scope == Scope::Client {
        println!(
            "allocs/op, insns/op, cycles/op and cpu-ns/op count this client's threads, not the server"
        );
    }
}

#[cfg(test)]
mod tests {
    use tarn::counting_allocator::allocations;

    /// The `allocs/op` column counts through the allocator installed above.
    #[test]
    fn counts_a_box() {
        let before = allocations();
        let boxed = std::hint::black_box(Box::new([7u8; 100]));
        assert!(allocations() > before);
        drop(boxed);
    }
}
