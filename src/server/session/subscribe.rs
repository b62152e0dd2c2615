//! A replica's SUBSCRIBE: checked here, then left for the connection, which hands its
//! socket to a relay (`server::replication::relay`). A Tarantool replica's SUBSCRIBE (no
//! tarn protocol key) is answered 48, as before tarn replicated.

use super::Session;
use crate::protocol::replication::{decode_subscribe, PROTOCOL_VERSION};
use crate::protocol::{reply, ErrorCode, ProtocolError};
use crate::server::replication::Subscription;

impl Session {
    /// Admits a SUBSCRIBE: a refusal goes to `out`; an accepted one is kept for
    /// [`Session::take_subscription`], with no reply yet (the relay sends it).
    pub(super) fn admit_subscribe(&mut self, body: &[u8], sync: u64, out: &mut Vec<u8>) {
        let schema_version = self.core.schema_version();
        let subscribe = match decode_subscribe(body) {
            Ok(subscribe) => subscribe,
            Err(error) => {
                let code = ErrorCode::ER_INVALID_MSGPACK;
                return reply::encode_error(out, sync, schema_version, code, &error.to_string());
            }
        };
        if subscribe.protocol == 0 {
            let error =
                ProtocolError::UnknownRequestType(crate::protocol::codes::request_type::SUBSCRIBE);
            return reply::encode_protocol_error(out, sync, schema_version, &error);
        }
        if subscribe.protocol != PROTOCOL_VERSION {
            let message = format!(
                "tarn replication protocol {} (this master speaks {PROTOCOL_VERSION}): run the \
                 same tarn version on master and replica",
                subscribe.protocol
            );
            return reply::encode_error(
                out,
                sync,
                schema_version,
                ErrorCode::ER_UNSUPPORTED,
                &message,
            );
        }
        // A replica reads everything: it needs the read grant (Tarantool: the replication role).
        if !self.grants().read {
            let user = self.core.shared.users.get(self.user_id).name.clone();
            let message = format!("Read access to universe '' is denied for user '{user}'");
            return reply::encode_error(
                out,
                sync,
                schema_version,
                ErrorCode::ER_ACCESS_DENIED,
                &message,
            );
        }
        self.subscription = Some(Box::new(Subscription {
            sync,
            peer: String::new(),
            instance_uuid: subscribe.instance_uuid.to_owned(),
            fingerprint: subscribe.fingerprint,
            vclock: subscribe.vclock,
            schema_version: subscribe.schema_version,
            term: subscribe.term,
            writable: subscribe.writable,
        }));
    }

    /// A SUBSCRIBE this session accepted: the connection stops serving requests and hands
    /// its socket to a relay.
    pub fn take_subscription(&mut self) -> Option<Box<Subscription>> {
        self.subscription.take()
    }
}
