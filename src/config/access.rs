//! Access control: what the guest may do, the users and their passwords and grants.
//!
//! Owns the grant names (`read`, `write`, `execute`) and the rules on users (unique names, not
//! `guest` or `admin`, a password). Knows nothing of the auth scramble or of which request needs
//! which grant; the server decides that.

use std::fmt;

use super::error::ConfigError;
use super::file::{RawGuest, RawUser};

/// Privileges on every space and function. An empty set still allows ping and authenticate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Grants {
    /// select, get, count, len.
    pub read: bool,
    /// insert, replace, update, upsert, delete, truncate.
    pub write: bool,
    /// call and eval (e.g. the crud functions).
    pub execute: bool,
}

impl Grants {
    /// Every privilege.
    pub const ALL: Grants = Grants {
        read: true,
        write: true,
        execute: true,
    };
}

/// A user that authenticates with chap-sha1.
#[derive(Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    /// The plain password, as written in the file; the server derives the scramble hashes.
    pub password: String,
    pub grants: Grants,
}

impl fmt::Debug for User {
    /// Leaves the password out, so that a logged config does not leak it.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("User")
            .field("name", &self.name)
            .field("password", &"<redacted>")
            .field("grants", &self.grants)
            .finish()
    }
}

/// `[guest]` and `[[user]]`, resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessConfig {
    /// What an unauthenticated connection may do.
    pub guest: Grants,
    pub users: Vec<User>,
}

/// Names the server reserves for built-in users.
const RESERVED_USER_NAMES: [&str; 2] = ["guest", "admin"];

pub(crate) fn resolve_access(
    raw_guest: &RawGuest,
    raw_users: &[RawUser],
) -> Result<AccessConfig, ConfigError> {
    let guest = parse_grants(&raw_guest.grants, "guest.grants")?;
    let mut users: Vec<User> = Vec::with_capacity(raw_users.len());
    for (position, raw) in raw_users.iter().enumerate() {
        let path = format!("user[{position}] {:?}", raw.name);
        if raw.name.is_empty() {
            return Err(ConfigError::invalid(path, "a user name must not be empty"));
        }
        if RESERVED_USER_NAMES.contains(&raw.name.as_str()) {
            return Err(ConfigError::invalid(
                path,
                "guest and admin are built-in users; configure guest under [guest] and pick \
                 another name",
            ));
        }
        if let Some(earlier) = users.iter().position(|user| user.name == raw.name) {
            return Err(ConfigError::invalid(
                path,
                format!("name is already used by user[{earlier}]"),
            ));
        }
        if raw.password.is_empty() {
            return Err(ConfigError::invalid(
                path,
                "password must not be empty (a user without one could never authenticate)",
            ));
        }
        users.push(User {
            name: raw.name.clone(),
            password: raw.password.clone(),
            grants: parse_grants(&raw.grants, &format!("{path}: grants"))?,
        });
    }
    Ok(AccessConfig { guest, users })
}

fn parse_grants(names: &[String], path: &str) -> Result<Grants, ConfigError> {
    let mut grants = Grants::default();
    for name in names {
        let slot = match name.as_str() {
            "read" => &mut grants.read,
            "write" => &mut grants.write,
            "execute" => &mut grants.execute,
            other => {
                return Err(ConfigError::invalid(
                    path,
                    format!("grant {other:?} is not one of read, write, execute"),
                ))
            }
        };
        if *slot {
            return Err(ConfigError::invalid(
                path,
                format!("grant {name:?} is listed twice"),
            ));
        }
        *slot = true;
    }
    Ok(grants)
}
