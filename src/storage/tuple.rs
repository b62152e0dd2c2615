//! Tuples: immutable MessagePack arrays with a field map, and the space format that
//! validates them.
//!
//! A tuple is one reference-counted object in its space's slab ([`crate::storage::slab`]),
//! reached through one pointer: `[references: u16][data length: u16][words: u8][offset:
//! u32 LE; slot_count][msgpack array bytes]`, where `words` counts the 4-byte words between
//! the header and the data, so that the data starts at `5 + 4 * words` with no branch. A
//! tuple of 65,535 bytes or more has `0xffff` as its short length and its length as a u32
//! in one more word, after the field map (so `words` is `slot_count + 1`). Each
//! slot holds the offset (from the start of the array bytes) of one indexed field, or
//! `u32::MAX` when the tuple is too short to have it, so an indexed field is found in O(1)
//! without re-parsing. Field 0, the usual primary key, needs no slot: it starts right after
//! the array's header. Which field goes in which slot is decided once per space by its
//! `FieldMap`.
//!
//! Memory: the header is 5 bytes (it was 9: u32 references and length), and the slab keeps
//! no header per object, so a kv tuple `[id, bucket_id, string(100)]` of 111 bytes of
//! MessagePack takes 116 bytes (it took a 128-byte glibc chunk: 9 + 111 = 120, plus malloc's
//! 8-byte size word, rounded to 16). The reference count saturates: a tuple that reaches
//! 65,535 references (more than every index, log row and reply of a shard hold) stays
//! allocated for good, as Linux's `refcount_t` does, rather than wrap.
//!
//! Knows nothing of indexes or keys beyond "these field numbers are indexed".

use crate::msgpack::{self, Value};
use crate::storage::error::{FieldLabel, Result, StorageError};
use crate::storage::field_type::FieldType;
use crate::storage::memory::MemoryQuota;
use crate::storage::prefetch::{prefetch_line, prefetch_slice};
use crate::storage::slab::{self, TupleSlab};
use smallvec::SmallVec;
use std::marker::PhantomData;
use std::ptr::NonNull;

const ABSENT_OFFSET: u32 = u32::MAX;
const NO_SLOT: u8 = u8::MAX;
/// The slot `FieldMap::slot_of` names for field 0, which is not stored: its offset is the
/// length of the array's header.
const FIRST_FIELD_SLOT: u8 = u8::MAX - 1;
/// At most this many distinct indexed fields per space: the slot count is one byte.
pub const MAX_FIELD_SLOTS: usize = 254;

/// Bytes before the field map: the reference count, the short length, the word count.
const HEADER_BYTES: usize = 5;
const SHORT_LENGTH_AT: usize = 2;
const WORDS_AT: usize = 4;
/// The short length of a tuple whose length is in the long one.
const LONG_LENGTH: u16 = u16::MAX;
/// A reference count that stays: the tuple is never freed.
const SATURATED_REFERENCES: u16 = u16::MAX;

/// A shared handle to one stored tuple, as `Rc` is: cloning adds a reference, dropping
/// the last frees it. Not `Send`: a tuple lives and dies on its shard's thread (the
/// `NonNull` field keeps it so).
#[repr(transparent)]
pub struct Tuple(NonNull<u8>);

impl Tuple {
    /// An object for a tuple with `slot_count` slots and `data_len` bytes of data, from
    /// `slab`, its header written and its references at one; the field map and data left
    /// to write. Refused (Tarantool's ER_MEMORY_ISSUE) when its memory does not fit the
    /// quota.
    fn allocate(slab: &TupleSlab, slot_count: usize, data_len: usize) -> Result<Tuple> {
        debug_assert!(slot_count <= MAX_FIELD_SLOTS);
        let Ok(data_len_u32) = u32::try_from(data_len) else {
            return Err(out_of_memory(data_len));
        };
        let bytes = allocation_len(slot_count, data_len);
        let Some(ptr) = slab.allocate(bytes) else {
            return Err(out_of_memory(bytes));
        };
        let short = match u16::try_from(data_len) {
            Ok(short) if short != LONG_LENGTH => short,
            _ => LONG_LENGTH,
        };
        let words = slot_count + usize::from(short == LONG_LENGTH);
        // SAFETY: the object is the header, `words` words and the data long, aligned to 4
        // for the u16s; the long length, the last word, is written unaligned.
        unsafe {
            ptr.as_ptr().cast::<u16>().write(1);
            ptr.as_ptr().add(SHORT_LENGTH_AT).cast::<u16>().write(short);
            ptr.as_ptr().add(WORDS_AT).write(words as u8);
            if short == LONG_LENGTH {
                ptr.as_ptr()
                    .add(HEADER_BYTES + 4 * slot_count)
                    .cast::<u32>()
                    .write_unaligned(data_len_u32);
            }
        }
        Ok(Tuple(ptr))
    }

