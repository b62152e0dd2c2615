//! Tuples: immutable MessagePack arrays with a field map, and the space format that
//! validates them.
//!
//! A tuple is one reference-counted allocation, reached through one pointer:
//! `[references: u32][data length: u32][slot_count: u8][offset: u32 LE; slot_count][msgpack
//! array bytes]`. Each slot holds the offset (from the start of the array bytes) of one
//! indexed field, or `u32::MAX` when the tuple is too short to have it, so an indexed field
//! is found in O(1) without re-parsing. Field 0, the usual primary key, needs no slot: it
//! starts right after the array's header. Which field goes in which slot is decided once
//! per space by its `FieldMap`.
//!
//! Memory: the header is 9 bytes where `Rc<[u8]>` took 17 (two `usize` counts and the slot
//! count) plus 4 for field 0's slot, and the handle is one pointer where a fat `Rc<[u8]>`
//! was two, which halves the value half of every index entry. A kv tuple `[id, bucket_id,
//! string(100)]` is 111 bytes of MessagePack: 120 with its header, one 128-byte glibc
//! chunk (it was 132, a 144-byte chunk).
//!
//! Knows nothing of indexes or keys beyond "these field numbers are indexed".

use crate::msgpack::{self, Value};
use crate::storage::error::{FieldLabel, Result, StorageError};
use crate::storage::field_type::FieldType;
use crate::storage::prefetch::{prefetch_line, prefetch_slice};
use smallvec::SmallVec;
use std::alloc::Layout;
use std::ptr::NonNull;

const ABSENT_OFFSET: u32 = u32::MAX;
const NO_SLOT: u8 = u8::MAX;
/// The slot `FieldMap::slot_of` names for field 0, which is not stored: its offset is the
/// length of the array's header.
const FIRST_FIELD_SLOT: u8 = u8::MAX - 1;
/// At most this many distinct indexed fields per space: the slot count is one byte.
pub const MAX_FIELD_SLOTS: usize = 254;

/// Bytes before the field map: the reference count, the data length, the slot count.
const HEADER_BYTES: usize = 9;
const LENGTH_AT: usize = 4;
const SLOT_COUNT_AT: usize = 8;
/// The allocation's alignment: the reference count is read and written as a `u32`.
const ALIGN: usize = 4;

/// A shared handle to one stored tuple, as `Rc` is: cloning adds a reference, dropping
/// the last frees it. Not `Send`: a tuple lives and dies on its shard's thread (the
/// `NonNull` field keeps it so).
pub struct Tuple(NonNull<u8>);

impl Tuple {
    /// The allocation of a tuple with `slot_count` slots and `data_len` bytes of data, its
    /// header written and its references at one; the field map and data left to write.
    fn allocate(slot_count: usize, data_len: usize) -> Tuple {
        debug_assert!(slot_count <= MAX_FIELD_SLOTS);
        let data_len_u32 = u32::try_from(data_len).expect("a tuple is smaller than 4 GiB");
        let layout = Self::layout(slot_count, data_len);
        // SAFETY: the layout's size is at least HEADER_BYTES, never zero.
        let ptr = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(ptr) else {
            std::alloc::handle_alloc_error(layout);
        };
        // SAFETY: the allocation is at least HEADER_BYTES long and aligned for the u32s.
        unsafe {
            ptr.as_ptr().cast::<u32>().write(1);
            ptr.as_ptr()
                .add(LENGTH_AT)
                .cast::<u32>()
                .write(data_len_u32);
            ptr.as_ptr().add(SLOT_COUNT_AT).write(slot_count as u8);
        }
        Tuple(ptr)
    }

    fn layout(slot_count: usize, data_len: usize) -> Layout {
        Layout::from_size_align(HEADER_BYTES + 4 * slot_count + data_len, ALIGN)
            .expect("a tuple's size fits a layout")
    }

    /// The whole allocation, header included, once built; for prefetches, which hold it
    /// no longer than the call (the reference count in it is written by every clone).
    #[inline]
    fn allocation(&self) -> &[u8] {
        // SAFETY: the allocation is `allocation_len` bytes, every one written before the
        // tuple was handed out (the builders below write the field map and data before
        // they return it), and it lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr(), self.allocation_len()) }
    }

