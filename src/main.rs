//! `tarn`: the server binary. Reads the config (file, then flags), starts one executor per
//! core, serves until SIGINT or SIGTERM.

use clap::Parser;
use std::process::ExitCode;
use tarn::config::{self, CliArgs};

fn main() -> ExitCode {
    tarn::server::heap::restart_with_huge_pages();
    tarn::server::heap::grow_in_large_steps();
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
        .init();
    tracing::info!(
        huge_pages = tarn::server::heap::huge_pages_requested(),
        "heap set up (huge pages: glibc.malloc.hugetlb in GLIBC_TUNABLES)"
    );
    match tarn::server::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            ExitCode::FAILURE
        }
    }
}
