//! Where tuples live: one arena per shard, cut into pages, and a slab per space that keeps
//! the space's tuples in those pages by size class.
//!
//! # Why
//!
//! A tuple used to be one `malloc` each: glibc adds an 8-byte size word and rounds the
//! chunk up to 16, so a kv tuple of 116 bytes (5-byte header, 111 bytes of MessagePack)
//! took a 128-byte chunk, and an index entry had to hold a whole 8-byte pointer to it. Here
//! an object carries no header of its own: its page is found from its address, so a kv
//! tuple takes 116 bytes; and every object has a 32-bit [handle](#handles), which is what
//! a TREE index's leaf stores.
//!
//! # Layout
//!
//! The arena takes memory a region at a time: 2 MiB, aligned to 2 MiB (one transparent
//! huge page where the process gets them), cut into 32 pages of 64 KiB. Regions come from
//! a [`RegionSource`]: the global allocator unless the program installs another. The
//! server maps them from the kernel itself (`server::os::heap`): glibc's aligned
//! allocation writes its chunk header just before the region, in the huge page below it,
//! and with transparent huge pages that page was faulted in whole for 16 bytes, a second
//! 2 MiB per region (measured: 168 bytes per kv tuple instead of 126).
//! A page holds the objects of one size class of one space's slab, after a 64-byte header
//! at its start, so `address & !(PAGE_BYTES - 1)` of any object is its page's header.
//! Objects up to [`MAX_SMALL_BYTES`] live in pages; a larger one is an allocation of its
//! own behind a 16-byte header (an 8 KiB tuple pays 0.2% for it).
//!
//! A class's first four pages are sub-pages of 4 KiB, each with a header of its own: a page
//! is split into sixteen when a class needs one, and its header says so, so the header of
//! an object's page is found with one more mask when the page is split. Without them a
//! space with a few tuples of each of many sizes took a 64 KiB page per size: the shipped
//! schema's system spaces (20 rows over 22 classes) held 1.4 MiB per shard, where they
//! hold 88 KiB in sub-pages. A sub-page's header and slack cost more per tuple than a
//! page's (a sub-page holds 34 kv tuples), which matters only until a class outgrows its
//! four sub-pages (16 KiB) and takes whole pages.
//!
//! Size classes are every multiple of 4 bytes up to 512, then 16 classes per power of two
//! up to 8 KiB (a class is at most 1/16 larger than what it holds): 192 classes. A kv page
//! holds (65,536 - 64) / 116 = 564 tuples and leaves 48 bytes over, so the page's header
//! and slack cost (64 + 48) / 564 = 0.2 bytes per tuple: 116.2 bytes where malloc took 128.
//!
//! # Handles
//!
//! A handle names an object in 32 bits. Below [`LARGE_HANDLES_FROM`] it is a region id
//! (13 bits, at most 7,680 regions: 15 GiB of pages per shard) and the object's offset in
//! its region in 4-byte units (19 bits: 2 MiB / 4): one load from a table of region
//! addresses that never moves and a shift turn it into a pointer. From
//! `LARGE_HANDLES_FROM` on it indexes the table of large objects (2^28 of them). Handle 0
//! is never an object's (offset 0 of a region is its first page's header).
//!
//! # The quota
//!
//! The shard's [`MemoryQuota`] is charged for every page a slab holds (64 KiB, or 4 KiB
//! for a sub-page, whatever is in it) and for every large object's allocation: what the process holds for tuples,
//! not the bytes of the tuples. A page is taken from the quota when a class needs room
//! and there is none in its pages, which is when an allocation can be refused; it goes
//! back when its last object is freed.
//!
//! # Fragmentation and returning memory
//!
//! A freed object's slot goes on its page's free list and is the next one its class hands
//! out from that page. A class allocates from the first page of its list of pages with
//! room; a full page that gets a slot back goes to the front of that list, so slots freed
//! here and there are filled again before a fresh page is started, and pages whose tuples
//! go away drain. Freed room is reused only by its own class of its own space while the
//! page holds any object: deleting every other tuple leaves the pages half full, and
//! charged in full, until writes of that size fill them or their last tuples go. An empty
//! page goes back to the arena's free pages (an empty sub-page to the free sub-pages, and
//! its page with them once all sixteen are free), reused first by any class of any space;
//! a region whose pages are all free is returned to its source, but for the arena's last
//! region, kept so that a small shard does not map and unmap one over and over. Free
//! pages are not counted by the quota: resident memory can exceed it by the free pages of
//! regions that still hold some used page.
//!
//! # Lifetime
//!
//! Each page a slab holds and each large object keeps one count on the quota's `Rc`, so
//! the arena (inside the quota) outlives every object in it, however the shard's parts are
//! dropped; a slab's class lists live in the arena for as long as it does.
//!
//! Single-threaded, as everything of a shard is: nothing here is `Send` or `Sync`.

use crate::storage::memory::MemoryQuota;
use crate::storage::prefetch::prefetch_line;
use std::alloc::Layout;
use std::cell::{Cell, UnsafeCell};
use std::ptr::{null_mut, NonNull};
use std::rc::Rc;

