//! Tuples: immutable MessagePack arrays with a field map, and the space format that
//! validates them.
//!
//! A tuple is one reference-counted allocation:
//! `[slot_count: u8][offset: u32 LE; slot_count][msgpack array bytes]`. Each slot holds the
//! offset (from the start of the array bytes) of one indexed field, or `u32::MAX` when the
//! tuple is too short to have it, so an indexed field is found in O(1) without re-parsing.
//! Which field goes in which slot is decided once per space by its `FieldMap`.
//!
//! Knows nothing of indexes or keys beyond "these field numbers are indexed".

use crate::msgpack::{self, Value};
use crate::storage::error::{FieldLabel, Result, StorageError};
use crate::storage::field_type::FieldType;
use crate::storage::prefetch::{prefetch_line, prefetch_slice};
use smallvec::SmallVec;
use std::rc::Rc;

const ABSENT_OFFSET: u32 = u32::MAX;
const NO_SLOT: u8 = u8::MAX;
/// At most this many distinct indexed fields per space: the slot count is one byte.
pub const MAX_FIELD_SLOTS: usize = 254;

#[derive(Clone)]
pub struct Tuple(Rc<[u8]>);

impl Tuple {
    /// Builds a tuple from validated array bytes and the offsets of its indexed fields.
    fn from_parts(data: &[u8], offsets: &[u32]) -> Tuple {
        debug_assert!(offsets.len() <= MAX_FIELD_SLOTS);
        let header_len = 1 + 4 * offsets.len();
        let mut rc = Rc::<[u8]>::new_uninit_slice(header_len + data.len());
        // The Rc was created just above, so it has no other owner yet.
        let slice = Rc::get_mut(&mut rc).expect("fresh Rc is unique");
        let mut write = |at: usize, bytes: &[u8]| {
            for (dst, &src) in slice[at..at + bytes.len()].iter_mut().zip(bytes) {
                dst.write(src);
            }
        };
        write(0, &[offsets.len() as u8]);
        for (slot, offset) in offsets.iter().enumerate() {
            write(1 + 4 * slot, &offset.to_le_bytes());
        }
        write(header_len, data);
        // SAFETY: every byte of the slice was written above.
        Tuple(unsafe { rc.assume_init() })
    }

