//! Polite idle polling: how a core that ran out of work waits for more.
//!
//! A core that sleeps is woken by the kernel when work arrives, and on a virtual machine that
//! costs tens of microseconds, paid by the request that woke it (and on several shards once
//! more by a request that hops to a sleeping peer). Going to sleep is not free either: glommio
//! issues a process-wide memory barrier (an interrupt to every core running this process)
//! each time it parks. So after each burst of work a core keeps polling for `idle_poll`.
//!
//! Plain spinning would starve whatever else wants the CPU meanwhile, such as a client on the
//! same machine, whose reply then waits until the kernel preempts the spinner (one client on
//! a 2-core VM, two shards spinning 300 µs: p99 393 µs instead of 70). So the polling core
//! gives its CPU away every [`YIELD_INTERVAL`]: a `sched_yield`, which returns at once when
//! nothing else is runnable.
//!
//! How: glommio's executor spins by itself for a short [`executor_spin`] before it parks. A
//! task of this module ([`IdlePoll::run`]), woken by [`IdlePoll::note_work`], ticks on a
//! timer every [`YIELD_INTERVAL`] while work was seen within `idle_poll`. Each tick yields
//! the CPU and, since a tick is a task run, restarts the executor's own short spin, so the
//! core never parks inside the window. Once the window passes without work, the task stops
//! ticking until the next work, and the executor parks after its short spin.
//!
//! This module knows nothing of connections or shards: the server calls
//! [`IdlePoll::note_work`] where work comes in (a socket read, a batch from another core).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// How often a polling core offers its CPU to other threads. A thread woken on this core
/// waits at most this long (plus its own scheduling) for the CPU. A tick costs a timer, a
/// task run and two system calls (the yield, and the executor's ring flush after a task ran):
/// every 5 µs they took 10% off cross-core throughput in process and gained nothing over the
/// network against every 20 µs.
pub const YIELD_INTERVAL: Duration = Duration::from_micros(20);

/// The spin glommio's executor does by itself before it parks: all of `idle_poll` when that is
/// too short for ticks, else just enough to bridge two ticks of [`IdlePoll::run`].
pub fn executor_spin(idle_poll: Duration) -> Duration {
    idle_poll.min(YIELD_INTERVAL * 2)
}

/// One core's idle-polling state. Single-threaded: lives on its core.
pub struct IdlePoll {
    window: Duration,
    /// Counts the calls of [`IdlePoll::note_work`]; the ticking task compares it tick to tick.
    work_seen: Cell<u64>,
    /// The ticking task waits for work; `note_work` wakes it.
    waiting: RefCell<Option<Waker>>,
}

impl IdlePoll {
    /// Polls for `idle_poll` after the last work seen; `Duration::ZERO` never polls.
    pub fn new(idle_poll: Duration) -> Rc<IdlePoll> {
        Rc::new(IdlePoll {
            window: idle_poll,
            work_seen: Cell::new(0),
            waiting: RefCell::new(None),
        })
    }

    /// Whether a ticking task is needed: glommio's own spin covers short windows.
    pub fn ticks(&self) -> bool {
        self.window > executor_spin(self.window)
    }

    /// Work arrived: keep polling for a window from now. Cheap enough to call per socket
    /// read: a counter, and a wake-up only when the ticking task had stopped.
    pub fn note_work(&self) {
        self.work_seen.set(self.work_seen.get().wrapping_add(1));
        if let Some(waker) = self.waiting.borrow_mut().take() {
            waker.wake();
        }
    }

    /// The ticking task of the core; spawn it once (only when [`IdlePoll::ticks`]).
    pub async fn run(self: Rc<IdlePoll>) {
        debug_assert!(self.ticks());
        let mut timer = glommio::timer::Timer::new(YIELD_INTERVAL);
        loop {
            self.next_work().await;
            let mut seen = self.work_seen.get();
            let mut quiet_since = Instant::now();
            loop {
                timer.reset(YIELD_INTERVAL);
                let now = (&mut timer).await;
                std::thread::yield_now();
                let work_seen = self.work_seen.get();
                if work_seen != seen {
                    seen = work_seen;
                    quiet_since = now;
                } else if now.saturating_duration_since(quiet_since) >= self.window {
                    break;
                }
            }
        }
    }

    /// Completes at the next [`IdlePoll::note_work`].
    fn next_work(&self) -> impl std::future::Future<Output = ()> + '_ {
        let seen = self.work_seen.get();
        std::future::poll_fn(move |cx| {
            if self.work_seen.get() != seen {
                return Poll::Ready(());
            }
            *self.waiting.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_windows_are_left_to_the_executor_spin() {
        assert_eq!(executor_spin(Duration::ZERO), Duration::ZERO);
        assert!(!IdlePoll::new(Duration::ZERO).ticks());
        assert_eq!(executor_spin(YIELD_INTERVAL), YIELD_INTERVAL);
        assert!(!IdlePoll::new(YIELD_INTERVAL * 2).ticks());
        assert_eq!(
            executor_spin(Duration::from_micros(200)),
            YIELD_INTERVAL * 2
        );
        assert!(IdlePoll::new(Duration::from_micros(200)).ticks());
    }

    #[test]
    fn ticking_stops_after_a_quiet_window_and_restarts_on_work() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                // Margins of 50x either way, so a busy machine cannot flip the outcome.
                let idle = IdlePoll::new(Duration::from_millis(50));
                let task = glommio::spawn_local(idle.clone().run()).detach();
                // Waiting for work: no ticks, so the waker is parked in `waiting`.
                glommio::timer::sleep(Duration::from_millis(1)).await;
                assert!(idle.waiting.borrow().is_some());
                idle.note_work();
                assert!(idle.waiting.borrow().is_none());
                glommio::timer::sleep(Duration::from_millis(1)).await;
                assert!(idle.waiting.borrow().is_none(), "ticking within the window");
                // Long past the window: waiting again.
                glommio::timer::sleep(Duration::from_millis(250)).await;
                assert!(idle.waiting.borrow().is_some());
                idle.note_work();
                glommio::timer::sleep(Duration::from_millis(1)).await;
                assert!(idle.waiting.borrow().is_none(), "ticking again");
                task.cancel();
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
