use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// The handle `quota`'s arena gives `object`, if it is its.
fn handle(quota: &Rc<MemoryQuota>, object: NonNull<u8>, bytes: usize) -> Option<u32> {
    // SAFETY: the tests pass live objects with the bytes they were allocated with.
    unsafe { quota.arena().handle_of(Rc::as_ptr(quota), object, bytes) }
}

/// The object `handle` names in `quota`'s arena.
fn pointer(quota: &MemoryQuota, handle: u32) -> NonNull<u8> {
    // SAFETY: the tests pass handles of live objects of this arena.
    unsafe { quota.arena().pointer_of(handle) }
}

/// Frees a live object.
fn release(object: NonNull<u8>, bytes: usize) {
    // SAFETY: the tests free each object once, with its bytes, and do not use it again.
    unsafe { free(object, bytes) }
}

#[test]
fn classes_are_the_smallest_that_hold_their_sizes() {
    let mut previous = 0;
    for class in 0..CLASSES {
        let bytes = class_bytes(class);
        assert!(bytes > previous, "class {class}");
        assert_eq!(bytes % GRAIN_BYTES, 0, "class {class}");
        assert_eq!(class_of(bytes), class, "class {class}");
        assert_eq!(class_of(previous + 1), class, "class {class}");
        // At most 1/16 more than the smallest size it takes, past the fine classes.
        if bytes > FINE_CLASSES_UP_TO_BYTES {
            assert!((bytes - previous - 1) * 16 <= previous + 1, "class {class}");
        }
        previous = bytes;
    }
    assert_eq!(previous, MAX_SMALL_BYTES);
    for bytes in 1..=MAX_SMALL_BYTES {
        let class = class_of(bytes);
        assert!(class_bytes(class) >= bytes);
        assert!(class == 0 || class_bytes(class - 1) < bytes, "{bytes}");
    }
    // A kv tuple's class: 116 bytes, 564 to a page, 34 to a sub-page.
    assert_eq!(class_bytes(class_of(116)), 116);
    assert_eq!(slots_per_page(class_of(116)), 564);
    assert_eq!(slots_per_sub_page(class_of(116)), 34);
}

#[test]
fn a_page_header_and_handles_fit_their_bits() {
    assert_eq!(PAGE_HEADER_BYTES % 16, 0);
    assert_eq!(std::mem::size_of::<Page>(), 56);
    assert_eq!(SUB_PAGES_PER_PAGE, 16);
    assert_eq!(OFFSET_BITS, 19);
    assert_eq!(MAX_REGIONS, 7680);
    // 15 GiB of pages per shard.
    assert_eq!(MAX_REGIONS * REGION_BYTES, 15 << 30);
    assert_eq!(MAX_PAGE_BYTES, 15 << 30);
}

/// Fills an object with bytes derived from its id, so that any overlap shows.
fn fill(object: NonNull<u8>, bytes: usize, id: u64) {
    for at in 0..bytes {
        // SAFETY: the object has `bytes` bytes.
        unsafe {
            object
                .as_ptr()
                .add(at)
                .write((id as u8).wrapping_add(at as u8))
        };
    }
}

fn check(object: NonNull<u8>, bytes: usize, id: u64) {
    for at in 0..bytes {
        // SAFETY: the object has `bytes` bytes.
        let byte = unsafe { object.as_ptr().add(at).read() };
        assert_eq!(
            byte,
            (id as u8).wrapping_add(at as u8),
            "object {id} byte {at}"
        );
    }
}

#[test]
fn a_kv_tuple_costs_its_bytes_and_a_page_share() {
    let quota = Rc::new(MemoryQuota::unlimited());
    let slab = TupleSlab::new(quota.clone());
    let objects: Vec<NonNull<u8>> = (0..10_000).map(|_| slab.allocate(116).unwrap()).collect();
    // Four sub-pages of 34, then whole pages of 564.
    let pages = (10_000usize - 4 * 34).div_ceil(564);
    let held = 4 * SUB_PAGE_BYTES + pages * PAGE_BYTES;
    assert_eq!(slab.held_bytes(), held);
    assert_eq!(quota.used_bytes(), held as u64);
    // Neighbours in a page are 116 bytes apart: no header between them.
    for pair in [&objects[..2], &objects[9_998..]] {
        assert_eq!(pair[1].as_ptr() as usize - pair[0].as_ptr() as usize, 116);
    }
    for (id, &object) in objects.iter().enumerate() {
        let handle = handle(&quota, object, 116).unwrap();
        assert!(handle != 0 && handle < LARGE_HANDLES_FROM);
        assert_eq!(pointer(&quota, handle), object, "{id}");
    }
    for object in objects {
        release(object, 116);
    }
    assert_eq!(slab.held_bytes(), 0);
    assert_eq!(quota.used_bytes(), 0);
    // The last region stays for the next page; its pages are free, the split one whole
    // again.
    let census = quota.arena().census();
    assert_eq!(census.regions, 1);
    assert_eq!(census.free_pages, pages + 1);
    assert_eq!(census.free_sub_pages, 0);
}