    /// Builds a tuple from the concatenation of `pieces`, validated by `check` where it
    /// lands: a caller whose tuple is the request's bytes with a field swapped gets it
    /// copied once, into the tuple's own allocation. On a failed check the allocation is
    /// freed and nothing is built. The count is a constant, so the loops over the pieces
    /// unroll.
    fn from_pieces_checked<const N: usize>(
        pieces: &[&[u8]; N],
        slot_count: usize,
        check: impl FnOnce(&[u8]) -> Result<FieldOffsets>,
    ) -> Result<Tuple> {
        debug_assert!(slot_count <= MAX_FIELD_SLOTS);
        let data_len: usize = pieces.iter().map(|piece| piece.len()).sum();
        let header_len = 1 + 4 * slot_count;
        let mut rc = Rc::<[u8]>::new_uninit_slice(header_len + data_len);
        // The Rc was created just above, so it has no other owner yet.
        let slice = Rc::get_mut(&mut rc).expect("fresh Rc is unique");
        let (header, body) = slice.split_at_mut(header_len);
        let mut rest = &mut *body;
        for piece in pieces {
            let (dst, after) = rest.split_at_mut(piece.len());
            if piece.len() <= SHORT_PIECE {
                // A field or two: cheaper by hand than the call a copy of unknown length is.
                for (dst, &src) in dst.iter_mut().zip(*piece) {
                    dst.write(src);
                }
            } else {
                // SAFETY: `dst` is `piece.len()` bytes of a fresh allocation, which no
                // slice borrowed from elsewhere can overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        piece.as_ptr(),
                        dst.as_mut_ptr().cast::<u8>(),
                        piece.len(),
                    );
                }
            }
            rest = after;
        }
        debug_assert!(rest.is_empty());
        // SAFETY: every byte of `body` was written just above.
        let data = unsafe { std::slice::from_raw_parts(body.as_ptr().cast::<u8>(), data_len) };
        let offsets = check(data)?;
        debug_assert_eq!(offsets.len(), slot_count);
        header[0].write(slot_count as u8);
        for (slot, offset) in header[1..].chunks_exact_mut(4).zip(&offsets) {
            for (dst, &src) in slot.iter_mut().zip(&offset.to_le_bytes()) {
                dst.write(src);
            }
        }
        // SAFETY: the header was written just above, the data before the check.
        Ok(Tuple(unsafe { rc.assume_init() }))
    }

    fn slot_count(&self) -> usize {
        self.0[0] as usize
    }

    /// The tuple's MessagePack array bytes, exactly as stored and sent.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.0[1 + 4 * self.slot_count()..]
    }

    /// The bytes from the start of the indexed field in `slot` to the end of the tuple, or
    /// `None` when the tuple does not reach that field.
    #[inline]
    pub fn field_in_slot(&self, slot: u8) -> Option<&[u8]> {
        let slot = slot as usize;
        debug_assert!(slot < self.slot_count());
        let at = 1 + 4 * slot;
        let offset =
            u32::from_le_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]]);
        if offset == ABSENT_OFFSET {
            return None;
        }
        Some(&self.data()[offset as usize..])
    }

    /// Bytes this tuple holds on the heap, reference counts included.
    pub fn allocated_bytes(&self) -> usize {
        allocated_bytes_for(self.0.len())
    }

    /// Starts fetching what dropping the last reference will touch, the reference counts
    /// and just before them the allocator's chunk header, and the rest of the allocation,
    /// which the allocator hands out again soon after the free (its per-size cache is
    /// last in, first out).
    #[inline]
    pub fn prefetch_for_drop(&self) {
        let counts = Rc::as_ptr(&self.0)
            .cast::<u8>()
            .wrapping_sub(2 * std::mem::size_of::<usize>());
        prefetch_line(counts.wrapping_sub(std::mem::size_of::<usize>()));
        prefetch_line(counts);
        prefetch_slice(&self.0);
    }

    /// Starts fetching the bytes a reply copies: the field map and the first lines of the
    /// data (a point reply copies the whole tuple; most tuples fit in four lines).
    #[inline]
    pub fn prefetch_for_read(&self) {
        const READ_AHEAD_BYTES: usize = 256;
        prefetch_slice(&self.0[..self.0.len().min(READ_AHEAD_BYTES)]);
    }

    pub fn ptr_eq(a: &Tuple, b: &Tuple) -> bool {
        Rc::ptr_eq(&a.0, &b.0)
    }

    /// Number of fields (the array length).
    pub fn field_count(&self) -> u32 {
        let mut cursor = self.data();
        match msgpack::read_value(&mut cursor) {
            Ok(Value::Array(count)) => count,
            _ => 0,
        }
    }
}

/// The heap size of an `Rc<[u8]>` of `len` bytes: two counters, then the bytes, rounded to
/// the counters' alignment.
fn allocated_bytes_for(len: usize) -> usize {
    (2 * std::mem::size_of::<usize>() + len).next_multiple_of(std::mem::align_of::<usize>())
}

impl AsRef<[u8]> for Tuple {
    fn as_ref(&self) -> &[u8] {
        self.data()
    }
}

impl std::fmt::Debug for Tuple {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::storage::text::msgpack_to_text(self.data()))
    }
}

/// Pieces up to this long are copied byte by byte by `Tuple::from_pieces_checked`.
const SHORT_PIECE: usize = 16;

/// Field-map slots whose offsets a tuple's validation keeps without allocating.
const INLINE_OFFSETS: usize = 8;

/// Offsets of a tuple's indexed fields, one per field-map slot.
pub type FieldOffsets = SmallVec<[u32; INLINE_OFFSETS]>;

/// One field of a space format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDef {
    pub name: Box<str>,
    pub field_type: FieldType,
    pub is_nullable: bool,
}

