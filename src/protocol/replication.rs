//! The packets between a tarn master and a tarn replica (`docs/replication.md`): the replica's
//! SUBSCRIBE, the master's answer, and what the master then streams — snapshot tuples, WAL
//! batches as the WAL writes them, heartbeats — and the replica's acknowledgements.
//!
//! IPROTO framing throughout (size prefix, header map, body map). Tarantool's own codes where
//! they mean the same thing (SUBSCRIBE, VCLOCK, LSN, REPLICA_ID, INSTANCE_UUID, DATA,
//! SPACE_ID); tarn's own in the `0x7a00` range where they do not, so that neither side can
//! mistake the other for a Tarantool peer. Knows nothing of files or shards: a batch is bytes
//! here, checked by the WAL layer that reads it.

use crate::msgpack::{read_value, take_value, write_map_len, write_str, write_uint, Value};
use crate::protocol::codes::{body_key, header_key, request_type};
use smallvec::SmallVec;

/// The version of this protocol a SUBSCRIBE asks for; a master answers only its own.
pub const PROTOCOL_VERSION: u64 = 1;

/// tarn's packet types (header `REQUEST_TYPE`) on a replication stream.
pub mod stream_type {
    /// A block of snapshot tuples of one space of one master shard.
    pub const SNAPSHOT_TUPLES: u64 = 0x7a01;
    /// A master shard's snapshot is all sent; header `LSN` is its LSN.
    pub const SNAPSHOT_END: u64 = 0x7a02;
    /// One WAL batch of a master shard, byte for byte as its WAL file holds it.
    pub const WAL_BATCH: u64 = 0x7a03;
    /// Nothing new; the body's `VCLOCK` is what each master shard has written.
    pub const HEARTBEAT: u64 = 0x7a04;
    /// From the replica: what it has applied of each master shard (its `VCLOCK`).
    pub const ACK: u64 = 0x7a05;
    /// Before a master shard's snapshot tuples: the schema the snapshot was taken at.
    pub const SNAPSHOT_SCHEMA: u64 = 0x7a06;
}

/// tarn's body keys on a replication stream.
pub mod stream_key {
    /// In SUBSCRIBE and its answer: the protocol version (see [`super::PROTOCOL_VERSION`]).
    pub const PROTOCOL: u64 = 0x7a10;
    /// In SUBSCRIBE's answer: the master's shard count.
    pub const SHARD_COUNT: u64 = 0x7a11;
    /// The master's data directory fingerprint: in SUBSCRIBE the one the replica's position
    /// was taken from (0: none, bootstrap), in the answer the master's own.
    pub const FINGERPRINT: u64 = 0x7a12;
    /// In `WAL_BATCH`: the batch bytes (bin).
    pub const BATCH: u64 = 0x7a13;
    /// In SUBSCRIBE: the master's last schema change the replica has made.
    pub const SCHEMA_VERSION: u64 = 0x7a14;
    /// In SUBSCRIBE, its answer and every heartbeat: the sender's term (`docs/replication.md`,
    /// promotion). A newer term than an instance's own makes it read-only.
    pub const TERM: u64 = 0x7a15;
    /// In SUBSCRIBE: the subscriber accepts writes, so it takes no rows and only watches the
    /// term; in the answer: the master accepts writes.
    pub const WRITABLE: u64 = 0x7a16;
    /// In `SNAPSHOT_SCHEMA`: the snapshot's schema section (bin), as the snapshot holds it.
    pub const SCHEMA: u64 = 0x7a17;
}

/// Per master shard, the LSN of the last row applied (a replica's position) or written (a
/// master's); `None` for a shard a replica has not bootstrapped from yet.
pub type Vclock = SmallVec<[Option<u64>; 8]>;

/// The most master shards a vclock may name: a map key above it is refused as bad input.
pub const VCLOCK_SHARDS_MAX: u64 = 1024;

