//! A single-threaded one-shot slot: a connection task waits on it, the task that receives
//! the other core's answer fills it. No atomics, since both live on one core.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

pub struct Sender<T>(Rc<RefCell<Slot<T>>>);
pub struct Receiver<T>(Rc<RefCell<Slot<T>>>);

pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let slot = Rc::new(RefCell::new(Slot {
        value: None,
        waker: None,
    }));
    (Sender(slot.clone()), Receiver(slot))
}

impl<T> Sender<T> {
    pub fn send(self, value: T) {
        let mut slot = self.0.borrow_mut();
        slot.value = Some(value);
        if let Some(waker) = slot.waker.take() {
            waker.wake();
        }
    }
}

impl<T> Future for Receiver<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut slot = self.0.borrow_mut();
        match slot.value.take() {
            Some(value) => Poll::Ready(value),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
