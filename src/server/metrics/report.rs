//! A scrape: every series `docs/metrics.md` lists, read from the cores' counters and the
//! server's shared state and written in the exposition format. Tarantool's names (`tnt_*`,
//! as the metrics module's `metrics/tarantool/*.lua` makes them) sum the cores; tarn's own
//! (`tarn_*`) show each core with a `shard` label, and sum to the `tnt_*` totals where both
//! exist.
//!
//! Owns the names, types, help texts and labels of the series; knows nothing of HTTP, and
//! reads only atomics and the replication status (a mutex no request takes).

use super::exposition::{Exposition, MetricKind};
use super::{CoreMetrics, SpaceSample, OPERATIONS};
use crate::server::Shared;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// The text of one scrape of `shared`.
pub fn render(shared: &Shared) -> String {
    let mut exposition = Exposition::new(&shared.config.metrics.alias);
    let cores = shared.metrics.cores();
    write_net(&mut exposition, shared, cores);
    write_operations(&mut exposition, cores);
    write_spaces(&mut exposition, cores);
    write_info(&mut exposition, shared, cores);
    write_replication(&mut exposition, shared);
    write_cpu(&mut exposition);
    write_shards(&mut exposition, shared, cores);
    exposition.into_text()
}

/// `metrics/tarantool/network.lua`, from `box.stat.net()`.
fn write_net(exposition: &mut Exposition, shared: &Shared, cores: &[Arc<CoreMetrics>]) {
    let sum = |field: fn(&CoreMetrics) -> &AtomicU64| -> u64 {
        cores.iter().map(|core| load(field(core))).sum()
    };
    let counter = MetricKind::Counter;
    let received = sum(|core| &core.live.bytes_received);
    let sent = sum(|core| &core.live.bytes_sent);
    exposition.single("tnt_net_sent_total", counter, "Totally sent in bytes", sent);
    exposition.single(
        "tnt_net_received_total",
        counter,
        "Totally received in bytes",
        received,
    );
    let accepted = sum(|core| &core.live.connections_accepted);
    exposition.single(
        "tnt_net_connections_total",
        counter,
        "Connections total amount",
        accepted,
    );
    let current = shared.net.connections() as u64;
    let help = "Current connections amount";
    exposition.single(
        "tnt_net_connections_current",
        MetricKind::Gauge,
        help,
        current,
    );
    let requests = sum(|core| &core.live.requests);
    exposition.single(
        "tnt_net_requests_total",
        counter,
        "Requests total amount",
        requests,
    );
}

/// `metrics/tarantool/operations.lua`: `box.stat()`, one `operation` a key, lower case.
fn write_operations(exposition: &mut Exposition, cores: &[Arc<CoreMetrics>]) {
    let help = "Total amount of operations";
    exposition.family("tnt_stats_op_total", MetricKind::Counter, help);
    for (slot, (operation, _)) in (1..).zip(OPERATIONS) {
        let total: u64 = cores
            .iter()
            .map(|core| load(&core.live.operations[slot]))
            .sum();
        exposition.sample(&[("operation", operation)], total);
    }
}

/// One space summed over the shards.
#[derive(Default)]
struct SpaceTotal {
    len: u64,
    tuple_bytes: u64,
    index_bytes: BTreeMap<Arc<str>, u64>,
}

/// `metrics/tarantool/spaces.lua`: the memtx user spaces, as last published by each core.
/// `tnt_space_bsize` is the memory the space's tuples hold (tarn keeps no running sum of
/// their MessagePack bytes, which Tarantool's `bsize()` is): see `docs/metrics.md`.
fn write_spaces(exposition: &mut Exposition, cores: &[Arc<CoreMetrics>]) {
    let mut spaces: BTreeMap<Arc<str>, SpaceTotal> = BTreeMap::new();
    for core in cores {
        for sample in core.spaces().iter() {
            add_space(spaces.entry(sample.name.clone()).or_default(), sample);
        }
    }
    let memtx = |name: &str| [("name", name.to_owned()), ("engine", "memtx".to_owned())];
    exposition.family("tnt_space_len", MetricKind::Gauge, "Space length");
    for (name, space) in &spaces {
        let [a, b] = memtx(name);
        exposition.sample(&[(a.0, &a.1), (b.0, &b.1)], space.len);
    }
    exposition.family("tnt_space_bsize", MetricKind::Gauge, "Space bsize");
    for (name, space) in &spaces {
        let [a, b] = memtx(name);
        exposition.sample(&[(a.0, &a.1), (b.0, &b.1)], space.tuple_bytes);
    }
    exposition.family("tnt_space_index_bsize", MetricKind::Gauge, "Index bsize");
    for (name, space) in &spaces {
        for (index, bytes) in &space.index_bytes {
            exposition.sample(&[("name", name), ("index_name", index)], *bytes);
        }
    }
    exposition.family(
        "tnt_space_total_bsize",
        MetricKind::Gauge,
        "Space total bsize",
    );
    for (name, space) in &spaces {
        let total = space.tuple_bytes + space.index_bytes.values().sum::<u64>();
        let [a, b] = memtx(name);
        exposition.sample(&[(a.0, &a.1), (b.0, &b.1)], total);
    }
}

