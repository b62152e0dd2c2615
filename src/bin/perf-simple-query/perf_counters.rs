//! Per-thread counters from `perf_event_open(2)`: user-space instructions and cycles
//! (hardware) and task-clock (software, nanoseconds on the CPU).
//!
//! task-clock is time on the CPU in user and kernel mode alike (the exclude bits do not
//! narrow a software clock): for a network client most of it is the kernel's TCP path.
//!
//! The syscall is declared here and reached through the C library that std already links,
//! so no crate is needed. A counter the kernel refuses (no PMU in a VM, a paranoid
//! `perf_event_paranoid`, seccomp) is `None`, never zero: the report prints `n/a` for it.
//!
//! A counter counts the thread that opened it (pid 0, any CPU) and may be read from any
//! thread, so each worker opens its own set and hands it to the sampler.

use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};

#[cfg(target_arch = "x86_64")]
const SYS_PERF_EVENT_OPEN: i64 = 298;
#[cfg(target_arch = "aarch64")]
const SYS_PERF_EVENT_OPEN: i64 = 241;

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;

const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;

const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;

/// `struct perf_event_attr` up to PERF_ATTR_SIZE_VER5 (112 bytes, Linux 4.1+); the flag
/// bitfield is one u64.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved: u16,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 112);

extern "C" {
    fn syscall(number: i64, ...) -> i64;
}

/// One open counter.
pub struct Counter {
    file: File,
}

impl Counter {
    fn open(kind: u32, config: u64) -> std::io::Result<Counter> {
        let attr = PerfEventAttr {
            kind,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config,
            read_format: PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING,
            flags: FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV,
            ..PerfEventAttr::default()
        };
        let (pid, cpu, group_fd, flags) = (0i32, -1i32, -1i32, 0u64);
        // SAFETY: `attr` is a valid, fully initialised perf_event_attr of the size it
        // declares and lives across the call; the other arguments are plain integers.
        let fd = unsafe {
            syscall(
                SYS_PERF_EVENT_OPEN,
                &attr as *const PerfEventAttr,
                pid,
                cpu,
                group_fd,
                flags,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        Ok(Counter {
            file: File::from(fd),
        })
    }

    /// The count so far, scaled up if the kernel multiplexed the counter.
    pub fn read(&self) -> Option<u64> {
        let mut bytes = [0u8; 24];
        (&self.file).read_exact(&mut bytes).ok()?;
        let word = |i: usize| u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        let (value, enabled, running) = (word(0), word(1), word(2));
        if running == 0 {
            return if enabled == 0 { Some(0) } else { None };
        }
        Some((value as u128 * enabled as u128 / running as u128) as u64)
    }
}

/// The counters of one thread; each is `None` where the kernel refused it.
pub struct ThreadCounters {
    pub instructions: Option<Counter>,
    pub cycles: Option<Counter>,
    pub task_clock: Option<Counter>,
}

/// Why a counter is unavailable, for the one line printed before the run.
#[derive(Debug, Clone, Default)]
pub struct Availability {
    pub hardware_error: Option<String>,
    pub task_clock_error: Option<String>,
}

impl ThreadCounters {
    /// Opens the counters for the calling thread.
    pub fn open_for_current_thread() -> (ThreadCounters, Availability) {
        let instructions = Counter::open(PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS);
        let cycles = Counter::open(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES);
        let task_clock = Counter::open(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK);
        let availability = Availability {
            hardware_error: instructions
                .as_ref()
                .err()
                .or(cycles.as_ref().err())
                .map(|e| e.to_string()),
            task_clock_error: task_clock.as_ref().err().map(|e| e.to_string()),
        };
        let counters = ThreadCounters {
            instructions: instructions.ok(),
            cycles: cycles.ok(),
            task_clock: task_clock.ok(),
        };
        (counters, availability)
    }

    pub fn read(&self) -> Readings {
        let read = |c: &Option<Counter>| c.as_ref().and_then(Counter::read);
        Readings {
            instructions: read(&self.instructions),
            cycles: read(&self.cycles),
            task_clock_ns: read(&self.task_clock),
        }
    }
}

/// Counter values at one instant; summed over threads, `None` if any thread lacks one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readings {
    pub instructions: Option<u64>,
    pub cycles: Option<u64>,
    pub task_clock_ns: Option<u64>,
}

impl Readings {
    /// Sum over threads; an empty set of threads has no readings at all.
    pub fn sum(all: &[Readings]) -> Readings {
        let total = |f: fn(&Readings) -> Option<u64>| -> Option<u64> {
            if all.is_empty() {
                return None;
            }
            all.iter().map(f).sum()
        };
        Readings {
            instructions: total(|r| r.instructions),
            cycles: total(|r| r.cycles),
            task_clock_ns: total(|r| r.task_clock_ns),
        }
    }

    /// `self - earlier`, per counter.
    pub fn since(&self, earlier: &Readings) -> Readings {
        let delta = |now: Option<u64>, then: Option<u64>| Some(now?.saturating_sub(then?));
        Readings {
            instructions: delta(self.instructions, earlier.instructions),
            cycles: delta(self.cycles, earlier.cycles),
            task_clock_ns: delta(self.task_clock_ns, earlier.task_clock_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_is_unavailable_if_any_thread_lacks_a_counter() {
        let a = Readings {
            instructions: Some(10),
            cycles: None,
            task_clock_ns: Some(5),
        };
        let b = Readings {
            instructions: Some(1),
            cycles: Some(3),
            task_clock_ns: Some(5),
        };
        let sum = Readings::sum(&[a, b]);
        assert_eq!(sum.instructions, Some(11));
        assert_eq!(sum.cycles, None);
        assert_eq!(sum.task_clock_ns, Some(10));
        assert_eq!(Readings::sum(&[]).task_clock_ns, None);
    }

    #[test]
    fn task_clock_counts_this_thread_when_available() {
        let (counters, availability) = ThreadCounters::open_for_current_thread();
        let Some(task_clock) = counters.task_clock.as_ref() else {
            eprintln!("task-clock refused here: {availability:?}");
            return;
        };
        let before = task_clock.read().unwrap();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let after = task_clock.read().unwrap();
        assert!(after > before, "{before} -> {after}");
    }
}