impl FieldDef {
    pub fn new(name: &str, field_type: FieldType) -> FieldDef {
        FieldDef {
            name: name.into(),
            field_type,
            is_nullable: false,
        }
    }

    pub fn nullable(mut self) -> FieldDef {
        self.is_nullable = true;
        self
    }
}

/// Which slot of the field map, if any, each field number uses.
#[derive(Debug, Clone, Default)]
pub struct FieldMap {
    slot_of_field: Vec<u8>,
    slot_count: u8,
}

impl FieldMap {
    /// Assigns a slot to every distinct field number in `indexed_fields`, in first-seen order.
    pub fn new(indexed_fields: impl IntoIterator<Item = u32>) -> FieldMap {
        let mut map = FieldMap::default();
        for field_no in indexed_fields {
            let field_no = field_no as usize;
            if map.slot_of_field.len() <= field_no {
                map.slot_of_field.resize(field_no + 1, NO_SLOT);
            }
            if map.slot_of_field[field_no] == NO_SLOT {
                assert!(
                    (map.slot_count as usize) < MAX_FIELD_SLOTS,
                    "too many indexed fields"
                );
                map.slot_of_field[field_no] = map.slot_count;
                map.slot_count += 1;
            }
        }
        map
    }

    #[inline]
    pub fn slot_of(&self, field_no: u32) -> Option<u8> {
        match self.slot_of_field.get(field_no as usize) {
            Some(&slot) if slot != NO_SLOT => Some(slot),
            _ => None,
        }
    }
}

/// The shape a space's tuples must have.
#[derive(Debug, Clone, Default)]
pub struct SpaceFormat {
    pub fields: Vec<FieldDef>,
    /// 0 = not enforced.
    pub exact_field_count: u32,
}

impl SpaceFormat {
    pub fn new(fields: Vec<FieldDef>) -> SpaceFormat {
        SpaceFormat {
            fields,
            exact_field_count: 0,
        }
    }

    pub fn field_no_by_name(&self, name: &str) -> Option<u32> {
        self.fields
            .iter()
            .position(|field| super::engine::same_name(field.name.as_bytes(), name.as_bytes()))
            .map(|no| no as u32)
    }

    /// `3 (name)` for format fields, `3` beyond the format; 1-based as Tarantool prints.
    pub fn label(&self, field_no: u32) -> FieldLabel {
        FieldLabel {
            number_1based: field_no + 1,
            name: self
                .fields
                .get(field_no as usize)
                .map(|field| field.name.clone()),
        }
    }

    /// Validates `data` (one msgpack array, nothing after it) against the format and builds
    /// the tuple with its field map. The one heap allocation of a write is here.
    pub fn build_tuple(&self, field_map: &FieldMap, data: &[u8]) -> Result<Tuple> {
        let offsets = self.check_tuple(field_map, data)?;
        Ok(Tuple::from_parts(data, &offsets))
    }

    /// `build_tuple` of the concatenation of `pieces`, copied once (into the tuple) and
    /// validated there: the same checks and errors as `build_tuple` of the joined bytes.
    pub fn build_tuple_from_pieces<const N: usize>(
        &self,
        field_map: &FieldMap,
        pieces: &[&[u8]; N],
    ) -> Result<Tuple> {
        Tuple::from_pieces_checked(pieces, field_map.slot_count as usize, |data| {
            self.check_tuple(field_map, data)
        })
    }

