//! The chap-sha1 scramble of spec §9, both the server check and the client side.
//!
//! Owns the hashing and the stored form (`base64(SHA1(SHA1(password)))`). It must not know
//! users, sessions or where the stored hash lives.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use sha1::{Digest, Sha1};

/// The only method this server implements.
pub const CHAP_SHA1: &str = "chap-sha1";
/// Bytes of a scramble, of a SHA1 digest, and of the salt prefix that enters the hash.
pub const SCRAMBLE_SIZE: usize = 20;

fn sha1(parts: &[&[u8]]) -> [u8; SCRAMBLE_SIZE] {
    let mut hasher = Sha1::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// `SHA1(SHA1(password))`: what the server keeps.
pub fn password_hash2(password: &[u8]) -> [u8; SCRAMBLE_SIZE] {
    sha1(&[&sha1(&[password])])
}

/// The `_user.auth` form: `{"chap-sha1": <this>}`.
pub fn stored_auth_base64(password: &[u8]) -> String {
    STANDARD.encode(password_hash2(password))
}

/// Reads a stored `chap-sha1` value back; `None` if it is not base64 of 20 bytes.
pub fn decode_stored_auth(stored: &str) -> Option<[u8; SCRAMBLE_SIZE]> {
    let mut out = [0u8; 32];
    let len = STANDARD.decode_slice(stored, &mut out).ok()?;
    out[..len].try_into().ok()
}

/// The client side: `SHA1(password) XOR SHA1(salt[..20] ++ hash2)`.
///
/// A salt shorter than 20 bytes is used as it is (Tarantool's clients refuse such
/// greetings; this only keeps the function total).
pub fn scramble(salt: &[u8], password: &[u8]) -> [u8; SCRAMBLE_SIZE] {
    let hash1 = sha1(&[password]);
    let hash2 = sha1(&[&hash1]);
    let salt = &salt[..salt.len().min(SCRAMBLE_SIZE)];
    let mask = sha1(&[salt, &hash2]);
    std::array::from_fn(|i| hash1[i] ^ mask[i])
}

/// The server check: recover `hash1` from the scramble and see whether it hashes to the
/// stored `hash2`. The final comparison does not stop at the first differing byte.
pub fn check_chap_sha1(salt: &[u8], scramble: &[u8], hash2: &[u8; SCRAMBLE_SIZE]) -> bool {
    if salt.len() < SCRAMBLE_SIZE || scramble.len() != SCRAMBLE_SIZE {
        return false;
    }
    let mask = sha1(&[&salt[..SCRAMBLE_SIZE], hash2]);
    let candidate: [u8; SCRAMBLE_SIZE] = std::array::from_fn(|i| scramble[i] ^ mask[i]);
    let candidate_hash2 = sha1(&[&candidate]);
    candidate_hash2
        .iter()
        .zip(hash2)
        .fold(0u8, |diff, (a, b)| diff | (a ^ b))
        == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_forms_match_tarantool() {
        assert_eq!(stored_auth_base64(b""), "vhvewKp0tNyweZQ+cFKAlsyphfg=");
        assert_eq!(
            stored_auth_base64(b"testpass"),
            "AOJHrF+a8mrgGUtB4edp3uFCmik="
        );
        assert_eq!(
            decode_stored_auth("AOJHrF+a8mrgGUtB4edp3uFCmik="),
            Some(password_hash2(b"testpass"))
        );
        assert_eq!(decode_stored_auth("AAAA"), None);
        assert_eq!(decode_stored_auth("not base64!"), None);
    }

    #[test]
    fn scramble_checks_against_the_right_password_only() {
        let salt: [u8; 32] = std::array::from_fn(|i| u8::try_from((i * 31 + 7) % 256).unwrap());
        let hash2 = password_hash2(b"testpass");
        let good = scramble(&salt, b"testpass");
        assert!(check_chap_sha1(&salt, &good, &hash2));
        assert!(!check_chap_sha1(&salt, &scramble(&salt, b"wrong"), &hash2));
        // only the first 20 salt bytes matter
        let mut other_tail = salt;
        other_tail[25] ^= 0xff;
        assert!(check_chap_sha1(&other_tail, &good, &hash2));
        let mut other_head = salt;
        other_head[0] ^= 0xff;
        assert!(!check_chap_sha1(&other_head, &good, &hash2));
        assert!(!check_chap_sha1(&salt, &good[..19], &hash2));
        assert!(!check_chap_sha1(&salt[..19], &good, &hash2));
    }

    #[test]
    fn guest_empty_password() {
        let salt = [9u8; 32];
        let hash2 = decode_stored_auth("vhvewKp0tNyweZQ+cFKAlsyphfg=").unwrap();
        assert!(check_chap_sha1(&salt, &scramble(&salt, b""), &hash2));
    }
}