    /// The whole object, header included, once built; for prefetches, which hold it no
    /// longer than the call (the reference count in it is written by every clone).
    #[inline]
    fn allocation(&self) -> &[u8] {
        // SAFETY: the object is `allocation_len` bytes, every one written before the
        // tuple was handed out (the builders below write the field map and data before
        // they return it), and it lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr(), self.allocation_len()) }
    }

    /// Where the field map of a tuple being built starts: right after the header.
    fn field_map_ptr(&mut self) -> *mut u8 {
        // SAFETY: the field map starts right after the header, within the object.
        unsafe { self.0.as_ptr().add(HEADER_BYTES) }
    }

    /// Where the data of a tuple being built starts.
    fn data_ptr(&mut self) -> *mut u8 {
        // SAFETY: the data starts `data_at` bytes in, within the object.
        unsafe { self.0.as_ptr().add(self.data_at()) }
    }

    #[inline]
    fn references(&self) -> u16 {
        // SAFETY: the count is the aligned first u16 of a live object.
        unsafe { self.0.as_ptr().cast::<u16>().read() }
    }

    #[inline]
    fn set_references(&self, count: u16) {
        // SAFETY: as `references`; the tuple is not `Sync`, so no other thread writes it,
        // and no reference into the count is held across this write.
        unsafe { self.0.as_ptr().cast::<u16>().write(count) }
    }

    #[inline]
    fn short_len(&self) -> u16 {
        // SAFETY: the short length is the aligned second u16 of a live object's header.
        unsafe { self.0.as_ptr().add(SHORT_LENGTH_AT).cast::<u16>().read() }
    }

    #[inline]
    fn data_len(&self) -> usize {
        let short = self.short_len();
        if short != LONG_LENGTH {
            return usize::from(short);
        }
        // SAFETY: a long length is the last word before the data.
        unsafe {
            self.0
                .as_ptr()
                .add(self.data_at() - 4)
                .cast::<u32>()
                .read_unaligned() as usize
        }
    }

    /// Words between the header and the data: the field map's, and a long length's.
    #[inline]
    fn words(&self) -> usize {
        // SAFETY: the word count is a byte of a live object's header.
        usize::from(unsafe { *self.0.as_ptr().add(WORDS_AT) })
    }

    #[inline]
    fn slot_count(&self) -> usize {
        self.words() - usize::from(self.short_len() == LONG_LENGTH)
    }

    #[inline]
    fn data_at(&self) -> usize {
        HEADER_BYTES + 4 * self.words()
    }

    #[inline]
    fn allocation_len(&self) -> usize {
        self.data_at() + self.data_len()
    }

    /// Builds a tuple from validated array bytes and the offsets of its indexed fields.
    fn from_parts(slab: &TupleSlab, data: &[u8], offsets: &[u32]) -> Result<Tuple> {
        let mut tuple = Tuple::allocate(slab, offsets.len(), data.len())?;
        write_offsets(tuple.field_map_ptr(), offsets);
        let body = tuple.data_ptr();
        // SAFETY: the data's `data.len()` bytes end the fresh object, which no slice
        // borrowed from elsewhere can overlap.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), body, data.len()) };
        Ok(tuple)
    }

