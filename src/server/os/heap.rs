//! How the process's heap is set up before anything allocates much: the allocator tuning
//! both `tarn` and the in-process `perf-simple-query` apply first thing in `main`.
//!
//! Knows glibc's malloc and the kernel's transparent huge pages; nothing of tarn's data.

/// The kernel's transparent huge page mode, where it says it.
const THP_MODE_PATH: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
const TUNABLES_VAR: &str = "GLIBC_TUNABLES";

/// Recovery and bulk loads allocate millions of tuples and keys in a burst; with glibc's
/// default 128 KiB top pad each shard's heap grows by an `mprotect` call per 128 KiB, a tenth
/// of a recovery's CPU time. Padding growth to 64 MiB costs address space, not memory: pages
/// are only backed once touched.
pub fn grow_in_large_steps() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const TOP_PAD_BYTES: libc::c_int = 64 << 20;
        // SAFETY: mallopt only sets a tuning parameter of the allocator; it is called before
        // any other thread exists.
        unsafe { libc::mallopt(libc::M_TOP_PAD, TOP_PAD_BYTES) };
    }
}

/// At a million tuples a point request's tree and tuple reads miss the TLB as well as the
/// cache, and in a virtual machine each TLB miss is a two-level page walk. Backed by 2 MiB
/// pages the heap needs 512 times fewer TLB entries (measured: a fifth less server CPU per
/// get at a million keys). Where the kernel gives huge pages only on request (THP mode
/// `madvise`, the common default), glibc's malloc requests them only if its
/// `glibc.malloc.hugetlb` tunable is set when the process starts; so this executes the
/// program again, once, with the tunable set. It returns (and changes nothing) when the
/// kernel's mode is `always` or `never`, when `GLIBC_TUNABLES` is already set (the
/// operator's choice, and how the second start knows it is the second), under valgrind,
/// or when the restart fails.
pub fn restart_with_huge_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        if std::env::var_os(TUNABLES_VAR).is_some() {
            return;
        }
        let on_request =
            std::fs::read_to_string(THP_MODE_PATH).is_ok_and(|mode| mode.contains("[madvise]"));
        if !on_request {
            return;
        }
        let mut args = std::env::args_os();
        let Some(program) = args.next() else {
            return;
        };
        // Under valgrind (whose preloads are in LD_PRELOAD) a restart would run the program
        // outside it: stay as we are.
        let under_valgrind = std::env::var_os("LD_PRELOAD")
            .is_some_and(|preload| preload.to_string_lossy().contains("vgpreload"));
        if under_valgrind {
            return;
        }
        // The executable by its own path, not as /proc/self/exe: the kernel names a process
        // after the file it executes, and `ps`, `top`, `pgrep tarn` and `killall tarn` would
        // otherwise see it as `exe`.
        let Ok(executable) = std::env::current_exe() else {
            return;
        };
        let error = std::process::Command::new(executable)
            .arg0(program)
            .args(args)
            .env(TUNABLES_VAR, "glibc.malloc.hugetlb=1")
            .exec();
        eprintln!("could not restart with huge pages for the heap ({error}); going on without");
    }
}

/// Makes the storage arenas take their tuple regions (2 MiB, aligned to 2 MiB) straight
/// from the kernel rather than from malloc, and ask for huge pages for them when the heap
/// has them (see [`restart_with_huge_pages`]). malloc's aligned allocation would write its
/// chunk header in the huge page below each region, and with transparent huge pages that
/// page is faulted in whole for its 16 bytes: a second 2 MiB per region. A region is
/// mapped twice its size and trimmed to its aligned middle, so nothing outside it is
/// mapped; freed, it is unmapped. Call first thing in `main`, before any engine is made.
pub fn tuple_regions_from_the_kernel() {
    #[cfg(target_os = "linux")]
    {
        HUGE_REGIONS.store(huge_pages_requested(), std::sync::atomic::Ordering::Relaxed);
        crate::storage::slab::set_region_source(crate::storage::slab::RegionSource {
            allocate: map_region,
            free: unmap_region,
        });
    }
}

/// Whether regions are advised to be huge pages: as the heap is.
#[cfg(target_os = "linux")]
static HUGE_REGIONS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cfg(target_os = "linux")]
fn map_region() -> *mut u8 {
    use crate::storage::slab::REGION_BYTES;
    let span = 2 * REGION_BYTES;
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches
    // no memory of the program.
    let mapped = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if mapped == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    let start = mapped as usize;
    let aligned = start.next_multiple_of(REGION_BYTES);
    let (head, tail) = (aligned - start, start + span - aligned - REGION_BYTES);
    // SAFETY: the head and the tail are the parts of this fresh mapping outside the
    // aligned region, which nothing refers to; the region itself is advised only.
    unsafe {
        if head > 0 {
            libc::munmap(mapped, head);
        }
        if tail > 0 {
            libc::munmap((aligned + REGION_BYTES) as *mut libc::c_void, tail);
        }
        if HUGE_REGIONS.load(std::sync::atomic::Ordering::Relaxed) {
            libc::madvise(
                aligned as *mut libc::c_void,
                REGION_BYTES,
                libc::MADV_HUGEPAGE,
            );
        }
    }
    aligned as *mut u8
}

/// # Safety
///
/// `region` came from [`map_region`] and nothing uses it any more.
#[cfg(target_os = "linux")]
unsafe fn unmap_region(region: *mut u8) {
    // SAFETY: the region is a mapping of REGION_BYTES of its own (the caller's).
    unsafe { libc::munmap(region.cast(), crate::storage::slab::REGION_BYTES) };
}

/// Whether glibc's malloc was told to back the heap with huge pages, for the start-up log.
pub fn huge_pages_requested() -> bool {
    std::env::var(TUNABLES_VAR).is_ok_and(|tunables| tunables.contains("glibc.malloc.hugetlb=1"))
}

/// Returns the heap's free memory to the system. glibc's `free` gives back only the top of
/// a heap, and keeps the top pad ([`grow_in_large_steps`]) even there; memory freed in the
/// middle (thousands of closed connections, say) stays resident until `malloc_trim`, which
/// releases the free pages of every arena. It walks the free chunks of each arena, holding
/// the arena's lock meanwhile, so it is for after a burst of frees, not for every free.
pub fn return_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only releases free pages of the allocator's own heaps.
        unsafe { libc::malloc_trim(0) };
    }
}
