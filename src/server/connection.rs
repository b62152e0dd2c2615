//! One client connection: greeting, framing, session state, and the dispatch of each
//! request to where it runs — here, the owner core, or every core with a merge.
//!
//! Requests of one connection are answered in arrival order; replies are gathered and
//! written before more is read, so a client that does not read gets backpressure instead
//! of unbounded buffering.

use crate::protocol::frame::{parse_frame_len, FrameLen};
use crate::protocol::reply::{self, DataReply, ErrorEntry};
use crate::protocol::request::{Request, Select};
use crate::protocol::{decode_packet, ErrorCode, PacketError, ProtocolError};
use crate::server::core::{Core, Envelope};
use crate::server::schema::{self, SpacePlacement, SCHEMA_VERSION};
use crate::server::session::{Access, AuthError};
use crate::server::Shared;
use crate::storage::key::SearchKeyBuf;
use crate::storage::msgpack::{self, write_str, write_uint};
use crate::storage::IteratorType;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use std::rc::Rc;
use std::sync::Arc;

/// Reads this much at a time; a larger packet grows the buffer up to `max_packet_size`.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Replies gathered past this size are written before more requests are handled.
const WRITE_FLUSH_BYTES: usize = 256 * 1024;

pub struct Connection {
    core: Rc<Core>,
    shared: Arc<Shared>,
    salt: [u8; 32],
    user_id: usize,
}

impl Connection {
    pub fn new(core: Rc<Core>, shared: Arc<Shared>) -> Connection {
        Connection {
            core,
            shared,
            salt: rand::random(),
            user_id: 0,
        }
    }

    pub async fn serve(mut self, mut stream: TcpStream) -> std::io::Result<()> {
        let greeting = crate::protocol::greeting::encode_greeting(
            crate::server::ADVERTISED_VERSION,
            &self.shared.instance_uuid,
            &self.salt,
        );
        stream.write_all(&greeting).await?;
        let max_packet_bytes = self.shared.config.max_packet_size_bytes as usize;
        let mut read_buf = vec![0u8; READ_CHUNK_BYTES];
        let mut filled = 0usize;
        let mut out = Vec::with_capacity(READ_CHUNK_BYTES);
        loop {
            let mut consumed = 0usize;
            loop {
                match parse_frame_len(&read_buf[consumed..filled]) {
                    FrameLen::Incomplete => break,
                    FrameLen::Complete {
                        prefix_len,
                        packet_len,
                    } if packet_len <= max_packet_bytes => {
                        if filled - consumed < prefix_len + packet_len {
                            if read_buf.len() < prefix_len + packet_len {
                                read_buf.resize(prefix_len + packet_len, 0);
                            }
                            break;
                        }
                        let start = consumed + prefix_len;
                        let packet = &read_buf[start..start + packet_len];
                        self.handle_packet(packet, &mut out).await;
                        consumed = start + packet_len;
                        if out.len() >= WRITE_FLUSH_BYTES {
                            stream.write_all(&out).await?;
                            out.clear();
                        }
                    }
                    FrameLen::Complete { packet_len, .. } => {
                        tracing::warn!(
                            packet_len,
                            max_packet_bytes,
                            "packet over max_packet_size; closing connection"
                        );
                        return Ok(());
                    }
                    other => {
                        let error = other
                            .error()
                            .unwrap_or(ProtocolError::InvalidMsgpack("packet length"));
                        reply::encode_protocol_error(&mut out, 0, SCHEMA_VERSION, &error);
                        stream.write_all(&out).await?;
                        tracing::info!(%error, "bad frame; closing connection");
                        return Ok(());
                    }
                }
            }
            if !out.is_empty() {
                stream.write_all(&out).await?;
                out.clear();
            }
            read_buf.copy_within(consumed..filled, 0);
            filled -= consumed;
            if filled == read_buf.len() {
                read_buf.resize(read_buf.len() * 2, 0);
            }
            let read = stream.read(&mut read_buf[filled..]).await?;
            if read == 0 {
                return Ok(());
            }
            filled += read;
        }
    }

