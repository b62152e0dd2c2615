//! The size limits set in different layers that must agree, related at compile time: a
//! limit changed in one place fails the build here instead of a request at run time.
//!
//! Owns no limit of its own; each stays with the layer whose bytes it bounds.

use crate::config::settings::MAX_PACKET_SIZE_BYTES_MAX;
use crate::protocol::error::PACKET_LEN_MAX;
use crate::wal::format::ROW_BODY_BYTES_MAX;

// The configured packet limit is one IPROTO accepts: a packet under it is never answered
// "too big packet size in the header".
const _: () = assert!(MAX_PACKET_SIZE_BYTES_MAX <= PACKET_LEN_MAX);

// A packet forwarded to its owner core travels with a u32 length (`mesh::batch`'s request
// entries, `mesh::crud_payloads`' lengths), so the largest packet must fit one.
const _: () = assert!(MAX_PACKET_SIZE_BYTES_MAX <= u32::MAX as u64);

// A tuple that one packet carries (it is shorter than its packet) can be logged: the WAL
// writer refuses only rows over `ROW_BODY_BYTES_MAX`, and its readers take every row up to
// it back (`wal::format` derives their limits from it).
const _: () = assert!(MAX_PACKET_SIZE_BYTES_MAX <= ROW_BODY_BYTES_MAX as u64);
