//! Admission: authentication, grants, the schema version, and the requests answered before
//! any routing (the views a user without the read grant sees, the errors for what tarn does
//! not serve). It says what is left to do with a request; it runs none of them.

use super::Session;
use crate::msgpack::write_str;
use crate::protocol::header::Header;
use crate::protocol::reply::{self, ErrorEntry};
use crate::protocol::request::{Auth, Request, Select};
use crate::protocol::{ErrorCode, ProtocolError, RequestTarget};
use crate::server::schema;
use crate::server::users::{Access, AuthError};
use crate::storage::IteratorType;

/// What admission left to do with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// Its whole reply is in `out` (an answer or a refusal), or it has none (WATCH).
    Answered,
    /// A CALL whose caller may call: the session runs it.
    Call,
    /// A select or a write the user may make: it runs where it is routed.
    Data,
}

impl Session {
    /// Admits a decoded request: answers those that end here, checks the rest.
    // Inlined into `Session::start` with the checks of selects and writes: a get spends
    // some 60 instructions on calls and returned values otherwise.
    #[inline(always)]
    pub(super) fn admit(
        &mut self,
        header: &Header,
        request: &Request<'_>,
        out: &mut Vec<u8>,
    ) -> Admission {
        let sync = header.sync;
        if !self.header_admits(header, request, out) {
            return Admission::Answered;
        }
        match request {
            Request::Ping => reply::encode_ok(out, sync, self.core.schema_version()),
            Request::Id(_) => {
                reply::encode_id_reply(out, sync, self.core.schema_version(), 3, &[], None)
            }
            Request::Auth(auth) => self.authenticate(auth, sync, out),
            Request::Call(_) => return Admission::Call,
            Request::Eval(_) => unsupported(out, sync, self.core.schema_version(), "Lua (EVAL)"),
            Request::Execute(_) | Request::Prepare(_) => {
                unsupported(out, sync, self.core.schema_version(), "SQL")
            }
            Request::Begin(_) | Request::Commit | Request::Rollback => {
                let name = match request {
                    Request::Begin(_) => "BEGIN",
                    Request::Commit => "COMMIT",
                    _ => "ROLLBACK",
                };
                let error = ProtocolError::OutOfStream(name);
                reply::encode_protocol_error(out, sync, self.core.schema_version(), &error);
            }
            // Watchers are not offered in IPROTO_ID; a WATCH gets no reply by definition.
            Request::Watch(_) | Request::Unwatch(_) => {}
            Request::Subscribe(raw) => self.admit_subscribe(raw.body, sync, out),
            Request::Select(select) if self.admit_select(select, sync, out) => {
                return Admission::Data
            }
            Request::Select(_) => {}
            Request::Insert(_)
            | Request::Replace(_)
            | Request::Update(_)
            | Request::Delete(_)
            | Request::Upsert(_) => {
                if self.admit_write(&request.target(), sync, out) {
                    return Admission::Data;
                }
            }
        }
        Admission::Answered
    }

    /// The header's checks, in Tarantool's order: the schema version, then streams (which
    /// tarn does not serve); false when a refusal is in `out`.
    #[inline(always)]
    fn header_admits(&self, header: &Header, request: &Request<'_>, out: &mut Vec<u8>) -> bool {
        let sync = header.sync;
        let wrong_schema =
            header.schema_version != 0 && header.schema_version != self.core.schema_version();
        let in_stream = header.stream_id != 0 && !matches!(request, Request::Ping);
        if (wrong_schema || in_stream) && crate::protocol::crud_call::has_torn_args(request) {
            // The general decoder would have refused the packet before either check.
            let error = crate::protocol::crud_call::torn_args_error();
            reply::encode_protocol_error(out, sync, self.core.schema_version(), &error);
            return false;
        }
        if wrong_schema {
            let error = ProtocolError::WrongSchemaVersion {
                server_version: self.core.schema_version(),
                request_version: header.schema_version,
            };
            reply::encode_protocol_error(out, sync, self.core.schema_version(), &error);
            return false;
        }
        if in_stream {
            unsupported(out, sync, self.core.schema_version(), "streams");
            return false;
        }
        true
    }

