//! The one error type of the config layer.
//!
//! Owns the wording users see when their file or flags are wrong. Every semantic error carries
//! the key path (`space[1] "customers": index "composite"`) and the reason, so the binary can
//! print it as is and exit non-zero. Knows nothing of the server that prints it.

use std::path::PathBuf;

/// A config file that cannot be read, parsed, or accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read (missing, unreadable). A missing default path falls back to
    /// the shipped file instead; only an explicitly given path reaches this.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The text is not TOML, has an unknown key, or a value of the wrong TOML type. The message
    /// of the TOML parser names the line and column.
    #[error("config {origin}: {source}")]
    Syntax {
        /// The file path, or a description such as `built-in conf/tarn.toml`.
        origin: String,
        #[source]
        source: Box<toml::de::Error>,
    },
    /// The file parsed but a value is not acceptable.
    #[error("{key_path}: {reason}")]
    Invalid {
        /// Where, e.g. `space[1] "customers": index "composite"`; array positions are 0-based.
        key_path: String,
        /// Why, in a sentence a user can act on.
        reason: String,
    },
}

impl ConfigError {
    /// Shorthand for [`ConfigError::Invalid`].
    pub(crate) fn invalid(key_path: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key_path: key_path.into(),
            reason: reason.into(),
        }
    }
}
