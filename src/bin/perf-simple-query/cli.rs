//! The command line: every option of the issue, parsed by clap and checked once, so the
//! drivers never see a contradictory combination.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

/// A load generator for tarn modelled on ScyllaDB's perf-simple-query.
///
/// Prints one line per second (tps, allocs/op, tasks/op, insns/op, cycles/op, cpu-ns/op,
/// errors) and summary statistics at the end. Without `--connect` it runs tarn's shards
/// in-process (one pinned executor per --smp shard, --concurrency requests pipelined through
/// one session per shard); with `--connect HOST:PORT` it drives any IPROTO server over TCP
/// (tarn or Tarantool). Both use space 512 `kv`.
#[derive(Debug, Clone, Parser)]
#[command(name = "perf-simple-query", version)]
pub struct LoadArguments {
    /// Shards (in-process) or client executor threads (--connect). Default: all cores
    /// (with --connect: no more than --conns).
    #[arg(long)]
    pub smp: Option<usize>,

    /// Seconds to measure (ignored with --operations-per-shard).
    #[arg(long, default_value_t = 5)]
    pub duration: u64,

    /// Run a fixed number of operations per shard (per client thread with --connect)
    /// instead of a fixed duration.
    #[arg(long)]
    pub operations_per_shard: Option<u64>,

    /// Operations in flight per shard (in-process mode; --connect uses --conns x --pipeline).
    #[arg(long, default_value_t = 100)]
    pub concurrency: usize,

    /// REPLACE whole tuples instead of reading.
    #[arg(long, group = "operation")]
    pub write: bool,

    /// UPDATE with `+ 1` on bucket_id instead of reading.
    #[arg(long, group = "operation")]
    pub update: bool,

    /// DELETE by primary key instead of reading.
    #[arg(long, group = "operation")]
    pub delete: bool,

    /// SELECT GE on the primary key with this limit instead of a point read.
    #[arg(long, group = "operation", value_name = "LIMIT")]
    pub select_range: Option<u32>,

    /// SELECT GE with this limit on `customers`' 5-part non-unique index (a, b, c, d, name),
    /// from the `[a, b]` of a drawn row, instead of a point read on `kv`. Populates (and,
    /// with --connect, expects) `customers` rows 0..--partitions instead of `kv` keys.
    #[arg(long, group = "operation", value_name = "LIMIT")]
    pub select_secondary: Option<u32>,

    /// The operation by name: get (the default), replace, update, delete, select-range
    /// (SELECT GE limit --limit on kv's primary key) or select-secondary (SELECT GE limit
    /// --limit on customers' 5-part non-unique index). The same as the flag of that name.
    #[arg(long, group = "operation", value_enum, value_name = "NAME")]
    pub op: Option<OpName>,

    /// The LIMIT of `--op select-range` and `--op select-secondary`.
    #[arg(long, default_value_t = 10, value_name = "ROWS")]
    pub limit: u32,

    /// Every operation uses the same key (0) instead of a uniformly drawn one.
    #[arg(long)]
    pub query_single_key: bool,

    /// Seed of the key generator; drawn from the clock when absent (and printed).
    #[arg(long)]
    pub random_seed: Option<u64>,

    /// Keys 0..N are populated before the measurement and drawn from during it.
    #[arg(long, default_value_t = 10_000)]
    pub partitions: u64,

    /// Durability of the in-process server's writes (in-process mode only) [default: none,
    /// whatever the shipped config says: the default run measures the request path without
    /// the log]. The report header says which mode ran.
    #[arg(long, value_enum)]
    pub wal: Option<tarn::config::WalMode>,

    /// Write parameters, per-second samples, summaries and error count as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json_result: Option<std::path::PathBuf>,

    /// Stop the run at the first error reply.
    #[arg(long)]
    pub stop_on_error: bool,

    /// In-process mode: each shard draws only keys it owns (true) or any key (false).
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub shard_aware: Option<bool>,