    /// Builds a tuple from the concatenation of `pieces`, validated by `check` where it
    /// lands: a caller whose tuple is the request's bytes with a field swapped gets it
    /// copied once, into the tuple's own object. On a failed check the object is freed
    /// and nothing is built. The count is a constant, so the loops over the pieces
    /// unroll.
    fn from_pieces_checked<const N: usize>(
        slab: &TupleSlab,
        pieces: &[&[u8]; N],
        slot_count: usize,
        check: impl FnOnce(&[u8]) -> Result<FieldOffsets>,
    ) -> Result<Tuple> {
        let data_len: usize = pieces.iter().map(|piece| piece.len()).sum();
        // Until the check passes the field map is unwritten; a failed check drops the
        // tuple, which reads only the header.
        let mut tuple = Tuple::allocate(slab, slot_count, data_len)?;
        let map = tuple.field_map_ptr();
        let body = tuple.data_ptr();
        let mut at = 0;
        for piece in pieces {
            // SAFETY: the pieces add up to `data_len`, so `at + piece.len()` stays within
            // the data; the fresh object overlaps no slice borrowed from elsewhere.
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

    /// This tuple, or a copy of it in `slab` if another arena holds it: for tuples built by
    /// another shard's engine (moving rows between layouts). The copy is refused when it
    /// does not fit the quota.
    pub fn adopted_by(self, slab: &TupleSlab) -> Result<Tuple> {
        if self.handle_in(slab.quota()).is_some() {
            return Ok(self);
        }
        let bytes = self.allocation_len();
        let ptr = slab.allocate(bytes).ok_or_else(|| out_of_memory(bytes))?;
        Ok(self.copy_to(ptr))
    }

    /// A copy of this tuple in `slab`, its memory taken even past the quota's limit: for
    /// an index that must hold a tuple of another arena (see `ArenaTuples`).
    fn copy_into_past_limit(&self, slab: &TupleSlab) -> Tuple {
        let bytes = self.allocation_len();
        match slab.allocate_past_limit(bytes) {
            Some(ptr) => self.copy_to(ptr),
            None => std::alloc::handle_alloc_error(
                std::alloc::Layout::from_size_align(bytes, slab::GRAIN_BYTES)
                    .unwrap_or(std::alloc::Layout::new::<u32>()),
            ),
        }
    }

    /// This tuple copied into the fresh object at `ptr`, which has its bytes.
    fn copy_to(&self, ptr: NonNull<u8>) -> Tuple {
        let bytes = self.allocation_len();
        // SAFETY: the new object has `bytes` bytes and overlaps no other; the copy is the
        // whole of this one, header and field map included, its count reset below.
        unsafe { std::ptr::copy_nonoverlapping(self.0.as_ptr(), ptr.as_ptr(), bytes) };
        let copy = Tuple(ptr);
        copy.set_references(1);
        copy
    }

    /// The tuple's MessagePack array bytes, exactly as stored and sent.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: the data is the object's last `data_len` bytes, written before the
        // tuple was handed out and never written again (the reference count, the one
        // word a handle writes, lies before it); it lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().add(self.data_at()), self.data_len()) }
    }

    /// The bytes from the start of the indexed field `slot` names to the end of the tuple,
    /// or `None` when the tuple does not reach that field. A tuple built before its space's
    /// field map grew (an index added while serving) has no slot for the new fields: those
    /// are found by walking the array, as Tarantool reads a field its tuple's format has no
    /// offset for.
    #[inline]
    pub fn field_in_slot(&self, slot: FieldSlot) -> Option<&[u8]> {
        if slot.slot == FIRST_FIELD_SLOT {
            return first_field(self.data());
        }
        let slot_no = slot.slot as usize;
        if slot_no >= self.slot_count() {
            return self.fields_by_walking(&[slot.field_no])[0];
        }
        let slot = slot_no;
        // SAFETY: slot `slot` of the field map lies within the object (the field map has
        // `slot_count` slots) and was written before the tuple was handed out.
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

    /// Whether this tuple's field map holds `slot` (a tuple built before its space's field
    /// map grew lacks the new slots; [`Tuple::field_in_slot`] then walks the array).
    #[inline]
    pub fn has_slot(&self, slot: FieldSlot) -> bool {
        slot.slot == FIRST_FIELD_SLOT || usize::from(slot.slot) < self.slot_count()
    }

    /// For each of `field_nos`, the bytes from that field to the end of the array (`None`
    /// where the array is shorter), found in one walk: what a tuple without slots for
    /// several fields gives a key of several parts.
    #[cold]
    pub fn fields_by_walking(&self, field_nos: &[u32]) -> SmallVec<[Option<&[u8]>; 8]> {
        let last = field_nos.iter().copied().max().unwrap_or(0);
        let mut starts: SmallVec<[&[u8]; 16]> = SmallVec::new();
        let mut cursor = self.data();
        if let Ok(Some(count)) = msgpack::read_array_len(&mut cursor) {
            for _ in 0..count.min(last.saturating_add(1)) {
                starts.push(cursor);
                if msgpack::skip_value(&mut cursor).is_err() {
                    break;
                }
            }
        }
        field_nos
            .iter()
            .map(|&field_no| starts.get(field_no as usize).copied())
            .collect()
    }
    /// Bytes this tuple holds: its slot in the slab (or, past the largest class, its own
    /// allocation as malloc rounds it).
    pub fn allocated_bytes(&self) -> usize {
        slab::allocated_bytes(self.allocation_len())
    }

    /// The 32-bit handle of this tuple in the arena of `quota`, an index leaf's form of it
    /// (see [`crate::storage::slab`]); `None` when another arena holds it.
    #[inline]
    pub fn handle_in(&self, quota: &MemoryQuota) -> Option<u32> {
        // SAFETY: this is a live object of a slab, allocated with `allocation_len` bytes.
        unsafe {
            quota
                .arena()
                .handle_of(quota, self.0, self.allocation_len())
        }
    }

    /// Gives up this handle's reference without freeing, for a holder that keeps the
    /// tuple by its address or arena handle; [`Tuple::from_raw`] takes it back.
    #[inline]
    pub fn into_raw(self) -> NonNull<u8> {
        let ptr = self.0;
        std::mem::forget(self);
        ptr
    }

    /// The tuple a reference given up by [`Tuple::into_raw`] is to.
    ///
    /// # Safety
    ///
    /// `ptr` came from `into_raw`, and its reference is taken back only once.
    #[inline]
    pub unsafe fn from_raw(ptr: NonNull<u8>) -> Tuple {
        Tuple(ptr)
    }

    /// Starts fetching what dropping the last reference will touch: the reference count
    /// and the rest of the object, which its class hands out again soon after the free
    /// (a page's free slots are last in, first out), and the page header the free writes.
    #[inline]
    pub fn prefetch_for_drop(&self) {
        let bytes = self.allocation();
        slab::prefetch_for_free(self.0, bytes.len());
        prefetch_slice(bytes);
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

    /// Starts fetching the tuple's first line, which holds its header and the start of its
    /// data, without reading it.
    #[inline]
    pub fn prefetch_header(&self) {
        prefetch_line(self.0.as_ptr().cast_const());
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

/// A tuple borrowed from wherever it is stored (an index entry, an owned [`Tuple`]), for as
/// long as `'a`: a [`Tuple`] that is never dropped. An index that keeps its tuples as
/// arena handles has no `Tuple` to lend, so it hands these out.
#[derive(Clone, Copy)]
pub struct TupleRef<'a> {
    tuple: NonNull<u8>,
    _borrowed: PhantomData<&'a Tuple>,
}

impl<'a> TupleRef<'a> {
    /// The tuple at `tuple`, borrowed for `'a`.
    ///
    /// # Safety
    ///
    /// `tuple` is a live tuple that someone holds a reference to for all of `'a`.
    #[inline]
    pub unsafe fn from_raw(tuple: NonNull<u8>) -> TupleRef<'a> {
        TupleRef {
            tuple,
            _borrowed: PhantomData,
        }
    }

    /// An owned handle: one more reference.
    #[inline]
    pub fn to_tuple(self) -> Tuple {
        (*self).clone()
    }

    /// [`Tuple::data`], for as long as the borrow.
    #[inline]
    pub fn data(self) -> &'a [u8] {
        let data = Tuple::data(&self);
        // SAFETY: the bytes belong to the tuple, which is held for `'a` and never written
        // (but for its reference count, outside these bytes).
        unsafe { std::slice::from_raw_parts(data.as_ptr(), data.len()) }
    }

    /// [`Tuple::field_in_slot`], for as long as the borrow.
    #[inline]
    pub fn field_in_slot(self, slot: FieldSlot) -> Option<&'a [u8]> {
        let field = Tuple::field_in_slot(&self, slot)?;
        // SAFETY: as in `data`.
        Some(unsafe { std::slice::from_raw_parts(field.as_ptr(), field.len()) })
    }
}

impl<'a> From<&'a Tuple> for TupleRef<'a> {
    #[inline]
    fn from(tuple: &'a Tuple) -> TupleRef<'a> {
        TupleRef {
            tuple: tuple.0,
            _borrowed: PhantomData,
        }
    }
}

impl std::ops::Deref for TupleRef<'_> {
    type Target = Tuple;

