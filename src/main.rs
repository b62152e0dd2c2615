//! `tarn`: the server binary. Reads the config (file, then flags), starts one executor per
//! core, serves until SIGINT or SIGTERM; SIGHUP reloads the config's spaces.

use clap::Parser;
use std::io::IsTerminal;
use std::process::ExitCode;
use tarn::config::{self, settings::describe_bytes, CliArgs, Config};

fn main() -> ExitCode {
    tarn::server::os::heap::restart_with_huge_pages();
    tarn::server::os::heap::grow_in_large_steps();
    tarn::server::os::heap::tuple_regions_from_the_kernel();
    let args = CliArgs::parse();
    let config = match config::load(&args) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("tarn: config error: {error}");
            return ExitCode::from(2);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(config.log_level.name()));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour_wanted())
        .init();
    log_start(&config);
    tracing::info!(
        huge_pages = tarn::server::os::heap::huge_pages_requested(),
        "heap set up (huge pages: glibc.malloc.hugetlb in GLIBC_TUNABLES)"
    );
    // SIGHUP reads the config again as here: the file, then the same flags.
    let read_config = Box::new(move || config::load(&args).map_err(|error| error.to_string()));
    match tarn::server::run_reloading(config, Some(read_config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// Colour codes only for a person at a terminal: not in a file, a pipe or a journal, and not
/// when `NO_COLOR` is set to anything (https://no-color.org).
fn colour_wanted() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    !no_color && std::io::stderr().is_terminal()
}

/// What an operator checks first: which file was read, where the data goes, how durable the
/// writes are, and how big the server is.
fn log_start(config: &Config) {
    let source = match &config.source {
        config::ConfigSource::File(path) => path.display().to_string(),
        config::ConfigSource::BuiltIn => "built-in".into(),
        config::ConfigSource::Text => "text".into(),
    };
    tracing::info!(
        config = %source,
        data_dir = %config.data_dir.display(),
        wal_mode = %config.durability.wal_mode.name(),
        shards = tarn::server::shard_count_for(config),
        memory = %describe_bytes(config.memory_bytes),
        "starting tarn {}",
        env!("CARGO_PKG_VERSION")
    );
}
