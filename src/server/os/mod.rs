//! What tarn asks of the operating system that std and glommio offer no safe form of: the
//! heap's set-up, the scheduler's treatment of a shard's thread, the open-files limit,
//! thread names, a few socket calls. The server's `unsafe` is here and only here.
//!
//! * [`heap`]: glibc malloc tuning and transparent huge pages, applied first in `main`.
//! * [`scheduling`]: a shard thread's scheduler slice.
//! * [`open_files`]: the open-files limit.
//! * [`threads`]: thread names.
//! * [`sockets`]: descriptors handed to glommio, duplicated, shut down; unacknowledged bytes.
//! * [`process`]: killing this process on the spot (the crash-point test hook).
//! * [`cpu_time`]: the process's user and system CPU time (`getrusage`), for the metrics.

pub mod cpu_time;
pub mod heap;
pub mod open_files;
pub mod process;
pub mod scheduling;
pub mod sockets;
pub mod threads;
