//! What one operation is: the key it draws and the IPROTO request it sends, the same for
//! every driver. Space 512 `kv`: `[id unsigned, bucket_id unsigned, value string]`.
//! Also the rows of `--load-customers`: space 513 `customers`,
//! `[id, bucket_id, a, b, c, d unsigned, name string]`.

use tarn::msgpack::{uint_bytes, write_array_len, write_str, write_uint, UINT_BYTES_MAX};
use tarn::protocol::client::{
    encode_delete, encode_insert, encode_replace, encode_select, encode_update,
};
use tarn::protocol::codes::{body_key, header_key, request_type};
use tarn::protocol::request::{Select, Update};

use crate::cli::Operation;

pub const KV_SPACE_ID: u32 = 512;
pub const CUSTOMERS_SPACE_ID: u32 = 513;
/// `customers`' non-unique TREE index on (a, b, c, d, name).
const CUSTOMERS_COMPOSITE_INDEX_ID: u32 = 1;
/// `customers.a`..`d` are drawn from `0..CUSTOMER_FIELD_RANGE`.
const CUSTOMER_FIELD_RANGE: u64 = 1000;
/// `customers.name` is `CUSTOMER_NAME_BYTES_MIN..=CUSTOMER_NAME_BYTES_MAX` lowercase letters.
const CUSTOMER_NAME_BYTES_MIN: u64 = 10;
const CUSTOMER_NAME_BYTES_MAX: u64 = 20;
/// `customers.bucket_id` is `id % CUSTOMER_BUCKET_MODULUS`.
const CUSTOMER_BUCKET_MODULUS: u64 = 3000;
const ITERATOR_EQ: u32 = 0;
const ITERATOR_GE: u32 = 5;
/// vshard's default bucket count; bucket_id is filled as `key % 3000 + 1`.
const BUCKET_COUNT: u64 = 3000;
/// Every value is this many bytes of text.
pub const VALUE_SIZE_BYTES: usize = 16;
/// `[["+", 1, 1]]`: add one to field 1 (0-based: bucket_id).
const UPDATE_OPS: &[u8] = &[0x91, 0x93, 0xa1, b'+', 0x01, 0x01];

/// SplitMix64: a fast, seedable generator; each worker gets its own stream.
#[derive(Debug, Clone)]
pub struct KeyGenerator {
    state: u64,
    partitions: u64,
    single_key: bool,
}