#[test]
fn a_page_refused_by_the_quota_is_a_refused_allocation() {
    let quota = Rc::new(MemoryQuota::new(SUB_PAGE_BYTES as u64));
    let slab = TupleSlab::new(quota.clone());
    let first = slab.allocate(100).unwrap();
    // Another class needs a sub-page of its own, and the quota has none left.
    assert_eq!(slab.room_for(200), Err(SUB_PAGE_BYTES));
    assert!(slab.allocate(200).is_none());
    assert_eq!(quota.used_bytes(), SUB_PAGE_BYTES as u64);
    // The first sub-page still has room.
    assert_eq!(slab.room_for(100), Ok(()));
    let second = slab.allocate(100).unwrap();
    // Past the limit only when asked for.
    let forced = slab.allocate_past_limit(200).unwrap();
    assert_eq!(quota.used_bytes(), 2 * SUB_PAGE_BYTES as u64);
    for (object, bytes) in [(first, 100), (second, 100), (forced, 200)] {
        release(object, bytes);
    }
    assert_eq!(quota.used_bytes(), 0);
}

#[test]
fn a_class_takes_four_sub_pages_then_whole_pages() {
    let quota = Rc::new(MemoryQuota::unlimited());
    let slab = TupleSlab::new(quota.clone());
    let per_sub_page = slots_per_sub_page(class_of(116)) as usize;
    let mut objects = Vec::new();
    for sub_pages in 1..=4 {
        for _ in 0..per_sub_page {
            objects.push(slab.allocate(116).unwrap());
        }
        assert_eq!(slab.held_bytes(), sub_pages * SUB_PAGE_BYTES);
    }
    assert_eq!(slab.room_for(116), Err(PAGE_BYTES));
    objects.push(slab.allocate(116).unwrap());
    assert_eq!(slab.held_bytes(), 4 * SUB_PAGE_BYTES + PAGE_BYTES);
    // The sub-pages of one split page: the same 64 KiB, 4 KiB apart.
    let page = |object: &NonNull<u8>| object.as_ptr() as usize & !(PAGE_BYTES - 1);
    assert!(objects[..4 * per_sub_page]
        .iter()
        .all(|o| page(o) == page(&objects[0])));
    assert_ne!(page(objects.last().unwrap()), page(&objects[0]));
    // Emptying a sub-page gives it back, and the class takes sub-pages again.
    for object in objects.drain(..per_sub_page) {
        release(object, 116);
    }
    assert_eq!(slab.held_bytes(), 3 * SUB_PAGE_BYTES + PAGE_BYTES);
    // Classes too large for four slots to a sub-page take whole pages at once.
    let large_slot = slab.allocate(1_500).unwrap();
    assert_eq!(slab.held_bytes(), 3 * SUB_PAGE_BYTES + 2 * PAGE_BYTES);
    release(large_slot, 1_500);
    for object in objects {
        release(object, 116);
    }
    assert_eq!(quota.used_bytes(), 0);
    let census = quota.arena().census();
    assert_eq!((census.free_sub_pages, census.free_pages), (0, 3));
}

#[test]
fn large_objects_are_allocated_alone_and_charged_as_malloc_rounds_them() {
    let quota = Rc::new(MemoryQuota::unlimited());
    let slab = TupleSlab::new(quota.clone());
    let bytes = MAX_SMALL_BYTES + 1;
    let object = slab.allocate(bytes).unwrap();
    fill(object, bytes, 7);
    assert_eq!(object.as_ptr() as usize % LARGE_ALIGN, 0);
    let charged = large_allocation_bytes(bytes) as u64;
    assert_eq!(quota.used_bytes(), charged);
    assert_eq!(slab.held_bytes() as u64, charged);
    let handle = handle(&quota, object, bytes).unwrap();
    assert!(handle >= LARGE_HANDLES_FROM);
    assert_eq!(pointer(&quota, handle), object);
    check(object, bytes, 7);
    release(object, bytes);
    assert_eq!(quota.used_bytes(), 0);
    assert_eq!(quota.arena().census().large_objects, 0);
}

#[test]
fn another_arenas_objects_have_no_handle_here() {
    let (a, b) = (
        Rc::new(MemoryQuota::unlimited()),
        Rc::new(MemoryQuota::unlimited()),
    );
    let slab = TupleSlab::new(a.clone());
    for bytes in [16, MAX_SMALL_BYTES + 100] {
        let object = slab.allocate(bytes).unwrap();
        let here = handle(&a, object, bytes);
        let there = handle(&b, object, bytes);
        assert!(here.is_some());
        assert_eq!(there, None);
        release(object, bytes);
    }
}

#[test]
fn objects_outlive_their_slab_and_quota() {
    let quota = Rc::new(MemoryQuota::unlimited());
    let slab = TupleSlab::new(quota.clone());
    let small = slab.allocate(40).unwrap();
    let large = slab.allocate(MAX_SMALL_BYTES * 2).unwrap();
    fill(small, 40, 1);
    fill(large, MAX_SMALL_BYTES * 2, 2);
    let weak = Rc::downgrade(&quota);
    drop(slab);
    drop(quota);
    // The page and the large object hold the arena.
    assert!(weak.upgrade().is_some());
    check(small, 40, 1);
    release(small, 40);
    assert!(weak.upgrade().is_some());
    check(large, MAX_SMALL_BYTES * 2, 2);
    release(large, MAX_SMALL_BYTES * 2);
    assert!(weak.upgrade().is_none(), "the last object let the arena go");
}