/// Bytes of a page, and its alignment.
pub const PAGE_BYTES: usize = 1 << 16;
const PAGES_PER_REGION: usize = 32;
/// Bytes of a region, and its alignment.
pub const REGION_BYTES: usize = PAGE_BYTES * PAGES_PER_REGION;
/// Bytes at the start of each page (and sub-page) for its [`Page`] header; its first slot
/// follows.
const PAGE_HEADER_BYTES: usize = 64;
/// Bytes of a sub-page, and its alignment: a class's first pages are these, so that a
/// space's few tuples of a size do not each take a whole page.
pub const SUB_PAGE_BYTES: usize = 4 << 10;
const SUB_PAGES_PER_PAGE: usize = PAGE_BYTES / SUB_PAGE_BYTES;
/// A class takes sub-pages until it holds this many (16 KiB), whole pages after.
const SUB_PAGES_PER_CLASS: u16 = 4;
/// A class whose sub-page would hold fewer slots than this takes whole pages only.
const SUB_PAGE_SLOTS_MIN: u16 = 4;
/// Object sizes, and so slot offsets, are multiples of this.
pub const GRAIN_BYTES: usize = 4;
/// Objects up to this size live in pages; larger ones are allocated alone.
pub const MAX_SMALL_BYTES: usize = 8 << 10;
/// Up to here the classes are every multiple of [`GRAIN_BYTES`].
const FINE_CLASSES_UP_TO_BYTES: usize = 512;
const FINE_CLASSES: usize = FINE_CLASSES_UP_TO_BYTES / GRAIN_BYTES;
/// Classes per power of two above [`FINE_CLASSES_UP_TO_BYTES`].
const CLASSES_PER_DOUBLING: usize = 16;
/// 512 -> 1 KiB -> 2 KiB -> 4 KiB -> 8 KiB.
const DOUBLINGS: usize = 4;
pub const CLASSES: usize = FINE_CLASSES + DOUBLINGS * CLASSES_PER_DOUBLING;
/// Bits of a small handle that give the offset in the region, in [`GRAIN_BYTES`] units.
const OFFSET_BITS: u32 = (REGION_BYTES / GRAIN_BYTES).trailing_zeros();
const OFFSET_MASK: u32 = (1 << OFFSET_BITS) - 1;
/// Handles from here on name large objects.
pub const LARGE_HANDLES_FROM: u32 = 0xF000_0000;
/// Region ids are below this, so small handles stay below [`LARGE_HANDLES_FROM`].
const MAX_REGIONS: usize = (LARGE_HANDLES_FROM >> OFFSET_BITS) as usize;
/// The most memory of pages one shard's arena can hold (15 GiB): a quota above it cannot be
/// reached, so the server refuses to start with one.
pub const MAX_PAGE_BYTES: u64 = (MAX_REGIONS * REGION_BYTES) as u64;
const MAX_LARGE_OBJECTS: usize = (u32::MAX - LARGE_HANDLES_FROM) as usize + 1;
/// The header before a large object: its slab and its large id.
const LARGE_HEADER_BYTES: usize = 16;
const LARGE_ALIGN: usize = 16;

const _: () = assert!(REGION_BYTES / GRAIN_BYTES == 1 << OFFSET_BITS);
const _: () = assert!(std::mem::size_of::<Page>() <= PAGE_HEADER_BYTES);
const _: () = assert!(std::mem::size_of::<LargeHeader>() == LARGE_HEADER_BYTES);
const _: () = assert!(MAX_SMALL_BYTES * 4 <= PAGE_BYTES - PAGE_HEADER_BYTES);
const _: () = assert!(FINE_CLASSES_UP_TO_BYTES << DOUBLINGS == MAX_SMALL_BYTES);

/// The class of an object of `bytes` bytes (1 to [`MAX_SMALL_BYTES`]): the smallest whose
/// slots hold it.
#[inline]
pub fn class_of(bytes: usize) -> usize {
    debug_assert!((1..=MAX_SMALL_BYTES).contains(&bytes));
    if bytes <= FINE_CLASSES_UP_TO_BYTES {
        return bytes.div_ceil(GRAIN_BYTES) - 1;
    }
    let below = bytes - 1;
    let doubling = (usize::BITS - 1 - below.leading_zeros()) as usize;
    let step_shift = doubling - CLASSES_PER_DOUBLING.trailing_zeros() as usize;
    let first_doubling = FINE_CLASSES_UP_TO_BYTES.trailing_zeros() as usize;
    FINE_CLASSES
        + (doubling - first_doubling) * CLASSES_PER_DOUBLING
        + ((below >> step_shift) - CLASSES_PER_DOUBLING)
}

/// The slot size of `class`.
#[inline]
pub fn class_bytes(class: usize) -> usize {
    debug_assert!(class < CLASSES);
    if class < FINE_CLASSES {
        return (class + 1) * GRAIN_BYTES;
    }
    let coarse = class - FINE_CLASSES;
    let (doubling, step) = (coarse / CLASSES_PER_DOUBLING, coarse % CLASSES_PER_DOUBLING);
    let step_shift = FINE_CLASSES_UP_TO_BYTES.trailing_zeros() as usize + doubling
        - CLASSES_PER_DOUBLING.trailing_zeros() as usize;
    (CLASSES_PER_DOUBLING + step + 1) << step_shift
}

/// Slots of `class` per page.
fn slots_per_page(class: usize) -> u16 {
    ((PAGE_BYTES - PAGE_HEADER_BYTES) / class_bytes(class)) as u16
}

/// Slots of `class` per sub-page.
fn slots_per_sub_page(class: usize) -> u16 {
    ((SUB_PAGE_BYTES - PAGE_HEADER_BYTES) / class_bytes(class)) as u16
}

/// How a page is cut: whole, or into [`SUB_PAGES_PER_PAGE`] sub-pages, each with a
/// header of its own; every sub-page's header says so, the first one's at the page's
/// start, where a whole page's header is.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
enum Cut {
    Whole,
    Split,
}

impl Cut {
    fn bytes(self) -> usize {
        match self {
            Cut::Whole => PAGE_BYTES,
            Cut::Split => SUB_PAGE_BYTES,
        }
    }
}

