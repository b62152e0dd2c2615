//! The CPU time this process has used, as `getrusage(RUSAGE_SELF)` reports it (the metrics
//! module's `tnt_cpu_user_time` and `tnt_cpu_system_time`). Diagnostics only.

/// User and system CPU time of every thread of the process, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuTime {
    pub user_seconds: f64,
    pub system_seconds: f64,
}

/// The process's CPU time so far; `None` if the kernel refuses (it does not for
/// RUSAGE_SELF).
pub fn process_cpu_time() -> Option<CpuTime> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one `struct rusage` to the pointer, which points at one,
    // zeroed, that lives for the call.
    let failed = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } != 0;
    if failed {
        return None;
    }
    // SAFETY: the call succeeded, so it filled the struct (and it was zeroed before).
    let usage = unsafe { usage.assume_init() };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    Some(CpuTime {
        user_seconds: seconds(usage.ru_utime),
        system_seconds: seconds(usage.ru_stime),
    })
}