    #[inline]
    fn deref(&self) -> &Tuple {
        // SAFETY: `Tuple` is a transparent wrapper of the same pointer, so this field read
        // as a `Tuple` is one; a shared reference cannot drop it, and the tuple it points
        // to is held for the borrow.
        unsafe { &*(&raw const self.tuple).cast::<Tuple>() }
    }
}

impl AsRef<[u8]> for TupleRef<'_> {
    fn as_ref(&self) -> &[u8] {
        Tuple::data(self)
    }
}

impl std::fmt::Debug for TupleRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Tuple::fmt(self, f)
    }
}

/// The tuples of one index as its B+tree's leaves keep them: a 32-bit arena handle each
/// (see [`crate::storage::slab`]).
#[derive(Clone)]
pub struct ArenaTuples {
    /// The space's slab: its quota's arena names the handles, and a tuple of another
    /// arena is copied into it.
    slab: TupleSlab,
    /// The arena's table of region addresses: a small handle decodes with one load.
    region_bases: *const std::cell::Cell<usize>,
}

impl ArenaTuples {
    /// The tuples of `slab`'s arena.
    pub fn new(slab: &TupleSlab) -> ArenaTuples {
        ArenaTuples {
            region_bases: slab.quota().arena().region_bases(),
            slab: slab.clone(),
        }
    }

    /// The tuple `handle` names.
    ///
    /// # Safety
    ///
    /// `handle` came from `pack` and is not yet unpacked.
    #[inline(always)]
    unsafe fn pointer(&self, handle: u32) -> NonNull<u8> {
        if handle < slab::LARGE_HANDLES_FROM {
            // SAFETY: the caller's live small handle; the table lives as long as the
            // arena, which `self.slab` keeps alive.
            return unsafe { slab::decode_small(self.region_bases, handle) };
        }
        // SAFETY: the caller's live large handle of this arena.
        unsafe { self.slab.quota().arena().pointer_of(handle) }
    }

    /// Takes `tuple`'s reference and returns its handle (never 0).
    #[inline]
    pub fn pack(&self, tuple: Tuple) -> u32 {
        let tuple = match tuple.handle_in(self.slab.quota()) {
            Some(handle) => {
                tuple.into_raw();
                return handle;
            }
            // Another shard's tuple (a caller that moved it here): a leaf can only name
            // this arena's, so it keeps a copy.
            None => tuple.copy_into_past_limit(&self.slab),
        };
        match tuple.handle_in(self.slab.quota()) {
            Some(handle) => {
                tuple.into_raw();
                handle
            }
            None => unreachable!("a tuple of this arena has a handle in it"),
        }
    }