    #[inline(always)]
    /// Whether a select may run; false when its answer or refusal is in `out`.
    fn admit_select(&self, select: &Select<'_>, sync: u64, out: &mut Vec<u8>) -> bool {
        // Tarantool's `box_select` checks the iterator before it looks for the space.
        if !IteratorType::is_known_code(select.iterator) {
            invalid_iterator(out, sync, self.core.schema_version(), select.iterator);
            return false;
        }
        if !self.check_access(Access::Read, select.space_id, sync, out) {
            return false;
        }
        if schema::is_view(select.space_id) && !self.grants().read {
            self.select_view(select, sync, out);
            return false;
        }
        true
    }

    #[inline(always)]
    /// Whether a write to `target` may run; false when its refusal is in `out`.
    fn admit_write(&self, target: &RequestTarget<'_>, sync: u64, out: &mut Vec<u8>) -> bool {
        let (RequestTarget::Key { space_id, .. } | RequestTarget::Tuple { space_id, .. }) = *target
        else {
            return true;
        };
        if self.writes_refused() {
            self.refuse_read_only_write(space_id, sync, out);
            return false;
        }
        if !self.check_access(Access::Write, space_id, sync, out) {
            return false;
        }
        if !schema::is_system_space(space_id) {
            return true;
        }
        // As Tarantool 2.6 answers: a view refuses writes (113); an id below 512 that names
        // no system space is a missing space (36). A write to any other system space would
        // change the schema, which tarn takes from its config only.
        match schema::tarantool_system_space(space_id) {
            Some((name, true)) => reply::encode_error(
                out,
                sync,
                self.core.schema_version(),
                ErrorCode::ER_VIEW_IS_RO,
                &format!("View '{name}' is read-only"),
            ),
            Some((_, false)) => unsupported(
                out,
                sync,
                self.core.schema_version(),
                "schema changes over IPROTO (edit the config file)",
            ),
            None => crate::shard::errors::encode_storage_error(
                out,
                sync,
                self.core.schema_version(),
                &crate::storage::StorageError::NoSuchSpace(space_id.to_string().into()),
            ),
        }
        false
    }

    /// The refusal of a write to `space_id` on a read-only instance, as Tarantool 2.6 answers
    /// it (`docs/tarantool-reference.md` (p)): a space that does not exist is 36; any other
    /// is 7, before its grant, its tuple or its key is looked at, for a system space or a
    /// view too.
    #[cold]
    #[inline(never)]
    fn refuse_read_only_write(&self, space_id: u32, sync: u64, out: &mut Vec<u8>) {
        let missing = match self.core.shard.borrow().engine.space(space_id) {
            Ok(_) => None,
            Err(_) if schema::tarantool_system_space(space_id).is_some() => None,
            Err(missing) => Some(missing),
        };
        let version = self.core.schema_version();
        match missing {
            Some(missing) => {
                crate::shard::errors::encode_storage_error(out, sync, version, &missing)
            }
            None => read_only(out, sync, version),
        }
    }

    pub(super) fn authenticate(&mut self, auth: &Auth<'_>, sync: u64, out: &mut Vec<u8>) {
        match self.core.shared.users.authenticate(auth, &self.salt) {
            Ok(user_id) => {
                self.user_id = user_id;
                reply::encode_ok(out, sync, self.core.schema_version());
            }
            Err(AuthError::Protocol(error)) => {
                reply::encode_protocol_error(out, sync, self.core.schema_version(), &error)
            }
            Err(AuthError::CredentialsMismatch) => reply::encode_error(
                out,
                sync,
                self.core.schema_version(),
                ErrorCode::ER_CREDS_MISMATCH,
                "User not found or supplied credentials are invalid",
            ),
        }
    }

    pub(super) fn user_name(&self) -> &str {
        &self.core.shared.users.get(self.user_id).name
    }

    pub(super) fn grants(&self) -> &crate::config::Grants {
        &self.core.shared.users.get(self.user_id).grants
    }