impl KeyGenerator {
    pub fn new(seed: u64, stream: u64, partitions: u64, single_key: bool) -> KeyGenerator {
        assert!(partitions > 0);
        KeyGenerator {
            state: seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F),
            partitions,
            single_key,
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A key drawn uniformly from `0..partitions` (multiply-shift; bias below 2^-40 for any
    /// partition count that fits in 24 bits), or 0 with `--query-single-key`.
    pub fn next_key(&mut self) -> u64 {
        if self.single_key {
            return 0;
        }
        ((u128::from(self.next_u64()) * u128::from(self.partitions)) >> 64) as u64
    }
}

/// Encodes the `customers` row of `id`: `[id, id % 3000, a, b, c, d, name]` with a, b, c, d
/// in `0..1000` and a 10 to 20 letter name, all drawn from `seed` and `id` alone, so every
/// server loaded with the same seed holds the same rows whatever the connection count.
pub fn write_customer(out: &mut Vec<u8>, seed: u64, id: u64) {
    let mut random = KeyGenerator::new(seed, id, 1, false);
    write_array_len(out, 7);
    write_uint(out, id);
    write_uint(out, id % CUSTOMER_BUCKET_MODULUS);
    for field in customer_fields(&mut random) {
        write_uint(out, field);
    }
    let name_range = CUSTOMER_NAME_BYTES_MAX - CUSTOMER_NAME_BYTES_MIN + 1;
    let name_len = (CUSTOMER_NAME_BYTES_MIN + random.next_u64() % name_range) as usize;
    let mut name = [0u8; CUSTOMER_NAME_BYTES_MAX as usize];
    for byte in &mut name[..name_len] {
        *byte = b'a' + (random.next_u64() % 26) as u8;
    }
    write_str(out, &name[..name_len]);
}

/// a, b, c, d of a `customers` row, the first four draws of its generator.
fn customer_fields(random: &mut KeyGenerator) -> [u64; 4] {
    std::array::from_fn(|_| random.next_u64() % CUSTOMER_FIELD_RANGE)
}

/// `[a, b]` of the `customers` row of `id` written with `seed`: a select GE from it starts
/// at that row's place in the composite index (or where it would be, if another seed
/// populated the space), so draws spread over the index as the rows do.
fn write_customer_prefix(out: &mut Vec<u8>, seed: u64, id: u64) {
    let [a, b, _, _] = customer_fields(&mut KeyGenerator::new(seed, id, 1, false));
    write_array_len(out, 2);
    write_uint(out, a);
    write_uint(out, b);
}

/// Appends an INSERT of the `customers` row of `id` (see [`write_customer`]) to `out`.
pub fn encode_customer_insert(out: &mut Vec<u8>, scratch: &mut Vec<u8>, seed: u64, id: u64) {
    scratch.clear();
    write_customer(scratch, seed, id);
    encode_insert(out, sync_of(id), CUSTOMERS_SPACE_ID, scratch);
}

/// The sync of the request that loads row `id` (any value works; the id keeps it readable).
fn sync_of(id: u64) -> u64 {
    id
}

/// A get of `key` in `kv`: byte for byte what `encode_select` writes (tested), assembled
/// on the stack with one copy into `out`. The load generator shares the machine with the
/// server it measures, and the general encoder's many small writes were 5% of the
/// machine's samples at 16 x 128.
fn encode_get(out: &mut Vec<u8>, sync: u64, key: u64) {
    const SIZE_PREFIX_BYTES: usize = 5;
    const HEADER_BEFORE_SYNC: [u8; 4] = [
        0x82,
        header_key::REQUEST_TYPE as u8,
        request_type::SELECT as u8,
        header_key::SYNC as u8,
    ];
    // The body below encodes the space id as a uint 16 (0xcd), its shortest form.
    const _: () = assert!(KV_SPACE_ID > 0xff && KV_SPACE_ID <= 0xffff);
    let [space_high, space_low] = (KV_SPACE_ID as u16).to_be_bytes();
    const BODY_BEFORE_KEY_BYTES: usize = 15;
    let body_before_key: [u8; BODY_BEFORE_KEY_BYTES] = [
        0x86,
        body_key::SPACE_ID as u8,
        0xcd,
        space_high,
        space_low,
        body_key::INDEX_ID as u8,
        0,
        body_key::LIMIT as u8,
        1,
        body_key::OFFSET as u8,
        0,
        body_key::ITERATOR as u8,
        ITERATOR_EQ as u8,
        body_key::KEY as u8,
        0x91,
    ];
    let mut packet = [0u8; SIZE_PREFIX_BYTES
        + HEADER_BEFORE_SYNC.len()
        + UINT_BYTES_MAX
        + BODY_BEFORE_KEY_BYTES
        + UINT_BYTES_MAX];
    let mut len = SIZE_PREFIX_BYTES;
    let mut put = |bytes: &[u8]| {
        packet[len..len + bytes.len()].copy_from_slice(bytes);
        len += bytes.len();
    };
    let (sync_bytes, sync_len) = uint_bytes(sync);
    let (key_bytes, key_len) = uint_bytes(key);
    put(&HEADER_BEFORE_SYNC);
    put(&sync_bytes[..sync_len]);
    put(&body_before_key);
    put(&key_bytes[..key_len]);
    packet[0] = 0xce;
    packet[1..SIZE_PREFIX_BYTES].copy_from_slice(&((len - SIZE_PREFIX_BYTES) as u32).to_be_bytes());
    out.extend_from_slice(&packet[..len]);
}

/// Encodes `[key]`.
fn write_key(out: &mut Vec<u8>, key: u64) {
    write_array_len(out, 1);
    write_uint(out, key);
}

/// Encodes the tuple `[key, bucket_id, value]` with a fixed-size value.
pub fn write_tuple(out: &mut Vec<u8>, key: u64) {
    let mut value = [b'v'; VALUE_SIZE_BYTES];
    let digits = format_digits(key);
    let tail = &mut value[VALUE_SIZE_BYTES - digits.len()..];
    tail.copy_from_slice(&digits);
    write_array_len(out, 3);
    write_uint(out, key);
    write_uint(out, key % BUCKET_COUNT + 1);
    write_str(out, &value);
}

/// Decimal digits of `key`, at most 16 of them (the low ones), without allocating.
fn format_digits(mut key: u64) -> smallvec::SmallVec<[u8; 20]> {
    let mut digits = smallvec::SmallVec::<[u8; 20]>::new();
    loop {
        digits.push(b'0' + (key % 10) as u8);
        key /= 10;
        if key == 0 || digits.len() == VALUE_SIZE_BYTES {
            break;
        }
    }
    digits.reverse();
    digits
}

/// Appends the REPLACE that populates key `key` before `operation` is measured: the `kv`
/// tuple, or for an operation on `customers` its row written with `seed`.
pub fn encode_populate(
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    operation: Operation,
    seed: u64,
    key: u64,
) {
    if operation.on_customers() {
        scratch.clear();
        write_customer(scratch, seed, key);
        encode_replace(out, sync_of(key), CUSTOMERS_SPACE_ID, scratch);
    } else {
        encode_operation(out, scratch, Operation::Replace, seed, sync_of(key), key);
    }
}

/// Appends the whole request packet for `operation` on `key` to `out`; `seed` is the one
/// the `customers` rows were populated with. `scratch` is reused for the key or tuple so
/// that steady state does not allocate.
pub fn encode_operation(
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    operation: Operation,
    seed: u64,
    sync: u64,
    key: u64,
) {
    scratch.clear();
    let select_ge = |space_id, index_id, limit, key: &[u8], out: &mut Vec<u8>| {
        let select = Select {
            space_id,
            index_id,
            limit,
            offset: 0,
            iterator: ITERATOR_GE,
            key,
            fetch_position: false,
            after_position: None,
            after_tuple: None,
        };
        encode_select(out, sync, &select);
    };
    match operation {
        Operation::Get => encode_get(out, sync, key),
        Operation::SelectRange { limit } => {
            write_key(scratch, key);
            select_ge(KV_SPACE_ID, 0, limit, scratch, out);
        }
        Operation::SelectSecondary { limit } => {
            write_customer_prefix(scratch, seed, key);
            select_ge(
                CUSTOMERS_SPACE_ID,
                CUSTOMERS_COMPOSITE_INDEX_ID,
                limit,
                scratch,
                out,
            );
        }
        Operation::Replace => {
            write_tuple(scratch, key);
            encode_replace(out, sync, KV_SPACE_ID, scratch);
        }
        Operation::Update => {
            write_key(scratch, key);
            let update = Update {
                space_id: KV_SPACE_ID,
                index_id: 0,
                key: scratch,
                ops: UPDATE_OPS,
                index_base: 0,
            };
            encode_update(out, sync, &update);
        }
        Operation::Delete => {
            write_key(scratch, key);
            encode_delete(out, sync, KV_SPACE_ID, 0, scratch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn::protocol::{decode_packet, parse_frame_len, FrameLen, Request};

    fn decode(bytes: &[u8]) -> (u64, String) {
        let FrameLen::Complete {
            prefix_len,
            packet_len,
        } = parse_frame_len(bytes)
        else {
            panic!("incomplete");
        };
        let packet = &bytes[prefix_len..prefix_len + packet_len];
        let (header, request) = decode_packet(packet).unwrap();
        (header.sync, format!("{request:?}"))
    }

    #[test]
    fn every_operation_decodes_as_the_server_sees_it() {
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        for operation in [
            Operation::Get,
            Operation::Replace,
            Operation::Update,
            Operation::Delete,
            Operation::SelectRange { limit: 10 },
            Operation::SelectSecondary { limit: 10 },
        ] {
            out.clear();
            encode_operation(&mut out, &mut scratch, operation, 3, 77, 12345);
            let (sync, text) = decode(&out);
            assert_eq!(sync, 77);
            let expected = match operation {
                Operation::Get
                | Operation::SelectRange { .. }
                | Operation::SelectSecondary { .. } => "Select",
                Operation::Replace => "Replace",
                Operation::Update => "Update",
                Operation::Delete => "Delete",
            };
            assert!(text.starts_with(expected), "{operation:?}: {text}");
        }
    }

    #[test]
    fn gets_are_what_the_general_encoder_writes() {
        let widths = [0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x1_0000, 0xffff_ffff];
        let values = widths
            .iter()
            .flat_map(|&v: &u64| [v, v + 1])
            .chain([u64::MAX]);
        for sync in values.clone() {
            for key in values.clone() {
                let mut fast = Vec::new();
                encode_get(&mut fast, sync, key);
                let mut general = Vec::new();
                let mut scratch = Vec::new();
                write_key(&mut scratch, key);
                let select = Select {
                    space_id: KV_SPACE_ID,
                    index_id: 0,
                    limit: 1,
                    offset: 0,
                    iterator: ITERATOR_EQ,
                    key: &scratch,
                    fetch_position: false,
                    after_position: None,
                    after_tuple: None,
                };
                encode_select(&mut general, sync, &select);
                assert_eq!(fast, general, "sync {sync}, key {key}");
            }
        }
    }

    fn decode_request(bytes: &[u8]) -> Request<'_> {
        let FrameLen::Complete {
            prefix_len,
            packet_len,
        } = parse_frame_len(bytes)
        else {
            panic!("incomplete");
        };
        decode_packet(&bytes[prefix_len..prefix_len + packet_len])
            .unwrap()
            .1
    }

    #[test]
    fn select_secondary_starts_at_the_drawn_rows_a_and_b() {
        use tarn::msgpack::{read_value, Value};
        let (mut row, mut out, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
        write_customer(&mut row, 9, 1234);
        // [id, bucket_id, a, b, ...]: the key is the row's third and fourth fields.
        let mut fields = &row[..];
        assert!(matches!(read_value(&mut fields).unwrap(), Value::Array(7)));
        let mut next = || match read_value(&mut fields).unwrap() {
            Value::Uint(value) => value,
            other => panic!("{other:?}"),
        };
        let (_, _, a, b) = (next(), next(), next(), next());
        let mut expected_key = Vec::new();
        write_array_len(&mut expected_key, 2);
        write_uint(&mut expected_key, a);
        write_uint(&mut expected_key, b);
        let operation = Operation::SelectSecondary { limit: 10 };
        encode_operation(&mut out, &mut scratch, operation, 9, 5, 1234);
        let Request::Select(select) = decode_request(&out) else {
            panic!("not a select");
        };
        assert_eq!(
            (
                select.space_id,
                select.index_id,
                select.iterator,
                select.limit
            ),
            (CUSTOMERS_SPACE_ID, 1, ITERATOR_GE, 10)
        );
        assert_eq!(select.key, &expected_key[..]);
    }

    #[test]
    fn populating_writes_the_rows_the_operation_reads() {
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        encode_populate(
            &mut out,
            &mut scratch,
            Operation::SelectSecondary { limit: 1 },
            9,
            42,
        );
        let Request::Replace(replace) = decode_request(&out) else {
            panic!("not a replace");
        };
        let mut row = Vec::new();
        write_customer(&mut row, 9, 42);
        assert_eq!(
            (replace.space_id, replace.tuple),
            (CUSTOMERS_SPACE_ID, &row[..])
        );
        out.clear();
        encode_populate(&mut out, &mut scratch, Operation::Get, 9, 42);
        let Request::Replace(replace) = decode_request(&out) else {
            panic!("not a replace");
        };
        let mut tuple = Vec::new();
        write_tuple(&mut tuple, 42);
        assert_eq!((replace.space_id, replace.tuple), (KV_SPACE_ID, &tuple[..]));
    }

    #[test]
    fn update_ops_add_one_to_bucket_id() {
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        encode_operation(&mut out, &mut scratch, Operation::Update, 3, 1, 5);
        let FrameLen::Complete {
            prefix_len,
            packet_len,
        } = parse_frame_len(&out)
        else {
            panic!()
        };
        let (_, request) = decode_packet(&out[prefix_len..prefix_len + packet_len]).unwrap();
        let Request::Update(update) = request else {
            panic!()
        };
        assert_eq!(update.ops, UPDATE_OPS);
        assert_eq!(update.key, &[0x91, 0x05]);
    }

    #[test]
    fn keys_are_in_range_and_seeded() {
        let mut a = KeyGenerator::new(42, 0, 10, false);
        let mut b = KeyGenerator::new(42, 0, 10, false);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            let key = a.next_key();
            assert_eq!(key, b.next_key());
            seen[key as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
        assert_eq!(KeyGenerator::new(1, 0, 10, true).next_key(), 0);
    }

    #[test]
    fn customer_rows_follow_the_schema_and_the_seed() {
        use tarn::msgpack::{read_value, Value};
        let uint = |rest: &mut &[u8]| match read_value(rest).unwrap() {
            Value::Uint(value) => value,
            other => panic!("not an unsigned: {other:?}"),
        };
        for id in [0u64, 1, 2999, 3000, 1_999_999] {
            let (mut first, mut again) = (Vec::new(), Vec::new());
            write_customer(&mut first, 7, id);
            write_customer(&mut again, 7, id);
            assert_eq!(first, again, "the same seed and id give the same row");
            let mut rest = first.as_slice();
            assert!(matches!(read_value(&mut rest).unwrap(), Value::Array(7)));
            assert_eq!(uint(&mut rest), id);
            assert_eq!(uint(&mut rest), id % 3000);
            for _ in 0..4 {
                assert!(uint(&mut rest) < 1000);
            }
            let Value::Str(name) = read_value(&mut rest).unwrap() else {
                panic!("name is not a string");
            };
            assert!((10..=20).contains(&name.len()), "{name:?}");
            assert!(name.iter().all(|byte| byte.is_ascii_lowercase()));
            assert!(rest.is_empty());
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        write_customer(&mut a, 7, 5);
        write_customer(&mut b, 8, 5);
        assert_ne!(a, b, "another seed gives another row");
    }

    #[test]
    fn customer_insert_decodes_as_an_insert_into_customers() {
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        encode_customer_insert(&mut out, &mut scratch, 1, 42);
        let (sync, text) = decode(&out);
        assert_eq!(sync, 42);
        assert!(text.starts_with("Insert"), "{text}");
        assert!(text.contains("513"), "{text}");
    }

    #[test]
    fn tuple_value_has_fixed_size() {
        let mut out = Vec::new();
        write_tuple(&mut out, u64::MAX);
        // fixarray(3), uint64 (9 bytes), bucket uint16 (3 bytes), str8? no: fixstr of 16.
        assert_eq!(out[0], 0x93);
        assert_eq!(*out.last().unwrap(), b'5');
        assert_eq!(out.len(), 1 + 9 + 3 + 1 + VALUE_SIZE_BYTES);
    }
}