    /// Where the field map of a tuple being built starts; the data follows it.
    fn field_map_ptr(&mut self) -> *mut u8 {
        // SAFETY: the field map starts right after the header, within the allocation.
        unsafe { self.0.as_ptr().add(HEADER_BYTES) }
    }

    #[inline]
    fn header_byte(&self, at: usize) -> u8 {
        debug_assert!(at < HEADER_BYTES);
        // SAFETY: the header's bytes were written by `allocate` and live as long as `self`.
        unsafe { *self.0.as_ptr().add(at) }
    }

    #[inline]
    fn references(&self) -> u32 {
        // SAFETY: the count is the aligned first word of a live allocation.
        unsafe { self.0.as_ptr().cast::<u32>().read() }
    }

    #[inline]
    fn set_references(&self, count: u32) {
        // SAFETY: as `references`; the tuple is not `Sync`, so no other thread writes it,
        // and no reference into the count is held across this write.
        unsafe { self.0.as_ptr().cast::<u32>().write(count) }
    }

    #[inline]
    fn data_len(&self) -> usize {
        // SAFETY: the length is the aligned second word of a live allocation.
        unsafe { self.0.as_ptr().add(LENGTH_AT).cast::<u32>().read() as usize }
    }

    #[inline]
    fn slot_count(&self) -> usize {
        self.header_byte(SLOT_COUNT_AT) as usize
    }

    #[inline]
    fn data_at(&self) -> usize {
        HEADER_BYTES + 4 * self.slot_count()
    }

    #[inline]
    fn allocation_len(&self) -> usize {
        self.data_at() + self.data_len()
    }