    /// Checks a grant; on refusal writes Tarantool's 42 reply and returns false. Everyone
    /// may read the views (`_vspace`, `_vindex`), as Tarantool's `public` role allows:
    /// connectors read them to resolve names, and they show each user only what it may
    /// use ([`Session::select_view`]). `_space` and `_index` need the read grant. A space
    /// that does not exist is 36 before any grant is looked at, as in Tarantool (which
    /// finds the space first); a granted request learns that where it runs.
    pub(super) fn check_access(
        &self,
        access: Access,
        space_id: u32,
        sync: u64,
        out: &mut Vec<u8>,
    ) -> bool {
        if access.granted(self.grants()) || (access == Access::Read && schema::is_view(space_id)) {
            return true;
        }
        let space_name = match self.core.shard.borrow().engine.space(space_id) {
            Ok(space) => space.name.to_string(),
            Err(missing) => match schema::tarantool_system_space(space_id) {
                // It exists in Tarantool, which refuses the grant first.
                Some((name, _)) => name.to_string(),
                None => {
                    crate::shard::errors::encode_storage_error(
                        out,
                        sync,
                        self.core.schema_version(),
                        &missing,
                    );
                    return false;
                }
            },
        };
        access_denied(
            out,
            sync,
            self.core.schema_version(),
            access,
            "space",
            &space_name,
            self.user_name(),
        );
        false
    }

    /// A select from `_vspace` or `_vindex` by a user without the read grant, answered
    /// here (every core holds the views) with only the rows Tarantool's views show it: the
    /// views themselves, and the user spaces when it may write them. Offset and limit count
    /// the rows shown.
    pub(super) fn select_view(&self, select: &Select<'_>, sync: u64, out: &mut Vec<u8>) {
        let may_write = self.grants().write;
        let shown = |space_id: u64| match u32::try_from(space_id) {
            Ok(id) if schema::is_system_space(id) => schema::is_view(id),
            _ => may_write,
        };
        let shard = self.core.shard.borrow();
        let entries = shard
            .engine
            .space(select.space_id)
            .and_then(|space| space.select(select.index_id, select.iterator, select.key));
        let entries = match entries {
            Ok(entries) => entries,
            Err(error) => {
                return crate::shard::errors::encode_storage_error(
                    out,
                    sync,
                    self.core.schema_version(),
                    &error,
                )
            }
        };
        let mut data = reply::DataReply::begin(out, sync, self.core.schema_version());
        let rows = entries
            .map(|(_, tuple)| tuple)
            .filter(|tuple| first_uint_field(tuple.data()).is_some_and(shown))
            .skip(select.offset as usize)
            .take(select.limit as usize);
        for tuple in rows {
            data.push_raw(out, tuple.data());
        }
        data.finish(out);
    }
}

/// What Tarantool 2.6 answers a write on a read-only instance (ER_READONLY; 2.11 words it
/// `Can't modify data on a read-only instance - box.cfg.read_only is true`).
pub(super) const READ_ONLY_MESSAGE: &str =
    "Can't modify data because this instance is in read-only mode.";

/// The ER_READONLY reply.
#[cold]
pub(super) fn read_only(out: &mut Vec<u8>, sync: u64, schema_version: u64) {
    reply::encode_error(
        out,
        sync,
        schema_version,
        ErrorCode::ER_READONLY,
        READ_ONLY_MESSAGE,
    );
}

pub(super) fn unsupported(out: &mut Vec<u8>, sync: u64, schema_version: u64, what: &str) {
    reply::encode_error(
        out,
        sync,
        schema_version,
        ErrorCode::ER_UNSUPPORTED,
        &format!("tarn does not support {what}"),
    );
}

/// The reply to a select whose iterator Tarantool does not know.
#[cold]
pub(super) fn invalid_iterator(out: &mut Vec<u8>, sync: u64, schema_version: u64, iterator: u32) {
    if let Err(error) = IteratorType::from_code(iterator) {
        crate::shard::errors::encode_storage_error(out, sync, schema_version, &error);
    }
}

pub(super) fn access_denied(
    out: &mut Vec<u8>,
    sync: u64,
    schema_version: u64,
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
    reply::encode_error_stack(out, sync, schema_version, &[entry]);
}

/// The first field of a tuple when it is an unsigned integer (a view row's space id).
pub(super) fn first_uint_field(tuple: &[u8]) -> Option<u64> {
    let mut fields = tuple;
    match crate::msgpack::read_value(&mut fields) {
        Ok(crate::msgpack::Value::Array(count)) if count > 0 => {}
        _ => return None,
    }
    match crate::msgpack::read_value(&mut fields) {
        Ok(crate::msgpack::Value::Uint(id)) => Some(id),
        _ => None,
    }
}