/// Why a replication packet was refused: the bytes are not what this protocol sends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad replication packet: {0}")]
pub struct BadPacket(pub &'static str);

type Result<T> = std::result::Result<T, BadPacket>;

/// A replica's SUBSCRIBE body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe<'a> {
    pub protocol: u64,
    pub instance_uuid: &'a str,
    /// The master fingerprint `vclock` was taken from; 0 when bootstrapping.
    pub fingerprint: u64,
    pub vclock: Vclock,
    /// The master's last schema change the replica has made.
    pub schema_version: u64,
    /// The subscriber's term.
    pub term: u64,
    /// The subscriber accepts writes: it watches the master's term and takes no rows.
    pub writable: bool,
}

/// The master's answer to SUBSCRIBE, before it streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribed<'a> {
    pub protocol: u64,
    pub instance_uuid: &'a str,
    pub fingerprint: u64,
    pub shard_count: u32,
    /// What each master shard had written when it answered.
    pub vclock: Vclock,
    /// The master's term, and whether it accepts writes.
    pub term: u64,
    pub writable: bool,
}

/// One packet of the master's stream, or the replica's acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Streamed<'a> {
    /// `tuples`: the msgpack array of them, whole.
    SnapshotTuples {
        shard: u32,
        space_id: u32,
        tuples: &'a [u8],
    },
    SnapshotEnd {
        shard: u32,
        lsn: u64,
    },
    /// `schema`: the snapshot's schema section, unread here.
    SnapshotSchema {
        shard: u32,
        schema: &'a [u8],
    },
    WalBatch {
        shard: u32,
        batch: &'a [u8],
    },
    Heartbeat {
        vclock: Vclock,
        /// The master's term (0: the heartbeat did not say).
        term: u64,
    },
    Ack {
        vclock: Vclock,
    },
    /// An error reply: the master refused or stopped (code, message).
    Error {
        code: u64,
        message: &'a str,
    },
}

fn begin(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0xce, 0, 0, 0, 0]);
    at
}

fn finish(out: &mut [u8], at: usize) {
    let length = u32::try_from(out.len() - at - 5).unwrap_or(u32::MAX);
    out[at + 1..at + 5].copy_from_slice(&length.to_be_bytes());
}

fn write_header(out: &mut Vec<u8>, kind: u64, sync: u64, shard_and_lsn: Option<(u32, u64)>) {
    write_map_len(out, if shard_and_lsn.is_some() { 4 } else { 2 });
    write_uint(out, header_key::REQUEST_TYPE);
    write_uint(out, kind);
    write_uint(out, header_key::SYNC);
    write_uint(out, sync);
    if let Some((shard, lsn)) = shard_and_lsn {
        write_uint(out, header_key::REPLICA_ID);
        write_uint(out, u64::from(shard));
        write_uint(out, header_key::LSN);
        write_uint(out, lsn);
    }
}

fn write_vclock(out: &mut Vec<u8>, vclock: &[Option<u64>]) {
    let known = vclock.iter().filter(|lsn| lsn.is_some()).count();
    write_map_len(out, u32::try_from(known).unwrap_or(u32::MAX));
    for (shard, lsn) in vclock.iter().enumerate() {
        if let Some(lsn) = lsn {
            write_uint(out, shard as u64);
            write_uint(out, *lsn);
        }
    }
}

impl Subscribe<'_> {
    /// The whole packet, size prefix included.
    pub fn encode(&self, sync: u64, out: &mut Vec<u8>) {
        let at = begin(out);
        write_header(out, request_type::SUBSCRIBE, sync, None);
        write_map_len(out, 7);
        write_uint(out, stream_key::TERM);
        write_uint(out, self.term);
        write_uint(out, stream_key::WRITABLE);
        write_bool(out, self.writable);
        write_uint(out, stream_key::PROTOCOL);
        write_uint(out, self.protocol);
        write_uint(out, stream_key::SCHEMA_VERSION);
        write_uint(out, self.schema_version);
        write_uint(out, body_key::INSTANCE_UUID);
        write_str(out, self.instance_uuid.as_bytes());
        write_uint(out, stream_key::FINGERPRINT);
        write_uint(out, self.fingerprint);
        write_uint(out, body_key::VCLOCK);
        write_vclock(out, &self.vclock);
        finish(out, at);
    }
}