    /// Gives back the tuple of `handle` with the reference `pack` took.
    ///
    /// # Safety
    ///
    /// `handle` came from `pack` and is unpacked once.
    #[inline]
    pub unsafe fn unpack(&self, handle: u32) -> Tuple {
        // SAFETY: the handle holds the reference `pack` took over, given back once.
        unsafe { Tuple::from_raw(self.pointer(handle)) }
    }

    /// The tuple of `handle`, lent.
    ///
    /// # Safety
    ///
    /// `handle` came from `pack` and is not yet unpacked; the tuple is lent no longer
    /// than the handle holds its reference.
    #[inline]
    pub unsafe fn get(&self, handle: u32) -> TupleRef<'_> {
        // SAFETY: as the caller promises.
        unsafe { TupleRef::from_raw(self.pointer(handle)) }
    }
}

/// The tuples of one TREE index keyed by one unsigned part: handles of [`ArenaTuples`],
/// the key read from the tuple's field in `key_slot` when hints tie.
#[derive(Clone)]
pub struct UnsignedKeyedTuples {
    tuples: ArenaTuples,
    key_slot: FieldSlot,
}

impl UnsignedKeyedTuples {
    /// The tuples of `slab`'s arena, keyed by the unsigned field in `key_slot`.
    pub fn new(slab: &TupleSlab, key_slot: FieldSlot) -> UnsignedKeyedTuples {
        UnsignedKeyedTuples {
            tuples: ArenaTuples::new(slab),
            key_slot,
        }
    }
}

impl crate::storage::btree::Store for UnsignedKeyedTuples {
    type Value = Tuple;
    type Ref<'a> = TupleRef<'a>;

    #[inline]
    fn pack(&self, key: u64, tuple: Tuple) -> u32 {
        debug_assert_eq!(
            tuple
                .field_in_slot(self.key_slot)
                .and_then(msgpack::leading_uint)
                .map(|(value, _)| value),
            Some(key),
            "a tuple goes under its own key"
        );
        self.tuples.pack(tuple)
    }

    #[inline]
    unsafe fn unpack(&self, handle: u32) -> Tuple {
        // SAFETY: the caller's handle, unpacked once.
        unsafe { self.tuples.unpack(handle) }
    }

    #[inline]
    unsafe fn get(&self, handle: u32) -> TupleRef<'_> {
        // SAFETY: the tree holds the handle's reference for as long as it lends it.
        unsafe { self.tuples.get(handle) }
    }

    #[inline]
    unsafe fn key(&self, handle: u32) -> u64 {
        // SAFETY: the caller's live handle.
        let tuple = unsafe { self.get(handle) };
        let key = tuple
            .field_in_slot(self.key_slot)
            .and_then(msgpack::leading_uint)
            .map(|(key, _)| key);
        debug_assert!(key.is_some(), "a stored tuple has its unsigned key");
        key.unwrap_or(0)
    }
}

impl crate::storage::btree::bytes::KeyStore for crate::storage::index::TreeTuples {
    type Value = Tuple;
    type Ref<'a> = TupleRef<'a>;

    #[inline]
    fn pack(&self, tuple: Tuple) -> u32 {
        self.tuples.pack(tuple)
    }

    #[inline]
    unsafe fn unpack(&self, handle: u32) -> Tuple {
        // SAFETY: the caller's handle, unpacked once.
        unsafe { self.tuples.unpack(handle) }
    }

    #[inline]
    unsafe fn get(&self, handle: u32) -> TupleRef<'_> {
        // SAFETY: the tree holds the handle's reference for as long as it lends it.
        unsafe { self.tuples.get(handle) }
    }

    #[inline]
    unsafe fn write_key(&self, handle: u32, out: &mut crate::storage::key::SearchKeyBuf) {
        // SAFETY: the caller's live handle.
        let tuple = unsafe { self.tuples.get(handle) };
        self.write(&tuple, out);
    }

    #[inline]
    fn shortest_key(&self) -> usize {
        self.shortest_key
    }
}

/// Tarantool's ER_MEMORY_ISSUE for a tuple of `size_bytes` that the quota has no room for.
pub fn out_of_memory(size_bytes: usize) -> StorageError {
    StorageError::MemoryIssue {
        size_bytes: size_bytes as u64,
        allocator: "slab allocator",
        purpose: "memtx_tuple",
    }
}

/// Bytes of a tuple's object with `slot_count` slots and `data_len` bytes of data.
fn allocation_len(slot_count: usize, data_len: usize) -> usize {
    let long_length_words = usize::from(data_len >= usize::from(LONG_LENGTH));
    HEADER_BYTES + 4 * (slot_count + long_length_words) + data_len
}