    /// Builds a tuple from validated array bytes and the offsets of its indexed fields.
    fn from_parts(data: &[u8], offsets: &[u32]) -> Tuple {
        let mut tuple = Tuple::allocate(offsets.len(), data.len());
        let map = tuple.field_map_ptr();
        write_offsets(map, offsets);
        // SAFETY: the data's `data.len()` bytes follow the field map within the fresh
        // allocation, which no slice borrowed from elsewhere can overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), map.add(4 * offsets.len()), data.len())
        };
        tuple
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
        let data_len: usize = pieces.iter().map(|piece| piece.len()).sum();
        // Until the check passes the field map is unwritten; a failed check drops the
        // tuple, which reads only the header.
        let mut tuple = Tuple::allocate(slot_count, data_len);
        let map = tuple.field_map_ptr();
        // SAFETY: the data follows the field map's `slot_count` slots in the allocation.
        let body = unsafe { map.add(4 * slot_count) };
        let mut at = 0;
        for piece in pieces {
            // SAFETY: the pieces add up to `data_len`, so `at + piece.len()` stays within
            // the data; the fresh allocation overlaps no slice borrowed from elsewhere.
            unsafe {
                let dst = body.add(at);
                if piece.len() <= SHORT_PIECE {
                    // A field or two: cheaper by hand than the call a copy of unknown
                    // length is.
                    for (i, &src) in piece.iter().enumerate() {
                        dst.add(i).write(src);
                    }
                } else {
                    std::ptr::copy_nonoverlapping(piece.as_ptr(), dst, piece.len());
                }
            }
            at += piece.len();
        }
        debug_assert_eq!(at, data_len);
        // SAFETY: every byte of the data was written just above.
        let data = unsafe { std::slice::from_raw_parts(body.cast_const(), data_len) };
        let offsets = check(data)?;
        debug_assert_eq!(offsets.len(), slot_count);
        write_offsets(map, &offsets);
        Ok(tuple)
    }

    /// The tuple's MessagePack array bytes, exactly as stored and sent.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: the data is the allocation's last `data_len` bytes, written before the
        // tuple was handed out and never written again (the reference count, the one
        // word a handle writes, lies before it); it lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().add(self.data_at()), self.data_len()) }
    }

    /// The bytes from the start of the indexed field in `slot` to the end of the tuple, or
    /// `None` when the tuple does not reach that field.
    #[inline]
    pub fn field_in_slot(&self, slot: u8) -> Option<&[u8]> {
        if slot == FIRST_FIELD_SLOT {
            return first_field(self.data());
        }
        let slot = slot as usize;
        debug_assert!(slot < self.slot_count());
        // SAFETY: slot `slot` of the field map lies within the allocation (the field map
        // has `slot_count` slots) and was written before the tuple was handed out.
        let offset = unsafe {
            self.0
                .as_ptr()
                .add(HEADER_BYTES + 4 * slot)
                .cast::<[u8; 4]>()
                .read()
        };
        let offset = u32::from_le_bytes(offset);
        if offset == ABSENT_OFFSET {
            return None;
        }
        Some(&self.data()[offset as usize..])
    }

    /// Bytes this tuple holds on the heap: its allocation as glibc's malloc rounds it.
    pub fn allocated_bytes(&self) -> usize {
        malloc_chunk_bytes(self.allocation_len())
    }

    /// Starts fetching what dropping the last reference will touch, the reference count
    /// and just before it the allocator's chunk header, and the rest of the allocation,
    /// which the allocator hands out again soon after the free (its per-size cache is
    /// last in, first out).
    #[inline]
    pub fn prefetch_for_drop(&self) {
        let start = self.0.as_ptr().cast_const();
        prefetch_line(start.wrapping_sub(std::mem::size_of::<usize>()));
        prefetch_slice(self.allocation());
    }

    /// Starts fetching the tuple's first lines, which a reply copies: the header, the field
    /// map and the start of the data (most tuples fit in them). Reads nothing: the header
    /// gives the tuple's length, and reading it would wait for the very miss this starts (a
    /// fetch-ahead walk that did so spent a fifth of its time waiting there).
    #[inline]
    pub fn prefetch_for_read(&self) {
        const HEAD_BYTES: usize = 128;
        let start = self.0.as_ptr().cast_const();
        prefetch_line(start);
        prefetch_line(start.wrapping_add(HEAD_BYTES / 2));
        // A tuple that starts late in its line reaches into a third one.
        prefetch_line(start.wrapping_add(HEAD_BYTES - 1));
    }

    pub fn ptr_eq(a: &Tuple, b: &Tuple) -> bool {
        a.0 == b.0
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

impl Clone for Tuple {
    #[inline]
    fn clone(&self) -> Tuple {
        let count = self.references();
        if count == u32::MAX {
            // As `Rc` does on overflow: 4 billion handles to one tuple is a leak.
            std::process::abort();
        }
        self.set_references(count + 1);
        Tuple(self.0)
    }
}

impl Drop for Tuple {
    #[inline]
    fn drop(&mut self) {
        let count = self.references();
        debug_assert!(count >= 1);
        if count > 1 {
            self.set_references(count - 1);
            return;
        }
        let layout = Self::layout(self.slot_count(), self.data_len());
        // SAFETY: this was the last handle, so nothing reads the tuple any more; the
        // allocation was made by `allocate` with this same layout (the header it was
        // computed from is unchanged).
        unsafe { std::alloc::dealloc(self.0.as_ptr(), layout) }
    }
}

/// Writes `offsets` as the field map at `map`, little-endian.
fn write_offsets(map: *mut u8, offsets: &[u32]) {
    for (slot, offset) in offsets.iter().enumerate() {
        // SAFETY: the caller's field map has a slot for each offset, within its allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(offset.to_le_bytes().as_ptr(), map.add(4 * slot), 4)
        };
    }
}

/// The heap size glibc's malloc gives a request of `len` bytes: the bytes and its 8-byte
/// size word, rounded up to 16, and at least 32.
fn malloc_chunk_bytes(len: usize) -> usize {
    (len + std::mem::size_of::<usize>())
        .next_multiple_of(16)
        .max(32)
}

