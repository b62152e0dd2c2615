//! What the tool prints and writes: the per-second line, the summary table, the latency
//! line and the `--json-result` document. Pure functions of the samples.

use std::fmt::Write;

use crate::cli::{Budget, LoadConfig, Mode};
use crate::driver::{MeshReport, Scope};
use crate::histogram::Histogram;
use crate::json::Json;
use crate::perf_counters::{Availability, Readings};
use crate::stats::Summary;
use crate::workload::VALUE_SIZE_BYTES;

/// One measured interval (normally one second).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds from the start of measuring to the end of this interval.
    pub at_seconds: f64,
    pub interval_seconds: f64,
    pub operations: u64,
    pub errors: u64,
    pub allocations: u64,
    /// Objects allocated in the shards' tuple arenas; `None` over the network.
    pub arena_allocations: Option<u64>,
    /// Glommio task runs on the shard executors; `None` where not counted (--connect).
    pub tasks: Option<u64>,
    pub counters: Readings,
    /// Shorter than a second (the tail of an --operations-per-shard run).
    pub partial: bool,
}

fn per_op(count: Option<u64>, operations: u64) -> Option<f64> {
    (operations > 0).then(|| count.map(|c| c as f64 / operations as f64))?
}

impl Sample {
    pub fn tps(&self) -> f64 {
        assert!(self.interval_seconds > 0.0);
        self.operations as f64 / self.interval_seconds
    }

    pub fn allocs_per_op(&self) -> Option<f64> {
        per_op(Some(self.allocations), self.operations)
    }

    pub fn arena_allocs_per_op(&self) -> Option<f64> {
        per_op(self.arena_allocations, self.operations)
    }

    pub fn tasks_per_op(&self) -> Option<f64> {
        per_op(self.tasks, self.operations)
    }

    pub fn insns_per_op(&self) -> Option<f64> {
        per_op(self.counters.instructions, self.operations)
    }

    pub fn cycles_per_op(&self) -> Option<f64> {
        per_op(self.counters.cycles, self.operations)
    }

    pub fn cpu_ns_per_op(&self) -> Option<f64> {
        per_op(self.counters.task_clock_ns, self.operations)
    }
}

fn or_na(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "n/a".to_string(), |v| format!("{v:.decimals$}"))
}

/// `252127.60 tps (66.1 allocs/op, n/a arena-allocs/op, 0.04 tasks/op, 37128 insns/op, 18147 cycles/op, 5123 cpu-ns/op, 0 errors)`
pub fn sample_line(sample: &Sample) -> String {
    format!(
        "{:.2} tps ({} allocs/op, {} arena-allocs/op, {} tasks/op, {} insns/op, {} cycles/op, {} cpu-ns/op, {} errors){}",
        sample.tps(),
        or_na(sample.allocs_per_op(), 1),
        or_na(sample.arena_allocs_per_op(), 1),
        or_na(sample.tasks_per_op(), 3),
        or_na(sample.insns_per_op(), 0),
        or_na(sample.cycles_per_op(), 0),
        or_na(sample.cpu_ns_per_op(), 0),
        sample.errors,
        if sample.partial { " [partial second]" } else { "" },
    )
}

/// Reads one metric from a sample; `None` where it is unavailable.
type Metric = fn(&Sample) -> Option<f64>;

/// The metrics summarised: printed label, JSON key, how each is read from a sample.
pub const METRICS: [(&str, &str, Metric); 7] = [
    ("tps", "tps", |s| Some(s.tps())),
    ("allocs/op", "allocs_per_op", Sample::allocs_per_op),
    (
        "arena-allocs/op",
        "arena_allocs_per_op",
        Sample::arena_allocs_per_op,
    ),
    ("tasks/op", "tasks_per_op", Sample::tasks_per_op),
    ("insns/op", "insns_per_op", Sample::insns_per_op),
    ("cycles/op", "cycles_per_op", Sample::cycles_per_op),
    ("cpu-ns/op", "cpu_ns_per_op", Sample::cpu_ns_per_op),
];

/// The samples statistics are taken over: whole seconds, or the partial ones if that is
/// all there is.
pub fn summarised(samples: &[Sample]) -> Vec<Sample> {
    let whole: Vec<Sample> = samples.iter().filter(|s| !s.partial).copied().collect();
    if whole.is_empty() {
        samples.to_vec()
    } else {
        whole
    }
}

pub fn summaries(samples: &[Sample]) -> Vec<(&'static str, &'static str, Option<Summary>)> {
    let used = summarised(samples);
    METRICS
        .iter()
        .map(|&(label, key, metric)| {
            let values: Vec<Option<f64>> = used.iter().map(metric).collect();
            (label, key, Summary::of_optional(&values))
        })
        .collect()
}

