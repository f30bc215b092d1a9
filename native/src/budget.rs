//! Byte budgets that the caches of every target of this process share. Each walker and task
//! scanner caches the code objects and stacks of its target, each cache bounded on its own;
//! `serve` of many targets would hold many times that. A cache is charged to its kind's
//! budget, and when the process's caches of a kind pass their budget, the next one to grow
//! that holds at least its fair share (the budget over the caches charged to it) is cleared.
//! A small cache is never cleared for the others' sake.

use std::sync::atomic::{AtomicUsize, Ordering};

/// One kind of cache, in the whole process: the bytes its caches hold, and how many there are.
pub struct Budget {
    limit: usize,
    used: AtomicUsize,
    holders: AtomicUsize,
}

impl Budget {
    pub const fn new(limit: usize) -> Budget {
        Budget {
            limit,
            used: AtomicUsize::new(0),
            holders: AtomicUsize::new(0),
        }
    }

    /// The bytes all its caches hold now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// Code objects, cached by every walker and task scanner of the process (16 MiB each at most).
pub static CODES: Budget = Budget::new(64 << 20);
/// Stack texts, cached by every walker of the process (32 MiB each at most).
pub static STACKS: Budget = Budget::new(128 << 20);

/// What one cache holds, charged to its kind's budget until it is cleared or dropped.
pub struct Charge {
    budget: &'static Budget,
    own: usize,
    limit: usize,
}

impl Charge {
    /// A cache of at most `limit` bytes, charged to `budget`.
    pub fn new(budget: &'static Budget, limit: usize) -> Charge {
        budget.holders.fetch_add(1, Ordering::Relaxed);
        Charge {
            budget,
            own: 0,
            limit,
        }
    }

    /// Whether the cache is to be cleared before it takes `bytes` more: past its own limit,
    /// or past the budget while it holds at least its share of it.
    pub fn over(&self, bytes: usize) -> bool {
        if self.own + bytes > self.limit {
            return true;
        }
        let budget = self.budget;
        let holders = budget.holders.load(Ordering::Relaxed).max(1);
        budget.used() + bytes > budget.limit && self.own >= budget.limit / holders
    }

    pub fn add(&mut self, bytes: usize) {
        self.own += bytes;
        self.budget.used.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn sub(&mut self, bytes: usize) {
        let bytes = bytes.min(self.own);
        self.own -= bytes;
        self.budget.used.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// The cache was cleared: it holds nothing.
    pub fn clear(&mut self) {
        self.sub(self.own);
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.clear();
        self.budget.holders.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::{Budget, Charge};

    #[test]
    fn the_caches_share_the_budget_and_the_largest_pays() {
        static SHARED: Budget = Budget::new(100);
        let (mut big, mut small) = (Charge::new(&SHARED, 80), Charge::new(&SHARED, 80));
        big.add(70);
        assert!(big.over(11), "past its own limit");
        assert!(!big.over(10));
        small.add(25);
        // 95 of 100: taking 10 more passes the budget; the small cache (under its share of
        // 50) goes on, the big one is cleared
        assert!(!small.over(10));
        assert!(big.over(10));
        big.clear();
        assert_eq!(SHARED.used(), 25);
        drop(small);
        assert_eq!(SHARED.used(), 0);
        // alone, its share is the whole budget: only its own limit bounds it
        big.add(75);
        assert!(!big.over(5));
        assert!(big.over(6));
    }
}