impl Clone for Tuple {
    #[inline]
    fn clone(&self) -> Tuple {
        let count = self.references();
        if count != SATURATED_REFERENCES {
            // At 65,534 the count saturates: the tuple stays for good.
            self.set_references(count + 1);
        }
        Tuple(self.0)
    }
}

impl Drop for Tuple {
    #[inline]
    fn drop(&mut self) {
        let count = self.references();
        debug_assert!(count >= 1);
        if count == SATURATED_REFERENCES {
            return;
        }
        if count > 1 {
            self.set_references(count - 1);
            return;
        }
        let bytes = self.allocation_len();
        // SAFETY: this was the last handle, so nothing reads the tuple any more; the
        // object was allocated by `allocate` with these bytes (the header they are
        // computed from is unchanged).
        unsafe { slab::free(self.0, bytes) }
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
            .map(|slot| slot.slot)
            .filter(|&slot| slot != FIRST_FIELD_SLOT)
    }

    /// Assigns a slot to every distinct field number in `indexed_fields`, in first-seen
    /// order; `None` when they need more than [`MAX_FIELD_SLOTS`] slots.
    pub fn new(indexed_fields: impl IntoIterator<Item = u32>) -> Option<FieldMap> {
        FieldMap::default().extended(indexed_fields)
    }

    /// This map with a slot for each of `indexed_fields` that has none, after the slots it
    /// has: a tuple built under this map reads its fields where it read them before, so
    /// the tuples of a space outlive its map growing (see [`Tuple::field_in_slot`]).
    /// `None` when they need more than [`MAX_FIELD_SLOTS`] slots.
    pub fn extended(&self, indexed_fields: impl IntoIterator<Item = u32>) -> Option<FieldMap> {
        let mut map = self.clone();
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
                if usize::from(map.slot_count) >= MAX_FIELD_SLOTS {
                    return None;
                }
                map.slot_of_field[field_no] = map.slot_count;
                map.slot_count += 1;
            }
        }
        Some(map)
    }

    /// Where an indexed field's offset is in the tuples' field map; field 0, which has
    /// none, is named by a slot `Tuple::field_in_slot` finds without one.
    #[inline]
    pub fn slot_of(&self, field_no: u32) -> Option<FieldSlot> {
        match self.slot_of_field.get(field_no as usize) {
            Some(&slot) if slot != NO_SLOT => Some(FieldSlot { slot, field_no }),
            _ => None,
        }
    }
}

/// An indexed field as a tuple finds it: its slot in the field map, and its number for a
/// tuple built before the slot existed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSlot {
    slot: u8,
    field_no: u32,
}