pub fn summary_table(samples: &[Sample]) -> String {
    let mut out = String::new();
    writeln!(
        out,
        "{:<15} {:>13} {:>13} {:>13} {:>13} {:>13} {:>13}",
        "", "mean", "stddev", "median", "mad", "max", "min"
    )
    .unwrap();
    for (label, _, summary) in summaries(samples) {
        write!(out, "{label:<15}").unwrap();
        match summary {
            Some(s) => {
                for v in [s.mean, s.stddev, s.median, s.mad, s.max, s.min] {
                    write!(out, " {v:>13.2}").unwrap();
                }
            }
            None => {
                for _ in 0..6 {
                    write!(out, " {:>13}", "n/a").unwrap();
                }
            }
        }
        out.push('\n');
    }
    out
}

const QUANTILES: [(&str, &str, f64); 3] = [
    ("p50", "p50", 0.5),
    ("p99", "p99", 0.99),
    ("p99.9", "p999", 0.999),
];

pub fn latency_line(histogram: &Histogram) -> String {
    if histogram.count() == 0 {
        return "latency: no replies".to_string();
    }
    let micros = |ns: u64| ns as f64 / 1000.0;
    let mut out = String::from("latency (client-observed):");
    for (label, _, q) in QUANTILES {
        write!(
            out,
            " {label} {:.1} us,",
            micros(histogram.quantile(q).unwrap())
        )
        .unwrap();
    }
    write!(
        out,
        " max {:.1} us ({} replies)",
        micros(histogram.max()),
        histogram.count()
    )
    .unwrap();
    out
}

/// `cross-core (all shards): 0.500 requests/op, 0.0100 batches/op, ...`: what the mesh
/// carried per operation in the measured window.
pub fn mesh_line(mesh: &MeshReport) -> String {
    let stats = &mesh.stats;
    let per_op = |count: u64| count as f64 / mesh.operations.max(1) as f64;
    format!(
        "cross-core (all shards, {} ops): {:.3} requests/op, {:.4} request batches/op, \
         {:.4} flusher runs/op, {} backlogged messages",
        mesh.operations,
        per_op(stats.requests_sent),
        per_op(stats.request_batches_sent),
        per_op(stats.flusher_runs),
        stats.backlogged
    )
}

fn mesh_json(mesh: Option<&MeshReport>) -> Json {
    let Some(mesh) = mesh else {
        return Json::Null;
    };
    let stats = &mesh.stats;
    Json::object()
        .with("operations", mesh.operations)
        .with("requests_sent", stats.requests_sent)
        .with("request_batches_sent", stats.request_batches_sent)
        .with("request_batches_served", stats.request_batches_served)
        .with("flusher_runs", stats.flusher_runs)
        .with("backlogged", stats.backlogged)
}

/// Everything the JSON document holds besides the samples.
pub struct RunFacts<'a> {
    pub config: &'a LoadConfig,
    pub scope: Scope,
    pub availability: Option<Availability>,
    pub populated_keys: u64,
    pub latency_ns: Option<&'a Histogram>,
    pub mesh: Option<&'a MeshReport>,
    pub first_error: Option<String>,
}

fn parameters(config: &LoadConfig) -> Json {
    let args = &config.args;
    let (mode, connect) = match &config.mode {
        Mode::InProcess => ("in-process", None),
        Mode::Connect { addr } => ("connect", Some(addr.to_string())),
    };
    let (duration, operations) = match config.budget {
        Budget::Duration(d) => (Some(d.as_secs()), None),
        Budget::OperationsPerShard(n) => (None, Some(n)),
    };
    Json::object()
        .with("mode", mode)
        .with("connect", connect)
        .with("smp", config.smp)
        .with("duration_seconds", duration)
        .with("operations_per_shard", operations)
        .with("concurrency", args.concurrency)
        .with("conns", args.conns)
        .with("pipeline", args.pipeline)
        .with("operation", config.operation.name())
        .with("select_limit", config.operation.select_limit())
        .with("query_single_key", args.query_single_key)
        .with("random_seed", config.seed)
        .with("partitions", args.partitions)
        .with("populate", !args.no_populate)
        .with("wal", config.in_process_wal().map(|w| w.name()))
        .with("shard_aware", args.shard_aware)
        .with("stop_on_error", args.stop_on_error)
        .with("value_size_bytes", VALUE_SIZE_BYTES)
}