    async fn handle_packet(&mut self, packet: &[u8], out: &mut Vec<u8>) {
        let (header, request) = match decode_packet(packet) {
            Ok(decoded) => decoded,
            Err(PacketError { sync, error }) => {
                reply::encode_protocol_error(out, sync, SCHEMA_VERSION, &error);
                return;
            }
        };
        let sync = header.sync;
        if header.schema_version != 0 && header.schema_version != SCHEMA_VERSION {
            let error = ProtocolError::WrongSchemaVersion {
                server_version: SCHEMA_VERSION,
                request_version: header.schema_version,
            };
            reply::encode_protocol_error(out, sync, SCHEMA_VERSION, &error);
            return;
        }
        if header.stream_id != 0 && !matches!(request, Request::Ping) {
            return unsupported(out, sync, "streams");
        }
        match request {
            Request::Ping => reply::encode_ok(out, sync, SCHEMA_VERSION),
            Request::Id(_) => reply::encode_id_reply(out, sync, SCHEMA_VERSION, 3, &[], None),
            Request::Auth(auth) => match self.shared.users.authenticate(&auth, &self.salt) {
                Ok(user_id) => {
                    self.user_id = user_id;
                    reply::encode_ok(out, sync, SCHEMA_VERSION);
                }
                Err(AuthError::Protocol(error)) => {
                    reply::encode_protocol_error(out, sync, SCHEMA_VERSION, &error)
                }
                Err(AuthError::CredentialsMismatch) => reply::encode_error(
                    out,
                    sync,
                    SCHEMA_VERSION,
                    ErrorCode::ER_CREDS_MISMATCH,
                    "User not found or supplied credentials are invalid",
                ),
            },
            Request::Call(call) => self.call(call.function_name, sync, out).await,
            Request::Eval(_) => unsupported(out, sync, "Lua (EVAL)"),
            Request::Execute(_) | Request::Prepare(_) => unsupported(out, sync, "SQL"),
            Request::Begin(_) | Request::Commit | Request::Rollback => {
                let name = match request {
                    Request::Begin(_) => "BEGIN",
                    Request::Commit => "COMMIT",
                    _ => "ROLLBACK",
                };
                reply::encode_protocol_error(
                    out,
                    sync,
                    SCHEMA_VERSION,
                    &ProtocolError::OutOfStream(name),
                );
            }
            // Watchers are not offered in IPROTO_ID; a WATCH gets no reply by definition.
            Request::Watch(_) | Request::Unwatch(_) => {}
            Request::Select(select) => {
                if self.check_access(Access::Read, select.space_id, sync, out) {
                    self.select(packet, &select, sync, out).await;
                }
            }
            Request::Insert(_)
            | Request::Replace(_)
            | Request::Update(_)
            | Request::Delete(_)
            | Request::Upsert(_) => self.write(packet, &request, sync, out).await,
        }
    }

    fn user_name(&self) -> &str {
        &self.shared.users.get(self.user_id).name
    }

    /// Checks a grant; on refusal writes Tarantool's 42 reply and returns false. Guest may
    /// always read the system spaces, as connectors need them to resolve names.
    fn check_access(&self, access: Access, space_id: u32, sync: u64, out: &mut Vec<u8>) -> bool {
        let grants = &self.shared.users.get(self.user_id).grants;
        if access.granted(grants) || (access == Access::Read && schema::is_system_space(space_id)) {
            return true;
        }
        let space_name = self
            .core
            .shard
            .borrow()
            .engine
            .space(space_id)
            .map(|space| space.name.to_string())
            .unwrap_or_else(|_| space_id.to_string());
        access_denied(out, sync, access, "space", &space_name, self.user_name());
        false
    }

    async fn call(&self, function_name: &str, sync: u64, out: &mut Vec<u8>) {
        let grants = &self.shared.users.get(self.user_id).grants;
        if !grants.execute {
            return access_denied(
                out,
                sync,
                Access::Execute,
                "function",
                function_name,
                self.user_name(),
            );
        }
        match function_name {
            "box.info" | "box.info.call" => self.box_info(sync, out),
            "box.snapshot" => match crate::server::durability::request_snapshot(&self.shared).await
            {
                Ok(()) => {
                    let mark = reply::begin_data_reply(out, sync, SCHEMA_VERSION, 1);
                    write_str(out, b"ok");
                    reply::finish_packet(out, mark);
                }
                Err(reason) => reply::encode_error(
                    out,
                    sync,
                    SCHEMA_VERSION,
                    ErrorCode::ER_WAL_IO,
                    &format!("Failed to write to disk: snapshot: {reason}"),
                ),
            },
            _ => reply::encode_error(
                out,
                sync,
                SCHEMA_VERSION,
                ErrorCode::ER_NO_SUCH_PROC,
                &format!("Procedure '{function_name}' is not defined"),
            ),
        }
    }