fn add_space(total: &mut SpaceTotal, sample: &SpaceSample) {
    total.len += sample.len;
    total.tuple_bytes += sample.tuple_bytes;
    for (index, bytes) in &sample.index_bytes {
        *total.index_bytes.entry(index.clone()).or_default() += bytes;
    }
}

/// `metrics/tarantool/info.lua` (`box.info`), `memory.lua` (`box.info.memory()`) and
/// `slab.lua` (`box.slab.info()`): what tarn knows of each.
fn write_info(exposition: &mut Exposition, shared: &Shared, cores: &[Arc<CoreMetrics>]) {
    let gauge = MetricKind::Gauge;
    let sum = |field: fn(&CoreMetrics) -> &AtomicU64| -> u64 {
        cores.iter().map(|core| load(field(core))).sum()
    };
    exposition.single("tnt_info_lsn", gauge, "Tarantool lsn", info_lsn(shared));
    let uptime = shared.started.elapsed().as_secs();
    exposition.single("tnt_info_uptime", gauge, "Tarantool uptime", uptime);
    let read_only = u64::from(shared.is_read_only());
    exposition.single("tnt_read_only", gauge, "Is instance read only", read_only);
    let data = sum(|core| &core.published.memory_data_bytes);
    exposition.single("tnt_info_memory_data", gauge, "Memory data", data);
    let index = sum(|core| &core.published.memory_index_bytes);
    exposition.single("tnt_info_memory_index", gauge, "Memory index", index);
    let net = shared.net.memory_bytes() as u64;
    exposition.single("tnt_info_memory_net", gauge, "Memory net", net);
    let quota_size = shared.config.memory_bytes;
    let quota_used = sum(|core| &core.published.quota_used_bytes);
    exposition.single(
        "tnt_slab_quota_size",
        gauge,
        "Slab quota_size info",
        quota_size,
    );
    exposition.single(
        "tnt_slab_quota_used",
        gauge,
        "Slab quota_used info",
        quota_used,
    );
    let ratio = 100.0 * quota_used as f64 / quota_size.max(1) as f64;
    exposition.single(
        "tnt_slab_quota_used_ratio",
        gauge,
        "Slab quota_used_ratio info",
        ratio,
    );
}

/// `box.info.lsn` as `box.info` answers it: a master's is the sum of its shards' WAL
/// LSNs; a replica following its master has written nothing of its own (0).
fn info_lsn(shared: &Shared) -> u64 {
    let follows = shared.replication.upstream().is_some() && !shared.leads_term();
    match follows {
        true => 0,
        false => shared.wal_written_vclock().iter().flatten().sum(),
    }
}

/// `metrics/tarantool/info.lua`'s replication series, labelled `stream` and `id` (the
/// replica ids `box.info.replication` gives: the master followed is 1, the replicas that
/// follow this instance 2, 3, ... in the order they subscribed). Only an upstream has a
/// lag in Tarantool 2.6's `box.info` (a downstream's came in 2.10).
fn write_replication(exposition: &mut Exposition, shared: &Shared) {
    let upstream = shared.replication.upstream().clone();
    let downstreams = shared.replication.downstreams();
    exposition.family("tnt_replication_lag", MetricKind::Gauge, "Replication lag");
    if let Some(upstream) = &upstream {
        let lag = upstream.lag().as_secs_f64();
        exposition.sample(&[("stream", "upstream"), ("id", "1")], lag);
    }
    exposition.family(
        "tnt_replication_status",
        MetricKind::Gauge,
        "Replication status",
    );
    if let Some(upstream) = &upstream {
        let follows = u64::from(upstream.status == "follow");
        exposition.sample(&[("stream", "upstream"), ("id", "1")], follows);
    }
    for (id, (_, _, seen)) in (2u64..).zip(&downstreams) {
        let follows =
            u64::from(seen.state == crate::server::replication::status::DownstreamState::Follow);
        let id = id.to_string();
        exposition.sample(&[("stream", "downstream"), ("id", &id)], follows);
    }
}

/// `metrics/tarantool/cpu.lua`: `getrusage(RUSAGE_SELF)`, in seconds.
fn write_cpu(exposition: &mut Exposition) {
    let Some(cpu) = crate::server::os::cpu_time::process_cpu_time() else {
        return;
    };
    let gauge = MetricKind::Gauge;
    exposition.single(
        "tnt_cpu_user_time",
        gauge,
        "CPU user time usage",
        cpu.user_seconds,
    );
    let system = cpu.system_seconds;
    exposition.single(
        "tnt_cpu_system_time",
        gauge,
        "CPU system time usage",
        system,
    );
}