/// Decodes a SUBSCRIBE body (the header was decoded by the server's request path). `None`
/// protocol: a body without tarn's key, as a Tarantool replica sends.
pub fn decode_subscribe(body: &[u8]) -> Result<Subscribe<'_>> {
    let fields = decode_link_fields(body)?;
    Ok(Subscribe {
        protocol: fields.protocol,
        instance_uuid: fields.instance_uuid,
        fingerprint: fields.fingerprint,
        vclock: fields.vclock,
        schema_version: fields.schema_version,
        term: fields.term,
        writable: fields.writable,
    })
}

/// What SUBSCRIBE and its answer both carry (the answer also the shard count).
#[derive(Default)]
struct LinkFields<'a> {
    protocol: u64,
    instance_uuid: &'a str,
    fingerprint: u64,
    shard_count: Option<u64>,
    vclock: Vclock,
    schema_version: u64,
    term: u64,
    writable: bool,
}

fn decode_link_fields(body: &[u8]) -> Result<LinkFields<'_>> {
    let mut fields = LinkFields::default();
    for_each_pair(body, |key, value| {
        match key {
            stream_key::PROTOCOL => fields.protocol = uint(value)?,
            stream_key::FINGERPRINT => fields.fingerprint = uint(value)?,
            stream_key::SHARD_COUNT => fields.shard_count = Some(uint(value)?),
            stream_key::SCHEMA_VERSION => fields.schema_version = uint(value)?,
            stream_key::TERM => fields.term = uint(value)?,
            stream_key::WRITABLE => fields.writable = boolean(value)?,
            body_key::INSTANCE_UUID => fields.instance_uuid = string(value)?,
            body_key::VCLOCK => fields.vclock = vclock(value)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(fields)
}

impl Subscribed<'_> {
    pub fn encode(&self, sync: u64, out: &mut Vec<u8>) {
        let at = begin(out);
        write_header(out, request_type::OK, sync, None);
        write_map_len(out, 7);
        write_uint(out, stream_key::TERM);
        write_uint(out, self.term);
        write_uint(out, stream_key::WRITABLE);
        write_bool(out, self.writable);
        write_uint(out, stream_key::PROTOCOL);
        write_uint(out, self.protocol);
        write_uint(out, body_key::INSTANCE_UUID);
        write_str(out, self.instance_uuid.as_bytes());
        write_uint(out, stream_key::FINGERPRINT);
        write_uint(out, self.fingerprint);
        write_uint(out, stream_key::SHARD_COUNT);
        write_uint(out, u64::from(self.shard_count));
        write_uint(out, body_key::VCLOCK);
        write_vclock(out, &self.vclock);
        finish(out, at);
    }
}

/// Decodes the master's answer to SUBSCRIBE: a packet (header and body, no size prefix).
/// An error reply comes back as `Err(Ok((code, message)))`.
pub fn decode_subscribed(
    packet: &[u8],
) -> Result<std::result::Result<Subscribed<'_>, (u64, &str)>> {
    let (header, body) = decode_stream_header(packet)?;
    if header.kind & request_type::TYPE_ERROR != 0 {
        return Ok(Err(decode_error(header.kind, body)?));
    }
    if header.kind != request_type::OK {
        return Err(BadPacket(
            "the answer to SUBSCRIBE is neither OK nor an error",
        ));
    }
    let fields = decode_link_fields(body)?;
    let shard_count = fields
        .shard_count
        .ok_or(BadPacket("the answer to SUBSCRIBE has no shard count"))?;
    let shard_count = u32::try_from(shard_count)
        .ok()
        .filter(|count| (1..=VCLOCK_SHARDS_MAX).contains(&u64::from(*count)))
        .ok_or(BadPacket("shard count out of range"))?;
    let subscribed = Subscribed {
        protocol: fields.protocol,
        instance_uuid: fields.instance_uuid,
        fingerprint: fields.fingerprint,
        shard_count,
        vclock: fields.vclock,
        term: fields.term,
        writable: fields.writable,
    };
    Ok(Ok(subscribed))
}