/// The header at the start of every page (and sub-page) the arena has cut.
#[repr(C)]
struct Page {
    /// The class whose objects this page holds; null while the page is free.
    class: *mut Class,
    /// The links of the one list the page is on: its class's pages with room, or the
    /// arena's free pages (or sub-pages). A full page is on no list.
    next: *mut Page,
    prev: *mut Page,
    /// The quota (and arena) the page belongs to.
    quota: *const MemoryQuota,
    /// The handle of the page's first byte.
    handle_base: u32,
    /// Offset of the first slot never handed out.
    bump: u32,
    /// Offset from the page's start of the first free slot, whose first four bytes hold
    /// the next one's; 0 when there is none.
    free: u16,
    used: u16,
    capacity: u16,
    slot_bytes: u16,
    cut: Cut,
    /// In the first sub-page of a split page: how many of its sub-pages classes hold.
    sub_pages_used: u16,
}

/// One size class of a slab.
struct Class {
    /// The class's pages with a free slot, the one allocations take from first.
    partial: *mut Page,
    slab: *mut SlabState,
    slot_bytes: u16,
    capacity: u16,
    /// Slots per sub-page; a class with too few takes whole pages only.
    sub_capacity: u16,
    /// Sub-pages the class holds.
    sub_pages: u16,
}

/// A space's slab: its classes and what it holds.
pub struct SlabState {
    classes: [Class; CLASSES],
    /// The quota (and arena) the slab belongs to.
    quota: *const MemoryQuota,
    /// Bytes of its pages, sub-pages and large objects.
    held_bytes: usize,
}

/// A region the arena took from the allocator.
struct Region {
    /// Null once the region is given back (its id is then free).
    base: *mut u8,
    /// Pages cut so far, from the start.
    carved: u32,
    /// Pages held by slabs.
    used: u32,
}

/// The header before a large object.
#[repr(C)]
struct LargeHeader {
    slab: *mut SlabState,
    id: u32,
    _reserved: u32,
}

#[derive(Default)]
struct ArenaState {
    regions: Vec<Region>,
    free_region_ids: Vec<u32>,
    /// Regions not given back.
    live_regions: usize,
    /// The region pages are cut from next, while it has uncut ones.
    carving: Option<u32>,
    /// Pages cut and free, doubly linked.
    free_pages: *mut Page,
    free_page_count: usize,
    /// Sub-pages of split pages, free, doubly linked.
    free_sub_pages: *mut Page,
    free_sub_page_count: usize,
    /// Large objects by id (minus [`LARGE_HANDLES_FROM`]); 0 for a free id.
    large: Vec<usize>,
    free_large_ids: Vec<u32>,
    /// Every slab made in the arena, freed with it: pages point into them. Kept as
    /// pointers from `Box::into_raw`, which stay valid where moving a `Box` would not.
    slabs: Vec<NonNull<SlabState>>,
}

impl Default for Page {
    fn default() -> Page {
        Page {
            class: null_mut(),
            next: null_mut(),
            prev: null_mut(),
            quota: std::ptr::null(),
            handle_base: 0,
            bump: 0,
            free: 0,
            used: 0,
            capacity: 0,
            slot_bytes: 0,
            cut: Cut::Whole,
            sub_pages_used: 0,
        }
    }
}

/// Where an arena's regions come from and go back to.
#[derive(Clone, Copy)]
pub struct RegionSource {
    /// A region of [`REGION_BYTES`], aligned to [`REGION_BYTES`], its bytes readable and
    /// writable; null when there is no memory.
    pub allocate: fn() -> *mut u8,
    /// Gives back a region.
    ///
    /// # Safety
    ///
    /// `region` came from `allocate` of this source and nothing uses it any more.
    pub free: unsafe fn(region: *mut u8),
}

/// The source of regions the arenas made from now on take theirs from.
static REGION_SOURCE: std::sync::OnceLock<RegionSource> = std::sync::OnceLock::new();

/// Makes `source` the source of the regions of every arena made from now on (an arena
/// keeps the source it was made with, so it gives its regions back where they came from).
/// Set once, first thing in a program's `main`; `false` if a source was set already.
pub fn set_region_source(source: RegionSource) -> bool {
    REGION_SOURCE.set(source).is_ok()
}

/// Regions from the global allocator, the source unless a program sets another.
const GLOBAL_ALLOCATOR_REGIONS: RegionSource = RegionSource {
    allocate: allocate_region,
    free: free_region_memory,
};

fn allocate_region() -> *mut u8 {
    // SAFETY: the layout's size is REGION_BYTES, not zero.
    unsafe { std::alloc::alloc(region_layout()) }
}

/// # Safety
///
/// As [`RegionSource::free`].
unsafe fn free_region_memory(region: *mut u8) {
    // SAFETY: the region was allocated with this layout (the caller's).
    unsafe { std::alloc::dealloc(region, region_layout()) }
}

/// The memory of one shard's tuples: regions, their pages, the slabs' classes, the tables
/// that turn handles into addresses. Lives inside the shard's [`MemoryQuota`].
pub struct Arena {
    state: UnsafeCell<ArenaState>,
    /// The address of each region by id, 0 for none. Never resized, so a pointer to it
    /// stays valid as long as the arena (see [`Arena::region_bases`]).
    region_bases: Box<[Cell<usize>]>,
    source: RegionSource,
    /// Objects allocated since the arena was made: per request, the analogue of ScyllaDB's
    /// logallocs/op (`perf-simple-query`'s arena-allocs/op).
    allocations: Cell<u64>,
}

impl Default for Arena {
    fn default() -> Arena {
        Arena::new()
    }
}

impl Arena {
    pub fn new() -> Arena {
        Arena {
            state: UnsafeCell::new(ArenaState::default()),
            region_bases: (0..MAX_REGIONS).map(|_| Cell::new(0)).collect(),
            source: *REGION_SOURCE.get().unwrap_or(&GLOBAL_ALLOCATOR_REGIONS),
            allocations: Cell::new(0),
        }
    }