/// Field 0 of the array `data` and what follows it, found from the array's header.
#[inline]
fn first_field(data: &[u8]) -> Option<&[u8]> {
    let (&marker, rest) = data.split_first()?;
    let (header_bytes, empty) = match marker {
        0x90 => return None,
        0x91..=0x9f => (0, false),
        0xdc => (2, rest.get(..2)? == [0, 0]),
        0xdd => (4, rest.get(..4)? == [0, 0, 0, 0]),
        _ => return None,
    };
    if empty {
        return None;
    }
    rest.get(header_bytes..)
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
    /// The stored slot of `field_no`: `slot_of` but for field 0.
    #[inline]
    fn stored_slot_of(&self, field_no: u32) -> Option<u8> {
        self.slot_of(field_no)
            .filter(|&slot| slot != FIRST_FIELD_SLOT)
    }

    /// Assigns a slot to every distinct field number in `indexed_fields`, in first-seen order.
    pub fn new(indexed_fields: impl IntoIterator<Item = u32>) -> FieldMap {
        let mut map = FieldMap::default();
        for field_no in indexed_fields {
            let field_no = field_no as usize;
            if field_no == 0 {
                map.slot_of_field
                    .resize(map.slot_of_field.len().max(1), NO_SLOT);
                map.slot_of_field[0] = FIRST_FIELD_SLOT;
                continue;
            }
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

    /// The slot of an indexed field's offset in the tuples' field map; field 0, which
    /// has none, is named by a slot `Tuple::field_in_slot` finds without one.
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
            if let Some(slot) = field_map.stored_slot_of(field_no) {
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
    fn a_kv_tuple_takes_one_128_byte_chunk() {
        // The handle is one pointer, and `None` fits its niche (index leaves hold these).
        assert_eq!(std::mem::size_of::<Tuple>(), 8);
        assert_eq!(std::mem::size_of::<Option<Tuple>>(), 8);
        let format = SpaceFormat::new(vec![
            FieldDef::new("id", FieldType::Unsigned),
            FieldDef::new("bucket_id", FieldType::Unsigned),
            FieldDef::new("value", FieldType::String),
        ]);
        let mut data = vec![0x93, 0xce, 0, 0x0f, 0x42, 0x40, 0xcd, 0x0b, 0xb8, 0xd9, 100];
        data.extend([b'v'; 100]);
        assert_eq!(data.len(), 111);
        // Field 0 takes no slot: the primary key is found from the array's header.
        let map = FieldMap::new([0]);
        assert_eq!(map.slot_count, 0);
        let tuple = format.build_tuple(&map, &data).unwrap();
        assert_eq!(tuple.allocation_len(), HEADER_BYTES + 111);
        assert_eq!(tuple.allocated_bytes(), 128);
        assert_eq!(
            tuple.field_in_slot(map.slot_of(0).unwrap()),
            Some(&data[1..])
        );
        let pieces = format
            .build_tuple_from_pieces(&map, &[&data[..6], &data[6..9], &data[9..]])
            .unwrap();
        assert_eq!(pieces.data(), &data[..]);
        let shared = pieces.clone();
        assert_eq!(shared.references(), 2);
        drop(pieces);
        assert_eq!(shared.references(), 1);
        assert!(Tuple::ptr_eq(&shared, &shared.clone()));
    }

    #[test]
    fn field_zero_is_found_behind_every_array_header() {
        let map = FieldMap::new([1, 0]);
        let format = SpaceFormat::default();
        for data in [
            vec![0x92, 0x07, 0x08],
            vec![0xdc, 0x00, 0x02, 0x07, 0x08],
            vec![0xdd, 0x00, 0x00, 0x00, 0x02, 0x07, 0x08],
        ] {
            let tuple = format.build_tuple(&map, &data).unwrap();
            let first = tuple.field_in_slot(map.slot_of(0).unwrap());
            assert_eq!(first, Some(&[0x07, 0x08][..]), "{data:x?}");
            let second = tuple.field_in_slot(map.slot_of(1).unwrap());
            assert_eq!(second, Some(&[0x08][..]), "{data:x?}");
        }
        for empty in [vec![0x90], vec![0xdc, 0, 0], vec![0xdd, 0, 0, 0, 0]] {
            let tuple = format.build_tuple(&map, &empty).unwrap();
            assert_eq!(tuple.field_in_slot(map.slot_of(0).unwrap()), None);
            assert_eq!(tuple.field_in_slot(map.slot_of(1).unwrap()), None);
        }
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