/// Appends one `SNAPSHOT_TUPLES` packet: `tuples` are whole msgpack arrays, `count` of them.
pub fn encode_snapshot_tuples<'t>(
    (sync, shard, space_id): (u64, u32, u32),
    tuples: impl ExactSizeIterator<Item = &'t [u8]>,
    out: &mut Vec<u8>,
) {
    let at = begin(out);
    write_header(out, stream_type::SNAPSHOT_TUPLES, sync, Some((shard, 0)));
    write_map_len(out, 2);
    write_uint(out, body_key::SPACE_ID);
    write_uint(out, u64::from(space_id));
    write_uint(out, body_key::DATA);
    crate::msgpack::write_array_len(out, u32::try_from(tuples.len()).unwrap_or(u32::MAX));
    for tuple in tuples {
        out.extend_from_slice(tuple);
    }
    finish(out, at);
}

/// Appends one `SNAPSHOT_SCHEMA` packet: `schema` is the snapshot's schema section.
pub fn encode_snapshot_schema(sync: u64, shard: u32, schema: &[u8], out: &mut Vec<u8>) {
    let at = begin(out);
    write_header(out, stream_type::SNAPSHOT_SCHEMA, sync, Some((shard, 0)));
    write_map_len(out, 1);
    write_uint(out, stream_key::SCHEMA);
    write_bin(out, schema);
    finish(out, at);
}

pub fn encode_snapshot_end(sync: u64, shard: u32, lsn: u64, out: &mut Vec<u8>) {
    let at = begin(out);
    write_header(out, stream_type::SNAPSHOT_END, sync, Some((shard, lsn)));
    write_map_len(out, 0);
    finish(out, at);
}

/// Appends one `WAL_BATCH` packet carrying `batch` (whose first row is at `lsn_first`).
pub fn encode_wal_batch(sync: u64, shard: u32, lsn_first: u64, batch: &[u8], out: &mut Vec<u8>) {
    let at = begin(out);
    write_header(out, stream_type::WAL_BATCH, sync, Some((shard, lsn_first)));
    write_map_len(out, 1);
    write_uint(out, stream_key::BATCH);
    write_bin(out, batch);
    finish(out, at);
}

/// An `ACK` (replica), carrying a vclock.
pub fn encode_vclock_packet(kind: u64, sync: u64, vclock: &[Option<u64>], out: &mut Vec<u8>) {
    debug_assert!(kind == stream_type::ACK);
    let at = begin(out);
    write_header(out, kind, sync, None);
    write_map_len(out, 1);
    write_uint(out, body_key::VCLOCK);
    write_vclock(out, vclock);
    finish(out, at);
}

/// Appends a `HEARTBEAT`: what each master shard has written, and the master's term.
pub fn encode_heartbeat(sync: u64, vclock: &[Option<u64>], term: u64, out: &mut Vec<u8>) {
    let at = begin(out);
    write_header(out, stream_type::HEARTBEAT, sync, None);
    write_map_len(out, 2);
    write_uint(out, body_key::VCLOCK);
    write_vclock(out, vclock);
    write_uint(out, stream_key::TERM);
    write_uint(out, term);
    finish(out, at);
}

fn write_bool(out: &mut Vec<u8>, value: bool) {
    out.push(if value { 0xc3 } else { 0xc2 });
}