    /// The arena's state, for the one function that holds it at a time.
    ///
    /// # Safety
    ///
    /// No other reference to the state is alive while the returned one is used: the
    /// arena is single-threaded and its functions do not call each other while they hold
    /// it.
    #[allow(clippy::mut_from_ref)]
    unsafe fn state(&self) -> &mut ArenaState {
        // SAFETY: the caller holds no other reference to the state (see above).
        unsafe { &mut *self.state.get() }
    }

    /// Objects allocated in the arena since it was made, small and large.
    pub fn allocations(&self) -> u64 {
        self.allocations.get()
    }

    /// The table of region addresses by id, for decoding handles with one load: valid as
    /// long as the arena, never moved.
    pub fn region_bases(&self) -> *const Cell<usize> {
        self.region_bases.as_ptr()
    }

    /// Regions held, free pages among them, and large objects: for tests and reports.
    pub fn census(&self) -> ArenaCensus {
        // SAFETY: no other reference to the state is alive during this read.
        let state = unsafe { self.state() };
        ArenaCensus {
            regions: state.live_regions,
            free_pages: state.free_page_count,
            free_sub_pages: state.free_sub_page_count,
            large_objects: state.large.len() - state.free_large_ids.len(),
        }
    }

    /// The object `handle` names.
    ///
    /// # Safety
    ///
    /// `handle` was made by [`Arena::handle_of`] of this arena for an object that is still
    /// allocated.
    #[inline]
    pub unsafe fn pointer_of(&self, handle: u32) -> NonNull<u8> {
        if handle >= LARGE_HANDLES_FROM {
            // SAFETY: a large handle is an index of a live large object (the caller's).
            return unsafe { self.large_pointer(handle) };
        }
        // SAFETY: the table has MAX_REGIONS entries and a small handle's region id is
        // below that; the region holds the object, so its base is set.
        unsafe { decode_small(self.region_bases(), handle) }
    }

    /// The large object `handle` names.
    ///
    /// # Safety
    ///
    /// As [`Arena::pointer_of`], for a large handle.
    #[inline(never)]
    unsafe fn large_pointer(&self, handle: u32) -> NonNull<u8> {
        // SAFETY: no other reference to the state is alive (single-threaded, no call out).
        let state = unsafe { self.state() };
        let address = state.large[(handle - LARGE_HANDLES_FROM) as usize];
        debug_assert_ne!(address, 0, "a live large object");
        // SAFETY: the entry of a live large object is its (non-null) address.
        unsafe { NonNull::new_unchecked(address as *mut u8) }
    }

    /// The handle of the object at `object` of `bytes` bytes (as allocated), if it belongs
    /// to this arena (`quota` is the quota it lives in); `None` for another arena's.
    ///
    /// # Safety
    ///
    /// `object` is a live object that a [`TupleSlab`] allocated with `bytes`.
    #[inline]
    pub unsafe fn handle_of(
        &self,
        quota: *const MemoryQuota,
        object: NonNull<u8>,
        bytes: usize,
    ) -> Option<u32> {
        if bytes > MAX_SMALL_BYTES {
            // SAFETY: a large object is preceded by its header, its slab lives in an arena
            // the object keeps alive.
            let (slab_quota, id) = unsafe {
                let header = &*large_header(object);
                ((*header.slab).quota, header.id)
            };
            return (slab_quota == quota).then_some(LARGE_HANDLES_FROM + id);
        }
        // SAFETY: a small object lies in a page of some arena, whose header is live.
        let page = unsafe { &*page_of(object) };
        if page.quota != quota {
            return None;
        }
        let offset = (object.as_ptr() as usize - page as *const Page as usize) / GRAIN_BYTES;
        Some(page.handle_base + offset as u32)
    }
}

/// Regions held, free pages among them, large objects: what an [`Arena`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaCensus {
    pub regions: usize,
    pub free_pages: usize,
    pub free_sub_pages: usize,
    pub large_objects: usize,
}

/// A small handle's object, from the table of region addresses.
///
/// # Safety
///
/// `handle` is a small handle of a live object of the arena whose table `bases` is.
#[inline(always)]
pub unsafe fn decode_small(bases: *const Cell<usize>, handle: u32) -> NonNull<u8> {
    debug_assert!(handle < LARGE_HANDLES_FROM);
    // SAFETY: the region id is below MAX_REGIONS, the table's length (the caller's).
    let base = unsafe { (*bases.add((handle >> OFFSET_BITS) as usize)).get() };
    let address = base + ((handle & OFFSET_MASK) as usize) * GRAIN_BYTES;
    debug_assert!(base != 0);
    // SAFETY: the base of a live region is a non-null address, and the object lies in it.
    unsafe { NonNull::new_unchecked(address as *mut u8) }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let state = self.state.get_mut();
        debug_assert_eq!(
            state.large.len(),
            state.free_large_ids.len(),
            "every large object holds the arena"
        );
        for region in &state.regions {
            if !region.base.is_null() {
                debug_assert_eq!(region.used, 0, "every used page holds the arena");
                // SAFETY: the region came from this source and is not used (every page a
                // slab holds keeps the arena alive, so none is).
                unsafe { (self.source.free)(region.base) };
            }
        }
        for &slab in &state.slabs {
            // SAFETY: each slab was leaked by `TupleSlab::new` and is freed once, here;
            // nothing refers to it any more (its pages are gone, and every `TupleSlab`
            // held the quota this arena is in).
            drop(unsafe { Box::from_raw(slab.as_ptr()) });
        }
    }
}

fn region_layout() -> Layout {
    Layout::from_size_align(REGION_BYTES, REGION_BYTES).expect("a power of two")
}

