//! Request bodies: decoding each request type's body map into a struct that borrows from
//! the packet (spec §6, §9, §16, §17).
//!
//! Owns which keys each request needs, their defaults, their msgpack types, and the error
//! for each malformation (20 / 48 / 69). Tuples, keys and operation lists stay raw msgpack:
//! what is inside them, and whether an iterator or a space exists, is storage's business.
//! Decoding allocates nothing on success.

use crate::msgpack::{read_value, take_value, Value};
use crate::protocol::codes::{body_key, request_type};
use crate::protocol::error::{invalid_msgpack, ProtocolError};

/// The msgpack of an empty array: the default CALL/EVAL arguments.
const EMPTY_ARRAY: &[u8] = &[0x90];

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Request<'a> {
    Select(Select<'a>),
    Insert(Insert<'a>),
    Replace(Insert<'a>),
    Update(Update<'a>),
    Delete(Delete<'a>),
    Upsert(Upsert<'a>),
    /// CALL (10), or CALL_16 (6) when `is_call_16`.
    Call(Call<'a>),
    Eval(Eval<'a>),
    Auth(Auth<'a>),
    Id(Id<'a>),
    Ping,
    /// SQL is optional for this project: the body is only checked to be a map.
    Execute(RawBody<'a>),
    Prepare(RawBody<'a>),
    Begin(Begin),
    Commit,
    Rollback,
    Watch(Watch<'a>),
    Unwatch(Watch<'a>),
    /// A replica's SUBSCRIBE (66): its body is `protocol::replication`'s to decode.
    Subscribe(RawBody<'a>),
}

impl Request<'_> {
    /// The request type code this request travels under.
    pub fn request_type(&self) -> u64 {
        match self {
            Request::Select(_) => request_type::SELECT,
            Request::Insert(_) => request_type::INSERT,
            Request::Replace(_) => request_type::REPLACE,
            Request::Update(_) => request_type::UPDATE,
            Request::Delete(_) => request_type::DELETE,
            Request::Upsert(_) => request_type::UPSERT,
            Request::Call(call) if call.is_call_16 => request_type::CALL_16,
            Request::Call(_) => request_type::CALL,
            Request::Eval(_) => request_type::EVAL,
            Request::Auth(_) => request_type::AUTH,
            Request::Id(_) => request_type::ID,
            Request::Ping => request_type::PING,
            Request::Execute(_) => request_type::EXECUTE,
            Request::Prepare(_) => request_type::PREPARE,
            Request::Begin(_) => request_type::BEGIN,
            Request::Commit => request_type::COMMIT,
            Request::Rollback => request_type::ROLLBACK,
            Request::Watch(_) => request_type::WATCH,
            Request::Unwatch(_) => request_type::UNWATCH,
            Request::Subscribe(_) => request_type::SUBSCRIBE,
        }
    }
}

/// What a request reads or writes, as routing, fetch-ahead and execution need it: the
/// space, the index and the key or tuple bytes (raw msgpack, borrowed from the packet).
/// [`Request::target`] is the one match over request kinds that works it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestTarget<'a> {
    /// No space's data: PING, ID, AUTH, EVAL, SQL, transaction control, WATCH.
    NoData,
    /// A stored procedure (CALL): what it touches is known only once it is planned.
    Procedure,
    /// A SELECT: `key` (a msgpack array) searched in `index_id` with `iterator`.
    Read {
        space_id: u32,
        index_id: u32,
        iterator: u32,
        key: &'a [u8],
    },
    /// An UPDATE or DELETE: the row with `key` (a msgpack array) in `index_id`.
    Key {
        space_id: u32,
        index_id: u32,
        key: &'a [u8],
    },
    /// An INSERT, REPLACE or UPSERT: the row given whole; its primary key is inside.
    Tuple { space_id: u32, tuple: &'a [u8] },
}

impl<'a> Request<'a> {
    /// What this request reads or writes (see [`RequestTarget`]).
    // Always inlined: where the caller knows the request's kind, the match folds away and
    // the target costs only its fields' loads.
    #[inline(always)]
    pub fn target(&self) -> RequestTarget<'a> {
        match *self {
            Request::Select(r) => RequestTarget::Read {
                space_id: r.space_id,
                index_id: r.index_id,
                iterator: r.iterator,
                key: r.key,
            },
            Request::Update(r) => RequestTarget::Key {
                space_id: r.space_id,
                index_id: r.index_id,
                key: r.key,
            },
            Request::Delete(r) => RequestTarget::Key {
                space_id: r.space_id,
                index_id: r.index_id,
                key: r.key,
            },
            Request::Insert(r) | Request::Replace(r) => RequestTarget::Tuple {
                space_id: r.space_id,
                tuple: r.tuple,
            },
            // Upsert goes by the primary key whatever index it names.
            Request::Upsert(r) => RequestTarget::Tuple {
                space_id: r.space_id,
                tuple: r.tuple,
            },
            Request::Call(_) => RequestTarget::Procedure,
            Request::Eval(_)
            | Request::Auth(_)
            | Request::Id(_)
            | Request::Ping
            | Request::Execute(_)
            | Request::Prepare(_)
            | Request::Begin(_)
            | Request::Commit
            | Request::Rollback
            | Request::Watch(_)
            | Request::Unwatch(_)
            | Request::Subscribe(_) => RequestTarget::NoData,
        }
    }
}

/// SELECT (1). `key` and `after_tuple` are whole msgpack arrays, header included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Select<'a> {
    pub space_id: u32,
    pub index_id: u32,
    pub limit: u32,
    pub offset: u32,
    /// Raw iterator number; whether it is valid for the index is storage's call.
    pub iterator: u32,
    pub key: &'a [u8],
    pub fetch_position: bool,
    /// The opaque string bytes of AFTER_POSITION.
    pub after_position: Option<&'a [u8]>,
    pub after_tuple: Option<&'a [u8]>,
}

/// INSERT (2) and REPLACE (3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insert<'a> {
    pub space_id: u32,
    pub tuple: &'a [u8],
}

/// UPDATE (4). The operation list travels under TUPLE (0x21).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Update<'a> {
    pub space_id: u32,
    pub index_id: u32,
    pub key: &'a [u8],
    pub ops: &'a [u8],
    /// 0 = field numbers in ops are 0-based, 1 = 1-based.
    pub index_base: u32,
}

/// DELETE (5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delete<'a> {
    pub space_id: u32,
    pub index_id: u32,
    pub key: &'a [u8],
}

/// UPSERT (9). The tuple is under TUPLE (0x21), the operations under OPS (0x28).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upsert<'a> {
    pub space_id: u32,
    /// Accepted and ignored by Tarantool: upsert always goes by the primary key.
    pub index_id: u32,
    pub tuple: &'a [u8],
    pub ops: &'a [u8],
    pub index_base: u32,
}

/// CALL (10) / CALL_16 (6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call<'a> {
    pub function_name: &'a str,
    /// A msgpack array; `[]` when the request has none.
    pub args: &'a [u8],
    pub is_call_16: bool,
}

/// EVAL (8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eval<'a> {
    pub expr: &'a str,
    pub args: &'a [u8],
}

/// AUTH (7). What is acceptable depends on the user (guest may send `[]`), so the
/// method/scramble checks of spec §9 are left to [`Auth::chap_sha1_scramble`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Auth<'a> {
    pub user_name: &'a str,
    /// `None` when the tuple has fewer than two items (only guest may do that).
    pub method: Option<&'a str>,
    /// The second tuple item when it is a string or binary; `None` for other types.
    pub scramble: Option<&'a [u8]>,
}

/// ID (73).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Id<'a> {
    pub version: u64,
    /// Bit `n` set = the client announced feature `n` (ids ≥ 64 are dropped: unknown).
    pub features: u64,
    pub auth_type: Option<&'a str>,
}

impl Id<'_> {
    pub fn has_feature(&self, feature: u32) -> bool {
        feature < 64 && self.features & (1 << feature) != 0
    }
}

/// BEGIN (14).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Begin {
    pub timeout_seconds: Option<f64>,
    /// 0 DEFAULT, 1 READ_COMMITTED, 2 READ_CONFIRMED, 3 BEST_EFFORT, 4 LINEARIZABLE.
    pub isolation: u32,
}

/// WATCH (74) / UNWATCH (75).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watch<'a> {
    pub key: &'a str,
}