    /// Validates `data` as `build_tuple` does, without building: returns the field map
    /// offsets, from which `build_checked` makes the tuple if it is wanted after all.
    pub fn check_tuple(&self, field_map: &FieldMap, data: &[u8]) -> Result<FieldOffsets> {
        let slot_count = field_map.slot_count as usize;
        // Built from a whole inline array, not filled by `from_elem`'s memset: the bytes
        // memset stores in pieces are read back as one vector when the offsets move, and
        // that load waited for them (a store-forwarding stall, a tenth of a replace).
        let mut offsets: FieldOffsets = if slot_count <= INLINE_OFFSETS {
            SmallVec::from_buf_and_len([ABSENT_OFFSET; INLINE_OFFSETS], slot_count)
        } else {
            SmallVec::from_elem(ABSENT_OFFSET, slot_count)
        };
        let (field_count, mut cursor) = match data.split_first() {
            Some((&marker @ 0x90..=0x9f, rest)) => (u32::from(marker & 0x0f), rest),
            _ => {
                let mut cursor = data;
                match msgpack::read_value(&mut cursor)? {
                    Value::Array(count) => (count, cursor),
                    _ => return Err(StorageError::TupleNotArray),
                }
            }
        };
        if self.exact_field_count != 0 && field_count != self.exact_field_count {
            return Err(StorageError::ExactFieldCount {
                actual: field_count,
                expected: self.exact_field_count,
            });
        }
        for field_no in 0..field_count {
            let field_start = cursor;
            if let Some(slot) = field_map.slot_of(field_no) {
                offsets[slot as usize] = (data.len() - cursor.len()) as u32;
            }
            let field = self.fields.get(field_no as usize);
            if let Some(rest) =
                field.and_then(|field| skip_plainly_accepted(field.field_type, cursor))
            {
                cursor = rest;
                continue;
            }
            let value = msgpack::read_value(&mut cursor)?;
            if let Some(field) = self.fields.get(field_no as usize) {
                let valid = match value {
                    Value::Nil => field.is_nullable || field.field_type == FieldType::Any,
                    _ => field.field_type.accepts(&value),
                };
                if !valid {
                    return Err(StorageError::FieldType {
                        field: self.label(field_no),
                        expected: field.field_type.name(),
                        actual: value.mp_type(),
                    });
                }
            }
            if matches!(value, Value::Array(_) | Value::Map(_)) {
                cursor = field_start;
                msgpack::skip_value(&mut cursor)?;
            }
        }
        if !cursor.is_empty() {
            return Err(StorageError::InvalidMsgpack("tuple"));
        }
        if let Some(missing) = self
            .fields
            .iter()
            .skip(field_count as usize)
            .position(|field| !field.is_nullable)
        {
            return Err(StorageError::FieldMissing(
                self.label(field_count + missing as u32),
            ));
        }
        Ok(offsets)
    }

    /// The tuple of `data` that `check_tuple` accepted with these `offsets`.
    pub fn build_checked(&self, data: &[u8], offsets: &FieldOffsets) -> Tuple {
        Tuple::from_parts(data, offsets)
    }
}

