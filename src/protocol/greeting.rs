//! The 128-byte greeting the server sends first on every connection (spec §2).
//!
//! Owns its exact layout and, for clients, reading the salt back. It must not know where
//! the salt comes from (the caller draws it per connection) nor anything about sockets.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

pub const GREETING_SIZE: usize = 128;
/// The salt the server keeps; only the first [`crate::protocol::auth::SCRAMBLE_SIZE`]
/// bytes enter chap-sha1, but clients expect exactly 44 base64 characters.
pub const SALT_SIZE: usize = 32;
const LINE_SIZE: usize = 64;
const SALT_BASE64_SIZE: usize = 44;

/// Builds the greeting for `version` (plain `X.Y.Z`: asynctnt rejects any suffix).
///
/// # Panics
/// If `version` is not digits and dots or too long for the first line. The version is the
/// server's own constant, so this is a programming error, never a network one.
pub fn encode_greeting(version: &str, instance_uuid: &uuid::Uuid, salt: &[u8; 32]) -> [u8; 128] {
    assert!(
        !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit() || b == b'.'),
        "greeting version must be plain X.Y.Z, got {version:?}"
    );
    let mut out = [b' '; GREETING_SIZE];
    let mut uuid_text = uuid::Uuid::encode_buffer();
    let uuid_text = instance_uuid.hyphenated().encode_lower(&mut uuid_text);
    let parts: [&[u8]; 4] = [
        b"Tarantool ",
        version.as_bytes(),
        b" (Binary) ",
        uuid_text.as_bytes(),
    ];
    let first_line_len: usize = parts.iter().map(|p| p.len()).sum();
    assert!(
        first_line_len < LINE_SIZE,
        "greeting version {version:?} too long"
    );
    let mut at = 0;
    for part in parts {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    out[LINE_SIZE - 1] = b'\n';

    let salt_text = &mut out[LINE_SIZE..LINE_SIZE + SALT_BASE64_SIZE];
    let written = STANDARD.encode_slice(salt, salt_text);
    debug_assert_eq!(written, Ok(SALT_BASE64_SIZE));
    out[GREETING_SIZE - 1] = b'\n';
    out
}

/// What a client reads from a greeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting<'a> {
    /// The version token (`"2.11.1"`).
    pub version: &'a str,
    /// The decoded salt (Tarantool sends 32 bytes; at least 20 are needed).
    pub salt: [u8; 64],
    pub salt_len: usize,
}

impl Greeting<'_> {
    pub fn salt(&self) -> &[u8] {
        &self.salt[..self.salt_len]
    }
}

/// Parses a greeting the way the go and Python connectors do; `None` if it isn't one.
pub fn parse_greeting(greeting: &[u8]) -> Option<Greeting<'_>> {
    if greeting.len() != GREETING_SIZE {
        return None;
    }
    let first_line = std::str::from_utf8(&greeting[..LINE_SIZE]).ok()?;
    let mut words = first_line.split_ascii_whitespace();
    if words.next()? != "Tarantool" {
        return None;
    }
    let version = words.next()?;
    let salt_text = std::str::from_utf8(&greeting[LINE_SIZE..]).ok()?.trim_end();
    let mut salt = [0u8; 64];
    let salt_len = STANDARD.decode_slice(salt_text, &mut salt).ok()?;
    if salt_len < crate::protocol::auth::SCRAMBLE_SIZE {
        return None;
    }
    Some(Greeting {
        version,
        salt,
        salt_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_spec() {
        let uuid = uuid::Uuid::parse_str("5158362a-64e7-4306-a707-584f484991a2").unwrap();
        let salt: [u8; 32] = std::array::from_fn(|i| u8::try_from(i).unwrap() * 7);
        let g = encode_greeting("2.11.1", &uuid, &salt);
        let text = std::str::from_utf8(&g).unwrap();
        assert!(text.starts_with("Tarantool 2.11.1 (Binary) 5158362a-64e7-4306-a707-584f484991a2 "));
        assert_eq!(g[63], b'\n');
        assert_eq!(g[127], b'\n');
        assert!(g[56 + 6..63].iter().all(|&b| b == b' '));
        let salt_text = &text[64..108];
        assert_eq!(STANDARD.decode(salt_text).unwrap(), salt);
        assert!(salt_text.ends_with('='));
        assert!(g[108..127].iter().all(|&b| b == b' '));

        let parsed = parse_greeting(&g).unwrap();
        assert_eq!(parsed.version, "2.11.1");
        assert_eq!(parsed.salt(), &salt);
    }

    #[test]
    fn parses_observed_tarantool_greeting() {
        let mut g = Vec::new();
        g.extend_from_slice(b"Tarantool 2.6.0 (Binary) 5158362a-64e7-4306-a707-584f484991a2  \n");
        g.extend_from_slice(b"uxr3UE5OL7i6Ah9reureQfU2j6T1dvJFSiIMPA+fKPk=                   \n");
        let parsed = parse_greeting(&g).unwrap();
        assert_eq!(parsed.version, "2.6.0");
        assert_eq!(parsed.salt_len, 32);
        assert!(parse_greeting(&g[..127]).is_none());
    }

    #[test]
    #[should_panic]
    fn rejects_version_suffix() {
        encode_greeting("2.11.1-g123", &uuid::Uuid::nil(), &[0; 32]);
    }
}