/// A body this layer does not take apart (SQL); a msgpack map, or empty when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawBody<'a> {
    pub body: &'a [u8],
}

/// Decodes the body of a request of type `type_code`; `body` is what follows the header
/// (empty when the packet has no body).
pub fn decode_body(type_code: u64, body: &[u8]) -> Result<Request<'_>, ProtocolError> {
    use crate::protocol::codes::request_type as t;
    Ok(match type_code {
        t::SELECT => Request::Select(decode_select(body)?),
        t::INSERT => Request::Insert(decode_insert(body)?),
        t::REPLACE => Request::Replace(decode_insert(body)?),
        t::UPDATE => Request::Update(decode_update(body)?),
        t::DELETE => Request::Delete(decode_delete(body)?),
        t::UPSERT => Request::Upsert(decode_upsert(body)?),
        t::CALL => Request::Call(decode_call(body, false)?),
        t::CALL_16 => Request::Call(decode_call(body, true)?),
        t::EVAL => Request::Eval(decode_eval(body)?),
        t::AUTH => Request::Auth(decode_auth(body)?),
        t::ID => Request::Id(decode_id(body)?),
        t::PING => {
            check_whole_value(body)?;
            Request::Ping
        }
        t::EXECUTE => Request::Execute(decode_raw(body)?),
        t::PREPARE => Request::Prepare(decode_raw(body)?),
        t::BEGIN => Request::Begin(decode_begin(body)?),
        t::COMMIT | t::ROLLBACK => {
            check_whole_value(body)?;
            if type_code == t::COMMIT {
                Request::Commit
            } else {
                Request::Rollback
            }
        }
        t::WATCH => Request::Watch(decode_watch(body)?),
        t::UNWATCH => Request::Unwatch(decode_watch(body)?),
        // A NOP is not supposed to have a body: Tarantool's header decoder refuses any.
        t::NOP if !body.is_empty() => return Err(BODY_ERROR),
        // Tarantool decodes a replication request's body first (`xrow_decode_join`,
        // `_subscribe`, `_register`), so one without a body is 20 "request body" whatever
        // the server's state. With a body it goes on to replication, which tarn does not
        // serve: 48 below (docs/tarantool-reference.md, (k)).
        t::JOIN | t::SUBSCRIBE | t::REGISTER if body.is_empty() => {
            return Err(ProtocolError::InvalidMsgpack(invalid_msgpack::REQUEST_BODY))
        }
        // A tarn replica's; the session answers a Tarantool replica's with 48 as before.
        t::SUBSCRIBE => Request::Subscribe(decode_raw(body)?),
        other => {
            // Tarantool checks the body's msgpack before it looks at the type.
            check_whole_value(body)?;
            return Err(ProtocolError::UnknownRequestType(other));
        }
    })
}

