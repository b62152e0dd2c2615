//! Turning fuzz bytes into inputs: a reader that never runs out (it answers zeros once the
//! bytes end, so every input decodes to something), and generators of MessagePack values
//! and update operations that are mostly well formed, where random bytes almost never are.
//! Every generated blob may instead be the fuzzer's raw bytes, so broken encodings are
//! reached too.

/// The fuzz input, read front to back.
pub struct Bytes<'a> {
    rest: &'a [u8],
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { rest: data }
    }

    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    pub fn byte(&mut self) -> u8 {
        match self.rest.split_first() {
            Some((&byte, rest)) => {
                self.rest = rest;
                byte
            }
            None => 0,
        }
    }

    pub fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// A number below `bound` (which must not be 0).
    pub fn below(&mut self, bound: usize) -> usize {
        usize::from(self.byte()) % bound
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// Up to `len` bytes (fewer when the input ends).
    pub fn take(&mut self, len: usize) -> &'a [u8] {
        let (head, rest) = self.rest.split_at(len.min(self.rest.len()));
        self.rest = rest;
        head
    }

    /// A length-prefixed slice of the raw input: the fuzzer's own bytes.
    pub fn raw(&mut self) -> &'a [u8] {
        let len = usize::from(self.byte());
        self.take(len)
    }

    /// A u64 that is often one of the values at which arithmetic and encodings change.
    pub fn interesting_u64(&mut self) -> u64 {
        const EDGES: [u64; 12] = [
            0,
            1,
            2,
            0x7f,
            0x80,
            0xff,
            0xffff,
            0xffff_ffff,
            i64::MAX as u64,
            (i64::MAX as u64) + 1,
            u64::MAX - 1,
            u64::MAX,
        ];
        match self.byte() % 4 {
            0 => EDGES[self.below(EDGES.len())],
            1 => u64::from(self.byte()),
            2 => u64::from(self.u32()),
            _ => self.u64(),
        }
    }
}

/// Names generated strings often take, so that field names and paths resolve.
pub const NAMES: [&str; 8] = ["id", "name", "n", "tags", "b", "s", "f", "[2]"];

/// Appends one MessagePack value (or, rarely, bytes that are not one) chosen by `bytes`.
pub fn value(bytes: &mut Bytes<'_>, out: &mut Vec<u8>, depth: u32) {
    use tarn::msgpack::{write_f32, write_f64, write_int, write_str, write_uint};
    match bytes.byte() % 26 {
        0 | 1 => out.push(bytes.byte() & 0x7f),
        2 => write_uint(out, bytes.interesting_u64()),
        3 => write_int(
            out,
            (bytes.interesting_u64() as i64)
                .wrapping_abs()
                .wrapping_neg(),
        ),
        4 => {
            // An int format that holds a non-negative number: `Int`, not `Uint`.
            out.push(0xd0 + bytes.byte() % 4);
            let width = 1usize << (out[out.len() - 1] - 0xd0);
            out.extend_from_slice(&bytes.u64().to_be_bytes()[8 - width..]);
        }
        5 => write_f32(out, f32::from_bits(bytes.u32())),
        6 => write_f64(out, f64::from_bits(bytes.u64())),
        7 => write_f64(out, f64::from(bytes.byte()) - 100.5),
        8 => out.push(0xc0),
        9 => out.push(0xc2 | (bytes.byte() & 1)),
        10 | 11 => write_str(out, NAMES[bytes.below(NAMES.len())].as_bytes()),
        12 => {
            let len = bytes.below(12);
            write_str(out, bytes.take(len));
        }
        13 => {
            // str8 / str16 of a short text: lengths beyond fixstr's.
            let len = bytes.below(8);
            let text = bytes.take(len);
            if bytes.bool() {
                out.extend_from_slice(&[0xd9, text.len() as u8]);
            } else {
                out.extend_from_slice(&[0xda, 0, text.len() as u8]);
            }
            out.extend_from_slice(text);
        }
        14 => {
            let len = bytes.below(6);
            let data = bytes.take(len);
            out.extend_from_slice(&[0xc4, data.len() as u8]);
            out.extend_from_slice(data);
        }
        15 | 16 if depth < 4 => {
            let count = bytes.below(5);
            if bytes.byte().is_multiple_of(8) {
                out.extend_from_slice(&[0xdc, 0, count as u8]);
            } else {
                out.push(0x90 | count as u8);
            }
            for _ in 0..count {
                value(bytes, out, depth + 1);
            }
        }
        17 if depth < 4 => {
            let count = bytes.below(3);
            out.push(0x80 | count as u8);
            for _ in 0..count {
                // Keys update paths name (`.a`, `.b`, `.k`) as often as any other value.
                match bytes.byte() % 4 {
                    0 => out.extend_from_slice(b"\xa1a"),
                    1 => out.extend_from_slice(b"\xa1b"),
                    2 => out.extend_from_slice(b"\xa1k"),
                    _ => value(bytes, out, depth + 1),
                }
                value(bytes, out, depth + 1);
            }
        }
        18 => {
            // A uuid, or an ext 2 of another length.
            if bytes.byte().is_multiple_of(4) {
                out.extend_from_slice(&[0xd6, 2]);
                out.extend_from_slice(&bytes.u32().to_le_bytes());
            } else {
                out.extend_from_slice(&[0xd8, 2]);
                out.extend_from_slice(&bytes.u64().to_le_bytes());
                out.extend_from_slice(&bytes.u64().to_le_bytes());
            }
        }
        19 => {
            // A decimal (ext 1), well formed or not.
            out.extend_from_slice(&[0xd5, 1, bytes.byte(), 0x0c]);
        }
        20 => {
            out.extend_from_slice(&[0xd7, 4]);
            out.extend_from_slice(&bytes.u64().to_le_bytes());
        }
        21 => {
            // Some other extension type, of any fixext length.
            let marker = 0xd4 + bytes.byte() % 5;
            out.extend_from_slice(&[marker, bytes.byte()]);
            let len = 1usize << (marker - 0xd4);
            for _ in 0..len {
                out.push(bytes.byte());
            }
        }
        22 => out.push(bytes.byte()),
        23 => out.extend_from_slice(bytes.raw()),
        24 => {
            // A container header that announces more than follows.
            out.push(if bytes.bool() { 0xdd } else { 0xdf });
            out.extend_from_slice(&bytes.u32().to_be_bytes());
        }
        _ => out.push(0xe0 | (bytes.byte() & 0x1f)),
    }
}

