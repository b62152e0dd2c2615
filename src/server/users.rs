//! Who a connection is: users from the config, chap-sha1 authentication and grants.
//!
//! Knows nothing of sockets or data; the connection asks it "may this user do this".

use crate::config::{Config, Grants};
use crate::protocol::auth::{check_chap_sha1, password_hash2};
use crate::protocol::request::Auth;
use crate::protocol::ProtocolError;

pub struct UserEntry {
    pub name: Box<str>,
    /// SHA1(SHA1(password)): what chap-sha1 checks against, as Tarantool stores it.
    pub hash2: [u8; 20],
    pub grants: Grants,
}

/// The users a server knows: index 0 is guest, then the config's, then the applier's (which
/// no AUTH finds).
pub struct Users {
    entries: Vec<UserEntry>,
}

/// Why an AUTH failed; the session keeps its previous user.
pub enum AuthError {
    Protocol(ProtocolError),
    /// Error 47: unknown user or wrong password (2.11 words them alike).
    CredentialsMismatch,
}

impl Users {
    pub fn from_config(config: &Config) -> Users {
        let guest = UserEntry {
            name: "guest".into(),
            hash2: password_hash2(b""),
            grants: config.access.guest,
        };
        let users = config.access.users.iter().map(|user| UserEntry {
            name: user.name.as_str().into(),
            hash2: password_hash2(user.password.as_bytes()),
            grants: user.grants,
        });
        let applier = UserEntry {
            name: "admin".into(),
            hash2: [0; 20],
            grants: Grants::ALL,
        };
        let entries = std::iter::once(guest).chain(users).chain([applier]);
        Users {
            entries: entries.collect(),
        }
    }

    /// The user a replica's applier writes as: every grant, and no password opens it.
    pub fn applier_id(&self) -> usize {
        self.entries.len() - 1
    }

    pub fn get(&self, user_id: usize) -> &UserEntry {
        &self.entries[user_id]
    }

    /// Checks an AUTH request against the connection's greeting salt; returns the user id.
    pub fn authenticate(&self, auth: &Auth<'_>, salt: &[u8]) -> Result<usize, AuthError> {
        let found = self.entries[..self.applier_id()]
            .iter()
            .position(|user| &*user.name == auth.user_name);
        if found == Some(0) && auth.method.is_none() {
            return Ok(0);
        }
        let scramble = auth.chap_sha1_scramble().map_err(AuthError::Protocol)?;
        let user_id = found.ok_or(AuthError::CredentialsMismatch)?;
        if check_chap_sha1(salt, scramble, &self.entries[user_id].hash2) {
            Ok(user_id)
        } else {
            Err(AuthError::CredentialsMismatch)
        }
    }
}

/// What a request needs from the user's grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    Execute,
}

impl Access {
    pub fn name(self) -> &'static str {
        match self {
            Access::Read => "Read",
            Access::Write => "Write",
            Access::Execute => "Execute",
        }
    }

    pub fn granted(self, grants: &Grants) -> bool {
        match self {
            Access::Read => grants.read,
            Access::Write => grants.write,
            Access::Execute => grants.execute,
        }
    }
}