const BODY_ERROR: ProtocolError = ProtocolError::InvalidMsgpack(invalid_msgpack::PACKET_BODY);

/// An absent body, or exactly one whole msgpack value and nothing after it, as Tarantool's
/// header decoder checks every body (`mp_check`): it takes the unused byte 0xc1 as a value of
/// one byte, at the top and inside containers, so a PING of `c1` or `[c1]` is answered.
fn check_whole_value(body: &[u8]) -> Result<(), ProtocolError> {
    let mut rest = body;
    let mut pending: u64 = if body.is_empty() { 0 } else { 1 };
    while pending > 0 {
        pending -= 1;
        if let Some((0xc1, after)) = rest.split_first() {
            rest = after;
            continue;
        }
        match read_value(&mut rest).map_err(|_| BODY_ERROR)? {
            Value::Array(count) => pending += u64::from(count),
            Value::Map(pairs) => pending += 2 * u64::from(pairs),
            _ => {}
        }
    }
    if rest.is_empty() {
        Ok(())
    } else {
        Err(BODY_ERROR)
    }
}

/// Walks a body map, yielding `(key, value bytes)` for uint keys and skipping the rest.
struct BodyMap<'a> {
    rest: &'a [u8],
    remaining: u32,
    error: ProtocolError,
}

impl<'a> BodyMap<'a> {
    /// An empty `body` reads as an empty map.
    fn open(body: &'a [u8], error: ProtocolError) -> Result<Self, ProtocolError> {
        let mut rest = body;
        let remaining = if body.is_empty() {
            0
        } else {
            match read_value(&mut rest) {
                Ok(Value::Map(pairs)) => pairs,
                _ => return Err(error),
            }
        };
        Ok(BodyMap {
            rest,
            remaining,
            error,
        })
    }