    /// In-process mode: microseconds a shard out of work polls before it sleeps (the
    /// server's `idle_poll_us`; default: the shipped config's).
    #[arg(long, value_name = "US")]
    pub idle_poll_us: Option<u64>,

    /// Drive a running IPROTO server at HOST:PORT over TCP instead of running in-process.
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Option<String>,

    /// TCP connections (--connect), split evenly over the --smp client threads.
    #[arg(long, default_value_t = 1)]
    pub conns: usize,

    /// Requests in flight per connection (--connect).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,

    /// Seconds without a reply after which the run fails instead of waiting on a server
    /// that stopped answering (--connect).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub io_timeout: u64,

    /// Skip populating keys 0..partitions before measuring (--connect).
    #[arg(long)]
    pub no_populate: bool,

    /// Authenticate as this user (chap-sha1) instead of guest (--connect).
    #[arg(long)]
    pub user: Option<String>,

    /// Password for --user.
    #[arg(long, default_value = "")]
    pub password: String,

    /// Instead of measuring: INSERT the `customers` (space 513) rows with ids 0..N, with
    /// --conns connections x --pipeline in flight, print the load rate and exit (--connect).
    /// Rows depend only on --random-seed and the id.
    #[arg(long, value_name = "N")]
    pub load_customers: Option<u64>,
}

/// The operations by name, for `--op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OpName {
    Get,
    Replace,
    Update,
    Delete,
    SelectRange,
    SelectSecondary,
}

/// What each operation does; exactly one per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// SELECT EQ on index 0, limit 1.
    Get,
    /// REPLACE `[key, bucket_id, value]`.
    Replace,
    /// UPDATE `[["+", 1, 1]]` (bucket_id, 0-based field number).
    Update,
    /// DELETE by primary key.
    Delete,
    /// SELECT GE on index 0 with a limit.
    SelectRange { limit: u32 },
    /// SELECT GE on `customers`' composite index with a limit.
    SelectSecondary { limit: u32 },
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Operation::Get => "get",
            Operation::Replace => "replace",
            Operation::Update => "update",
            Operation::Delete => "delete",
            Operation::SelectRange { .. } => "select-range",
            Operation::SelectSecondary { .. } => "select-secondary",
        }
    }

    /// The LIMIT of a select that returns many rows; `None` for the others.
    pub fn select_limit(self) -> Option<u32> {
        match self {
            Operation::SelectRange { limit } | Operation::SelectSecondary { limit } => Some(limit),
            _ => None,
        }
    }

    /// Whether the operation works on `customers` (its rows are what is populated).
    pub fn on_customers(self) -> bool {
        matches!(self, Operation::SelectSecondary { .. })
    }
}

/// How long a run lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    Duration(Duration),
    OperationsPerShard(u64),
}

/// Which driver runs the operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    InProcess,
    Connect { addr: SocketAddr },
}

/// Arguments checked and resolved (defaults that depend on the machine filled in).
#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub args: LoadArguments,
    pub smp: usize,
    pub operation: Operation,
    pub budget: Budget,
    pub seed: u64,
    pub mode: Mode,
    /// Notes printed before the run: options that have no effect in the chosen mode.
    pub notes: Vec<String>,
}

/// The in-process server's WAL mode without `--wal`: set here, not taken from the shipped
/// config, so that a change of the server's default does not change what is measured.
pub const IN_PROCESS_WAL_DEFAULT: tarn::config::WalMode = tarn::config::WalMode::None;

impl LoadConfig {
    /// The WAL mode the in-process server runs with; `None` with `--connect`, where the
    /// server's own mode applies and the client cannot know it.
    pub fn in_process_wal(&self) -> Option<tarn::config::WalMode> {
        match self.mode {
            Mode::InProcess => Some(self.args.wal.unwrap_or(IN_PROCESS_WAL_DEFAULT)),
            Mode::Connect { .. } => None,
        }
    }
}