fn write_bin(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.push(0xc6);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Decodes one stream packet (header and body, no size prefix).
pub fn decode_streamed(packet: &[u8]) -> Result<Streamed<'_>> {
    let (header, body) = decode_stream_header(packet)?;
    let shard = || {
        header
            .shard
            .and_then(|shard| u32::try_from(shard).ok())
            .filter(|shard| u64::from(*shard) < VCLOCK_SHARDS_MAX)
            .ok_or(BadPacket("no master shard (REPLICA_ID) in the header"))
    };
    if header.kind & request_type::TYPE_ERROR != 0 {
        let (code, message) = decode_error(header.kind, body)?;
        return Ok(Streamed::Error { code, message });
    }
    match header.kind {
        stream_type::SNAPSHOT_TUPLES => {
            let (space_id, tuples) = decode_snapshot_tuples(body)?;
            Ok(Streamed::SnapshotTuples {
                shard: shard()?,
                space_id,
                tuples,
            })
        }
        stream_type::SNAPSHOT_END => Ok(Streamed::SnapshotEnd {
            shard: shard()?,
            lsn: header.lsn.ok_or(BadPacket("snapshot end without an LSN"))?,
        }),
        stream_type::WAL_BATCH => Ok(Streamed::WalBatch {
            shard: shard()?,
            batch: decode_bin_body(body, stream_key::BATCH)?,
        }),
        stream_type::SNAPSHOT_SCHEMA => Ok(Streamed::SnapshotSchema {
            shard: shard()?,
            schema: decode_bin_body(body, stream_key::SCHEMA)?,
        }),
        stream_type::HEARTBEAT | stream_type::ACK => {
            let (mut clock, mut term) = (None, 0);
            for_each_pair(body, |key, value| {
                match key {
                    body_key::VCLOCK => clock = Some(vclock(value)?),
                    stream_key::TERM => term = uint(value)?,
                    _ => {}
                }
                Ok(())
            })?;
            let vclock = clock.ok_or(BadPacket("a heartbeat or ack without a vclock"))?;
            Ok(match header.kind {
                stream_type::HEARTBEAT => Streamed::Heartbeat { vclock, term },
                _ => Streamed::Ack { vclock },
            })
        }
        _ => Err(BadPacket("unknown replication packet type")),
    }
}