    fn next(&mut self) -> Result<Option<(u64, &'a [u8])>, ProtocolError> {
        while self.remaining > 0 {
            self.remaining -= 1;
            // Keys are small unsigned integers: one byte, read without the general decoder.
            let key = match self.rest.split_first() {
                Some((&key, rest)) if key < 0x80 => {
                    self.rest = rest;
                    Value::Uint(key as u64)
                }
                _ => read_value(&mut self.rest).map_err(|_| self.error.clone())?,
            };
            let value = take_value(&mut self.rest).map_err(|_| self.error.clone())?;
            if let Value::Uint(key) = key {
                return Ok(Some((key, value)));
            }
        }
        Ok(None)
    }

    /// Bytes after the map inside the packet are an error, like Tarantool's.
    fn finish(self) -> Result<(), ProtocolError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(BODY_ERROR)
        }
    }
}

fn read_single(value: &[u8]) -> Option<Value<'_>> {
    let mut buf = value;
    read_value(&mut buf).ok()
}

fn uint(value: &[u8]) -> Result<u64, ProtocolError> {
    match read_single(value) {
        Some(Value::Uint(n)) => Ok(n),
        _ => Err(BODY_ERROR),
    }
}

/// Tarantool stores these fields in `uint32_t` and keeps the low bits of larger values.
fn uint32(value: &[u8]) -> Result<u32, ProtocolError> {
    uint(value).map(low_32_bits)
}

/// What Tarantool keeps of a uint it stores in a `uint32_t` (a space or index id, a limit,
/// a response type): the low 32 bits, the rest dropped without an error.
#[inline(always)]
#[allow(
    clippy::cast_possible_truncation,
    reason = "truncating is the point: Tarantool's behaviour, kept"
)]
pub(crate) fn low_32_bits(value: u64) -> u32 {
    value as u32
}

fn string(value: &[u8]) -> Result<&str, ProtocolError> {
    match read_single(value) {
        Some(Value::Str(bytes)) => std::str::from_utf8(bytes).map_err(|_| BODY_ERROR),
        _ => Err(BODY_ERROR),
    }
}

fn array(value: &[u8]) -> Result<&[u8], ProtocolError> {
    match read_single(value) {
        Some(Value::Array(_)) => Ok(value),
        _ => Err(BODY_ERROR),
    }
}

fn required<T>(field: Option<T>, name: &'static str) -> Result<T, ProtocolError> {
    field.ok_or(ProtocolError::MissingRequestField(name))
}

fn decode_select(body: &[u8]) -> Result<Select<'_>, ProtocolError> {
    let mut map = BodyMap::open(body, BODY_ERROR)?;
    let (mut space_id, mut limit, mut key) = (None, None, None);
    let mut select = Select {
        space_id: 0,
        index_id: 0,
        limit: 0,
        offset: 0,
        iterator: 0,
        key: EMPTY_ARRAY,
        fetch_position: false,
        after_position: None,
        after_tuple: None,
    };
    while let Some((k, value)) = map.next()? {
        match k {
            body_key::SPACE_ID => space_id = Some(uint32(value)?),
            body_key::INDEX_ID => select.index_id = uint32(value)?,
            body_key::LIMIT => limit = Some(uint32(value)?),
            body_key::OFFSET => select.offset = uint32(value)?,
            body_key::ITERATOR => select.iterator = uint32(value)?,
            body_key::KEY => key = Some(array(value)?),
            body_key::FETCH_POSITION => match read_single(value) {
                Some(Value::Bool(b)) => select.fetch_position = b,
                _ => return Err(BODY_ERROR),
            },
            body_key::AFTER_POSITION => match read_single(value) {
                Some(Value::Str(bytes)) => select.after_position = Some(bytes),
                // nil means "from the start" for connectors that always send the key.
                Some(Value::Nil) => {}
                _ => return Err(BODY_ERROR),
            },
            body_key::AFTER_TUPLE => select.after_tuple = Some(array(value)?),
            _ => {}
        }
    }
    map.finish()?;
    select.space_id = required(space_id, "SPACE_ID")?;
    select.limit = required(limit, "LIMIT")?;
    select.key = required(key, "KEY")?;
    Ok(select)
}

/// The DML fields, gathered once for INSERT/REPLACE/UPDATE/DELETE/UPSERT; each decoder
/// then checks its mandatory ones in key-code order, the order Tarantool reports them in.
#[derive(Default)]
struct Dml<'a> {
    space_id: Option<u32>,
    index_id: u32,
    index_base: u32,
    key: Option<&'a [u8]>,
    tuple: Option<&'a [u8]>,
    ops: Option<&'a [u8]>,
}

