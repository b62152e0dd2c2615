//! Thread names, as `top -H` and `/proc` show them. Diagnostics only.

/// Names the calling thread as `top -H` and `/proc/PID/task/TID/comm` show it (the kernel
/// keeps the first 15 bytes). Only a diagnostic: a failure changes nothing else.
pub fn name_this_thread(name: &str) {
    let Ok(name) = std::ffi::CString::new(name) else {
        return;
    };
    // SAFETY: PR_SET_NAME reads a NUL-terminated string (at most 16 bytes of it) from the
    // pointer, which `name` keeps valid for the call.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0) };
}