/// A per-shard family: its name, type, help and where each core keeps its value.
type ShardFamily = (
    &'static str,
    MetricKind,
    &'static str,
    fn(&CoreMetrics) -> &AtomicU64,
);

/// tarn's per-shard series read from the cores' counters: each of the first five sums to
/// the `tnt_*` total its help names.
const SHARD_FAMILIES: [ShardFamily; 14] = [
    (
        "tarn_requests_total",
        MetricKind::Counter,
        "Requests read from clients on the core (sums to tnt_net_requests_total)",
        |core| &core.live.requests,
    ),
    (
        "tarn_net_received_bytes_total",
        MetricKind::Counter,
        "Bytes received from clients on the core (sums to tnt_net_received_total)",
        |core| &core.live.bytes_received,
    ),
    (
        "tarn_net_sent_bytes_total",
        MetricKind::Counter,
        "Bytes sent to clients on the core (sums to tnt_net_sent_total)",
        |core| &core.live.bytes_sent,
    ),
    (
        "tarn_connections_total",
        MetricKind::Counter,
        "Client connections the core has served (sums to tnt_net_connections_total)",
        |core| &core.live.connections_accepted,
    ),
    (
        "tarn_memory_data_bytes",
        MetricKind::Gauge,
        "Bytes the shard's tuples hold (sums to tnt_info_memory_data)",
        |core| &core.published.memory_data_bytes,
    ),
    (
        "tarn_memory_index_bytes",
        MetricKind::Gauge,
        "Bytes the shard's indexes hold (sums to tnt_info_memory_index)",
        |core| &core.published.memory_index_bytes,
    ),
    (
        "tarn_hops_total",
        MetricKind::Counter,
        "Requests the core sent to the core owning their data",
        |core| &core.published.hops,
    ),
    (
        "tarn_hop_batches_sent_total",
        MetricKind::Counter,
        "Batches of requests the core sent to other cores",
        |core| &core.published.hop_batches_sent,
    ),
    (
        "tarn_hop_batches_served_total",
        MetricKind::Counter,
        "Batches of requests from other cores the core served",
        |core| &core.published.hop_batches_served,
    ),
    (
        "tarn_hops_backlogged_total",
        MetricKind::Counter,
        "Messages to other cores that found the channel full and waited",
        |core| &core.published.hops_backlogged,
    ),
    (
        "tarn_wal_rows_total",
        MetricKind::Counter,
        "Rows the shard's WAL writer appended",
        |core| &core.published.wal_rows,
    ),
    (
        "tarn_wal_flushes_total",
        MetricKind::Counter,
        "Writes of one or more batches to the shard's WAL file",
        |core| &core.published.wal_flushes,
    ),
    (
        "tarn_wal_syncs_total",
        MetricKind::Counter,
        "fdatasync calls on the shard's WAL file",
        |core| &core.published.wal_syncs,
    ),
    (
        "tarn_wal_written_bytes_total",
        MetricKind::Counter,
        "Bytes written to the shard's WAL files",
        |core| &core.published.wal_bytes,
    ),
];

/// tarn's per-shard series, labelled `shard` (Seastar's way).
fn write_shards(exposition: &mut Exposition, shared: &Shared, cores: &[Arc<CoreMetrics>]) {
    let shard_labels: Vec<String> = (0..cores.len()).map(|shard| shard.to_string()).collect();
    for (name, kind, help, field) in SHARD_FAMILIES {
        exposition.family(name, kind, help);
        for (label, core) in shard_labels.iter().zip(cores) {
            exposition.sample(&[("shard", label)], load(field(core)));
        }
    }
    let help = "WAL flushes the disk refused";
    exposition.family("tarn_wal_flush_failures_total", MetricKind::Counter, help);
    for (label, core) in shard_labels.iter().zip(cores) {
        let failed = load(&core.published.wal_flushes_failed);
        exposition.sample(&[("shard", label)], failed);
    }
    let help = "Client connections open on the core (sums to tnt_net_connections_current)";
    exposition.family("tarn_connections", MetricKind::Gauge, help);
    for (label, open) in shard_labels.iter().zip(shared.net.connections_by_core()) {
        exposition.sample(&[("shard", label)], open as u64);
    }
    let help = "Operations by type the core's sessions started (sums to tnt_stats_op_total)";
    exposition.family("tarn_operations_total", MetricKind::Counter, help);
    for (label, core) in shard_labels.iter().zip(cores) {
        for (slot, (operation, _)) in (1..).zip(OPERATIONS) {
            let count = load(&core.live.operations[slot]);
            exposition.sample(&[("shard", label), ("operation", operation)], count);
        }
    }
    let help = "Times the shard published what its engine, WAL and mesh know";
    exposition.family("tarn_publications_total", MetricKind::Counter, help);
    for (label, core) in shard_labels.iter().zip(cores) {
        exposition.sample(&[("shard", label)], load(&core.published.publications));
    }
}