fn decode_dml(body: &[u8]) -> Result<Dml<'_>, ProtocolError> {
    let mut map = BodyMap::open(body, BODY_ERROR)?;
    let mut dml = Dml::default();
    while let Some((k, value)) = map.next()? {
        match k {
            body_key::SPACE_ID => dml.space_id = Some(uint32(value)?),
            body_key::INDEX_ID => dml.index_id = uint32(value)?,
            body_key::INDEX_BASE => dml.index_base = uint32(value)?,
            body_key::KEY => dml.key = Some(array(value)?),
            body_key::TUPLE => dml.tuple = Some(array(value)?),
            body_key::OPS => dml.ops = Some(array(value)?),
            _ => {}
        }
    }
    map.finish()?;
    Ok(dml)
}

fn decode_insert(body: &[u8]) -> Result<Insert<'_>, ProtocolError> {
    let dml = decode_dml(body)?;
    Ok(Insert {
        space_id: required(dml.space_id, "SPACE_ID")?,
        tuple: required(dml.tuple, "TUPLE")?,
    })
}

fn decode_update(body: &[u8]) -> Result<Update<'_>, ProtocolError> {
    let dml = decode_dml(body)?;
    Ok(Update {
        space_id: required(dml.space_id, "SPACE_ID")?,
        index_id: dml.index_id,
        key: required(dml.key, "KEY")?,
        ops: required(dml.tuple, "TUPLE")?,
        index_base: dml.index_base,
    })
}

fn decode_delete(body: &[u8]) -> Result<Delete<'_>, ProtocolError> {
    let dml = decode_dml(body)?;
    Ok(Delete {
        space_id: required(dml.space_id, "SPACE_ID")?,
        index_id: dml.index_id,
        key: required(dml.key, "KEY")?,
    })
}

fn decode_upsert(body: &[u8]) -> Result<Upsert<'_>, ProtocolError> {
    let dml = decode_dml(body)?;
    Ok(Upsert {
        space_id: required(dml.space_id, "SPACE_ID")?,
        index_id: dml.index_id,
        tuple: required(dml.tuple, "TUPLE")?,
        ops: required(dml.ops, "OPS")?,
        index_base: dml.index_base,
    })
}

/// CALL, CALL_16 and EVAL share one layout: a name or an expression plus TUPLE args.
fn decode_call_like(body: &[u8], name_key: u64) -> Result<(Option<&str>, &[u8]), ProtocolError> {
    if body.is_empty() {
        return Err(ProtocolError::InvalidMsgpack(
            invalid_msgpack::MISSING_REQUEST_BODY,
        ));
    }
    let mut map = BodyMap::open(body, BODY_ERROR)?;
    let (mut name, mut args) = (None, EMPTY_ARRAY);
    while let Some((k, value)) = map.next()? {
        match k {
            k if k == name_key => name = Some(string(value)?),
            body_key::TUPLE => args = array(value)?,
            _ => {}
        }
    }
    map.finish()?;
    Ok((name, args))
}

fn decode_call(body: &[u8], is_call_16: bool) -> Result<Call<'_>, ProtocolError> {
    let (name, args) = decode_call_like(body, body_key::FUNCTION_NAME)?;
    Ok(Call {
        function_name: required(name, "FUNCTION_NAME")?,
        args,
        is_call_16,
    })
}

fn decode_eval(body: &[u8]) -> Result<Eval<'_>, ProtocolError> {
    let (expr, args) = decode_call_like(body, body_key::EXPR)?;
    Ok(Eval {
        expr: required(expr, "EXPR")?,
        args,
    })
}

fn decode_auth(body: &[u8]) -> Result<Auth<'_>, ProtocolError> {
    if body.is_empty() {
        return Err(ProtocolError::InvalidMsgpack(
            invalid_msgpack::MISSING_REQUEST_BODY,
        ));
    }
    let mut map = BodyMap::open(body, BODY_ERROR)?;
    let (mut user_name, mut tuple) = (None, None);
    while let Some((k, value)) = map.next()? {
        match k {
            body_key::USER_NAME => user_name = Some(string(value)?),
            body_key::TUPLE => tuple = Some(array(value)?),
            _ => {}
        }
    }
    map.finish()?;
    let user_name = required(user_name, "USER_NAME")?;
    let mut tuple = required(tuple, "TUPLE")?;

    let auth_body_error = ProtocolError::InvalidMsgpack(invalid_msgpack::AUTH_REQUEST_BODY);
    let Ok(Value::Array(count)) = read_value(&mut tuple) else {
        return Err(BODY_ERROR);
    };
    if count < 2 {
        return Ok(Auth {
            user_name,
            method: None,
            scramble: None,
        });
    }
    let method = match read_value(&mut tuple) {
        Ok(Value::Str(bytes)) => std::str::from_utf8(bytes).map_err(|_| auth_body_error)?,
        _ => return Err(auth_body_error),
    };
    let scramble = match read_value(&mut tuple) {
        Ok(Value::Str(bytes) | Value::Bin(bytes)) => Some(bytes),
        _ => None,
    };
    Ok(Auth {
        user_name,
        method: Some(method),
        scramble,
    })
}