    /// `box.info` as connection pools read it: `ro` false, `status` "running".
    fn box_info(&self, sync: u64, out: &mut Vec<u8>) {
        let mark = reply::begin_data_reply(out, sync, SCHEMA_VERSION, 1);
        out.push(0x87);
        write_str(out, b"id");
        write_uint(out, 1);
        write_str(out, b"uuid");
        write_str(out, self.shared.instance_uuid.to_string().as_bytes());
        write_str(out, b"ro");
        out.push(0xc2);
        write_str(out, b"status");
        write_str(out, b"running");
        write_str(out, b"version");
        write_str(out, crate::server::ADVERTISED_VERSION.as_bytes());
        write_str(out, b"pid");
        write_uint(out, std::process::id() as u64);
        write_str(out, b"lsn");
        write_uint(out, 0);
        reply::finish_packet(out, mark);
    }

    async fn write(&self, packet: &[u8], request: &Request<'_>, sync: u64, out: &mut Vec<u8>) {
        let (space_id, index_id, key, tuple) = match request {
            Request::Insert(r) | Request::Replace(r) => (r.space_id, 0, None, Some(r.tuple)),
            Request::Upsert(r) => (r.space_id, 0, None, Some(r.tuple)),
            Request::Update(r) => (r.space_id, r.index_id, Some(r.key), None),
            Request::Delete(r) => (r.space_id, r.index_id, Some(r.key), None),
            _ => return,
        };
        if !self.check_access(Access::Write, space_id, sync, out) {
            return;
        }
        if schema::is_system_space(space_id) {
            if schema::is_view(space_id) {
                let name = if space_id == schema::SPACE_ID_VSPACE {
                    "_vspace"
                } else {
                    "_vindex"
                };
                return reply::encode_error(
                    out,
                    sync,
                    SCHEMA_VERSION,
                    ErrorCode::ER_VIEW_IS_RO,
                    &format!("View '{name}' is read-only"),
                );
            }
            return unsupported(
                out,
                sync,
                "schema changes over IPROTO (edit the config file)",
            );
        }
        let owner = match schema::placement_of(&self.shared.config, space_id) {
            SpacePlacement::Shard0 => 0,
            _ if index_id != 0 => self.core.id(),
            _ => self
                .owner_of(space_id, key, tuple)
                .unwrap_or(self.core.id()),
        };
        self.run_on(owner, packet, request, sync, out).await;
    }

    /// The core that owns the primary key given as a search key or inside a tuple; `None`
    /// when the key does not parse (then the local shard reports the error).
    fn owner_of(&self, space_id: u32, key: Option<&[u8]>, tuple: Option<&[u8]>) -> Option<usize> {
        if self.core.shard_count == 1 {
            return Some(0);
        }
        let shard = self.core.shard.borrow();
        let space = shard.engine.space(space_id).ok()?;
        let key_def = &space.indexes()[0].def.key_def;
        let mut encoded = SearchKeyBuf::new();
        match (key, tuple) {
            (Some(key), _) => {
                let parts = key_def.encode_search_key(key, &mut encoded).ok()?;
                if parts != key_def.part_count() {
                    return None;
                }
            }
            (None, Some(tuple)) => key_def.encode_from_tuple_data(tuple, &mut encoded).ok()?,
            (None, None) => return None,
        }
        Some(crate::server::shard_of_key(&encoded, self.core.shard_count))
    }

    async fn run_on(
        &self,
        owner: usize,
        packet: &[u8],
        request: &Request<'_>,
        sync: u64,
        out: &mut Vec<u8>,
    ) {
        if owner == self.core.id() {
            self.core.execute_local(sync, request, out).await;
            return;
        }
        let packet = packet.to_vec();
        let reply = self
            .core
            .ask(owner, |ticket| Envelope::Execute { ticket, packet })
            .await;
        out.extend_from_slice(&reply);
    }

    async fn select(&self, packet: &[u8], select: &Select<'_>, sync: u64, out: &mut Vec<u8>) {
        let placement = schema::placement_of(&self.shared.config, select.space_id);
        let is_point = select.index_id == 0 && select.iterator == IteratorType::Eq as u32;
        let target = match placement {
            SpacePlacement::Everywhere => Some(self.core.id()),
            SpacePlacement::Shard0 => Some(0),
            SpacePlacement::ByPrimaryKey if self.core.shard_count == 1 => Some(0),
            SpacePlacement::ByPrimaryKey if is_point => {
                self.owner_of(select.space_id, Some(select.key), None)
            }
            SpacePlacement::ByPrimaryKey => None,
        };
        if let Some(owner) = target {
            return self
                .run_on(owner, packet, &Request::Select(*select), sync, out)
                .await;
        }
        self.fan_out_select(packet, select, sync, out).await;
    }

