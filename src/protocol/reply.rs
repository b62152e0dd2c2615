//! Reply encoding, straight into the connection's write buffer (spec §3, §6, §7, §8, §17).
//!
//! Owns the server packet shape: the `0xce` + u32 size prefix, the three-entry header,
//! the DATA / error / ID / EVENT bodies. The caller writes tuples (raw msgpack) itself.
//! It must not know where tuples come from or how the buffer is flushed.
//!
//! Counts and sizes that are only known at the end are reserved in fixed-width forms and
//! patched, so a reply is produced in one pass with no scratch buffer.

use crate::msgpack::{write_array_len, write_str, write_uint};
use crate::protocol::codes::{
    body_key, error_key, header_key, key_byte, request_type, MP_ERROR_EXT_TYPE,
};
use crate::protocol::error::ProtocolError;
use crate::protocol::error_code::ErrorCode;
use crate::protocol::header::decode_header;

/// Where a packet's size prefix sits in the buffer; hand it back to [`finish_packet`].
#[derive(Debug)]
#[must_use = "the size prefix stays 0 until finish_packet"]
pub struct PacketMark {
    prefix_at: usize,
}

/// Where a reserved `0xdd` array header sits; hand it back to [`finish_array`].
#[derive(Debug)]
#[must_use = "the array header stays 0 until finish_array"]
pub struct ArrayMark {
    header_at: usize,
}

/// Starts a packet: a 5-byte `0xce` size placeholder.
#[inline]
pub fn begin_packet(out: &mut Vec<u8>) -> PacketMark {
    let prefix_at = out.len();
    out.extend_from_slice(&[0xce, 0, 0, 0, 0]);
    PacketMark { prefix_at }
}

/// Patches the size prefix with the length of everything written since [`begin_packet`].
///
/// A packet the u32 length field cannot hold (a scan or fan-out over 4 GiB, which a client
/// can ask for) is replaced by an error reply with the same sync and schema version: the
/// client gets ER_MEMORY_ISSUE and the connection's framing stays intact.
#[inline]
pub fn finish_packet(out: &mut Vec<u8>, mark: PacketMark) {
    let packet_len = out.len() - mark.prefix_at - 5;
    match u32::try_from(packet_len) {
        Ok(length_field) => {
            out[mark.prefix_at + 1..mark.prefix_at + 5].copy_from_slice(&length_field.to_be_bytes())
        }
        Err(_) => replace_with_too_large_error(out, mark.prefix_at, packet_len),
    }
}

/// What [`finish_packet`] answers instead of the packet at `prefix_at`, `packet_len` bytes that no IPROTO
/// length field can describe. The packet's own header says whose reply it was.
#[cold]
#[inline(never)]
pub(super) fn replace_with_too_large_error(out: &mut Vec<u8>, prefix_at: usize, packet_len: usize) {
    let (sync, schema_version) = match decode_header(&out[prefix_at + 5..]) {
        Ok((header, _)) => (header.sync, header.schema_version),
        Err(error) => (error.sync, 0),
    };
    out.truncate(prefix_at);
    let message = format!(
        "Failed to allocate {packet_len} bytes in the reply buffer for one reply packet \
         (IPROTO's length field holds at most {} bytes): ask for fewer rows, with a limit",
        u32::MAX
    );
    encode_error(
        out,
        sync,
        schema_version,
        ErrorCode::ER_MEMORY_ISSUE,
        &message,
    );
}