impl LoadArguments {
    pub fn operation(&self) -> Operation {
        if let Some(op) = self.op {
            return match op {
                OpName::Get => Operation::Get,
                OpName::Replace => Operation::Replace,
                OpName::Update => Operation::Update,
                OpName::Delete => Operation::Delete,
                OpName::SelectRange => Operation::SelectRange { limit: self.limit },
                OpName::SelectSecondary => Operation::SelectSecondary { limit: self.limit },
            };
        }
        if self.write {
            Operation::Replace
        } else if self.update {
            Operation::Update
        } else if self.delete {
            Operation::Delete
        } else if let Some(limit) = self.select_range {
            Operation::SelectRange { limit }
        } else if let Some(limit) = self.select_secondary {
            Operation::SelectSecondary { limit }
        } else {
            Operation::Get
        }
    }

    /// Resolves defaults and refuses contradictions; the error is the text to print.
    pub fn resolve(self) -> Result<LoadConfig, String> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // With --connect and no --smp, never more client threads than connections.
        let smp = match (self.smp, &self.connect) {
            (Some(smp), _) => smp,
            (None, Some(_)) => cores.min(self.conns.max(1)),
            (None, None) => cores,
        };
        if smp == 0 {
            return Err("--smp must be at least 1".into());
        }
        if self.partitions == 0 {
            return Err("--partitions must be at least 1".into());
        }
        if self.select_range == Some(0) {
            return Err("--select-range must be at least 1".into());
        }
        if self.select_secondary == Some(0) {
            return Err("--select-secondary must be at least 1".into());
        }
        if self.limit == 0 {
            return Err("--limit must be at least 1".into());
        }
        let budget = match self.operations_per_shard {
            Some(0) => return Err("--operations-per-shard must be at least 1".into()),
            Some(n) => Budget::OperationsPerShard(n),
            None if self.duration == 0 => return Err("--duration must be at least 1".into()),
            None => Budget::Duration(Duration::from_secs(self.duration)),
        };
        let seed = self.random_seed.unwrap_or_else(clock_seed);
        if self.load_customers.is_some() && self.connect.is_none() {
            return Err("--load-customers needs --connect HOST:PORT".into());
        }
        if self.load_customers == Some(0) {
            return Err("--load-customers must be at least 1".into());
        }
        let mut notes = Vec::new();
        let mode = match &self.connect {
            None => {
                if self.concurrency == 0 {
                    return Err("--concurrency must be at least 1".into());
                }
                let client_only = self.no_populate
                    || self.user.is_some()
                    || self.conns != 1
                    || self.pipeline != 1;
                if client_only {
                    notes.push(
                        "--conns, --pipeline, --no-populate and --user have no effect \
                         in-process: keys are always populated and --concurrency sets the \
                         requests in flight"
                            .into(),
                    );
                }
                Mode::InProcess
            }
            Some(text) => {
                let addr = resolve_addr(text)?;
                if self.conns == 0 || self.pipeline == 0 {
                    return Err("--conns and --pipeline must be at least 1".into());
                }
                if self.io_timeout == 0 {
                    return Err("--io-timeout must be at least 1".into());
                }
                if self.conns < smp {
                    return Err(format!(
                        "--conns {} is fewer than the {smp} client threads (--smp); \
                         give --smp {} or more connections",
                        self.conns, self.conns
                    ));
                }
                if self.wal.is_some() {
                    notes.push(
                        "--wal has no effect with --connect: the server's own WAL mode applies"
                            .into(),
                    );
                }
                if self.load_customers.is_some() && self.no_populate {
                    notes.push("--no-populate has no effect with --load-customers".into());
                }
                if self.shard_aware.is_some() {
                    notes.push("--shard-aware has no effect with --connect: the server routes keys to shards".into());
                }
                if self.idle_poll_us.is_some() {
                    notes.push(
                        "--idle-poll-us has no effect with --connect: set it on the server".into(),
                    );
                }
                Mode::Connect { addr }
            }
        };
        Ok(LoadConfig {
            operation: self.operation(),
            args: self,
            smp,
            budget,
            seed,
            mode,
            notes,
        })
    }
}