/// The page (or sub-page) header of a small object: the header at the start of its
/// 64 KiB-aligned page says whether that page is split, and then the object's 4 KiB-aligned
/// sub-page starts with its own.
///
/// # Safety
///
/// `object` is a live small object of some arena.
#[inline(always)]
unsafe fn page_of(object: NonNull<u8>) -> *mut Page {
    let address = object.as_ptr() as usize;
    let page = (address & !(PAGE_BYTES - 1)) as *mut Page;
    // SAFETY: the object's page is live while the object is; its header is initialised.
    match unsafe { (*page).cut } {
        Cut::Whole => page,
        Cut::Split => (address & !(SUB_PAGE_BYTES - 1)) as *mut Page,
    }
}

#[inline(always)]
fn large_header(object: NonNull<u8>) -> *mut LargeHeader {
    object
        .as_ptr()
        .wrapping_sub(LARGE_HEADER_BYTES)
        .cast::<LargeHeader>()
}

fn large_layout(bytes: usize) -> Option<Layout> {
    Layout::from_size_align(LARGE_HEADER_BYTES.checked_add(bytes)?, LARGE_ALIGN).ok()
}

/// What a large object of `bytes` costs the quota: its allocation as glibc's malloc rounds
/// it (its header, an 8-byte size word, up to 16).
pub fn large_allocation_bytes(bytes: usize) -> usize {
    (LARGE_HEADER_BYTES + bytes + std::mem::size_of::<usize>()).next_multiple_of(16)
}

/// What an object of `bytes` bytes holds: its slot, or its own allocation.
pub fn allocated_bytes(bytes: usize) -> usize {
    if bytes > MAX_SMALL_BYTES {
        large_allocation_bytes(bytes)
    } else {
        class_bytes(class_of(bytes.max(1)))
    }
}

/// One space's slab: allocates its objects in pages of the shard's arena, one size class
/// per page. Dropping it leaves its objects where they are; each frees its slot when it is
/// freed (see [`free`]). A clone is another handle to the same slab.
#[derive(Clone)]
pub struct TupleSlab {
    quota: Rc<MemoryQuota>,
    state: NonNull<SlabState>,
}

impl TupleSlab {
    /// A new slab in the arena of `quota`.
    pub fn new(quota: Rc<MemoryQuota>) -> TupleSlab {
        let slab = Box::new(SlabState {
            classes: std::array::from_fn(|class| Class {
                partial: null_mut(),
                slab: null_mut(),
                slot_bytes: class_bytes(class) as u16,
                capacity: slots_per_page(class),
                sub_capacity: slots_per_sub_page(class),
                sub_pages: 0,
            }),
            quota: Rc::as_ptr(&quota),
            held_bytes: 0,
        });
        let state = NonNull::from(Box::leak(slab));
        // SAFETY: the slab was just leaked, so nothing else refers to it; the arena frees
        // it (`Box::from_raw`) when it is dropped itself. No other reference to the arena's
        // state is alive during the push.
        unsafe {
            for class in &mut (*state.as_ptr()).classes {
                class.slab = state.as_ptr();
            }
            quota.arena().state().slabs.push(state);
        }
        TupleSlab { quota, state }
    }

    pub fn quota(&self) -> &Rc<MemoryQuota> {
        &self.quota
    }

    /// Bytes this slab holds: its pages and sub-pages, whole, and its large objects'
    /// allocations.
    pub fn held_bytes(&self) -> usize {
        // SAFETY: the state lives in the arena, which `self.quota` keeps alive; only
        // shared reads here.
        unsafe { self.state.as_ref() }.held_bytes
    }

    /// Whether an object of `bytes` fits in a page the slab holds, and what the page its
    /// class takes next costs otherwise: for tests that predict a refusal.
    pub fn room_for(&self, bytes: usize) -> Result<(), usize> {
        let bytes = bytes.max(1);
        if bytes > MAX_SMALL_BYTES {
            return Err(large_allocation_bytes(bytes));
        }
        // SAFETY: as in `held_bytes`.
        let class = &unsafe { self.state.as_ref() }.classes[class_of(bytes)];
        match class.partial.is_null() {
            false => Ok(()),
            true => Err(next_page_cut(class).bytes()),
        }
    }

    /// Room for an object of `bytes` bytes (at least 1), aligned to [`GRAIN_BYTES`];
    /// `None` when it would take memory past the quota (or the arena or the allocator has
    /// none). Its first [`GRAIN_BYTES`] bytes may hold anything.
    #[inline]
    pub fn allocate(&self, bytes: usize) -> Option<NonNull<u8>> {
        self.allocate_charging(bytes, Charge::WithinLimit)
    }

    /// [`TupleSlab::allocate`] that takes its memory even past the quota's limit: for a
    /// copy of an object that must not fail (see [`Charge::PastLimit`]).
    pub fn allocate_past_limit(&self, bytes: usize) -> Option<NonNull<u8>> {
        self.allocate_charging(bytes, Charge::PastLimit)
    }

    #[inline]
    fn allocate_charging(&self, bytes: usize, charge: Charge) -> Option<NonNull<u8>> {
        let allocations = &self.quota.arena().allocations;
        allocations.set(allocations.get() + 1);
        let bytes = bytes.max(1);
        if bytes > MAX_SMALL_BYTES {
            return self.allocate_large(bytes, charge);
        }
        let quota = Rc::as_ptr(&self.quota);
        // SAFETY: the class is this slab's, in the arena `self.quota` keeps alive; no
        // other reference into the slab or arena is held during the call.
        unsafe {
            let class = &raw mut (*self.state.as_ptr()).classes[class_of(bytes)];
            allocate_in(class, quota, charge)
        }
    }