/// The shape a space's tuples must have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// the tuple with its field map, in `slab`. The one allocation of a write is here.
    pub fn build_tuple(
        &self,
        slab: &TupleSlab,
        field_map: &FieldMap,
        data: &[u8],
    ) -> Result<Tuple> {
        let offsets = self.check_tuple(field_map, data)?;
        Tuple::from_parts(slab, data, &offsets)
    }

    /// `build_tuple` of the concatenation of `pieces`, copied once (into the tuple) and
    /// validated there: the same checks and errors as `build_tuple` of the joined bytes.
    pub fn build_tuple_from_pieces<const N: usize>(
        &self,
        slab: &TupleSlab,
        field_map: &FieldMap,
        pieces: &[&[u8]; N],
    ) -> Result<Tuple> {
        Tuple::from_pieces_checked(slab, pieces, field_map.slot_count as usize, |data| {
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

    /// The tuple of `data` that `check_tuple` accepted with these `offsets`, in `slab`.
    pub fn build_checked(
        &self,
        slab: &TupleSlab,
        data: &[u8],
        offsets: &FieldOffsets,
    ) -> Result<Tuple> {
        Tuple::from_parts(slab, data, offsets)
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
    use std::rc::Rc;

    /// A slab of its own quota, unlimited.
    fn slab() -> TupleSlab {
        TupleSlab::new(Rc::new(MemoryQuota::unlimited()))
    }

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
    fn a_grown_field_map_reads_tuples_built_under_the_old_one() {
        let old = FieldMap::new([0, 2]).unwrap();
        let grown = old.extended([1, 2, 1]).unwrap();
        assert_eq!(
            grown.slot_of(2),
            old.slot_of(2),
            "old slots keep their place"
        );
        let data = [0x93, 0x07, 0xa1, b'x', 0x2a];
        let before = kv_format().build_tuple(&slab(), &old, &data).unwrap();
        let after = kv_format().build_tuple(&slab(), &grown, &data).unwrap();
        for tuple in [&before, &after] {
            assert_eq!(
                tuple.field_in_slot(grown.slot_of(1).unwrap()),
                Some(&[0xa1, b'x', 0x2a][..])
            );
            assert_eq!(
                tuple.field_in_slot(grown.slot_of(2).unwrap()),
                Some(&[0x2a][..])
            );
        }
        let short = SpaceFormat::default()
            .build_tuple(&slab(), &old, &[0x91, 0x07])
            .unwrap();
        assert_eq!(short.field_in_slot(grown.slot_of(1).unwrap()), None);
        let too_many = FieldMap::new(0..MAX_FIELD_SLOTS as u32 + 1).unwrap();
        assert!(too_many.extended([MAX_FIELD_SLOTS as u32 + 1]).is_none());
    }

    #[test]
    fn field_map_reaches_indexed_fields_directly() {
        let map = FieldMap::new([2, 0, 2]).unwrap();
        let tuple = kv_format()
            .build_tuple(&slab(), &map, &[0x93, 0x07, 0xa1, b'x', 0x2a])
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
            .build_tuple(&slab(), &map, &[0x92, 0x07, 0xa1, b'x'])
            .unwrap();
        assert_eq!(short.field_in_slot(map.slot_of(2).unwrap()), None);
        assert_eq!(short.field_count(), 2);
    }

    #[test]
    fn a_kv_tuple_takes_116_bytes() {
        // The handle is one pointer, and `None` fits its niche.
        assert_eq!(std::mem::size_of::<Tuple>(), 8);
        assert_eq!(std::mem::size_of::<Option<Tuple>>(), 8);
        assert_eq!(std::mem::size_of::<TupleRef<'_>>(), 8);
        let format = SpaceFormat::new(vec![
            FieldDef::new("id", FieldType::Unsigned),
            FieldDef::new("bucket_id", FieldType::Unsigned),
            FieldDef::new("value", FieldType::String),
        ]);
        let mut data = vec![0x93, 0xce, 0, 0x0f, 0x42, 0x40, 0xcd, 0x0b, 0xb8, 0xd9, 100];
        data.extend([b'v'; 100]);
        assert_eq!(data.len(), 111);
        // Field 0 takes no slot: the primary key is found from the array's header.
        let map = FieldMap::new([0]).unwrap();
        assert_eq!(map.slot_count, 0);
        let slab = slab();
        let tuple = format.build_tuple(&slab, &map, &data).unwrap();
        assert_eq!(tuple.allocation_len(), HEADER_BYTES + 111);
        assert_eq!(HEADER_BYTES + 111, 116);
        assert_eq!(tuple.allocated_bytes(), 116);
        assert_eq!(
            tuple.field_in_slot(map.slot_of(0).unwrap()),
            Some(&data[1..])
        );
        let pieces = format
            .build_tuple_from_pieces(&slab, &map, &[&data[..6], &data[6..9], &data[9..]])
            .unwrap();
        assert_eq!(pieces.data(), &data[..]);
        let shared = pieces.clone();
        assert_eq!(shared.references(), 2);
        drop(pieces);
        assert_eq!(shared.references(), 1);
        assert!(Tuple::ptr_eq(&shared, &shared.clone()));
    }

    /// A tuple of `len` bytes of data: `[id, "xx…"]` with a string of the rest.
    fn sized_tuple(id: u64, len: usize) -> Vec<u8> {
        let mut data = vec![0x92];
        msgpack::write_uint(&mut data, id);
        let string_len = len - data.len() - 5;
        data.push(0xdb);
        data.extend((string_len as u32).to_be_bytes());
        data.extend(std::iter::repeat_n(b'x', string_len));
        assert_eq!(data.len(), len);
        data
    }

    #[test]
    fn short_long_and_large_tuples_keep_their_bytes_and_fields() {
        let quota = Rc::new(MemoryQuota::unlimited());
        let slab = TupleSlab::new(quota.clone());
        let map = FieldMap::new([0, 1]).unwrap();
        let format = SpaceFormat::default();
        // Short (a page slot), large (its own allocation), long (its length in a word).
        for len in [16, 8_000, 9_000, 65_534, 65_535, 65_536, 200_000] {
            let data = sized_tuple(7, len);
            let tuple = format.build_tuple(&slab, &map, &data).unwrap();
            assert_eq!(tuple.data(), &data[..], "{len}");
            assert_eq!(tuple.data_len(), len);
            assert_eq!(tuple.slot_count(), 1, "{len}");
            let long = usize::from(len >= 65_535);
            assert_eq!(tuple.allocation_len(), 5 + 4 * (1 + long) + len, "{len}");
            assert_eq!(
                tuple.field_in_slot(map.slot_of(0).unwrap()),
                Some(&data[1..])
            );
            assert_eq!(
                tuple.field_in_slot(map.slot_of(1).unwrap()),
                Some(&data[2..])
            );
            assert!(tuple.handle_in(&quota).is_some());
            let held = slab.held_bytes();
            assert!(held >= tuple.allocated_bytes(), "{len}");
            drop(tuple);
            assert_eq!(slab.held_bytes(), 0, "{len}: freed whole");
        }
        assert_eq!(quota.used_bytes(), 0);
    }

    #[test]
    fn a_reference_count_saturates_and_keeps_the_tuple() {
        let quota = Rc::new(MemoryQuota::unlimited());
        let slab = TupleSlab::new(quota.clone());
        let tuple = SpaceFormat::default()
            .build_tuple(&slab, &FieldMap::default(), &[0x91, 0x01])
            .unwrap();
        let mut handles: Vec<Tuple> = (1..u32::from(u16::MAX)).map(|_| tuple.clone()).collect();
        assert_eq!(tuple.references(), SATURATED_REFERENCES);
        handles.push(tuple.clone());
        assert_eq!(tuple.references(), SATURATED_REFERENCES);
        drop(handles);
        drop(tuple);
        // Never freed: its page stays.
        assert_eq!(slab.held_bytes(), slab::SUB_PAGE_BYTES);
    }

    #[test]
    fn a_tuple_of_another_arena_is_copied_and_a_borrowed_one_outlives_nothing() {
        let (here, there) = (
            Rc::new(MemoryQuota::unlimited()),
            Rc::new(MemoryQuota::unlimited()),
        );
        let (ours, theirs) = (TupleSlab::new(here.clone()), TupleSlab::new(there.clone()));
        let format = SpaceFormat::default();
        let map = FieldMap::new([0]).unwrap();
        let foreign = format
            .build_tuple(&theirs, &map, &[0x92, 0x05, 0xa1, b'x'])
            .unwrap();
        assert_eq!(foreign.handle_in(&here), None);
        let adopted = foreign.clone().adopted_by(&ours).unwrap();
        assert!(!Tuple::ptr_eq(&adopted, &foreign));
        assert_eq!(adopted.data(), foreign.data());
        assert_eq!(adopted.references(), 1);
        assert!(adopted.handle_in(&here).is_some());
        let own = adopted.clone().adopted_by(&ours).unwrap();
        assert!(
            Tuple::ptr_eq(&own, &adopted),
            "a tuple of this arena stays itself"
        );
        // A borrowed tuple reads as the tuple and takes no reference until owned.
        let borrowed = TupleRef::from(&own);
        assert_eq!(borrowed.data(), own.data());
        assert_eq!(own.references(), 2);
        let owned = borrowed.to_tuple();
        assert_eq!(own.references(), 3);
        drop((owned, own, adopted));
        assert_eq!(ours.held_bytes(), 0);
        drop(foreign);
        assert_eq!(there.used_bytes(), 0);
    }

    #[test]
    fn field_zero_is_found_behind_every_array_header() {
        let map = FieldMap::new([1, 0]).unwrap();
        let format = SpaceFormat::default();
        for data in [
            vec![0x92, 0x07, 0x08],
            vec![0xdc, 0x00, 0x02, 0x07, 0x08],
            vec![0xdd, 0x00, 0x00, 0x00, 0x02, 0x07, 0x08],
        ] {
            let tuple = format.build_tuple(&slab(), &map, &data).unwrap();
            let first = tuple.field_in_slot(map.slot_of(0).unwrap());
            assert_eq!(first, Some(&[0x07, 0x08][..]), "{data:x?}");
            let second = tuple.field_in_slot(map.slot_of(1).unwrap());
            assert_eq!(second, Some(&[0x08][..]), "{data:x?}");
        }
        for empty in [vec![0x90], vec![0xdc, 0, 0], vec![0xdd, 0, 0, 0, 0]] {
            let tuple = format.build_tuple(&slab(), &map, &empty).unwrap();
            assert_eq!(tuple.field_in_slot(map.slot_of(0).unwrap()), None);
            assert_eq!(tuple.field_in_slot(map.slot_of(1).unwrap()), None);
        }
    }

    #[test]
    fn validation_errors_are_tarantools() {
        let map = FieldMap::new([0]).unwrap();
        let format = kv_format();
        let err = format
            .build_tuple(&slab(), &map, &[0x92, 0xa1, b'x', 0x01])
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
        let err = format
            .build_tuple(&slab(), &map, &[0x91, 0x01])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Tuple field 2 (name) required by space format is missing"
        );
        let err = format.build_tuple(&slab(), &map, &[0x01]).unwrap_err();
        assert_eq!(err, StorageError::TupleNotArray);
        let err = format
            .build_tuple(&slab(), &map, &[0x92, 0xc0, 0xa0])
            .unwrap_err();
        assert!(
            err.to_string().ends_with("expected unsigned, got nil"),
            "{err}"
        );
        // Nullable fields take nil; fields beyond the format take anything.
        format
            .build_tuple(&slab(), &map, &[0x94, 0x01, 0xa0, 0xc0, 0x92, 0x01, 0x02])
            .unwrap();
    }

    #[test]
    fn exact_field_count_is_enforced_when_set() {
        let mut format = kv_format();
        format.exact_field_count = 3;
        let err = format
            .build_tuple(&slab(), &FieldMap::default(), &[0x92, 0x01, 0xa0])
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
            format
                .build_tuple(&slab(), &map, &[0x91, 0x01, 0x02])
                .unwrap_err(),
            StorageError::InvalidMsgpack("tuple")
        );
        assert!(format.build_tuple(&slab(), &map, &[0x92, 0x01]).is_err());
    }
}
