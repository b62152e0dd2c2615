//! Admission: authentication, grants, and the requests answered before any routing (the
//! views a user without the read grant sees, the errors for what tarn does not serve).

use super::*;

impl Session {
    pub(super) fn authenticate(
        &mut self,
        auth: &crate::protocol::request::Auth<'_>,
        sync: u64,
        out: &mut Vec<u8>,
    ) {
        match self.core.shared.users.authenticate(auth, &self.salt) {
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
                    crate::shard::errors::encode_storage_error(out, sync, SCHEMA_VERSION, &missing);
                    return false;
                }
            },
        };
        access_denied(out, sync, access, "space", &space_name, self.user_name());
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
                    SCHEMA_VERSION,
                    &error,
                )
            }
        };
        let mut data = reply::DataReply::begin(out, sync, SCHEMA_VERSION);
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

pub(super) fn unsupported(out: &mut Vec<u8>, sync: u64, what: &str) {
    reply::encode_error(
        out,
        sync,
        SCHEMA_VERSION,
        ErrorCode::ER_UNSUPPORTED,
        &format!("tarn does not support {what}"),
    );
}

/// The reply to a select whose iterator Tarantool does not know.
#[cold]
pub(super) fn invalid_iterator(out: &mut Vec<u8>, sync: u64, iterator: u32) {
    if let Err(error) = IteratorType::from_code(iterator) {
        crate::shard::errors::encode_storage_error(out, sync, SCHEMA_VERSION, &error);
    }
}

pub(super) fn access_denied(
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