    #[inline(never)]
    fn allocate_large(&self, bytes: usize, charge: Charge) -> Option<NonNull<u8>> {
        let layout = large_layout(bytes)?;
        let charged = large_allocation_bytes(bytes);
        if !charge.reserve(&self.quota, charged) {
            return None;
        }
        // SAFETY: no other reference to the arena's state is alive during this call.
        let state = unsafe { self.quota.arena().state() };
        let id = match state.free_large_ids.pop() {
            Some(id) => id,
            None if state.large.len() < MAX_LARGE_OBJECTS => {
                state.large.push(0);
                (state.large.len() - 1) as u32
            }
            None => {
                self.quota.release(charged as u64);
                return None;
            }
        };
        // SAFETY: the layout's size is at least LARGE_HEADER_BYTES, never zero.
        let Some(start) = NonNull::new(unsafe { std::alloc::alloc(layout) }) else {
            state.free_large_ids.push(id);
            self.quota.release(charged as u64);
            return None;
        };
        // SAFETY: the allocation starts with room for the header, aligned for it.
        let object = unsafe {
            start.as_ptr().cast::<LargeHeader>().write(LargeHeader {
                slab: self.state.as_ptr(),
                id,
                _reserved: 0,
            });
            NonNull::new_unchecked(start.as_ptr().add(LARGE_HEADER_BYTES))
        };
        state.large[id as usize] = object.as_ptr() as usize;
        // SAFETY: the state lives in the arena; no other reference to it is alive.
        unsafe { (*self.state.as_ptr()).held_bytes += charged };
        // SAFETY: `self.quota` is a live `Rc`: the object holds one more count on it,
        // given back by `free_large`.
        unsafe { Rc::increment_strong_count(Rc::as_ptr(&self.quota)) };
        Some(object)
    }
}

/// How an allocation's new memory is charged to the quota.
#[derive(Clone, Copy)]
enum Charge {
    /// Refused when it does not fit: a write's.
    WithinLimit,
    /// Taken even past the limit: for memory the caller must have, such as a copy of a
    /// tuple it already holds (it is charged, and later writes see the quota full).
    PastLimit,
}

impl Charge {
    fn reserve(self, quota: &MemoryQuota, bytes: usize) -> bool {
        match self {
            Charge::WithinLimit => quota.try_reserve(bytes as u64),
            Charge::PastLimit => {
                quota.reserve_past_limit(bytes as u64);
                true
            }
        }
    }
}

/// Takes a slot of `class`, starting a page if its pages are full.
///
/// # Safety
///
/// `class` is a class of a slab of the arena inside `*quota`, which is alive (a live `Rc`
/// holds it); no reference into the slab, its pages or the arena is alive.
#[inline]
unsafe fn allocate_in(
    class: *mut Class,
    quota: *const MemoryQuota,
    charge: Charge,
) -> Option<NonNull<u8>> {
    // SAFETY: the caller's class; its first page with room, if any, is a live page of it.
    unsafe {
        let mut page = (*class).partial;
        if page.is_null() {
            page = take_page(class, quota, charge)?;
        }
        let offset = if (*page).free != 0 {
            let offset = usize::from((*page).free);
            (*page).free = page.cast::<u8>().add(offset).cast::<u16>().read();
            offset
        } else {
            let offset = (*page).bump as usize;
            (*page).bump += u32::from((*page).slot_bytes);
            offset
        };
        (*page).used += 1;
        if (*page).used == (*page).capacity {
            unlink(&mut (*class).partial, page);
        }
        Some(NonNull::new_unchecked(page.cast::<u8>().add(offset)))
    }
}

/// Frees an object a [`TupleSlab`] allocated: its slot goes back to its page, and the page
/// to the arena if it was the last.
///
/// # Safety
///
/// `object` was allocated with `bytes` by a [`TupleSlab`], is not freed yet, and is not
/// used again.
#[inline]
pub unsafe fn free(object: NonNull<u8>, bytes: usize) {
    if bytes.max(1) > MAX_SMALL_BYTES {
        // SAFETY: the caller's large object.
        unsafe { free_large(object, bytes) };
        return;
    }
    // SAFETY: a small object lies in a live page of a slab (the page is held while it has
    // objects); nothing else holds a reference into the page or its class.
    unsafe {
        let page = page_of(object);
        let offset = (object.as_ptr() as usize - page as usize) as u16;
        object.as_ptr().cast::<u16>().write((*page).free);
        (*page).free = offset;
        let was_full = (*page).used == (*page).capacity;
        (*page).used -= 1;
        let class = (*page).class;
        if (*page).used == 0 {
            if !was_full {
                unlink(&mut (*class).partial, page);
            }
            return_page(page);
        } else if was_full {
            push_front(&mut (*class).partial, page);
        }
    }
}

/// Starts fetching what freeing `object` will touch: its page's header and, if the page
/// is split, its sub-page's (the object's own first bytes the caller reads anyway).
#[inline]
pub fn prefetch_for_free(object: NonNull<u8>, bytes: usize) {
    if bytes <= MAX_SMALL_BYTES {
        let address = object.as_ptr().cast_const();
        let offset = address as usize;
        prefetch_line(address.wrapping_sub(offset & (PAGE_BYTES - 1)));
        prefetch_line(address.wrapping_sub(offset & (SUB_PAGE_BYTES - 1)));
    }
}

/// # Safety
///
/// As [`free`], for an object larger than [`MAX_SMALL_BYTES`].
#[inline(never)]
unsafe fn free_large(object: NonNull<u8>, bytes: usize) {
    // SAFETY: a large object is preceded by its header, written at allocation; its slab
    // and quota are alive (the object holds a count on the quota, whose arena holds the
    // slab).
    unsafe {
        let header = large_header(object);
        let slab = (*header).slab;
        let id = (*header).id;
        let quota = (*slab).quota;
        let charged = large_allocation_bytes(bytes);
        {
            let state = (*quota).arena().state();
            state.large[id as usize] = 0;
            state.free_large_ids.push(id);
        }
        (*slab).held_bytes -= charged;
        (*quota).release(charged as u64);
        if let Some(layout) = large_layout(bytes) {
            std::alloc::dealloc(header.cast(), layout);
        }
        Rc::decrement_strong_count(quota);
    }
}

