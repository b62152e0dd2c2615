//! How a shard's thread asks the kernel's scheduler to treat it: the one place tarn talks
//! to the scheduler. Knows nothing of shards, requests or the config file.
//!
//! Linux's fair scheduler (EEVDF, 6.6 and later) runs the eligible thread whose virtual
//! deadline (roughly: CPU time so far plus one slice) comes first. A shard looks to it like
//! a thread that always wants the CPU: it never sleeps while it has work and polls for a
//! while when it has none (`idle_poll_us`). With every thread on the default slice (about a
//! millisecond), a load generator woken on a shard's core by the replies the shard just sent
//! is run ahead of the shard, mid-batch, and goes back to sleep after a few replies' worth
//! of work. Given a shorter slice, the shard's deadline comes first, so the woken thread
//! runs when the shard runs out of work and yields, and then finds the replies of several
//! connections waiting. Measured on two cores shared with `perf-simple-query --connect` at
//! 16 x 128 (100 us against the kernel's 1.4 ms): a quarter fewer context switches of the
//! load generator, 4-10% more gets and replaces per second, and a lower p99 at 1 x 1.

use std::time::Duration;

/// `struct sched_attr` as `sched_getattr(2)` and `sched_setattr(2)` take it, in its first
/// published size (`SCHED_ATTR_SIZE_VER0`), which every kernel since 3.14 accepts.
#[repr(C)]
#[derive(Debug, Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    /// For a fair-policy thread, its slice in nanoseconds (Linux 6.12; earlier kernels
    /// ignore it); 0 = the kernel's default.
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

const SCHED_ATTR_SIZE_VER0: u32 = 48;
const _: () = assert!(std::mem::size_of::<SchedAttr>() == SCHED_ATTR_SIZE_VER0 as usize);

const SCHED_OTHER: u32 = 0;
const SCHED_BATCH: u32 = 3;
/// The one flag a fair-policy thread keeps when its attributes are written back.
const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;

/// What [`request_slice`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceRequest {
    /// The calling thread now asks for the slice.
    Set,
    /// The thread runs under another policy (an operator's `chrt`, say): left as it is.
    KeptPolicy(u32),
}

/// Asks the kernel to run the calling thread in slices of `slice` (clamped by the kernel to
/// 0.1..=100 ms). Keeps the thread's policy and nice value; a thread under a real-time or
/// idle policy is left alone.
pub fn request_slice(slice: Duration) -> std::io::Result<SliceRequest> {
    let mut attr = SchedAttr::default();
    // SAFETY: `attr` is a writable `sched_attr` of the size passed; pid 0 is this thread.
    let read = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            SCHED_ATTR_SIZE_VER0,
            0,
        )
    };
    if read != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH {
        return Ok(SliceRequest::KeptPolicy(attr.sched_policy));
    }
    attr.size = SCHED_ATTR_SIZE_VER0;
    attr.sched_flags &= SCHED_FLAG_RESET_ON_FORK;
    attr.sched_runtime = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
    // SAFETY: `attr` is a readable, fully initialised `sched_attr` whose `size` says how
    // much of it the kernel may read; pid 0 is this thread.
    let written =
        unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if written != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(SliceRequest::Set)
}

/// Asks for the shard thread's scheduler slice ; a refusal costs
/// throughput, not correctness, so it is logged and the shard goes on.
pub fn ask_for_slice(slice: Duration) {
    let slice_us = slice.as_micros() as u64;
    match request_slice(slice) {
        Ok(SliceRequest::Set) => tracing::debug!(slice_us, "scheduler slice set"),
        Ok(SliceRequest::KeptPolicy(policy)) => {
            tracing::info!(
                policy,
                "shard thread not on a fair policy; sched_slice_us not applied"
            )
        }
        Err(error) => tracing::warn!(%error, slice_us, "could not set the scheduler slice"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread's slice as the kernel reports it, where it does (`se.slice`, Linux 6.6).
    fn reported_slice_ns() -> Option<u64> {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/sched")).ok()?;
        let line = text.lines().find(|line| line.starts_with("se.slice"))?;
        line.split(':').nth(1)?.trim().parse().ok()
    }

    #[test]
    fn a_fair_thread_gets_the_slice_it_asks_for() {
        let outcome = std::thread::spawn(|| {
            let outcome = request_slice(Duration::from_micros(300));
            (
                outcome.map_err(|error| error.to_string()),
                reported_slice_ns(),
            )
        })
        .join()
        .expect("thread");
        assert_eq!(outcome.0, Ok(SliceRequest::Set));
        if let Some(slice_ns) = outcome.1 {
            assert_eq!(slice_ns, 300_000, "/proc says the slice is {slice_ns} ns");
        }
    }
}
