//! The differential test's request generator: from a seed, a sequence of IPROTO requests over
//! the test's spaces (every request type tarn answers, every iterator and update operation,
//! every field type, edge and malformed values), the same for any server.
//!
//! It owns the schema model the requests are drawn from (read from the servers' `_vspace` and
//! `_vindex`, so it cannot drift from `schema.lua`/`schema.toml`) and a seeded random source.
//! It knows nothing of sockets or replies: a seed gives the same requests whatever the servers
//! answer, so a reported seed replays exactly.

use super::value::V;

/// SplitMix64: a stable, seedable source whose sequence is fixed by this code alone (rand's
/// `StdRng` may change its algorithm between releases, and a reported seed must replay).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5eed_d1ff_0000_0019)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn range(&mut self, low: i64, high_inclusive: i64) -> i64 {
        low + self.below((high_inclusive - low + 1) as u64) as i64
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// An index into `weights`, each chosen in proportion to its weight.
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let mut roll = self.below(weights.iter().sum());
        for (at, weight) in weights.iter().enumerate() {
            if roll < *weight {
                return at;
            }
            roll -= weight;
        }
        unreachable!("the roll is below the sum")
    }
}

/// A field type of Tarantool 2.6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Any,
    Unsigned,
    Integer,
    Number,
    Double,
    String,
    Boolean,
    Varbinary,
    Scalar,
    Uuid,
    Decimal,
    Array,
    Map,
}