fn resolve_addr(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    text.to_socket_addrs()
        .map_err(|e| format!("--connect {text}: {e}"))?
        .next()
        .ok_or_else(|| format!("--connect {text}: no address"))
}

fn clock_seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<LoadConfig, String> {
        let mut all = vec!["perf-simple-query"];
        all.extend_from_slice(args);
        LoadArguments::try_parse_from(all)
            .map_err(|e| e.to_string())?
            .resolve()
    }

    #[test]
    fn defaults_are_the_issue_defaults() {
        let config = parse(&["--smp", "2"]).unwrap();
        assert_eq!(config.operation, Operation::Get);
        assert_eq!(config.budget, Budget::Duration(Duration::from_secs(5)));
        assert_eq!(config.args.partitions, 10_000);
        assert_eq!(config.args.concurrency, 100);
        assert_eq!(config.mode, Mode::InProcess);
        assert_eq!(config.smp, 2);
    }

    #[test]
    fn operations_are_exclusive() {
        assert!(parse(&["--write", "--update"]).is_err());
        assert_eq!(
            parse(&["--select-range", "10"]).unwrap().operation,
            Operation::SelectRange { limit: 10 }
        );
        assert_eq!(parse(&["--delete"]).unwrap().operation, Operation::Delete);
    }

    #[test]
    fn an_operation_can_be_named_with_its_limit() {
        assert_eq!(
            parse(&["--op", "select-range"]).unwrap().operation,
            Operation::SelectRange { limit: 10 }
        );
        assert_eq!(
            parse(&["--op", "select-secondary", "--limit", "3"])
                .unwrap()
                .operation,
            Operation::SelectSecondary { limit: 3 }
        );
        assert_eq!(
            parse(&["--op", "replace"]).unwrap().operation,
            Operation::Replace
        );
        assert!(parse(&["--op", "replace", "--write"]).is_err());
        assert!(parse(&["--op", "select-range", "--limit", "0"]).is_err());
        assert!(parse(&["--op", "scan"]).is_err());
    }

    #[test]
    fn shard_aware_takes_a_value() {
        let config = parse(&["--shard-aware", "false"]).unwrap();
        assert_eq!(config.args.shard_aware, Some(false));
    }

    #[test]
    fn connect_defaults_to_no_more_threads_than_connections() {
        let config = parse(&["--connect", "127.0.0.1:1"]).unwrap();
        assert_eq!(config.smp, 1);
    }

    #[test]
    fn connect_needs_a_connection_per_thread() {
        assert!(parse(&["--connect", "127.0.0.1:1", "--smp", "2", "--conns", "1"]).is_err());
        let config = parse(&["--connect", "127.0.0.1:1", "--smp", "2", "--conns", "4"]).unwrap();
        assert!(matches!(config.mode, Mode::Connect { .. }));
    }

    #[test]
    fn load_customers_needs_connect_and_rows() {
        assert!(parse(&["--load-customers", "10"]).is_err());
        assert!(parse(&["--connect", "127.0.0.1:1", "--load-customers", "0"]).is_err());
        let config = parse(&["--connect", "127.0.0.1:1", "--load-customers", "10"]).unwrap();
        assert_eq!(config.args.load_customers, Some(10));
    }

    #[test]
    fn fixed_operation_count_replaces_duration() {
        let config = parse(&["--operations-per-shard", "1000"]).unwrap();
        assert_eq!(config.budget, Budget::OperationsPerShard(1000));
    }

    #[test]
    fn in_process_needs_something_in_flight() {
        assert!(parse(&["--concurrency", "0"]).is_err());
        assert!(parse(&["--concurrency", "0", "--connect", "127.0.0.1:1"]).is_ok());
        assert!(parse(&["--pipeline", "8"]).unwrap().notes.len() == 1);
    }
}