/// How the next page `class` takes is cut: a sub-page while it holds fewer than
/// [`SUB_PAGES_PER_CLASS`] and a sub-page holds enough of its slots, else a whole page.
fn next_page_cut(class: &Class) -> Cut {
    if class.sub_capacity >= SUB_PAGE_SLOTS_MIN && class.sub_pages < SUB_PAGES_PER_CLASS {
        Cut::Split
    } else {
        Cut::Whole
    }
}

/// A page (or sub-page) for `class`, put first on its list of pages with room: a free one
/// of the arena, or one cut from a region. Charged to the quota (refused when it does not
/// fit).
///
/// # Safety
///
/// As [`allocate_in`].
#[inline(never)]
unsafe fn take_page(
    class: *mut Class,
    quota: *const MemoryQuota,
    charge: Charge,
) -> Option<*mut Page> {
    // SAFETY: the caller's live quota and class; the arena's state is borrowed only in the
    // calls that take it.
    unsafe {
        let cut = next_page_cut(&*class);
        if !charge.reserve(&*quota, cut.bytes()) {
            return None;
        }
        let arena = (*quota).arena();
        let page = match cut {
            Cut::Whole => free_or_new_page(arena, quota).inspect(|&page| {
                let state = arena.state();
                state.regions[((*page).handle_base >> OFFSET_BITS) as usize].used += 1;
            }),
            Cut::Split => free_or_new_sub_page(arena, quota).inspect(|_| {
                (*class).sub_pages += 1;
            }),
        };
        let Some(page) = page else {
            (*quota).release(cut.bytes() as u64);
            return None;
        };
        (*page).class = class;
        (*page).free = 0;
        (*page).bump = PAGE_HEADER_BYTES as u32;
        (*page).used = 0;
        (*page).capacity = match cut {
            Cut::Whole => (*class).capacity,
            Cut::Split => (*class).sub_capacity,
        };
        (*page).slot_bytes = (*class).slot_bytes;
        push_front(&mut (*class).partial, page);
        (*(*class).slab).held_bytes += cut.bytes();
        // The page holds one count on the quota's `Rc` until it is free again.
        Rc::increment_strong_count(quota);
        Some(page)
    }
}

/// A free sub-page of the arena, or the first of a free page split for it (the others
/// become free sub-pages); not on any list, its class unset. The split page counts as
/// used in its region until all its sub-pages are free again.
///
/// # Safety
///
/// As [`free_or_new_page`].
unsafe fn free_or_new_sub_page(arena: &Arena, quota: *const MemoryQuota) -> Option<*mut Page> {
    // SAFETY: the caller's; the state is borrowed in one call at a time, the pages taken
    // from it are live pages of this arena.
    unsafe {
        {
            let state = arena.state();
            if !state.free_sub_pages.is_null() {
                let sub_page = state.free_sub_pages;
                unlink(&mut state.free_sub_pages, sub_page);
                state.free_sub_page_count -= 1;
                (*first_sub_page(sub_page)).sub_pages_used += 1;
                return Some(sub_page);
            }
        }
        let page = free_or_new_page(arena, quota)?;
        let state = arena.state();
        let handle_base = (*page).handle_base;
        state.regions[(handle_base >> OFFSET_BITS) as usize].used += 1;
        for index in 0..SUB_PAGES_PER_PAGE {
            let sub_page = page.cast::<u8>().add(index * SUB_PAGE_BYTES).cast::<Page>();
            sub_page.write(Page {
                quota,
                handle_base: handle_base + (index * SUB_PAGE_BYTES / GRAIN_BYTES) as u32,
                cut: Cut::Split,
                ..Page::default()
            });
            if index > 0 {
                push_front(&mut state.free_sub_pages, sub_page);
                state.free_sub_page_count += 1;
            }
        }
        (*page).sub_pages_used = 1;
        Some(page)
    }
}

/// The first sub-page of the page `sub_page` was cut from, which counts their use.
fn first_sub_page(sub_page: *mut Page) -> *mut Page {
    (sub_page as usize & !(PAGE_BYTES - 1)) as *mut Page
}

/// A free page of the arena, or one cut from a region (a new one if need be); not on any
/// list, its class unset.
///
/// # Safety
///
/// `arena` is the arena inside `*quota`; no other reference to its state is alive.
unsafe fn free_or_new_page(arena: &Arena, quota: *const MemoryQuota) -> Option<*mut Page> {
    // SAFETY: the caller's; the state is borrowed only in this call.
    let state = unsafe { arena.state() };
    if !state.free_pages.is_null() {
        let page = state.free_pages;
        // SAFETY: a page on the free list is a live page of this arena.
        unsafe { unlink(&mut state.free_pages, page) };
        state.free_page_count -= 1;
        return Some(page);
    }
    let id = match state.carving {
        Some(id) => id,
        None => {
            let id = new_region(arena, state)?;
            state.carving = Some(id);
            id
        }
    };
    let region = &mut state.regions[id as usize];
    let index = region.carved as usize;
    region.carved += 1;
    if region.carved as usize == PAGES_PER_REGION {
        state.carving = None;
    }
    // SAFETY: page `index` lies within the region, which is live.
    let page = unsafe { region.base.add(index * PAGE_BYTES) }.cast::<Page>();
    let handle_base = (id << OFFSET_BITS) | ((index * PAGE_BYTES / GRAIN_BYTES) as u32);
    // SAFETY: the page's first bytes are its header's, aligned for it, owned by the arena.
    unsafe {
        page.write(Page {
            quota,
            handle_base,
            ..Page::default()
        })
    };
    Some(page)
}

