//! `metrics_listen` and `metrics_alias`: where the Prometheus endpoint listens (off when
//! absent or empty) and the `alias` label every series carries.
//!
//! Owns the parsing and the wording of their errors; knows nothing of HTTP or of what the
//! endpoint serves.

use super::error::ConfigError;
use std::net::SocketAddr;

/// The Prometheus endpoint, as the config resolves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Where `GET /metrics` is served; `None`: no endpoint.
    pub listen: Option<SocketAddr>,
    /// The `alias` label of every series (the metrics module's global label): the config's
    /// `metrics_alias`, or the IPROTO listen address when it is empty.
    pub alias: String,
}

/// Resolves `metrics_listen` ("" = off) and `metrics_alias` ("" = `listen`).
pub(crate) fn resolve_metrics(
    listen_text: &str,
    alias: &str,
    listen: SocketAddr,
) -> Result<MetricsConfig, ConfigError> {
    let listen_text = listen_text.trim();
    let metrics_listen = match listen_text {
        "" => None,
        text => Some(text.parse().map_err(|_| {
            ConfigError::invalid(
                "metrics_listen",
                format!(
                    "{text:?} is not a socket address; write IP:PORT such as \
                     \"127.0.0.1:9100\", or leave it empty for no endpoint"
                ),
            )
        })?),
    };
    if alias.chars().any(char::is_control) {
        return Err(ConfigError::invalid(
            "metrics_alias",
            format!("{alias:?} holds a control character"),
        ));
    }
    let alias = match alias {
        "" => listen.to_string(),
        alias => alias.to_owned(),
    };
    Ok(MetricsConfig {
        listen: metrics_listen,
        alias,
    })
}