/// Appends a tuple: an array of generated values, or the fuzzer's raw bytes.
pub fn tuple(bytes: &mut Bytes<'_>, out: &mut Vec<u8>) {
    if bytes.byte().is_multiple_of(8) {
        out.extend_from_slice(bytes.raw());
        return;
    }
    let count = bytes.below(7);
    out.push(0x90 | count as u8);
    for _ in 0..count {
        value(bytes, out, 1);
    }
}

/// Appends a key: an array of up to three generated values, or raw bytes.
pub fn key(bytes: &mut Bytes<'_>, out: &mut Vec<u8>) {
    if bytes.byte().is_multiple_of(8) {
        out.extend_from_slice(bytes.raw());
        return;
    }
    let count = bytes.below(4);
    out.push(0x90 | count as u8);
    for _ in 0..count {
        value(bytes, out, 2);
    }
}

/// Appends a list of update operations (Tarantool's `=`, `+`, `-`, `&`, `|`, `^`, `!`,
/// `#`, `:`), their field ids by number (from either end) or by name or path, mostly of
/// the right shape; or raw bytes.
pub fn update_ops(bytes: &mut Bytes<'_>, out: &mut Vec<u8>) {
    use tarn::msgpack::{write_int, write_str, write_uint};
    if bytes.byte().is_multiple_of(8) {
        out.extend_from_slice(bytes.raw());
        return;
    }
    let count = bytes.below(5);
    out.push(0x90 | count as u8);
    for _ in 0..count {
        const OPS: &[u8] = b"=+-&|^!#:";
        let choice = bytes.byte();
        let opcode = OPS.get(usize::from(choice % 10)).copied();
        let wrong_shape = choice >= 0xf0;
        let arg_count = match opcode {
            Some(b':') => 5,
            _ => 3,
        };
        let arg_count = if wrong_shape {
            bytes.below(7)
        } else {
            arg_count
        };
        out.push(0x90 | arg_count as u8);
        if arg_count == 0 {
            continue;
        }
        match opcode {
            Some(opcode) if !wrong_shape => write_str(out, &[opcode]),
            _ => value(bytes, out, 2),
        }
        if arg_count == 1 {
            continue;
        }
        match bytes.byte() % 8 {
            0..=2 => write_uint(out, u64::from(bytes.byte() % 8)),
            3 => write_int(out, -1 - i64::from(bytes.byte() % 8)),
            4 => write_str(out, NAMES[bytes.below(NAMES.len())].as_bytes()),
            5 => {
                let path = format!("[{}]", bytes.byte() % 8);
                write_str(out, path.as_bytes());
            }
            // A JSON path into a field: a number or a name, then steps into maps and
            // arrays, now and then a malformed one.
            6 => {
                const STEPS: &[&str] = &[
                    ".a", ".b", ".k", "[1]", "[2]", "[3]", "['a']", "[\"b\"]", "[*]", "..", "[0]",
                    "[", "",
                ];
                let mut path = if bytes.byte().is_multiple_of(2) {
                    format!("[{}]", bytes.byte() % 6)
                } else {
                    NAMES[bytes.below(NAMES.len())].to_string()
                };
                for _ in 0..1 + bytes.below(3) {
                    let step = STEPS[bytes.below(STEPS.len())];
                    path.push_str(step);
                }
                write_str(out, path.as_bytes());
            }
            _ => value(bytes, out, 2),
        }
        for at in 2..arg_count {
            match (opcode, bytes.byte() % 4) {
                (Some(b'+' | b'-' | b'&' | b'|' | b'^' | b'#'), 0..=1) => {
                    write_uint(out, bytes.interesting_u64())
                }
                (Some(b'+' | b'-'), 2) => {
                    write_int(out, (bytes.interesting_u64() as i64).wrapping_neg())
                }
                // A decimal of up to 38 digits at any scale (or a broken one).
                (Some(b'+' | b'-'), 3) if bytes.byte().is_multiple_of(2) => {
                    let len = 1 + bytes.below(20);
                    let scale = bytes.byte() as i8 % 40;
                    out.extend_from_slice(&[0xc7, len as u8 + 1, 1, scale as u8 & 0x7f]);
                    if scale < 0 {
                        // A negative fixint scale: 0xe0.. in place of the positive one.
                        let last = out.len() - 1;
                        out[last] = scale as u8;
                    }
                    let digits = bytes.take(len);
                    let start = out.len();
                    out.extend_from_slice(digits);
                    out.resize(start + len, 0x11);
                    let last = out.len() - 1;
                    out[last] = (out[last] & 0xf0)
                        | if bytes.byte().is_multiple_of(2) {
                            0x0c
                        } else {
                            0x0d
                        };
                }
                (Some(b':'), 0..=2) if at == 4 => {
                    let len = bytes.below(6);
                    write_str(out, bytes.take(len));
                }
                (Some(b':'), 0..=2) => write_int(out, i64::from(bytes.byte() as i8)),
                _ => value(bytes, out, 2),
            }
        }
    }
}