/// Takes a region from the allocator; its id.
fn new_region(arena: &Arena, state: &mut ArenaState) -> Option<u32> {
    let id = match state.free_region_ids.pop() {
        Some(id) => id,
        None if state.regions.len() < MAX_REGIONS => {
            state.regions.push(Region {
                base: null_mut(),
                carved: 0,
                used: 0,
            });
            (state.regions.len() - 1) as u32
        }
        None => return None,
    };
    let base = (arena.source.allocate)();
    debug_assert_eq!(base as usize % REGION_BYTES, 0, "regions are aligned");
    if base.is_null() {
        state.free_region_ids.push(id);
        return None;
    }
    state.regions[id as usize] = Region {
        base,
        carved: 0,
        used: 0,
    };
    arena.region_bases[id as usize].set(base as usize);
    state.live_regions += 1;
    Some(id)
}

/// Gives a page (or sub-page) that has no objects left back to the arena: a sub-page to
/// the free sub-pages, and its page with them once all of them are free; a page to the
/// free pages, and its region to its source if that was the region's last used page (and
/// it is not the arena's last). Lets go of the page's count on the quota, last: that may
/// free the arena.
///
/// # Safety
///
/// `page` is a live page on no list, with no objects; nothing holds a reference into it,
/// its class or the arena.
unsafe fn return_page(page: *mut Page) {
    // SAFETY: the caller's page; its quota is alive (the page holds a count on it), and
    // the pages the arena's lists hold are live.
    unsafe {
        let quota = (*page).quota;
        let arena = (*quota).arena();
        let class = (*page).class;
        let cut = (*page).cut;
        (*(*class).slab).held_bytes -= cut.bytes();
        (*page).class = null_mut();
        (*quota).release(cut.bytes() as u64);
        let freed_page = match cut {
            Cut::Whole => Some(page),
            Cut::Split => {
                (*class).sub_pages -= 1;
                return_sub_page(arena.state(), page)
            }
        };
        if let Some(page) = freed_page {
            let state = arena.state();
            push_front(&mut state.free_pages, page);
            state.free_page_count += 1;
            let id = (*page).handle_base >> OFFSET_BITS;
            let region = &mut state.regions[id as usize];
            region.used -= 1;
            if region.used == 0 && state.live_regions > 1 {
                free_region(arena, state, id);
            }
        }
        Rc::decrement_strong_count(quota);
    }
}

/// Puts a free sub-page with the arena's free sub-pages; once every sub-page of its page
/// is free, takes them all off and returns the page, whole again, for the free pages.
///
/// # Safety
///
/// `sub_page` is a live sub-page of this arena, on no list, with no objects.
unsafe fn return_sub_page(state: &mut ArenaState, sub_page: *mut Page) -> Option<*mut Page> {
    // SAFETY: the caller's sub-page; its page's sub-pages are live headers of this arena,
    // every one but those a class holds on the free sub-pages list.
    unsafe {
        push_front(&mut state.free_sub_pages, sub_page);
        state.free_sub_page_count += 1;
        let page = first_sub_page(sub_page);
        (*page).sub_pages_used -= 1;
        if (*page).sub_pages_used > 0 {
            return None;
        }
        for index in 0..SUB_PAGES_PER_PAGE {
            let each = page.cast::<u8>().add(index * SUB_PAGE_BYTES).cast::<Page>();
            unlink(&mut state.free_sub_pages, each);
        }
        state.free_sub_page_count -= SUB_PAGES_PER_PAGE;
        (*page).cut = Cut::Whole;
        Some(page)
    }
}

/// Gives region `id`, all of whose cut pages are free, back to the allocator.
///
/// # Safety
///
/// The region is live and none of its pages is used.
unsafe fn free_region(arena: &Arena, state: &mut ArenaState, id: u32) {
    let region = &mut state.regions[id as usize];
    debug_assert_eq!(region.used, 0);
    for index in 0..region.carved as usize {
        // SAFETY: every cut page of the region is free, so on the free list.
        unsafe {
            let page = region.base.add(index * PAGE_BYTES).cast::<Page>();
            unlink(&mut state.free_pages, page);
        }
    }
    state.free_page_count -= region.carved as usize;
    // SAFETY: the region came from the arena's source; nothing points into it any more.
    unsafe { (arena.source.free)(region.base) };
    *region = Region {
        base: null_mut(),
        carved: 0,
        used: 0,
    };
    arena.region_bases[id as usize].set(0);
    state.live_regions -= 1;
    state.free_region_ids.push(id);
    if state.carving == Some(id) {
        state.carving = None;
    }
}

/// Puts `page` first on the list at `head`.
///
/// # Safety
///
/// `page` is live and on no list; the list's pages are live.
unsafe fn push_front(head: &mut *mut Page, page: *mut Page) {
    // SAFETY: the caller's live pages.
    unsafe {
        (*page).prev = null_mut();
        (*page).next = *head;
        if !head.is_null() {
            (**head).prev = page;
        }
    }
    *head = page;
}

/// Takes `page` off the list at `head`.
///
/// # Safety
///
/// `page` is live and on that list.
unsafe fn unlink(head: &mut *mut Page, page: *mut Page) {
    // SAFETY: the caller's live page and its live neighbours.
    unsafe {
        let (prev, next) = ((*page).prev, (*page).next);
        if prev.is_null() {
            debug_assert_eq!(*head, page);
            *head = next;
        } else {
            (*prev).next = next;
        }
        if !next.is_null() {
            (*next).prev = prev;
        }
        (*page).prev = null_mut();
        (*page).next = null_mut();
    }
}

#[cfg(test)]
mod tests;
