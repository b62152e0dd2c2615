//! The replication keys: `replication` (the masters this instance follows, as Tarantool's
//! `box.cfg.replication` URIs), `read_only`, and synchronous replication's
//! `replication_synchro_quorum` and `replication_synchro_timeout`.
//!
//! Owns the URI syntax `[user[:password]@]IP:PORT` and the checks of these keys. Knows
//! nothing of how an upstream is followed or how a quorum is counted.

use std::net::SocketAddr;

use super::error::ConfigError;

/// A master this instance follows: where it listens and whom to log in as.
#[derive(Clone, PartialEq, Eq)]
pub struct Upstream {
    pub address: SocketAddr,
    /// `None`: connect as guest (no AUTH), as Tarantool does for a URI without a user.
    pub user: Option<String>,
    pub password: String,
}

impl Upstream {
    /// Parses `[user[:password]@]IP:PORT`; `key` names the entry in errors.
    pub(crate) fn parse(text: &str, key: &str) -> Result<Upstream, ConfigError> {
        let (credentials, address) = match text.rsplit_once('@') {
            Some((credentials, address)) => (Some(credentials), address),
            None => (None, text),
        };
        let address = address.parse().map_err(|_| {
            ConfigError::invalid(
                key,
                format!(
                    "{address:?} is not a socket address; write [user[:password]@]IP:PORT such \
                     as \"replicator:secret@127.0.0.1:3301\" (host names are not resolved)"
                ),
            )
        })?;
        let (user, password) = match credentials {
            None => (None, String::new()),
            Some(credentials) => {
                let (user, password) = credentials.split_once(':').unwrap_or((credentials, ""));
                if user.is_empty() {
                    return Err(ConfigError::invalid(
                        key,
                        "the user before '@' is empty; leave out \"user@\" to connect as guest",
                    ));
                }
                (Some(user.to_owned()), password.to_owned())
            }
        };
        Ok(Upstream {
            address,
            user,
            password,
        })
    }
}

/// The password stays out of logs and debug output.
impl std::fmt::Debug for Upstream {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, formatter)
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.user {
            Some(user) => write!(formatter, "{user}@{}", self.address),
            None => write!(formatter, "{}", self.address),
        }
    }
}

/// Synchronous replication's settings (Tarantool's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synchro {
    /// `replication_synchro_quorum`: instances, the master included, that must have a sync
    /// write in their WAL before it is acknowledged; 1 (the default) waits for nobody.
    pub quorum: u32,
    /// `replication_synchro_timeout`: how long a sync write waits for its quorum.
    pub timeout: std::time::Duration,
}

impl Default for Synchro {
    fn default() -> Synchro {
        Synchro {
            quorum: 1,
            timeout: std::time::Duration::from_secs(5),
        }
    }
}

/// Checks `replication_synchro_quorum` (at least 1) and `replication_synchro_timeout`
/// (seconds, more than 0), in Tarantool's words where it has them.
pub(crate) fn resolve_synchro(quorum: u64, timeout_seconds: f64) -> Result<Synchro, ConfigError> {
    if quorum == 0 || quorum > 32 {
        return Err(ConfigError::invalid(
            "replication_synchro_quorum",
            format!(
                "{quorum}: the value must be greater than zero and at most 32 (instances, this \
                 one included)"
            ),
        ));
    }
    if !(timeout_seconds > 0.0 && timeout_seconds <= 1e9) {
        return Err(ConfigError::invalid(
            "replication_synchro_timeout",
            format!("{timeout_seconds}: the value must be greater than zero (seconds)"),
        ));
    }
    Ok(Synchro {
        quorum: quorum as u32,
        timeout: std::time::Duration::from_secs_f64(timeout_seconds),
    })
}

/// Checks the `replication` entries: at most one master is followed for now.
pub(crate) fn resolve_upstreams(uris: &[String]) -> Result<Vec<Upstream>, ConfigError> {
    if uris.len() > 1 {
        return Err(ConfigError::invalid(
            "replication",
            format!(
                "{} masters are given; tarn follows one master (a replica set has one \
                 writable instance)",
                uris.len()
            ),
        ));
    }
    uris.iter()
        .enumerate()
        .map(|(at, uri)| Upstream::parse(uri, &format!("replication[{at}]")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uri_gives_its_user_password_and_address() {
        let upstream = Upstream::parse("replicator:se:cret@127.0.0.1:3301", "r").unwrap();
        assert_eq!(upstream.user.as_deref(), Some("replicator"));
        assert_eq!(upstream.password, "se:cret");
        assert_eq!(upstream.address, "127.0.0.1:3301".parse().unwrap());
        assert_eq!(upstream.to_string(), "replicator@127.0.0.1:3301");
        assert_eq!(format!("{upstream:?}"), "replicator@127.0.0.1:3301");

        let guest = Upstream::parse("[::1]:3302", "r").unwrap();
        assert_eq!((guest.user, guest.password.as_str()), (None, ""));
        let no_password = Upstream::parse("admin@127.0.0.1:1", "r").unwrap();
        assert_eq!(
            (no_password.user.as_deref(), no_password.password.as_str()),
            (Some("admin"), "")
        );
    }

    #[test]
    fn synchro_settings_are_checked() {
        let synchro = resolve_synchro(2, 0.1).unwrap();
        assert_eq!(synchro.quorum, 2);
        assert_eq!(synchro.timeout, std::time::Duration::from_millis(100));
        let zero = resolve_synchro(0, 5.0).unwrap_err().to_string();
        assert!(zero.starts_with("replication_synchro_quorum: 0: the value must be greater"));
        for timeout in [0.0, -1.0, f64::NAN] {
            let error = resolve_synchro(1, timeout).unwrap_err().to_string();
            assert!(error.contains("replication_synchro_timeout"), "{error}");
            assert!(error.contains("must be greater than zero"), "{error}");
        }
    }

    #[test]
    fn bad_uris_say_what_to_write() {
        let error = Upstream::parse("user@localhost:3301", "replication[0]").unwrap_err();
        assert!(error
            .to_string()
            .starts_with("replication[0]: \"localhost:3301\" is not a socket address"));
        let error = Upstream::parse(":pw@127.0.0.1:3301", "replication[0]").unwrap_err();
        assert!(error.to_string().contains("the user before '@' is empty"));
        let two = ["127.0.0.1:1".to_owned(), "127.0.0.1:2".to_owned()];
        assert!(resolve_upstreams(&two)
            .unwrap_err()
            .to_string()
            .contains("follows one master"));
    }
}