/// A `SNAPSHOT_TUPLES` body: the space and the whole array of tuples.
fn decode_snapshot_tuples(body: &[u8]) -> Result<(u32, &[u8])> {
    let (mut space_id, mut tuples) = (None, None);
    for_each_pair(body, |key, value| {
        match key {
            body_key::SPACE_ID => space_id = Some(u32_of(value)?),
            body_key::DATA => {
                let mut rest = value;
                match read_value(&mut rest) {
                    Ok(Value::Array(_)) => tuples = Some(value),
                    _ => return Err(BadPacket("snapshot tuples are not an array")),
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok((
        space_id.ok_or(BadPacket("snapshot tuples without a space"))?,
        tuples.ok_or(BadPacket("snapshot tuples without tuples"))?,
    ))
}

/// A `WAL_BATCH` or `SNAPSHOT_SCHEMA` body: the bytes under `key`.
fn decode_bin_body(body: &[u8], key: u64) -> Result<&[u8]> {
    let mut bytes = None;
    for_each_pair(body, |found, value| {
        if found == key {
            let mut rest = value;
            match read_value(&mut rest) {
                Ok(Value::Bin(value)) => bytes = Some(value),
                _ => return Err(BadPacket("a WAL batch or schema that is not bin")),
            }
        }
        Ok(())
    })?;
    bytes.ok_or(BadPacket("a WAL batch or schema packet without its bytes"))
}

struct StreamHeader {
    kind: u64,
    shard: Option<u64>,
    lsn: Option<u64>,
}

fn decode_stream_header(packet: &[u8]) -> Result<(StreamHeader, &[u8])> {
    let mut rest = packet;
    let mut header = StreamHeader {
        kind: u64::MAX,
        shard: None,
        lsn: None,
    };
    let Ok(Value::Map(pairs)) = read_value(&mut rest) else {
        return Err(BadPacket("the header is not a map"));
    };
    for _ in 0..pairs {
        let key = match read_value(&mut rest) {
            Ok(Value::Uint(key)) => key,
            _ => return Err(BadPacket("a header key is not a number")),
        };
        let value = take_value(&mut rest).map_err(|_| BadPacket("a header value is cut short"))?;
        match key {
            header_key::REQUEST_TYPE => header.kind = uint(value)?,
            header_key::REPLICA_ID => header.shard = Some(uint(value)?),
            header_key::LSN => header.lsn = Some(uint(value)?),
            _ => {}
        }
    }
    if header.kind == u64::MAX {
        return Err(BadPacket("the header has no type"));
    }
    Ok((header, rest))
}

fn decode_error(kind: u64, body: &[u8]) -> Result<(u64, &str)> {
    let mut message = "";
    for_each_pair(body, |key, value| {
        if key == body_key::ERROR_24 {
            message = string(value)?;
        }
        Ok(())
    })?;
    Ok((kind & !request_type::TYPE_ERROR, message))
}

/// Calls `each(key, value bytes)` for every pair of the body map; an empty body is an empty
/// map. Bytes after the map are refused.
fn for_each_pair<'a>(
    body: &'a [u8],
    mut each: impl FnMut(u64, &'a [u8]) -> Result<()>,
) -> Result<()> {
    if body.is_empty() {
        return Ok(());
    }
    let mut rest = body;
    let Ok(Value::Map(pairs)) = read_value(&mut rest) else {
        return Err(BadPacket("the body is not a map"));
    };
    for _ in 0..pairs {
        let key = match read_value(&mut rest) {
            Ok(Value::Uint(key)) => key,
            _ => return Err(BadPacket("a body key is not a number")),
        };
        let value = take_value(&mut rest).map_err(|_| BadPacket("a body value is cut short"))?;
        each(key, value)?;
    }
    if !rest.is_empty() {
        return Err(BadPacket("bytes after the body"));
    }
    Ok(())
}

fn uint(mut value: &[u8]) -> Result<u64> {
    match read_value(&mut value) {
        Ok(Value::Uint(number)) => Ok(number),
        _ => Err(BadPacket("a value that should be a number is not")),
    }
}

fn boolean(mut value: &[u8]) -> Result<bool> {
    match read_value(&mut value) {
        Ok(Value::Bool(value)) => Ok(value),
        _ => Err(BadPacket("a value that should be a boolean is not")),
    }
}

fn u32_of(value: &[u8]) -> Result<u32> {
    u32::try_from(uint(value)?).map_err(|_| BadPacket("a number above 2^32"))
}

fn string(mut value: &[u8]) -> Result<&str> {
    match read_value(&mut value) {
        Ok(Value::Str(bytes)) => {
            std::str::from_utf8(bytes).map_err(|_| BadPacket("a string that is not UTF-8"))
        }
        _ => Err(BadPacket("a value that should be a string is not")),
    }
}

fn vclock(mut value: &[u8]) -> Result<Vclock> {
    let Ok(Value::Map(pairs)) = read_value(&mut value) else {
        return Err(BadPacket("a vclock is not a map"));
    };
    let mut clock = Vclock::new();
    for _ in 0..pairs {
        let (Ok(Value::Uint(shard)), Ok(Value::Uint(lsn))) =
            (read_value(&mut value), read_value(&mut value))
        else {
            return Err(BadPacket("a vclock entry is not shard: lsn"));
        };
        if shard >= VCLOCK_SHARDS_MAX {
            return Err(BadPacket("a vclock names a shard above the limit"));
        }
        let shard = usize::try_from(shard).map_err(|_| BadPacket("a vclock shard number"))?;
        if clock.len() <= shard {
            clock.resize(shard + 1, None);
        }
        clock[shard] = Some(lsn);
    }
    Ok(clock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{parse_frame_len, FrameLen};

    fn packet(bytes: &[u8]) -> &[u8] {
        let FrameLen::Complete {
            prefix_len,
            packet_len,
        } = parse_frame_len(bytes)
        else {
            panic!("incomplete frame");
        };
        assert_eq!(prefix_len + packet_len, bytes.len(), "one whole packet");
        &bytes[prefix_len..]
    }

    #[test]
    fn subscribe_and_its_answer_round_trip() {
        let subscribe = Subscribe {
            protocol: PROTOCOL_VERSION,
            instance_uuid: "b5c3a0f2-0000-4000-8000-000000000001",
            fingerprint: 77,
            vclock: SmallVec::from_slice(&[Some(5), None, Some(0)]),
            schema_version: 3,
            term: 4,
            writable: true,
        };
        let mut out = Vec::new();
        subscribe.encode(9, &mut out);
        let (header, body) = crate::protocol::decode_header(packet(&out)).unwrap();
        assert_eq!(
            (header.request_type, header.sync),
            (request_type::SUBSCRIBE, 9)
        );
        assert_eq!(decode_subscribe(body).unwrap(), subscribe);

        let subscribed = Subscribed {
            protocol: PROTOCOL_VERSION,
            instance_uuid: "m",
            fingerprint: 3,
            shard_count: 2,
            vclock: SmallVec::from_slice(&[Some(10), Some(0)]),
            term: 2,
            writable: false,
        };
        out.clear();
        subscribed.encode(9, &mut out);
        assert_eq!(decode_subscribed(packet(&out)).unwrap(), Ok(subscribed));
    }

    #[test]
    fn stream_packets_round_trip() {
        let mut out = Vec::new();
        let tuples: [&[u8]; 2] = [&[0x91, 0x01], &[0x92, 0x02, 0xa1, b'x']];
        encode_snapshot_tuples((1, 3, 512), tuples.iter().copied(), &mut out);
        assert_eq!(
            decode_streamed(packet(&out)).unwrap(),
            Streamed::SnapshotTuples {
                shard: 3,
                space_id: 512,
                tuples: &[0x92, 0x91, 0x01, 0x92, 0x02, 0xa1, b'x'],
            }
        );
        out.clear();
        encode_snapshot_end(1, 2, 40, &mut out);
        assert_eq!(
            decode_streamed(packet(&out)).unwrap(),
            Streamed::SnapshotEnd { shard: 2, lsn: 40 }
        );
        out.clear();
        encode_snapshot_schema(1, 2, b"entries", &mut out);
        assert_eq!(
            decode_streamed(packet(&out)).unwrap(),
            Streamed::SnapshotSchema {
                shard: 2,
                schema: b"entries"
            }
        );
        out.clear();
        encode_wal_batch(1, 1, 41, b"TBAT...", &mut out);
        assert_eq!(
            decode_streamed(packet(&out)).unwrap(),
            Streamed::WalBatch {
                shard: 1,
                batch: b"TBAT..."
            }
        );
        let vclock: Vclock = SmallVec::from_slice(&[None, Some(8)]);
        out.clear();
        encode_heartbeat(1, &vclock, 3, &mut out);
        let expected = Streamed::Heartbeat {
            vclock: vclock.clone(),
            term: 3,
        };
        assert_eq!(decode_streamed(packet(&out)).unwrap(), expected);
        out.clear();
        encode_vclock_packet(stream_type::ACK, 1, &vclock, &mut out);
        let expected = Streamed::Ack { vclock };
        assert_eq!(decode_streamed(packet(&out)).unwrap(), expected);
    }

    #[test]
    fn an_error_reply_gives_its_code_and_message() {
        let mut out = Vec::new();
        crate::protocol::reply::encode_error(
            &mut out,
            4,
            0,
            crate::protocol::ErrorCode::ER_ACCESS_DENIED,
            "no",
        );
        let packet = packet(&out);
        assert_eq!(decode_subscribed(packet).unwrap(), Err((42, "no")));
        assert_eq!(
            decode_streamed(packet).unwrap(),
            Streamed::Error {
                code: 42,
                message: "no"
            }
        );
    }

    #[test]
    fn bad_packets_are_refused_not_panicked_on() {
        let mut out = Vec::new();
        encode_wal_batch(1, 0, 1, b"xyz", &mut out);
        let whole = packet(&out).to_vec();
        for cut in 0..whole.len() {
            assert!(decode_streamed(&whole[..cut]).is_err(), "cut at {cut}");
        }
        // A vclock naming a shard past the limit.
        let mut body = Vec::new();
        write_map_len(&mut body, 1);
        write_uint(&mut body, body_key::VCLOCK);
        write_map_len(&mut body, 1);
        write_uint(&mut body, VCLOCK_SHARDS_MAX);
        write_uint(&mut body, 1);
        assert_eq!(
            decode_subscribe(&body),
            Err(BadPacket("a vclock names a shard above the limit"))
        );
    }
}
