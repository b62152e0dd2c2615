//! What tarn asks of the operating system beyond sockets and files: the heap's set-up and
//! the scheduler's treatment of a shard's thread.
//!
//! * [`heap`]: glibc malloc tuning and transparent huge pages, applied first in `main`.
//! * [`scheduling`]: a shard thread's scheduler slice.

pub mod heap;
pub mod scheduling;
