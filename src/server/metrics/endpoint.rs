//! The HTTP endpoint: `GET /metrics` answers a scrape ([`super::report::render`]), any
//! other path 404, before the shards have started 503. Served by `tiny_http` on threads of
//! its own, started from the main thread before any shard's: not pinned to a shard's core,
//! and never running on a shard's executor.
//!
//! Owns the socket, its thread and the HTTP answers; knows nothing of the series.

use super::exposition::CONTENT_TYPE;
use crate::server::{ServerError, Shared};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the serving thread looks at the stop flag while no request comes.
const STOP_POLL: Duration = Duration::from_millis(200);

/// The running endpoint; dropping it stops the thread.
pub struct Endpoint {
    address: SocketAddr,
    shared: Arc<OnceLock<Arc<Shared>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Endpoint {
    /// Binds `address` (port 0: a free one) and starts serving; scrapes are answered 503
    /// until [`Endpoint::serve`] gives the server's state. Logs "metrics on ADDR".
    pub fn start(address: SocketAddr) -> Result<Endpoint, ServerError> {
        let failed = |source: std::io::Error| match source.kind() {
            std::io::ErrorKind::AddrInUse => ServerError::MetricsAddressInUse { address },
            _ => ServerError::MetricsListen { address, source },
        };
        let listener = std::net::TcpListener::bind(address).map_err(failed)?;
        let bound = listener.local_addr().map_err(failed)?;
        let server = tiny_http::Server::from_listener(listener, None)
            .map_err(|error| failed(std::io::Error::other(error.to_string())))?;
        let shared = Arc::new(OnceLock::new());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("metrics".to_owned())
            .spawn({
                let (shared, stop) = (shared.clone(), stop.clone());
                move || serve_until_stopped(&server, &shared, &stop)
            })
            .map_err(failed)?;
        tracing::info!(address = %bound, "metrics on {bound}");
        Ok(Endpoint {
            address: bound,
            shared,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on (the port chosen, when 0 was asked for).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// From now on scrapes read `shared`.
    pub fn serve(&self, shared: Arc<Shared>) {
        let _ = self.shared.set(shared);
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve_until_stopped(
    server: &tiny_http::Server,
    shared: &OnceLock<Arc<Shared>>,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        match server.recv_timeout(STOP_POLL) {
            Ok(Some(request)) => answer(request, shared.get()),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, "metrics endpoint: accepting a connection failed");
                std::thread::sleep(STOP_POLL);
            }
        }
    }
}

/// Answers one request: the scrape, or why not.
fn answer(request: tiny_http::Request, shared: Option<&Arc<Shared>>) {
    let path = request.url().split('?').next().unwrap_or("");
    let is_read = matches!(
        request.method(),
        tiny_http::Method::Get | tiny_http::Method::Head
    );
    let (status, content_type, body) = match (path, is_read, shared) {
        ("/metrics", true, Some(shared)) => (200, CONTENT_TYPE, super::report::render(shared)),
        ("/metrics", true, None) => (503, "text/plain", "starting: shards recovering\n".into()),
        ("/metrics", false, _) => (405, "text/plain", "GET /metrics\n".into()),
        _ => (404, "text/plain", "not found: GET /metrics\n".into()),
    };
    let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes())
        .expect("a content type is a valid header value");
    let response = tiny_http::Response::from_string(body)
        .with_status_code(status)
        .with_header(header);
    if let Err(error) = request.respond(response) {
        tracing::debug!(%error, "metrics endpoint: the scraper left before the answer");
    }
}
