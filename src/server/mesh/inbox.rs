//! Where a session's answers from other cores land: one reused byte buffer and one slot per
//! request in flight, filled by the core's receive loop as reply batches arrive. The session
//! waits once for all of its slots rather than once per request.
//!
//! Single-threaded (both sides live on one core): `RefCell`, no atomics. Nothing here
//! allocates once the buffers have grown to the session's usual pipeline depth.

use crate::server::mesh::batch::EntryTooLong;
use std::cell::{Ref, RefCell};
use std::future::Future;
use std::task::{Poll, Waker};

/// A slot not yet answered.
const NOT_ARRIVED: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
}

#[derive(Default)]
struct State {
    bytes: Vec<u8>,
    spans: Vec<Span>,
    /// The slots answered with a too-long marker (their spans are empty); rare, so a list.
    too_long: Vec<(u32, EntryTooLong)>,
    outstanding: usize,
    waker: Option<Waker>,
}

#[derive(Default)]
pub struct Inbox {
    state: RefCell<State>,
}

impl Inbox {
    /// A slot for one more reply; slots count from 0 after each [`Inbox::clear`].
    pub fn reserve(&self) -> u32 {
        let mut state = self.state.borrow_mut();
        let slot = u32::try_from(state.spans.len()).expect("slots are bounded by the read buffer");
        state.spans.push(Span {
            start: 0,
            len: NOT_ARRIVED,
        });
        state.outstanding += 1;
        slot
    }

    /// Stores the reply for `slot`; wakes the waiter when it was the last one missing.
    pub fn deliver(&self, slot: u32, reply: &[u8]) {
        let mut state = self.state.borrow_mut();
        let start = u32::try_from(state.bytes.len()).expect("inbox under 4 GiB");
        let len = u32::try_from(reply.len()).expect("reply under 4 GiB");
        assert!(len != NOT_ARRIVED);
        let span = &mut state.spans[slot as usize];
        assert_eq!(span.len, NOT_ARRIVED, "slot {slot} answered twice");
        *span = Span { start, len };
        state.bytes.extend_from_slice(reply);
        arrived(&mut state);
    }

    /// Stores for `slot` that its reply was too long to send ([`Replies::part`] says so).
    #[cold]
    pub fn deliver_too_long(&self, slot: u32, too_long: EntryTooLong) {
        let mut state = self.state.borrow_mut();
        let start = u32::try_from(state.bytes.len()).expect("inbox under 4 GiB");
        let span = &mut state.spans[slot as usize];
        assert_eq!(span.len, NOT_ARRIVED, "slot {slot} answered twice");
        *span = Span { start, len: 0 };
        state.too_long.push((slot, too_long));
        arrived(&mut state);
    }

    pub fn outstanding(&self) -> usize {
        self.state.borrow().outstanding
    }

    /// Completes when every reserved slot has its reply.
    pub fn wait(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            let mut state = self.state.borrow_mut();
            if state.outstanding == 0 {
                return Poll::Ready(());
            }
            match &state.waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => state.waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
    }

    /// The replies, readable by slot; only once [`Inbox::wait`] completed.
    pub fn replies(&self) -> Replies<'_> {
        let state = self.state.borrow();
        assert_eq!(state.outstanding, 0, "replies read before all arrived");
        Replies { state }
    }

    /// Forgets every slot and reply, keeping the buffers.
    pub fn clear(&self) {
        let mut state = self.state.borrow_mut();
        assert_eq!(state.outstanding, 0, "inbox cleared with replies in flight");
        state.bytes.clear();
        state.spans.clear();
        state.too_long.clear();
    }

    /// Bytes the buffers hold (their capacity).
    pub fn capacity_bytes(&self) -> usize {
        let state = self.state.borrow();
        state.bytes.capacity() + state.spans.capacity() * std::mem::size_of::<Span>()
    }

    /// Shrinks each buffer that grew past `kept_bytes` (a deep pipeline's replies) back to
    /// that, when no reply is expected.
    pub fn shrink(&self, kept_bytes: usize) {
        let mut state = self.state.borrow_mut();
        if state.outstanding != 0 || !state.spans.is_empty() {
            return;
        }
        state.bytes.shrink_to(kept_bytes);
        state
            .spans
            .shrink_to(kept_bytes / std::mem::size_of::<Span>());
    }
}

/// One more slot answered: wakes the waiter when it was the last one missing.
#[inline]
fn arrived(state: &mut State) {
    state.outstanding -= 1;
    if state.outstanding == 0 {
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }
}

pub struct Replies<'a> {
    state: Ref<'a, State>,
}

impl Replies<'_> {
    pub fn get(&self, slot: u32) -> &[u8] {
        let span = self.state.spans[slot as usize];
        &self.state.bytes[span.start as usize..(span.start + span.len) as usize]
    }

    /// The reply for `slot` of a part a core sent (a scan's or a crud call's), which may have
    /// been too long to send.
    pub fn part(&self, slot: u32) -> Result<&[u8], EntryTooLong> {
        match self.state.too_long.iter().find(|(at, _)| *at == slot) {
            Some((_, too_long)) => Err(*too_long),
            None => Ok(self.get(slot)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_arrive_in_any_order_and_are_read_by_slot() {
        let inbox = Inbox::default();
        let a = inbox.reserve();
        let b = inbox.reserve();
        inbox.deliver(b, b"second");
        assert_eq!(inbox.outstanding(), 1);
        inbox.deliver(a, b"first");
        assert_eq!(inbox.outstanding(), 0);
        let replies = inbox.replies();
        assert_eq!(
            (replies.get(a), replies.get(b)),
            (&b"first"[..], &b"second"[..])
        );
        drop(replies);
        inbox.clear();
        assert_eq!(inbox.reserve(), 0);
    }

    #[test]
    fn a_too_long_part_is_told_apart_until_cleared() {
        let inbox = Inbox::default();
        let a = inbox.reserve();
        let b = inbox.reserve();
        let too_long = EntryTooLong { bytes: 1 << 32 };
        inbox.deliver_too_long(a, too_long);
        inbox.deliver(b, b"fits");
        let replies = inbox.replies();
        assert_eq!(replies.part(a), Err(too_long));
        assert_eq!(replies.part(b), Ok(&b"fits"[..]));
        drop(replies);
        inbox.clear();
        let c = inbox.reserve();
        inbox.deliver(c, b"");
        assert_eq!(inbox.replies().part(c), Ok(&b""[..]));
    }

    #[test]
    #[should_panic(expected = "answered twice")]
    fn a_slot_answered_twice_is_a_bug() {
        let inbox = Inbox::default();
        let slot = inbox.reserve();
        inbox.reserve();
        inbox.deliver(slot, b"x");
        inbox.deliver(slot, b"x");
    }
}
