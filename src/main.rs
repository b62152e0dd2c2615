//! `tarn`: the server binary. Reads the config (file, then flags), starts one executor per
//! core, serves until SIGINT or SIGTERM.

use clap::Parser;
use std::process::ExitCode;
use tarn::config::{self, CliArgs};

fn main() -> ExitCode {
    grow_heap_in_large_steps();
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
    match tarn::server::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// Recovery and bulk loads allocate millions of tuples and keys in a burst; with glibc's
/// default 128 KiB top pad each shard's heap grows by an `mprotect` call per 128 KiB, a tenth
/// of a recovery's CPU time. Padding growth to 64 MiB costs address space, not memory: pages
/// are only backed once touched.
fn grow_heap_in_large_steps() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const TOP_PAD_BYTES: libc::c_int = 64 << 20;
        // SAFETY: mallopt only sets a tuning parameter of the allocator; it is called before
        // any other thread exists.
        unsafe { libc::mallopt(libc::M_TOP_PAD, TOP_PAD_BYTES) };
    }
}