/// A count of items (or bytes) inside one packet, as the u32 its msgpack header holds.
/// Over `u32::MAX` the packet is over 4 GiB too (every item is at least a byte), and
/// [`finish_packet`] replaces it whole by an error reply: the count saturates, and what it
/// would have wrapped to never reaches the client.
#[inline]
fn count_in_packet(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// Reserves a 5-byte `0xdd` array header whose count is patched by [`finish_array`].
#[inline]
pub fn begin_array(out: &mut Vec<u8>) -> ArrayMark {
    let header_at = out.len();
    out.extend_from_slice(&[0xdd, 0, 0, 0, 0]);
    ArrayMark { header_at }
}

#[inline]
pub fn finish_array(out: &mut [u8], mark: ArrayMark, count: u32) {
    out[mark.header_at + 1..mark.header_at + 5].copy_from_slice(&count.to_be_bytes());
}

/// Writes `{0: status, 1: sync, 5: schema_version}` with minimal uint encodings.
#[inline]
pub fn write_reply_header(out: &mut Vec<u8>, status: u64, sync: u64, schema_version: u64) {
    let mut head = Head::new();
    head.put_reply_header(status, sync, schema_version);
    out.extend_from_slice(head.bytes());
}

/// The start of a reply (size placeholder, header, the body's first bytes), assembled on
/// the stack and appended with one copy: a push per byte costs a capacity check each.
struct Head {
    bytes: [u8; Head::CAPACITY],
    len: usize,
}

impl Head {
    /// Size prefix (5), a header of three widest uints (1 + 3 * 10), a body start (16).
    const CAPACITY: usize = 5 + 31 + 16;

    #[inline(always)]
    fn new() -> Head {
        Head {
            bytes: [0; Head::CAPACITY],
            len: 0,
        }
    }

    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        self.bytes[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    #[inline(always)]
    fn put_uint(&mut self, value: u64) {
        if value < 128 {
            #[allow(clippy::cast_possible_truncation, reason = "under 128, checked above")]
            self.put(&[value as u8]);
        } else if let Ok(value) = u8::try_from(value) {
            self.put(&[0xcc, value]);
        } else if let Ok(value) = u16::try_from(value) {
            self.put(&[0xcd]);
            self.put(&value.to_be_bytes());
        } else if let Ok(value) = u32::try_from(value) {
            self.put(&[0xce]);
            self.put(&value.to_be_bytes());
        } else {
            self.put(&[0xcf]);
            self.put(&value.to_be_bytes());
        }
    }

    #[inline(always)]
    fn put_reply_header(&mut self, status: u64, sync: u64, schema_version: u64) {
        self.put(&[0x83, const { key_byte(header_key::REQUEST_TYPE) }]);
        self.put_uint(status);
        self.put(&[const { key_byte(header_key::SYNC) }]);
        self.put_uint(sync);
        self.put(&[const { key_byte(header_key::SCHEMA_VERSION) }]);
        self.put_uint(schema_version);
    }

    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Appends the size placeholder and the header (`body_start` after it) to `out`;
    /// returns where the packet starts.
    #[inline(always)]
    fn begin_packet(
        out: &mut Vec<u8>,
        status: u64,
        sync: u64,
        schema_version: u64,
        body_start: &[u8],
    ) -> PacketMark {
        let mut head = Head::new();
        head.put(&[0xce, 0, 0, 0, 0]);
        head.put_reply_header(status, sync, schema_version);
        head.put(body_start);
        let prefix_at = out.len();
        out.extend_from_slice(head.bytes());
        PacketMark { prefix_at }
    }
}

/// A whole OK reply with the empty body `{}` (PING, AUTH, BEGIN, COMMIT, ...).
pub fn encode_ok(out: &mut Vec<u8>, sync: u64, schema_version: u64) {
    let mark = Head::begin_packet(out, request_type::OK, sync, schema_version, &[0x80]);
    finish_packet(out, mark);
}

/// Starts an OK reply `{0x30: [` whose item count is known up front (minimal header).
/// Write exactly `count` msgpack values, then call [`finish_packet`].
pub fn begin_data_reply(
    out: &mut Vec<u8>,
    sync: u64,
    schema_version: u64,
    count: u32,
) -> PacketMark {
    let mark = Head::begin_packet(
        out,
        request_type::OK,
        sync,
        schema_version,
        &[0x81, const { key_byte(body_key::DATA) }],
    );
    write_array_len(out, count);
    mark
}

/// An OK reply `{0x30: [...]}` whose item count is learned while writing (a scan).
#[derive(Debug)]
#[must_use = "call DataReply::finish"]
pub struct DataReply {
    packet: PacketMark,
    array: ArrayMark,
    count: u32,
}

impl DataReply {
    #[inline]
    pub fn begin(out: &mut Vec<u8>, sync: u64, schema_version: u64) -> DataReply {
        const BODY_START: [u8; 7] = [0x81, key_byte(body_key::DATA), 0xdd, 0, 0, 0, 0];
        let packet = Head::begin_packet(out, request_type::OK, sync, schema_version, &BODY_START);
        let array = ArrayMark {
            header_at: out.len() - 5,
        };
        DataReply {
            packet,
            array,
            count: 0,
        }
    }

    /// Appends one item (a whole msgpack value, e.g. a tuple's bytes).
    #[inline]
    pub fn push_raw(&mut self, out: &mut Vec<u8>, item: &[u8]) {
        out.extend_from_slice(item);
        self.count += 1;
    }

    /// Counts one item the caller has written into `out` itself.
    #[inline]
    pub fn count_written(&mut self) {
        self.count += 1;
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn finish(self, out: &mut Vec<u8>) {
        finish_array(out, self.array, self.count);
        finish_packet(out, self.packet);
    }
}

/// A whole `{0x30: [items...]}` reply from already-encoded items.
pub fn encode_data<'i>(
    out: &mut Vec<u8>,
    sync: u64,
    schema_version: u64,
    items: impl ExactSizeIterator<Item = &'i [u8]>,
) {
    let mark = begin_data_reply(out, sync, schema_version, count_in_packet(items.len()));
    for item in items {
        out.extend_from_slice(item);
    }
    finish_packet(out, mark);
}

/// Makes the data of the OK reply at `prefix_at` one list: `{0x30: [a, b]}` becomes
/// `{0x30: [[a, b]]}`, what a CALL answers for a function that returns a table of tuples
/// (the outer header `0xdd`, as Tarantool writes a CALL's, the inner the shortest). An
/// error reply is left as it is.
pub fn wrap_data_in_one_list(out: &mut Vec<u8>, prefix_at: usize) {
    let packet_at = prefix_at + 5;
    let Some(mut cursor) = out.get(packet_at..) else {
        return;
    };
    let packet_len = cursor.len();
    if crate::msgpack::skip_value(&mut cursor).is_err() || !cursor.starts_with(&[0x81]) {
        return;
    }
    let body_at = packet_at + (packet_len - cursor.len());
    if out.get(body_at + 1) != Some(&key_byte(body_key::DATA)) {
        return;
    }
    let array_at = body_at + 2;
    let mut items = &out[array_at..];
    let Ok(Some(count)) = crate::msgpack::read_array_len(&mut items) else {
        return;
    };
    let header_len = out.len() - array_at - items.len();
    let mut headers = vec![0xdd, 0, 0, 0, 1];
    write_array_len(&mut headers, count);
    out.splice(array_at..array_at + header_len, headers);
    finish_packet(out, PacketMark { prefix_at });
}

/// One entry of the error stack (spec §7); element 0 of a stack is the error raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorEntry<'a> {
    pub type_name: &'a str,
    pub file: &'a str,
    pub line: u32,
    pub message: &'a str,
    pub errno: u32,
    pub code: ErrorCode,
    /// A raw msgpack map for key 6 (e.g. AccessDeniedError's object fields); omitted when
    /// `None`, as Tarantool omits it when empty.
    pub fields: Option<&'a [u8]>,
}

impl<'a> ErrorEntry<'a> {
    /// An entry with the code's usual type name and this crate as its origin.
    pub fn new(code: ErrorCode, message: &'a str) -> ErrorEntry<'a> {
        ErrorEntry {
            type_name: code.type_name(),
            file: "tarn",
            line: 0,
            message,
            errno: 0,
            code,
            fields: None,
        }
    }
}

/// Writes the `{0: [entry, ...]}` map shared by the 0x52 key and the MP_ERROR extension.
pub fn write_error_stack(out: &mut Vec<u8>, stack: &[ErrorEntry<'_>]) {
    out.push(0x81);
    out.push(const { key_byte(error_key::STACK) });
    write_array_len(out, count_in_packet(stack.len()));
    for entry in stack {
        // Python indexes keys 0..5 directly: all six are always present.
        out.push(0x80 | if entry.fields.is_some() { 7 } else { 6 });
        out.push(const { key_byte(error_key::TYPE) });
        write_str(out, entry.type_name.as_bytes());
        out.push(const { key_byte(error_key::FILE) });
        write_str(out, entry.file.as_bytes());
        out.push(const { key_byte(error_key::LINE) });
        write_uint(out, entry.line.into());
        out.push(const { key_byte(error_key::MESSAGE) });
        write_str(out, entry.message.as_bytes());
        out.push(const { key_byte(error_key::ERRNO) });
        write_uint(out, entry.errno.into());
        out.push(const { key_byte(error_key::CODE) });
        write_uint(out, entry.code.0.into());
        if let Some(fields) = entry.fields {
            out.push(const { key_byte(error_key::FIELDS) });
            out.extend_from_slice(fields);
        }
    }
}

/// A whole error reply: status `0x8000 | code` of the top entry, body with both the
/// `0x31` message and the `0x52` stack (2.4+ clients prefer the latter).
///
/// An empty `stack` is a caller bug; it is answered as ER_UNKNOWN rather than panicking.
pub fn encode_error_stack(
    out: &mut Vec<u8>,
    sync: u64,
    schema_version: u64,
    stack: &[ErrorEntry<'_>],
) {
    debug_assert!(!stack.is_empty());
    let unknown = [ErrorEntry::new(ErrorCode::ER_UNKNOWN, "Unknown error")];
    let stack = if stack.is_empty() {
        &unknown[..]
    } else {
        stack
    };
    let top = &stack[0];
    let mark = Head::begin_packet(
        out,
        top.code.response_type(),
        sync,
        schema_version,
        &[0x82, const { key_byte(body_key::ERROR_24) }],
    );
    write_str(out, top.message.as_bytes());
    out.push(const { key_byte(body_key::ERROR) });
    write_error_stack(out, stack);
    finish_packet(out, mark);
}

/// A whole error reply with a one-entry stack.
pub fn encode_error(
    out: &mut Vec<u8>,
    sync: u64,
    schema_version: u64,
    code: ErrorCode,
    message: &str,
) {
    encode_error_stack(out, sync, schema_version, &[ErrorEntry::new(code, message)]);
}

/// A whole error reply for an error of this layer.
pub fn encode_protocol_error(
    out: &mut Vec<u8>,
    sync: u64,
    schema_version: u64,
    error: &ProtocolError,
) {
    encode_error(out, sync, schema_version, error.code(), &error.to_string());
}

/// Writes a CALL/EVAL return value that is an error object: the MP_ERROR extension
/// (type 3) wrapping the same stack map, for clients that negotiated ERROR_EXTENSION.
pub fn write_mp_error_ext(out: &mut Vec<u8>, stack: &[ErrorEntry<'_>]) {
    // ext 32 with a patched length: the size is only known after writing.
    let header_at = out.len();
    out.extend_from_slice(&[0xc9, 0, 0, 0, 0, MP_ERROR_EXT_TYPE as u8]);
    write_error_stack(out, stack);
    let len = count_in_packet(out.len() - header_at - 6);
    out[header_at + 1..header_at + 5].copy_from_slice(&len.to_be_bytes());
}

/// The IPROTO_ID reply: `{0x54: version, 0x55: [features], 0x5b?: auth_type}`.
pub fn encode_id_reply(
    out: &mut Vec<u8>,
    sync: u64,
    schema_version: u64,
    protocol_version: u64,
    features: &[u32],
    auth_type: Option<&str>,
) {
    let body_map = if auth_type.is_some() { 0x83 } else { 0x82 };
    let mark = Head::begin_packet(out, request_type::OK, sync, schema_version, &[body_map]);
    out.push(const { key_byte(body_key::VERSION) });
    write_uint(out, protocol_version);
    out.push(const { key_byte(body_key::FEATURES) });
    write_array_len(out, count_in_packet(features.len()));
    for &feature in features {
        write_uint(out, feature.into());
    }
    if let Some(auth_type) = auth_type {
        out.push(const { key_byte(body_key::AUTH_TYPE) });
        write_str(out, auth_type.as_bytes());
    }
    finish_packet(out, mark);
}

/// An EVENT push (spec §17): header `{0: 76, 1: sync}` (no schema version), body
/// `{0x57: key[, 0x58: value]}`; `value` is one raw msgpack value.
pub fn encode_event(out: &mut Vec<u8>, sync: u64, key: &str, value: Option<&[u8]>) {
    let mark = begin_packet(out);
    out.push(0x82);
    out.push(const { key_byte(header_key::REQUEST_TYPE) });
    write_uint(out, request_type::EVENT);
    out.push(const { key_byte(header_key::SYNC) });
    write_uint(out, sync);
    out.push(if value.is_some() { 0x82 } else { 0x81 });
    out.push(const { key_byte(body_key::EVENT_KEY) });
    write_str(out, key.as_bytes());
    if let Some(value) = value {
        out.push(const { key_byte(body_key::EVENT_DATA) });
        out.extend_from_slice(value);
    }
    finish_packet(out, mark);
}
