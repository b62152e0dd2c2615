//! The process itself: killing it on the spot, as a crash test needs (no destructor, no
//! flush, no atexit handler runs). Must not know why it is killed.

/// Ends this process with SIGKILL, as `kill -9` from outside would: what a crash-point test
/// hook asks for, so that recovery sees exactly what a real crash leaves on disk.
pub fn kill_self() -> ! {
    // SAFETY: kill(2) on our own pid with a valid signal number; SIGKILL cannot be caught,
    // so no handler runs, and nothing of ours runs after it is delivered.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    // Delivery is immediate for a signal sent to oneself; should it not be, end anyway.
    std::process::abort();
}
