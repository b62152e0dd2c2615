//! What tarn asks of the operating system beyond sockets and files: the heap's set-up,
//! the scheduler's treatment of a shard's thread, the open-files limit, thread names. All
//! of tarn's libc calls outside the files and sockets are here.
//!
//! * [`heap`]: glibc malloc tuning and transparent huge pages, applied first in `main`.
//! * [`scheduling`]: a shard thread's scheduler slice.
//! * [`open_files`]: the open-files limit.
//! * [`threads`]: thread names.

pub mod heap;
pub mod open_files;
pub mod scheduling;
pub mod threads;