impl<'a> Auth<'a> {
    /// The chap-sha1 scramble, or the 2.11 error for this request (spec §9 table).
    ///
    /// The caller handles guest's empty tuple (`method == None`) before calling this.
    pub fn chap_sha1_scramble(&self) -> Result<&'a [u8; 20], ProtocolError> {
        const METHOD: &str = crate::protocol::auth::CHAP_SHA1;
        let Some(method) = self.method else {
            return Err(ProtocolError::InvalidMsgpack(
                invalid_msgpack::AUTH_REQUEST_BODY,
            ));
        };
        if method != METHOD {
            return Err(ProtocolError::UnknownAuthMethod(method.into()));
        }
        let Some(scramble) = self.scramble else {
            return Err(ProtocolError::InvalidAuthRequest {
                method: METHOD,
                reason: "scramble must be string",
            });
        };
        scramble
            .try_into()
            .map_err(|_| ProtocolError::InvalidAuthRequest {
                method: METHOD,
                reason: "invalid scramble size",
            })
    }
}

fn decode_id(body: &[u8]) -> Result<Id<'_>, ProtocolError> {
    let error = ProtocolError::InvalidMsgpack(invalid_msgpack::REQUEST_BODY);
    if body.is_empty() {
        return Err(error);
    }
    let mut map = BodyMap::open(body, error.clone())?;
    let mut id = Id {
        version: 0,
        features: 0,
        auth_type: None,
    };
    while let Some((k, value)) = map.next()? {
        match k {
            body_key::VERSION => id.version = uint(value).map_err(|_| error.clone())?,
            body_key::FEATURES => {
                let mut items = value;
                let Ok(Value::Array(count)) = read_value(&mut items) else {
                    return Err(error);
                };
                for _ in 0..count {
                    match read_value(&mut items) {
                        Ok(Value::Uint(feature)) if feature < 64 => id.features |= 1 << feature,
                        Ok(Value::Uint(_)) => {}
                        _ => return Err(error),
                    }
                }
            }
            body_key::AUTH_TYPE => id.auth_type = Some(string(value).map_err(|_| error.clone())?),
            _ => {}
        }
    }
    map.finish().map_err(|_| error)?;
    Ok(id)
}

fn decode_begin(body: &[u8]) -> Result<Begin, ProtocolError> {
    let mut map = BodyMap::open(body, BODY_ERROR)?;
    let mut begin = Begin {
        timeout_seconds: None,
        isolation: 0,
    };
    while let Some((k, value)) = map.next()? {
        match k {
            body_key::TIMEOUT => {
                // Any number is accepted, as with Tarantool's mp_read_double.
                begin.timeout_seconds = Some(match read_single(value) {
                    Some(Value::F64(v)) => v,
                    Some(Value::F32(v)) => f64::from(v),
                    Some(Value::Uint(v)) => v as f64,
                    Some(Value::Int(v)) => v as f64,
                    _ => return Err(BODY_ERROR),
                })
            }
            body_key::TXN_ISOLATION => begin.isolation = uint32(value)?,
            _ => {}
        }
    }
    map.finish()?;
    Ok(begin)
}

fn decode_watch(body: &[u8]) -> Result<Watch<'_>, ProtocolError> {
    let mut map = BodyMap::open(body, BODY_ERROR)?;
    let mut key = None;
    while let Some((k, value)) = map.next()? {
        if k == body_key::EVENT_KEY {
            key = Some(string(value)?);
        }
    }
    map.finish()?;
    Ok(Watch {
        key: required(key, "EVENT_KEY")?,
    })
}

fn decode_raw(body: &[u8]) -> Result<RawBody<'_>, ProtocolError> {
    let mut map = BodyMap::open(body, BODY_ERROR)?;
    while map.next()?.is_some() {}
    map.finish()?;
    Ok(RawBody { body })
}
