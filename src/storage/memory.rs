//! The shard's memory: a byte budget that writes reserve from and deletes return to, and
//! the arena its tuples live in ([`crate::storage::slab`]), whose pages it counts.
//!
//! What is charged is what the process holds for the shard's data: every page a space's
//! slab holds (whole, 64 KiB, whatever is in it), every large tuple's allocation, and the
//! nodes of the indexes (see `Space`). A write is refused when the page its tuple needs
//! does not fit, or when the budget is already spent.
//!
//! Single-threaded by design (one per shard), hence `Cell`.

use crate::storage::slab::Arena;
use std::cell::Cell;

pub struct MemoryQuota {
    limit_bytes: u64,
    used_bytes: Cell<u64>,
    arena: Arena,
}

impl std::fmt::Debug for MemoryQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryQuota")
            .field("limit_bytes", &self.limit_bytes)
            .field("used_bytes", &self.used_bytes.get())
            .field("arena", &self.arena.census())
            .finish()
    }
}

impl MemoryQuota {
    pub fn new(limit_bytes: u64) -> MemoryQuota {
        MemoryQuota {
            limit_bytes,
            used_bytes: Cell::new(0),
            arena: Arena::new(),
        }
    }

    /// The arena the shard's tuples live in.
    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// Whether more is charged than the limit: what was charged past it (index nodes,
    /// charged after the write that made them) refuses the writes that follow.
    #[inline]
    pub fn is_over_limit(&self) -> bool {
        self.used_bytes.get() > self.limit_bytes
    }

    pub fn unlimited() -> MemoryQuota {
        MemoryQuota::new(u64::MAX)
    }

    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.get()
    }

    /// Takes `bytes` from the budget, or takes nothing and returns false if they do not fit.
    #[must_use]
    pub fn try_reserve(&self, bytes: u64) -> bool {
        let used = self.used_bytes.get();
        match used.checked_add(bytes) {
            Some(total) if total <= self.limit_bytes => {
                self.used_bytes.set(total);
                true
            }
            _ => false,
        }
    }

    /// Takes `bytes` even past the limit: for what the budget held a moment ago and must
    /// hold again (a write undone), which must never fail.
    pub fn reserve_past_limit(&self, bytes: u64) {
        self.used_bytes
            .set(self.used_bytes.get().saturating_add(bytes));
    }

    pub fn release(&self, bytes: u64) {
        let used = self.used_bytes.get();
        debug_assert!(bytes <= used, "releasing {bytes} of {used} bytes");
        self.used_bytes.set(used.saturating_sub(bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stop_at_the_limit() {
        let quota = MemoryQuota::new(100);
        assert!(quota.try_reserve(60));
        assert!(!quota.try_reserve(41));
        assert_eq!(quota.used_bytes(), 60);
        assert!(quota.try_reserve(40));
        quota.release(100);
        assert_eq!(quota.used_bytes(), 0);
    }
}