    /// Runs the scan on every core (each returns at most offset + limit entries in index
    /// order), merges by encoded key, then applies offset and limit.
    async fn fan_out_select(
        &self,
        packet: &[u8],
        select: &Select<'_>,
        sync: u64,
        out: &mut Vec<u8>,
    ) {
        let wanted = select.offset.saturating_add(select.limit);
        let mut local = Vec::new();
        if let Err(error) = self
            .core
            .shard
            .borrow()
            .scan(select, wanted as usize, &mut local)
        {
            return crate::shard::errors::encode_storage_error(out, sync, SCHEMA_VERSION, &error);
        }
        let me = self.core.id();
        let mut parts: Vec<Vec<u8>> = Vec::with_capacity(self.core.shard_count);
        parts.push(local);
        for peer in (0..self.core.shard_count).filter(|&peer| peer != me) {
            let packet = packet.to_vec();
            let reply = self
                .core
                .ask(peer, |ticket| Envelope::Scan {
                    ticket,
                    packet,
                    limit: wanted,
                })
                .await;
            parts.push(reply);
        }
        let descending =
            IteratorType::from_code(select.iterator).is_ok_and(IteratorType::is_descending);
        let mut streams: Vec<ScanEntries<'_>> =
            parts.iter().map(|bytes| ScanEntries::new(bytes)).collect();
        let mut data = DataReply::begin(out, sync, SCHEMA_VERSION);
        let mut skipped = 0u32;
        while data.count() < select.limit {
            let best = streams
                .iter()
                .enumerate()
                .filter_map(|(at, stream)| stream.peek().map(|(key, _)| (at, key)))
                .reduce(|a, b| {
                    if (b.1 < a.1) != descending && b.1 != a.1 {
                        b
                    } else {
                        a
                    }
                });
            let Some((at, _)) = best else { break };
            let Some((_, tuple)) = streams[at].next() else {
                break;
            };
            if skipped < select.offset {
                skipped += 1;
                continue;
            }
            data.push_raw(out, tuple);
        }
        data.finish(out);
    }
}

/// Reads `[key length u32 LE][key][tuple]` entries written by `Shard::scan`.
struct ScanEntries<'a> {
    rest: &'a [u8],
}

impl<'a> ScanEntries<'a> {
    fn new(bytes: &'a [u8]) -> ScanEntries<'a> {
        ScanEntries { rest: bytes }
    }

    fn peek(&self) -> Option<(&'a [u8], &'a [u8])> {
        let mut probe = ScanEntries { rest: self.rest };
        probe.next()
    }
}

impl<'a> Iterator for ScanEntries<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let len_bytes = self.rest.get(..4)?;
        let key_len =
            u32::from_le_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]) as usize;
        let key = self.rest.get(4..4 + key_len)?;
        let mut cursor = &self.rest[4 + key_len..];
        let tuple = msgpack::take_value(&mut cursor).ok()?;
        self.rest = cursor;
        Some((key, tuple))
    }
}

fn unsupported(out: &mut Vec<u8>, sync: u64, what: &str) {
    reply::encode_error(
        out,
        sync,
        SCHEMA_VERSION,
        ErrorCode::ER_UNSUPPORTED,
        &format!("tarn does not support {what}"),
    );
}

fn access_denied(
    out: &mut Vec<u8>,
    sync: u64,
    access: Access,
    object_type: &str,
    object_name: &str,
    user: &str,
) {
    let message = format!(
        "{} access to {object_type} '{object_name}' is denied for user '{user}'",
        access.name()
    );
    let mut fields = Vec::new();
    fields.push(0x83);
    write_str(&mut fields, b"object_type");
    write_str(&mut fields, object_type.as_bytes());
    write_str(&mut fields, b"object_name");
    write_str(&mut fields, object_name.as_bytes());
    write_str(&mut fields, b"access_type");
    write_str(&mut fields, access.name().as_bytes());
    let entry = ErrorEntry {
        fields: Some(&fields),
        ..ErrorEntry::new(ErrorCode::ER_ACCESS_DENIED, &message)
    };
    reply::encode_error_stack(out, sync, SCHEMA_VERSION, &[entry]);
}