impl Kind {
    fn parse(name: &str) -> Result<Kind, String> {
        Ok(match name {
            "any" => Kind::Any,
            "unsigned" => Kind::Unsigned,
            "integer" => Kind::Integer,
            "number" => Kind::Number,
            "double" => Kind::Double,
            "string" => Kind::String,
            "boolean" => Kind::Boolean,
            "varbinary" => Kind::Varbinary,
            "scalar" => Kind::Scalar,
            "uuid" => Kind::Uuid,
            "decimal" => Kind::Decimal,
            "array" => Kind::Array,
            "map" => Kind::Map,
            other => return Err(format!("unknown field type {other:?}")),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub kind: Kind,
    pub nullable: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// 0-based.
    pub field: usize,
    pub kind: Kind,
    pub nullable: bool,
    pub collation: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Index {
    pub id: u32,
    pub name: String,
    pub hash: bool,
    pub unique: bool,
    pub parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Space {
    pub id: u32,
    pub name: String,
    pub fields: Vec<Field>,
    pub indexes: Vec<Index>,
}

impl Space {
    pub fn primary(&self) -> &Index {
        &self.indexes[0]
    }

    /// Whether any index has field `field` (0-based) as a part.
    pub fn is_indexed(&self, field: usize) -> bool {
        self.indexes
            .iter()
            .any(|index| index.parts.iter().any(|part| part.field == field))
    }

    /// The primary key of a tuple of this space, if it has the key's fields.
    pub fn primary_key_of(&self, tuple: &V) -> Option<V> {
        let fields = tuple.as_array()?;
        let parts = self
            .primary()
            .parts
            .iter()
            .map(|part| fields.get(part.field).cloned())
            .collect::<Option<Vec<V>>>()?;
        Some(V::Array(parts))
    }
}

/// The user spaces (ids 512 and up) both servers have, as their system views describe them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    pub spaces: Vec<Space>,
}

impl Schema {
    /// Reads the rows of `_vspace` and `_vindex` (ids 512 and up). The index type is compared
    /// case-blind: Tarantool keeps it as its creator spelled it.
    pub fn from_rows(vspace: &[V], vindex: &[V]) -> Result<Schema, String> {
        let mut spaces = Vec::new();
        for row in vspace {
            let row = row.as_array().ok_or("a _vspace row is an array")?;
            let id = uint_at(row, 0)? as u32;
            let name = str_at(row, 2)?.to_string();
            let format = row
                .get(6)
                .and_then(V::as_array)
                .ok_or("a _vspace row has a format")?;
            let fields = format
                .iter()
                .map(|field| {
                    Ok(Field {
                        name: field
                            .get_str("name")
                            .and_then(V::as_str)
                            .ok_or("a field has a name")?
                            .to_string(),
                        kind: Kind::parse(
                            field
                                .get_str("type")
                                .and_then(V::as_str)
                                .ok_or("a field has a type")?,
                        )?,
                        nullable: matches!(field.get_str("is_nullable"), Some(V::Bool(true))),
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            spaces.push(Space {
                id,
                name,
                fields,
                indexes: Vec::new(),
            });
        }
        for row in vindex {
            let row = row.as_array().ok_or("a _vindex row is an array")?;
            let space_id = uint_at(row, 0)? as u32;
            let space = spaces
                .iter_mut()
                .find(|space| space.id == space_id)
                .ok_or_else(|| format!("_vindex names space {space_id}, not in _vspace"))?;
            let parts = row
                .get(5)
                .and_then(V::as_array)
                .ok_or("an index has parts")?
                .iter()
                .map(|part| match part {
                    V::Array(items) => Ok(Part {
                        field: uint_at(items, 0)? as usize,
                        kind: Kind::parse(str_at(items, 1)?)?,
                        nullable: false,
                        collation: None,
                    }),
                    V::Map(_) => Ok(Part {
                        field: part
                            .get_str("field")
                            .and_then(V::as_uint)
                            .ok_or("a part has a field")? as usize,
                        kind: Kind::parse(
                            part.get_str("type")
                                .and_then(V::as_str)
                                .ok_or("a part has a type")?,
                        )?,
                        nullable: matches!(part.get_str("is_nullable"), Some(V::Bool(true))),
                        collation: part.get_str("collation").and_then(V::as_uint),
                    }),
                    other => Err(format!("an index part is {other}")),
                })
                .collect::<Result<Vec<_>, String>>()?;
            let index_type = str_at(row, 3)?.to_ascii_lowercase();
            space.indexes.push(Index {
                id: uint_at(row, 1)? as u32,
                name: str_at(row, 2)?.to_string(),
                hash: index_type == "hash",
                unique: matches!(
                    row.get(4).and_then(|opts| opts.get_str("unique")),
                    Some(V::Bool(true))
                ),
                parts,
            });
        }
        spaces.sort_by_key(|space| space.id);
        for space in &mut spaces {
            space.indexes.sort_by_key(|index| index.id);
        }
        Ok(Schema { spaces })
    }

    pub fn space(&self, id: u64) -> Option<&Space> {
        self.spaces.iter().find(|space| u64::from(space.id) == id)
    }
}

fn uint_at(row: &[V], at: usize) -> Result<u64, String> {
    row.get(at)
        .and_then(V::as_uint)
        .ok_or_else(|| format!("field {at} of a system row is a uint"))
}

fn str_at(row: &[V], at: usize) -> Result<&str, String> {
    row.get(at)
        .and_then(V::as_str)
        .ok_or_else(|| format!("field {at} of a system row is a string"))
}

/// IPROTO request types and body keys the generator uses.
pub mod iproto {
    pub const SELECT: u64 = 1;
    pub const INSERT: u64 = 2;
    pub const REPLACE: u64 = 3;
    pub const UPDATE: u64 = 4;
    pub const DELETE: u64 = 5;
    pub const CALL_16: u64 = 6;
    pub const AUTH: u64 = 7;
    pub const EVAL: u64 = 8;
    pub const UPSERT: u64 = 9;
    pub const CALL: u64 = 10;
    pub const PING: u64 = 64;

    pub const SPACE_ID: u64 = 0x10;
    pub const INDEX_ID: u64 = 0x11;
    pub const LIMIT: u64 = 0x12;
    pub const OFFSET: u64 = 0x13;
    pub const ITERATOR: u64 = 0x14;
    pub const INDEX_BASE: u64 = 0x15;
    pub const KEY: u64 = 0x20;
    pub const TUPLE: u64 = 0x21;
    pub const FUNCTION_NAME: u64 = 0x22;
    pub const USER_NAME: u64 = 0x23;
    pub const EXPR: u64 = 0x27;
    pub const OPS: u64 = 0x28;

    pub fn type_name(kind: u64) -> String {
        match kind {
            SELECT => "SELECT".into(),
            INSERT => "INSERT".into(),
            REPLACE => "REPLACE".into(),
            UPDATE => "UPDATE".into(),
            DELETE => "DELETE".into(),
            CALL_16 => "CALL_16".into(),
            AUTH => "AUTH".into(),
            EVAL => "EVAL".into(),
            UPSERT => "UPSERT".into(),
            CALL => "CALL".into(),
            PING => "PING".into(),
            other => format!("TYPE_{other}"),
        }
    }

    pub fn key_name(key: u64) -> String {
        match key {
            SPACE_ID => "space_id".into(),
            INDEX_ID => "index_id".into(),
            LIMIT => "limit".into(),
            OFFSET => "offset".into(),
            ITERATOR => "iterator".into(),
            INDEX_BASE => "index_base".into(),
            KEY => "key".into(),
            TUPLE => "tuple".into(),
            FUNCTION_NAME => "function_name".into(),
            USER_NAME => "user_name".into(),
            EXPR => "expr".into(),
            OPS => "ops".into(),
            other => format!("0x{other:x}"),
        }
    }
}

/// The body of a request: a map built from values, or raw bytes (malformed on purpose).
#[derive(Clone, Debug)]
pub enum Body {
    Map(Vec<(u64, V)>),
    Raw(Vec<u8>),
}

/// One request, the same bytes for both servers except AUTH (whose scramble takes each
/// server's salt).
#[derive(Clone, Debug)]
pub struct Request {
    pub kind: u64,
    pub body: Body,
    /// AUTH only: the user and the password to scramble with the connection's salt.
    pub auth: Option<(String, String)>,
}

impl Request {
    fn new(kind: u64, body: Vec<(u64, V)>) -> Request {
        Request {
            kind,
            body: Body::Map(body),
            auth: None,
        }
    }

    /// The value under body key `key`.
    pub fn get(&self, key: u64) -> Option<&V> {
        match &self.body {
            Body::Map(pairs) => pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| v),
            Body::Raw(_) => None,
        }
    }

    pub fn space_id(&self) -> Option<u64> {
        self.get(iproto::SPACE_ID).and_then(V::as_uint)
    }

    pub fn index_id(&self) -> u64 {
        match self.get(iproto::INDEX_ID) {
            Some(V::Uint(id)) => *id,
            _ => 0,
        }
    }

    pub fn is_write(&self) -> bool {
        matches!(
            self.kind,
            iproto::INSERT | iproto::REPLACE | iproto::UPDATE | iproto::DELETE | iproto::UPSERT
        )
    }

    /// The update operations: UPDATE's TUPLE, UPSERT's OPS.
    pub fn ops(&self) -> Option<&[V]> {
        match self.kind {
            iproto::UPDATE => self.get(iproto::TUPLE)?.as_array(),
            iproto::UPSERT => self.get(iproto::OPS)?.as_array(),
            _ => None,
        }
    }

    /// The body's bytes; `salt` is the connection's (for AUTH).
    pub fn body_bytes(&self, salt: &[u8]) -> Vec<u8> {
        if let Some((user, password)) = &self.auth {
            let scramble = tarn::protocol::auth::scramble(salt, password.as_bytes());
            let body = V::Map(vec![
                (V::Uint(iproto::USER_NAME), V::str(user)),
                (
                    V::Uint(iproto::TUPLE),
                    V::Array(vec![V::str("chap-sha1"), V::Bin(scramble.to_vec())]),
                ),
            ]);
            return body.to_bytes();
        }
        match &self.body {
            Body::Map(pairs) => V::Map(
                pairs
                    .iter()
                    .map(|(key, value)| (V::Uint(*key), value.clone()))
                    .collect(),
            )
            .to_bytes(),
            Body::Raw(bytes) => bytes.clone(),
        }
    }

    /// The framed packet with `sync` in its header.
    pub fn packet(&self, sync: u64, salt: &[u8]) -> Vec<u8> {
        let mut header = Vec::new();
        V::Map(vec![
            (V::Uint(0), V::Uint(self.kind)),
            (V::Uint(1), V::Uint(sync)),
        ])
        .encode(&mut header);
        let body = self.body_bytes(salt);
        let mut packet = vec![0xce];
        packet.extend_from_slice(&((header.len() + body.len()) as u32).to_be_bytes());
        packet.extend_from_slice(&header);
        packet.extend_from_slice(&body);
        packet
    }
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ", iproto::type_name(self.kind))?;
        if let Some((user, password)) = &self.auth {
            return write!(f, "{{user_name: {user:?}, password: {password:?}}}");
        }
        match &self.body {
            Body::Map(pairs) => {
                write!(f, "{{")?;
                for (at, (key, value)) in pairs.iter().enumerate() {
                    if at > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{}: {value}", iproto::key_name(*key))?;
                }
                write!(f, "}}")
            }
            Body::Raw(bytes) => {
                write!(f, "raw body ")?;
                for byte in bytes {
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
        }
    }
}

/// Ids below 512 that no Tarantool 2.6 system space has (writes there must answer
/// ER_NO_SUCH_SPACE), and the system views whose user rows both servers show.
const MISSING_SYSTEM_IDS: [u64; 6] = [0, 1, 100, 300, 400, 511];
const VIEW_IDS: [u64; 4] = [280, 281, 288, 289];
/// User space ids that exist on neither server.
const MISSING_USER_IDS: [u64; 3] = [514, 600, 9999];

/// Primary keys and other indexed numbers come from `0..KEYS`, so that hits, misses and
/// duplicates all happen.
pub const KEYS: i64 = 10;

const UINT_EDGES: [u64; 10] = [
    0,
    1,
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    (1 << 32) + 1,
    (1 << 63) - 1,
    1 << 63,
    u64::MAX,
];
const INT_EDGES: [i64; 7] = [
    -1,
    -2,
    i32::MIN as i64,
    i32::MIN as i64 - 1,
    -(1 << 32),
    i64::MIN + 1,
    i64::MIN,
];
/// Doubles: exact in float32 or not, signed zero, the largest and smallest, overflows.
const F64_EDGES: [f64; 20] = [
    0.0,
    -0.0,
    0.5,
    1.0,
    1.5,
    -1.5,
    2.0,
    3.25,
    0.1,
    -0.3,
    1e300,
    -1e300,
    f32::MAX as f64,
    f64::MAX,
    f64::MIN_POSITIVE,
    5e-324,
    9007199254740993.0,
    18446744073709551616.0,
    -9223372036854775808.0,
    123456789.125,
];
const F32_EDGES: [f32; 7] = [0.5, 1.5, -2.0, 0.1, f32::MAX, 1e-45, 16777217.0];
const STRINGS: [&str; 10] = ["", "a", "A", "b", "B", "ab", "ä", "Ä", "z", "zz"];
/// Three UUIDs (MP_EXT type 2), in byte order.
const UUIDS: [[u8; 16]; 3] = [
    [0; 16],
    [
        0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x43, 0x33, 0x84, 0x44, 0x55, 0x55, 0x55, 0x55, 0x55,
        0x55,
    ],
    [
        0xf8, 0x1d, 0x4f, 0xae, 0x7d, 0xec, 0x41, 0xd0, 0xa7, 0x65, 0x00, 0xa0, 0xc9, 0x1e, 0x6b,
        0xf6,
    ],
];
/// Decimals (MP_EXT type 1: scale, then packed BCD with a sign nibble): 0, 1, -1.5, 12.5,
/// 1.0 (equal to 1), 0.001, a 20-digit one.
const DECIMALS: [&[u8]; 7] = [
    &[0x00, 0x0c],
    &[0x00, 0x1c],
    &[0x01, 0x01, 0x5d],
    &[0x01, 0x12, 0x5c],
    &[0x01, 0x01, 0x0c],
    &[0x03, 0x1c],
    &[
        0x00, 0x01, 0x23, 0x45, 0x67, 0x89, 0x01, 0x23, 0x45, 0x67, 0x89, 0x0c,
    ],
];

/// A nonzero float that Tarantool's decimal conversion makes 0 (see `Use`).
fn is_tiny(value: f64) -> bool {
    value != 0.0 && value.abs() < 1e-38
}

/// Whether `op` names its field by a JSON path rather than a number or a format field's name.
fn is_path_op(op: &V, space: &Space) -> bool {
    match op.as_array() {
        Some([_, V::Str(path), ..]) => {
            !space
                .fields
                .iter()
                .any(|field| field.name.as_bytes() == path.as_slice())
                && path.iter().any(|byte| matches!(byte, b'[' | b'.'))
        }
        _ => false,
    }
}

/// What a generated value may be: anything, or only values an index compares sanely. Not in
/// an index (nor in a key searched in one): NaN and the infinities, which Tarantool 2.6 orders
/// in no consistent way, so two correct servers could disagree; and nonzero floats below
/// 1e-38 in magnitude, which Tarantool turns into decimal 0 when it compares them with a
/// decimal (decimal_from_double(): the `%.15g` text, 38 digits) but which are above integer
/// 0 and 0.0, that are equal to decimal 0. A TREE index holding such a float, a decimal 0
/// and a 0 is then not a total order, a DELETE misses the tuple in it, and the freed tuple
/// stays in the index: Tarantool 2.6.0 then answers with garbage rows or crashes in
/// mempool_alloc (docs/tarantool-reference.md (l), its last row).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Use {
    Free,
    Indexed,
}

pub struct Generator<'s> {
    pub rng: Rng,
    schema: &'s Schema,
}

impl<'s> Generator<'s> {
    pub fn new(schema: &'s Schema, seed: u64) -> Generator<'s> {
        Generator {
            rng: Rng::new(seed),
            schema,
        }
    }

    /// The next request.
    pub fn request(&mut self) -> Request {
        match self.rng.weighted(&[30, 9, 9, 22, 10, 10, 2, 2, 1, 5]) {
            0 => self.select(),
            1 => self.insert_or_replace(iproto::INSERT),
            2 => self.insert_or_replace(iproto::REPLACE),
            3 => self.update(),
            4 => self.upsert(),
            5 => self.delete(),
            6 => self.call(),
            7 => Request::new(iproto::PING, Vec::new()),
            8 => self.auth(),
            _ => self.malformed(),
        }
    }

    fn space(&mut self) -> &'s Space {
        let spaces = &self.schema.spaces;
        // The spaces with more to get wrong come up more often.
        let weights: Vec<u64> = spaces
            .iter()
            .map(|space| 2 + space.fields.len() as u64 / 2 + space.indexes.len() as u64)
            .collect();
        &spaces[self.rng.weighted(&weights)]
    }

    /// A space id: mostly a user space's, sometimes a missing one.
    fn space_id_for_write(&mut self) -> (u64, Option<&'s Space>) {
        match self.rng.weighted(&[94, 3, 3]) {
            0 => {
                let space = self.space();
                (u64::from(space.id), Some(space))
            }
            1 => (*self.rng.pick(&MISSING_SYSTEM_IDS), None),
            _ => (*self.rng.pick(&MISSING_USER_IDS), None),
        }
    }

    fn index_id(&mut self, space: &Space) -> u64 {
        match self.rng.weighted(&[92, 6, 2]) {
            0 => self.rng.below(space.indexes.len() as u64),
            1 => space.indexes.len() as u64 + self.rng.below(3),
            _ => *self.rng.pick(&[1 << 32, u64::MAX, 127]),
        }
    }

    fn select(&mut self) -> Request {
        if self.rng.chance(4) {
            return self.select_view();
        }
        let (space_id, space) = match self.rng.weighted(&[96, 2, 2]) {
            0 => {
                let space = self.space();
                (u64::from(space.id), Some(space))
            }
            1 => (*self.rng.pick(&MISSING_USER_IDS), None),
            _ => (*self.rng.pick(&MISSING_SYSTEM_IDS), None),
        };
        let space = space.unwrap_or(&self.schema.spaces[0]);
        let index_id = self.index_id(space);
        let iterator = match self.rng.weighted(&[22, 8, 14, 10, 10, 14, 12, 3, 4]) {
            0 => 0,
            1 => 1,
            2 => 2,
            3 => 3,
            4 => 4,
            5 => 5,
            6 => 6,
            7 => self.rng.range(7, 11) as u64,
            _ => *self.rng.pick(&[12, 13, 100, 1 << 32]),
        };
        let key = match space.indexes.get(index_id as usize) {
            Some(index) => {
                let max = index.parts.len() as u64;
                let count = match self.rng.weighted(&[45, 45, 10]) {
                    0 => max,
                    1 => self.rng.below(max + 1),
                    _ => max + 1,
                };
                self.key(space, index, count as usize)
            }
            None => self.key(space, space.primary(), 1),
        };
        let limit = match self.rng.weighted(&[40, 30, 25, 5]) {
            0 => u64::from(u32::MAX),
            1 => self.rng.range(0, 3) as u64,
            2 => self.rng.range(4, 12) as u64,
            _ => *self.rng.pick(&[1 << 32, u64::MAX, (1 << 31) + 1]),
        };
        let offset = match self.rng.weighted(&[70, 25, 5]) {
            0 => 0,
            1 => self.rng.range(1, 5) as u64,
            _ => *self.rng.pick(&[u64::from(u32::MAX), 1 << 32, 1000]),
        };
        let mut body = vec![(iproto::SPACE_ID, V::Uint(space_id))];
        // INDEX_ID, OFFSET and ITERATOR may be left to their defaults (0).
        if index_id != 0 || self.rng.chance(70) {
            body.push((iproto::INDEX_ID, V::Uint(index_id)));
        }
        body.push((iproto::LIMIT, V::Uint(limit)));
        if offset != 0 || self.rng.chance(70) {
            body.push((iproto::OFFSET, V::Uint(offset)));
        }
        if iterator != 0 || self.rng.chance(70) {
            body.push((iproto::ITERATOR, V::Uint(iterator)));
        }
        body.push((iproto::KEY, key));
        Request::new(iproto::SELECT, body)
    }

    /// A select on a system view or space by a user space's id: rows both servers have.
    fn select_view(&mut self) -> Request {
        let view = *self.rng.pick(&VIEW_IDS);
        let space_id = V::Uint(self.rng.range(510, 523) as u64);
        let is_index = view == 288 || view == 289;
        let (iterator, key) = match self.rng.below(3) {
            0 => (0, V::Array(vec![space_id])),
            1 if is_index => (
                0,
                V::Array(vec![space_id, V::Uint(self.rng.range(0, 7) as u64)]),
            ),
            _ => (*self.rng.pick(&[5u64, 6]), V::Array(vec![space_id])),
        };
        let limit = *self.rng.pick(&[1u64, 3, 100]);
        Request::new(
            iproto::SELECT,
            vec![
                (iproto::SPACE_ID, V::Uint(view)),
                (iproto::INDEX_ID, V::Uint(0)),
                (iproto::LIMIT, V::Uint(limit)),
                (iproto::OFFSET, V::Uint(self.rng.range(0, 1) as u64)),
                (iproto::ITERATOR, V::Uint(iterator)),
                (iproto::KEY, key),
            ],
        )
    }

    fn insert_or_replace(&mut self, kind: u64) -> Request {
        let (space_id, space) = self.space_id_for_write();
        let tuple = self.tuple(space.unwrap_or(&self.schema.spaces[0]));
        Request::new(
            kind,
            vec![
                (iproto::SPACE_ID, V::Uint(space_id)),
                (iproto::TUPLE, tuple),
            ],
        )
    }

    fn update(&mut self) -> Request {
        let (space_id, space) = self.space_id_for_write();
        let space = space.unwrap_or(&self.schema.spaces[0]);
        let index_id = if self.rng.chance(85) {
            0
        } else {
            self.index_id(space)
        };
        let key = self.exact_key(space, index_id);
        let index_base = self.index_base();
        let ops = self.ops(space, index_base.unwrap_or(0));
        let mut body = vec![(iproto::SPACE_ID, V::Uint(space_id))];
        if index_id != 0 || self.rng.chance(50) {
            body.push((iproto::INDEX_ID, V::Uint(index_id)));
        }
        if let Some(base) = index_base {
            body.push((iproto::INDEX_BASE, V::Uint(base)));
        }
        body.push((iproto::KEY, key));
        body.push((iproto::TUPLE, ops));
        Request::new(iproto::UPDATE, body)
    }

    fn upsert(&mut self) -> Request {
        let (space_id, space) = self.space_id_for_write();
        let space = space.unwrap_or(&self.schema.spaces[0]);
        let tuple = self.tuple(space);
        let index_base = self.index_base();
        let ops = self.ops(space, index_base.unwrap_or(0));
        let mut body = vec![(iproto::SPACE_ID, V::Uint(space_id))];
        if self.rng.chance(20) {
            body.push((iproto::INDEX_ID, V::Uint(self.rng.below(3))));
        }
        if let Some(base) = index_base {
            body.push((iproto::INDEX_BASE, V::Uint(base)));
        }
        body.push((iproto::TUPLE, tuple));
        body.push((iproto::OPS, ops));
        Request::new(iproto::UPSERT, body)
    }

    fn delete(&mut self) -> Request {
        let (space_id, space) = self.space_id_for_write();
        let space = space.unwrap_or(&self.schema.spaces[0]);
        let index_id = if self.rng.chance(85) {
            0
        } else {
            self.index_id(space)
        };
        let key = self.exact_key(space, index_id);
        let mut body = vec![(iproto::SPACE_ID, V::Uint(space_id))];
        if index_id != 0 || self.rng.chance(50) {
            body.push((iproto::INDEX_ID, V::Uint(index_id)));
        }
        body.push((iproto::KEY, key));
        Request::new(iproto::DELETE, body)
    }

    /// CALL / CALL_16 of functions that exist on neither server (tarn runs no Lua; its
    /// built-ins, `box.info`, `box.snapshot` and crud, answer differently by design).
    fn call(&mut self) -> Request {
        let kind = if self.rng.chance(80) {
            iproto::CALL
        } else {
            iproto::CALL_16
        };
        let name = *self
            .rng
            .pick(&["no_such_function", "nope.nope", "x", "box.nope"]);
        let args = V::Array(vec![V::Uint(self.rng.below(3))]);
        Request::new(
            kind,
            vec![(iproto::FUNCTION_NAME, V::str(name)), (iproto::TUPLE, args)],
        )
    }

    fn auth(&mut self) -> Request {
        let password = if self.rng.chance(60) {
            "secret"
        } else {
            "wrong"
        };
        Request {
            kind: iproto::AUTH,
            body: Body::Map(Vec::new()),
            auth: Some(("bench".into(), password.into())),
        }
    }

    /// Bodies that break a rule of the protocol: a wrong type, a missing mandatory key, bytes
    /// that are not msgpack, an unknown request type.
    fn malformed(&mut self) -> Request {
        let space = self.space();
        let space_id = V::Uint(u64::from(space.id));
        let key = V::Array(vec![V::Uint(1)]);
        match self.rng.below(12) {
            0 => Request::new(
                iproto::SELECT,
                vec![
                    (iproto::SPACE_ID, space_id),
                    (iproto::LIMIT, V::Uint(1)),
                    (iproto::ITERATOR, V::str("GE")),
                    (iproto::KEY, key),
                ],
            ),
            1 => Request::new(
                iproto::SELECT,
                vec![(iproto::SPACE_ID, space_id), (iproto::KEY, key)],
            ),
            2 => Request::new(
                iproto::SELECT,
                vec![(iproto::SPACE_ID, space_id), (iproto::LIMIT, V::Uint(1))],
            ),
            3 => Request::new(iproto::INSERT, vec![(iproto::TUPLE, key)]),
            4 => Request::new(
                *self.rng.pick(&[iproto::INSERT, iproto::REPLACE]),
                vec![(iproto::SPACE_ID, space_id), (iproto::TUPLE, V::Uint(1))],
            ),
            5 => Request::new(
                iproto::UPDATE,
                vec![(iproto::SPACE_ID, space_id), (iproto::KEY, key)],
            ),
            6 => Request::new(
                iproto::DELETE,
                vec![(iproto::SPACE_ID, V::str("kv")), (iproto::KEY, key)],
            ),
            7 => Request::new(iproto::EVAL, vec![(iproto::TUPLE, V::Array(Vec::new()))]),
            8 => Request::new(iproto::CALL, vec![(iproto::TUPLE, V::Array(Vec::new()))]),
            9 => Request {
                kind: *self
                    .rng
                    .pick(&[iproto::SELECT, iproto::INSERT, iproto::PING]),
                body: Body::Raw(
                    self.rng
                        .pick(&[&[0x91, 0x01][..], &[0xc1], &[0x81, 0x10]])
                        .to_vec(),
                ),
                auth: None,
            },
            // Not types of 256 and up: 2.6 keeps the low 8 bits of the type (iproto.cc:1251
            // at 2.6.0, `uint8_t type`), 2.11 the whole number.
            10 => Request::new(*self.rng.pick(&[99, 200, 255]), Vec::new()),
            _ => Request::new(
                iproto::UPSERT,
                vec![
                    (iproto::SPACE_ID, space_id),
                    (iproto::TUPLE, self.tuple(space)),
                    (iproto::OPS, V::Uint(1)),
                ],
            ),
        }
    }

    fn index_base(&mut self) -> Option<u64> {
        match self.rng.weighted(&[60, 20, 20]) {
            0 => None,
            1 => Some(0),
            _ => Some(1),
        }
    }

    /// A key for an exact match (UPDATE, DELETE): mostly complete, sometimes not.
    fn exact_key(&mut self, space: &Space, index_id: u64) -> V {
        let index = space
            .indexes
            .get(index_id as usize)
            .unwrap_or(space.primary());
        let count = index.parts.len();
        let count = match self.rng.weighted(&[88, 6, 6]) {
            0 => count,
            1 => self.rng.below(count as u64) as usize,
            _ => count + 1 + self.rng.below(2) as usize,
        };
        self.key(space, index, count)
    }

    /// A key of `count` parts for `index` (more parts than the index has take the next
    /// fields' kinds, or unsigned).
    fn key(&mut self, space: &Space, index: &Index, count: usize) -> V {
        let parts = (0..count)
            .map(|at| match index.parts.get(at) {
                Some(part) if self.rng.chance(93) => {
                    if part.nullable && self.rng.chance(15) {
                        V::Nil
                    } else {
                        self.value(part.kind, Use::Indexed, part.field == 0)
                    }
                }
                Some(_) => self.any_value(Use::Indexed, 1),
                None => {
                    let kind = space.fields.get(at).map_or(Kind::Unsigned, |f| f.kind);
                    self.value(kind, Use::Indexed, true)
                }
            })
            .collect();
        V::Array(parts)
    }

    /// A tuple for `space`: mostly valid, sometimes with a field of the wrong type, too few
    /// fields, or fields beyond the format.
    fn tuple(&mut self, space: &Space) -> V {
        // One field in ten tuples gets a value of any type.
        let wrong = if self.rng.chance(10) {
            Some(self.rng.below(space.fields.len() as u64) as usize)
        } else {
            None
        };
        let mut fields: Vec<V> = space
            .fields
            .iter()
            .enumerate()
            .map(|(at, field)| {
                let usage = if space.is_indexed(at) {
                    Use::Indexed
                } else {
                    Use::Free
                };
                if wrong == Some(at) {
                    self.wrong_value(space, usage)
                } else if field.nullable && self.rng.chance(25) {
                    V::Nil
                } else {
                    let is_key = space.primary().parts.iter().any(|part| part.field == at);
                    self.value(field.kind, usage, is_key)
                }
            })
            .collect();
        if self.rng.chance(3) {
            fields.truncate(self.rng.below(fields.len() as u64) as usize);
        }
        if self.rng.chance(12) {
            for _ in 0..=self.rng.below(2) {
                // Safe for a double field: a deletion may shift it into one.
                let extra = self.wrong_value(space, Use::Free);
                fields.push(extra);
            }
        }
        V::Array(fields)
    }

    /// A value of field type `kind`, mostly from a small domain (so that equal keys happen),
    /// sometimes an edge. `is_key`: from the primary key range.
    fn value(&mut self, kind: Kind, usage: Use, is_key: bool) -> V {
        let edge = self.rng.chance(if is_key { 3 } else { 10 });
        match kind {
            Kind::Unsigned => {
                if edge {
                    V::Uint(*self.rng.pick(&UINT_EDGES))
                } else {
                    V::Uint(self.rng.range(0, KEYS - 1) as u64)
                }
            }
            Kind::Integer => {
                if edge {
                    if self.rng.chance(50) {
                        V::Uint(*self.rng.pick(&UINT_EDGES))
                    } else {
                        V::Int(*self.rng.pick(&INT_EDGES))
                    }
                } else {
                    V::int(self.rng.range(-3, KEYS - 4))
                }
            }
            Kind::Number => match self.rng.weighted(&[40, 25, 10, 10, 5, 10]) {
                0 => V::int(self.rng.range(-3, 6)),
                1 => V::f64(self.rng.range(-6, 12) as f64 / 2.0),
                2 => V::f32(self.rng.range(-6, 12) as f32 / 2.0),
                3 => self.float(usage, true),
                4 => self.decimal(),
                _ => self.integer_edge(),
            },
            // Only float64: 2.6's double takes nothing else (field_def.c:64 at 2.6.0), 2.11's
            // any number (field_def.c:71 at 2.11.1).
            Kind::Double => match self.rng.weighted(&[60, 40]) {
                0 => V::f64(self.rng.range(-6, 12) as f64 / 2.0),
                _ => self.float(usage, false),
            },
            Kind::String => {
                if edge && self.rng.chance(30) {
                    V::str(&"long-".repeat(60))
                } else {
                    self.pick_str(&STRINGS)
                }
            }
            Kind::Boolean => V::Bool(self.rng.chance(50)),
            Kind::Varbinary => V::Bin(
                self.rng
                    .pick(&[&b""[..], b"a", b"\x00\xff", b"ab"])
                    .to_vec(),
            ),
            Kind::Uuid => V::Ext(2, self.rng.pick(&UUIDS).to_vec()),
            Kind::Decimal => self.decimal(),
            // Not a uuid: 2.11's scalar takes one, 2.6's does not (field_def.c:86 at 2.6.0,
            // :96 at 2.11.1).
            Kind::Scalar => {
                let kind = *self.rng.pick(&[
                    Kind::Boolean,
                    Kind::Unsigned,
                    Kind::Integer,
                    Kind::Number,
                    Kind::Double,
                    Kind::String,
                    Kind::Varbinary,
                    Kind::Decimal,
                ]);
                self.value(kind, usage, false)
            }
            Kind::Array => match self.rng.below(4) {
                0 => V::Array(Vec::new()),
                1 => V::Array(vec![V::Uint(1)]),
                2 => V::Array(vec![V::str("x"), V::Array(vec![V::Uint(2)])]),
                _ => V::Array(vec![V::Nil, V::f64(1.5)]),
            },
            Kind::Map => match self.rng.below(4) {
                0 => V::Map(Vec::new()),
                1 => V::Map(vec![(V::str("a"), V::Uint(1))]),
                2 => V::Map(vec![(V::Uint(1), V::str("x"))]),
                _ => V::Map(vec![
                    (V::str("a"), V::Map(vec![(V::str("b"), V::Uint(1))])),
                    (V::str("c"), V::Array(vec![V::Uint(1), V::Uint(2)])),
                ]),
            },
            Kind::Any => self.any_value(usage, 2),
        }
    }

    /// A value of any kind for a field of `space`, but in a space with a double field never
    /// a number that is not a float64 (2.6's double refuses it, 2.11's takes it; the value
    /// may land in the double field).
    fn wrong_value(&mut self, space: &Space, usage: Use) -> V {
        let has_double = space.fields.iter().any(|field| field.kind == Kind::Double);
        loop {
            let value = self.any_value(usage, 1);
            if !has_double || !matches!(value, V::Uint(_) | V::Int(_) | V::F32(_)) {
                return value;
            }
        }
    }

    /// An integer edge for a splice's position or length, but not -2^31: Tarantool (2.6.0
    /// and 2.11.1, xrow_update_op_do_splice(), xrow_update_field.c:488) negates it, which
    /// overflows, and then crashes with SIGSEGV in xrow_update_op_store_splice().
    fn splice_edge(&mut self) -> V {
        loop {
            let value = self.integer_edge();
            if value != V::Int(i32::MIN as i64) {
                return value;
            }
        }
    }

    fn integer_edge(&mut self) -> V {
        if self.rng.chance(50) {
            V::Uint(*self.rng.pick(&UINT_EDGES))
        } else {
            V::Int(*self.rng.pick(&INT_EDGES))
        }
    }

    /// A float64 edge, or for free use also the infinities and NaNs of both signs (as float32
    /// too when `float32`).
    fn float(&mut self, usage: Use, float32: bool) -> V {
        if usage == Use::Free && self.rng.chance(30) {
            match self.rng.below(if float32 { 6 } else { 4 }) {
                0 => V::f64(f64::INFINITY),
                1 => V::f64(f64::NEG_INFINITY),
                2 => V::f64(f64::NAN),
                3 => V::f64(-f64::NAN),
                4 => V::f32(f32::INFINITY),
                _ => V::f32(f32::NAN),
            }
        } else if usage == Use::Free {
            V::f64(*self.rng.pick(&F64_EDGES))
        } else {
            loop {
                let mut value = *self.rng.pick(&F64_EDGES);
                // Huge ones scaled down, so that `+` never makes an infinity in an index;
                // f32::MAX / 1e290 would be one of the tiny floats kept out of indexes.
                if value.abs() > 1e20 {
                    value /= if value.abs() > 1e290 { 1e290 } else { 1e30 };
                }
                if !is_tiny(value) {
                    return V::f64(value);
                }
            }
        }
    }

    fn pick_str(&mut self, texts: &[&str]) -> V {
        let text: &&str = self.rng.pick(texts);
        V::str(text)
    }

    fn decimal(&mut self) -> V {
        V::Ext(1, self.rng.pick(&DECIMALS).to_vec())
    }

    /// A value of any kind (nil and nested ones included), `depth` levels deep at most. Never
    /// a uuid, nor an extension type 2.6 and 2.11 know differently (2.11 adds datetime 4,
    /// compression 5, interval 6): only `Kind::Uuid` fields get uuids, see `Kind::Scalar`.
    fn any_value(&mut self, usage: Use, depth: u32) -> V {
        match self.rng.below(if depth > 0 { 14 } else { 12 }) {
            0 => V::Nil,
            1 => self.value(Kind::Boolean, usage, false),
            2 => self.value(Kind::Unsigned, usage, false),
            3 => self.value(Kind::Integer, usage, false),
            4 => V::Int(self.rng.range(0, 5)),
            5 => self.value(Kind::Number, usage, false),
            6 => self.value(Kind::Double, usage, false),
            7 => self.value(Kind::String, usage, false),
            8 => self.value(Kind::Varbinary, usage, false),
            9 | 10 => self.value(Kind::Decimal, usage, false),
            // Types Tarantool knows as no extension: negative ones and 0 are refused by every
            // field type, `any` too; 100 passes `any` (field_mp_type_is_compatible()).
            11 => V::Ext(*self.rng.pick(&[-1i8, 0, 100]), vec![0x01, 0x02]),
            12 => self.value(Kind::Array, usage, false),
            _ => self.value(Kind::Map, usage, false),
        }
    }

    /// 0 to 4 update operations (sometimes not an array at all). `index_base` 1 shifts the
    /// field numbers.
    fn ops(&mut self, space: &Space, index_base: u64) -> V {
        if self.rng.chance(2) {
            return self.any_value(Use::Free, 1);
        }
        let count = self.rng.weighted(&[5, 45, 30, 12, 8]);
        let ops: Vec<V> = (0..count).map(|_| self.op(space, index_base)).collect();
        // An operation on a nested JSON path goes alone: with another operation on the same
        // field Tarantool 2.6 crashes (SIGSEGV in xrow_update_map_extract_opt_item(); fixed
        // after 2.6 by commits 8425ebfce7, gh-7705, and d4e928091b, gh-8216).
        match ops.iter().find(|op| is_path_op(op, space)) {
            Some(op) => V::Array(vec![op.clone()]),
            None => V::Array(ops),
        }
    }

    fn op(&mut self, space: &Space, index_base: u64) -> V {
        if self.rng.chance(60) {
            return self.typed_op(space, index_base);
        }
        if self.rng.chance(3) {
            return match self.rng.below(3) {
                0 => V::Uint(1),
                1 => V::Array(vec![V::str("=")]),
                _ => V::Array(vec![V::Uint(61), V::Uint(1), V::Uint(1)]),
            };
        }
        let op = match self.rng.weighted(&[14, 10, 6, 6, 6, 10, 10, 12, 22, 4]) {
            0 => "+",
            1 => "-",
            2 => "&",
            3 => "|",
            4 => "^",
            5 => ":",
            6 => "!",
            7 => "#",
            8 => "=",
            _ => *self.rng.pick(&["x", "", "++", "=="]),
        };
        let (field, target) = self.op_field(space, index_base, op);
        // The target's format field, when the operation names one for sure.
        let target_field = target.and_then(|at| space.fields.get(at).map(|f| (at, f)));
        let usage = match target {
            Some(at) if !space.is_indexed(at) => Use::Free,
            _ => Use::Indexed,
        };
        let mut op_array = vec![V::str(op), field];
        match op {
            "+" | "-" => op_array.push(self.arith_arg(usage)),
            "&" | "|" | "^" => op_array.push(match self.rng.weighted(&[50, 25, 25]) {
                0 => V::Uint(self.rng.range(0, 7) as u64),
                1 => V::Uint(*self.rng.pick(&UINT_EDGES)),
                _ => self.any_value(usage, 0),
            }),
            ":" => {
                let position = match self.rng.weighted(&[60, 40]) {
                    0 => V::int(self.rng.range(-4, 5)),
                    _ => self.splice_edge(),
                };
                let cut = match self.rng.weighted(&[60, 30, 10]) {
                    0 => V::int(self.rng.range(-2, 4)),
                    1 => self.splice_edge(),
                    _ => V::str("1"),
                };
                let text = match self.rng.weighted(&[85, 15]) {
                    0 => self.pick_str(&["", "X", "yz"]),
                    _ => self.any_value(usage, 0),
                };
                op_array.extend([position, cut, text]);
                if self.rng.chance(4) {
                    op_array.pop();
                }
            }
            "#" => op_array.push(match self.rng.weighted(&[60, 30, 10]) {
                0 => V::Uint(self.rng.range(1, 3) as u64),
                1 => self
                    .rng
                    .pick(&[
                        V::Uint(0),
                        V::Int(-1),
                        V::Uint(1 << 32),
                        V::Uint((1 << 32) + 1),
                        V::Uint((1 << 32) + 2),
                        V::Uint(u64::MAX),
                        V::Int(i64::MIN),
                    ])
                    .clone(),
                _ => self.any_value(usage, 0),
            }),
            "!" | "=" => op_array.push(match target_field {
                Some((at, field)) if self.rng.chance(75) => {
                    let is_key = space.primary().parts.iter().any(|p| p.field == at);
                    self.value(field.kind, usage, is_key)
                }
                _ => self.wrong_value(space, usage),
            }),
            _ => op_array.push(V::Uint(1)),
        }
        if self.rng.chance(3) {
            op_array.push(V::Uint(1));
        }
        V::Array(op_array)
    }

    /// An operation that fits the field it targets (so that most of them apply): arithmetic
    /// on numbers (with integer, float64, float32 and decimal arguments), bit operations on
    /// unsigned, splices of strings, and `=` of a value of the field's type.
    fn typed_op(&mut self, space: &Space, index_base: u64) -> V {
        let at = self.rng.below(space.fields.len() as u64) as usize;
        let field = &space.fields[at];
        let usage = if space.is_indexed(at) {
            Use::Indexed
        } else {
            Use::Free
        };
        let target = if self.rng.chance(25) {
            V::str(&field.name)
        } else {
            V::int(at as i64 + index_base as i64)
        };
        let arith = |generator: &mut Generator<'_>| {
            let op = *generator.rng.pick(&["+", "-"]);
            (op, generator.arith_arg(usage))
        };
        let (op, arg) = match field.kind {
            Kind::Unsigned | Kind::Integer => match self.rng.weighted(&[45, 25, 30]) {
                0 => (*self.rng.pick(&["+", "-"]), V::int(self.rng.range(-3, 3))),
                1 => (
                    *self.rng.pick(&["&", "|", "^"]),
                    V::Uint(self.rng.range(0, 7) as u64),
                ),
                _ => ("=", self.value(field.kind, usage, at == 0)),
            },
            Kind::Number | Kind::Double | Kind::Decimal | Kind::Scalar => {
                if self.rng.chance(70) {
                    arith(self)
                } else {
                    ("=", self.value(field.kind, usage, false))
                }
            }
            Kind::String if self.rng.chance(60) => {
                let position = V::int(self.rng.range(-3, 4));
                let cut = V::int(self.rng.range(-1, 3));
                let text = self.pick_str(&["", "X", "yz"]);
                return V::Array(vec![V::str(":"), target, position, cut, text]);
            }
            _ => ("=", self.value(field.kind, usage, false)),
        };
        V::Array(vec![V::str(op), target, arg])
    }

    /// An operation's field: a number (0- or 1-based as `index_base` says, negative from the
    /// end, out of range), a name, or a JSON path; and the 0-based format field it surely
    /// targets, if one.
    ///
    /// `=` and `!` go at most one past the format's last field and `#` not past it: every
    /// stored tuple has all the format's fields, and beyond the end 2.11 fills the gap with
    /// nils (`=`, `!`) or does nothing (`#`) where 2.6 fails (xrow_update_array.c, diff
    /// 2.6.0..2.11.1: xrow_update_array_append_nils and the delete's `field_no >= size`).
    fn op_field(&mut self, space: &Space, index_base: u64, op: &str) -> (V, Option<usize>) {
        let count = space.fields.len() as i64;
        let last = match op {
            "#" => count - 1,
            "=" | "!" => count,
            _ => count + 1,
        };
        match self.rng.weighted(&[62, 14, 14, 6, 4]) {
            0 => {
                let at = self.rng.range(0, last);
                let number = at + index_base as i64;
                let target = (at < count).then_some(at as usize);
                (V::int(number), target)
            }
            1 => (V::Int(-self.rng.range(1, count + 2)), None),
            2 => {
                if self.rng.chance(90) {
                    let at = self.rng.below(space.fields.len() as u64) as usize;
                    (V::str(&space.fields[at].name), Some(at))
                } else {
                    (V::str("no_such_field"), None)
                }
            }
            3 => (
                match self.rng.below(4) {
                    0 => V::Uint(u64::from(u32::MAX) + 2),
                    1 => V::Int(i64::MIN),
                    2 => V::f64(1.0),
                    _ => V::Nil,
                },
                None,
            ),
            _ => {
                let at = self.rng.below(space.fields.len() as u64) as usize;
                let name = &space.fields[at].name;
                let path = match self.rng.below(5) {
                    0 => format!("[{}]", at + 1),
                    1 => format!("{name}[1]"),
                    2 => format!("{name}.a"),
                    3 => format!("[{}].a.b", at + 1),
                    _ => format!("{name}[1][2]"),
                };
                (V::str(&path), None)
            }
        }
    }

    /// An argument of `+`/`-`: integers (edges too), doubles exact in float32 or not, float32,
    /// decimals, and sometimes no number at all.
    fn arith_arg(&mut self, usage: Use) -> V {
        match self.rng.weighted(&[35, 15, 20, 10, 8, 12]) {
            0 => V::int(self.rng.range(-3, 3)),
            1 => self.integer_edge(),
            2 => self.float(usage, true),
            3 => loop {
                let value = *self.rng.pick(&F32_EDGES);
                if usage == Use::Free || !is_tiny(f64::from(value)) {
                    break V::f32(value);
                }
            },
            4 => self.decimal(),
            _ => self.any_value(usage, 0),
        }
    }
}