#[test]
fn empty_regions_go_back_to_their_source_but_the_last() {
    let quota = Rc::new(MemoryQuota::unlimited());
    let slab = TupleSlab::new(quota.clone());
    let per_page = slots_per_page(class_of(4096)) as usize;
    // Three regions' worth of pages.
    let objects: Vec<NonNull<u8>> = (0..per_page * PAGES_PER_REGION * 3)
        .map(|_| slab.allocate(4096).unwrap())
        .collect();
    assert_eq!(quota.arena().census().regions, 3);
    for object in objects {
        release(object, 4096);
    }
    let census = quota.arena().census();
    assert_eq!(census.regions, 1);
    assert_eq!(census.free_pages, PAGES_PER_REGION);
    assert_eq!(quota.used_bytes(), 0);
}

#[derive(Debug, Clone)]
enum SlabOp {
    /// In slab `0`, an object of `1` bytes.
    Allocate(usize, usize),
    /// The live object at this position (modulo their count).
    Free(usize),
}

fn slab_op() -> impl Strategy<Value = SlabOp> {
    let bytes = prop_oneof![
        6 => 1usize..200,
        2 => 200usize..MAX_SMALL_BYTES + 1,
        1 => MAX_SMALL_BYTES + 1..MAX_SMALL_BYTES * 3,
        2 => Just(116usize),
    ];
    prop_oneof![
        3 => (0usize..3, bytes).prop_map(|(slab, bytes)| SlabOp::Allocate(slab, bytes)),
        2 => any::<usize>().prop_map(SlabOp::Free),
    ]
}

/// The bytes of the distinct pages and sub-pages `slab`'s live small objects are in.
fn held_page_bytes(live: &BTreeMap<u64, (usize, usize, NonNull<u8>)>, slab: usize) -> usize {
    let pages: std::collections::BTreeMap<usize, usize> = live
        .values()
        .filter(|&&(owner, bytes, _)| owner == slab && bytes <= MAX_SMALL_BYTES)
        .map(|&(_, _, object)| {
            // SAFETY: the object is live, so its page header is.
            let page = unsafe { page_of(object) };
            // SAFETY: as above.
            (page as usize, unsafe { (*page).cut }.bytes())
        })
        .collect();
    pages.values().sum()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Against a model of live objects: no two overlap (each keeps the bytes written into
    /// it), every handle names its object, each slab holds exactly the pages and sub-pages
    /// its objects are in (no empty one, none shared between slabs) and the quota is the
    /// sum of what the slabs hold; once everything is freed, nothing is charged and every
    /// split page is whole again.
    #[test]
    fn slabs_behave_like_a_map_of_live_objects(ops in prop::collection::vec(slab_op(), 1..600)) {
        let quota = Rc::new(MemoryQuota::unlimited());
        let slabs: Vec<TupleSlab> = (0..3).map(|_| TupleSlab::new(quota.clone())).collect();
        let mut live: BTreeMap<u64, (usize, usize, NonNull<u8>)> = BTreeMap::new();
        for (id, op) in ops.into_iter().enumerate() {
            let id = id as u64;
            match op {
                SlabOp::Allocate(slab, bytes) => {
                    let object = slabs[slab].allocate(bytes).unwrap();
                    prop_assert_eq!(object.as_ptr() as usize % GRAIN_BYTES, 0);
                    fill(object, bytes, id);
                    live.insert(id, (slab, bytes, object));
                }
                SlabOp::Free(position) if !live.is_empty() => {
                    let key = *live.keys().nth(position % live.len()).unwrap();
                    let (_, bytes, object) = live.remove(&key).unwrap();
                    check(object, bytes, key);
                    release(object, bytes);
                }
                SlabOp::Free(_) => {}
            }
            let mut held = 0;
            for (index, slab) in slabs.iter().enumerate() {
                let large: usize = live
                    .values()
                    .filter(|&&(owner, bytes, _)| owner == index && bytes > MAX_SMALL_BYTES)
                    .map(|&(_, bytes, _)| large_allocation_bytes(bytes))
                    .sum();
                prop_assert_eq!(slab.held_bytes() - large, held_page_bytes(&live, index));
                held += slab.held_bytes();
            }
            prop_assert_eq!(quota.used_bytes(), held as u64);
        }
        for (&id, &(_, bytes, object)) in &live {
            check(object, bytes, id);
            let named = handle(&quota, object, bytes).unwrap();
            prop_assert_eq!(pointer(&quota, named), object);
        }
        for (_, (_, bytes, object)) in live {
            release(object, bytes);
        }
        prop_assert_eq!(quota.used_bytes(), 0);
        let census = quota.arena().census();
        prop_assert!(census.regions <= 1);
        prop_assert_eq!(census.free_sub_pages, 0);
    }
}