fn sample_json(sample: &Sample) -> Json {
    let mut json = Json::object()
        .with("at_seconds", sample.at_seconds)
        .with("interval_seconds", sample.interval_seconds)
        .with("operations", sample.operations)
        .with("tps", sample.tps())
        .with("errors", sample.errors);
    for (_, key, metric) in METRICS.iter().skip(1) {
        json = json.with(key, metric(sample));
    }
    json.with("partial", sample.partial)
}

fn summary_json(summary: Option<Summary>) -> Json {
    match summary {
        None => Json::Null,
        Some(s) => Json::object()
            .with("mean", s.mean)
            .with("stddev", s.stddev)
            .with("median", s.median)
            .with("mad", s.mad)
            .with("max", s.max)
            .with("min", s.min),
    }
}

fn latency_json(histogram: Option<&Histogram>) -> Json {
    let Some(h) = histogram.filter(|h| h.count() > 0) else {
        return Json::Null;
    };
    let mut json = Json::object().with("count", h.count());
    for (_, key, q) in QUANTILES {
        json = json.with(key, h.quantile(q));
    }
    json.with("max", h.max())
}

pub fn result_json(samples: &[Sample], facts: &RunFacts<'_>) -> Json {
    let availability = facts.availability.clone().unwrap_or_default();
    let counters = Json::object()
        .with("scope", facts.scope.name())
        .with("hardware_error", availability.hardware_error)
        .with("task_clock_error", availability.task_clock_error);
    let mut summary = Json::object();
    for (_, key, s) in summaries(samples) {
        summary = summary.with(key, summary_json(s));
    }
    let operations: u64 = samples.iter().map(|s| s.operations).sum();
    let errors: u64 = samples.iter().map(|s| s.errors).sum();
    Json::object()
        .with("tool", "perf-simple-query")
        .with("parameters", parameters(facts.config))
        .with("counters", counters)
        .with("populated_keys", facts.populated_keys)
        .with(
            "samples",
            Json::Array(samples.iter().map(sample_json).collect()),
        )
        .with("summary", summary)
        .with("latency_ns", latency_json(facts.latency_ns))
        .with("cross_core", mesh_json(facts.mesh))
        .with("operations", operations)
        .with("errors", errors)
        .with("first_error", facts.first_error.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(operations: u64, counters: Readings) -> Sample {
        Sample {
            at_seconds: 1.0,
            interval_seconds: 1.0,
            operations,
            errors: 0,
            allocations: operations * 2,
            arena_allocations: None,
            tasks: None,
            counters,
            partial: false,
        }
    }

    #[test]
    fn unavailable_counters_print_na_never_zero() {
        let readings = Readings {
            instructions: None,
            cycles: None,
            task_clock_ns: Some(3_000_000),
        };
        assert_eq!(
            sample_line(&sample(1000, readings)),
            "1000.00 tps (2.0 allocs/op, n/a arena-allocs/op, n/a tasks/op, n/a insns/op, n/a cycles/op, 3000 cpu-ns/op, 0 errors)"
        );
        let table = summary_table(&[sample(1000, readings)]);
        let insns = table.lines().find(|l| l.starts_with("insns/op")).unwrap();
        assert!(insns.contains("n/a") && !insns.contains('0'), "{insns}");
        let config =
            <crate::cli::LoadArguments as clap::Parser>::try_parse_from(["x", "--smp", "1"])
                .unwrap()
                .resolve()
                .unwrap();
        let json = result_json(
            &[sample(1000, readings)],
            &RunFacts {
                config: &config,
                scope: Scope::Client,
                availability: None,
                populated_keys: 0,
                latency_ns: None,
                mesh: None,
                first_error: None,
            },
        )
        .to_pretty_string();
        assert!(json.contains("\"insns_per_op\": null"), "{json}");
        assert!(json.contains("\"cycles_per_op\": null"));
        assert!(json.contains("\"cpu_ns_per_op\": 3000.0"));
    }

    #[test]
    fn a_second_without_operations_has_no_per_op_values() {
        let s = sample(0, Readings::default());
        assert_eq!(s.allocs_per_op(), None);
        assert_eq!(s.tps(), 0.0);
    }

    #[test]
    fn partial_seconds_are_left_out_of_summaries_when_whole_ones_exist() {
        let mut tail = sample(10, Readings::default());
        tail.partial = true;
        tail.interval_seconds = 0.1;
        let used = summarised(&[sample(1000, Readings::default()), tail]);
        assert_eq!(used.len(), 1);
        assert_eq!(summarised(&[tail]).len(), 1);
    }
}