/// The bytes after `cursor`'s first value when its marker alone shows a value that
/// `field_type` accepts: an unsigned integer or a string, the fields of nearly every tuple.
/// `None` sends the field through the general decoder, which also reports every error, so
/// this only skips work, never changes an outcome.
#[inline]
fn skip_plainly_accepted(field_type: FieldType, cursor: &[u8]) -> Option<&[u8]> {
    let takes_unsigned = matches!(
        field_type,
        FieldType::Unsigned | FieldType::Integer | FieldType::Number | FieldType::Scalar
    );
    let takes_string = matches!(field_type, FieldType::String | FieldType::Scalar);
    let (&marker, rest) = cursor.split_first()?;
    let (length_bytes, payload_bytes) = match marker {
        0x00..=0x7f if takes_unsigned => (0, 0),
        0xcc..=0xcf if takes_unsigned => (0, 1usize << (marker - 0xcc)),
        0xa0..=0xbf if takes_string => (0, usize::from(marker & 0x1f)),
        0xd9 if takes_string => (1, usize::from(*rest.first()?)),
        0xda if takes_string => (
            2,
            usize::from(u16::from_be_bytes([*rest.first()?, *rest.get(1)?])),
        ),
        _ => return None,
    };
    rest.get(length_bytes..)?.get(payload_bytes..)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgpack::MpType;

    #[test]
    fn the_marker_shortcut_agrees_with_the_general_decoder() {
        let mut shortcuts = 0;
        for marker in 0..=255u8 {
            // Whole values of every length the marker can announce, and cut ones.
            for body_len in [0usize, 1, 2, 3, 4, 5, 8, 9, 31, 40, 300] {
                let mut value = vec![marker];
                value.extend((0..body_len).map(|i| if i < 2 { 0 } else { i as u8 }));
                for field_type in FieldType::ALL {
                    let Some(rest) = skip_plainly_accepted(field_type, &value) else {
                        continue;
                    };
                    shortcuts += 1;
                    let mut cursor = &value[..];
                    let decoded = msgpack::read_value(&mut cursor).expect("decodes");
                    assert!(field_type.accepts(&decoded), "{marker:#x} {field_type:?}");
                    assert_eq!(cursor.len(), rest.len(), "{marker:#x} {body_len}");
                }
            }
        }
        assert!(shortcuts > 1000, "the shortcut is taken: {shortcuts}");
    }

    fn kv_format() -> SpaceFormat {
        SpaceFormat::new(vec![
            FieldDef::new("id", FieldType::Unsigned),
            FieldDef::new("name", FieldType::String),
            FieldDef::new("age", FieldType::Unsigned).nullable(),
        ])
    }

    #[test]
    fn field_map_reaches_indexed_fields_directly() {
        let map = FieldMap::new([2, 0, 2]);
        let tuple = kv_format()
            .build_tuple(&map, &[0x93, 0x07, 0xa1, b'x', 0x2a])
            .unwrap();
        assert_eq!(tuple.data(), &[0x93, 0x07, 0xa1, b'x', 0x2a]);
        assert_eq!(
            tuple.field_in_slot(map.slot_of(0).unwrap()),
            Some(&[0x07, 0xa1, b'x', 0x2a][..])
        );
        assert_eq!(
            tuple.field_in_slot(map.slot_of(2).unwrap()),
            Some(&[0x2a][..])
        );
        assert_eq!(map.slot_of(1), None);
        let short = kv_format()
            .build_tuple(&map, &[0x92, 0x07, 0xa1, b'x'])
            .unwrap();
        assert_eq!(short.field_in_slot(map.slot_of(2).unwrap()), None);
        assert_eq!(short.field_count(), 2);
    }

    #[test]
    fn validation_errors_are_tarantools() {
        let map = FieldMap::new([0]);
        let format = kv_format();
        let err = format
            .build_tuple(&map, &[0x92, 0xa1, b'x', 0x01])
            .unwrap_err();
        assert_eq!(
            err,
            StorageError::FieldType {
                field: FieldLabel {
                    number_1based: 1,
                    name: Some("id".into())
                },
                expected: "unsigned",
                actual: MpType::Str,
            }
        );
        assert_eq!(
            err.to_string(),
            "Tuple field 1 (id) type does not match one required by operation: expected unsigned, got string"
        );
        let err = format.build_tuple(&map, &[0x91, 0x01]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Tuple field 2 (name) required by space format is missing"
        );
        let err = format.build_tuple(&map, &[0x01]).unwrap_err();
        assert_eq!(err, StorageError::TupleNotArray);
        let err = format.build_tuple(&map, &[0x92, 0xc0, 0xa0]).unwrap_err();
        assert!(
            err.to_string().ends_with("expected unsigned, got nil"),
            "{err}"
        );
        // Nullable fields take nil; fields beyond the format take anything.
        format
            .build_tuple(&map, &[0x94, 0x01, 0xa0, 0xc0, 0x92, 0x01, 0x02])
            .unwrap();
    }

    #[test]
    fn exact_field_count_is_enforced_when_set() {
        let mut format = kv_format();
        format.exact_field_count = 3;
        let err = format
            .build_tuple(&FieldMap::default(), &[0x92, 0x01, 0xa0])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Tuple field count 2 does not match space field count 3"
        );
    }

    #[test]
    fn trailing_or_truncated_bytes_are_rejected() {
        let map = FieldMap::default();
        let format = SpaceFormat::default();
        assert_eq!(
            format.build_tuple(&map, &[0x91, 0x01, 0x02]).unwrap_err(),
            StorageError::InvalidMsgpack("tuple")
        );
        assert!(format.build_tuple(&map, &[0x92, 0x01]).is_err());
    }
}
