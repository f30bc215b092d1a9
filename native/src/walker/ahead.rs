//! What the next sample reads ahead in its batch: where each thread's stack was, and the
//! addresses (code objects, frames outside the data stacks) recent samples met.

/// At most this many frames and code objects are read ahead per sample.
const READ_AHEAD_MAX: usize = 8192;
/// Code objects and frames outside the data stacks are read ahead while some sample of the
/// last this many met them: a stack that alternates between a few leaves finds all of their
/// code headers in the batch instead of costing a second read every other sample.
pub const RECENT_SAMPLES: u64 = 64;
/// Beyond what the last sample met, at most this many of those addresses are read ahead.
const RECENT_EXTRA: usize = 16;
/// The top of a data stack read ahead reaches this far past the highest top recent samples
/// saw, so that a stack a few frames deeper than before is still inside it.
pub const STACK_SLACK: usize = 256;

/// Where a thread's stack was found: read ahead in the next sample's batch.
#[derive(Clone, Copy)]
pub struct AheadStack {
    /// Where the thread's current frame is read: its `_PyCFrame` (3.11, 3.12) or the thread
    /// state's field (3.13+).
    pub current: usize,
    /// The part of the data stack read: from `start` to `end`, past the highest top.
    pub start: usize,
    pub end: usize,
    /// The highest top of the stack recent samples saw, and the sample that saw it.
    high: usize,
    high_seen: u64,
    /// The thread's first frame, once a walk ended there outside the chunk the thread pushes
    /// its frames on (a stack that spans several chunks; found through the chunks' links): a
    /// walk that ends there is whole without a check. 0 while none is known.
    pub root: usize,
}

impl AheadStack {
    /// What the next sample reads ahead after this one found the data stack read from
    /// `start` up to `top`: up to the highest top recent samples saw, plus some slack.
    pub fn next(
        previous: Option<AheadStack>,
        current: usize,
        start: usize,
        top: usize,
        sample: u64,
    ) -> Self {
        let (high, high_seen) = match previous {
            Some(p)
                if p.current == current
                    && p.start == start
                    && p.high > top
                    && p.high_seen + RECENT_SAMPLES > sample =>
            {
                (p.high, p.high_seen)
            }
            _ => (top, sample),
        };
        AheadStack {
            current,
            start,
            end: high + STACK_SLACK,
            high,
            high_seen,
            root: previous.map_or(0, |p| p.root),
        }
    }
}

/// Addresses met by recent samples, with the last sample that met each, by address.
#[derive(Default)]
pub struct Recent {
    last: Vec<(usize, u64)>,
    /// Room for the next `last`, and for addresses given out of order.
    merged: Vec<(usize, u64)>,
    sorted: Vec<usize>,
}

impl Recent {
    /// Notes the addresses `sample` met, and keeps of the others only the few met most
    /// recently, within the last RECENT_SAMPLES samples: a service whose stacks vary a lot
    /// should not read ahead every code object it ran lately.
    pub fn seen(&mut self, addresses: &[usize], sample: u64) {
        let addresses = if addresses.windows(2).all(|pair| pair[0] < pair[1]) {
            addresses
        } else {
            self.sorted.clear();
            self.sorted.extend_from_slice(addresses);
            self.sorted.sort_unstable();
            self.sorted.dedup();
            &self.sorted[..]
        };
        // the same addresses as all those kept (a stack that did not change): all met now
        if self.last.len() == addresses.len()
            && self.last.iter().zip(addresses).all(|(&(a, _), &b)| a == b)
        {
            self.last.iter_mut().for_each(|entry| entry.1 = sample);
            return;
        }
        // one pass over both, by address: those met now, and the others still recent
        let recent = |&(_, last): &(usize, u64)| last + RECENT_SAMPLES > sample;
        let (last, merged) = (&self.last, &mut self.merged);
        merged.clear();
        let mut i = 0;
        for &address in addresses {
            while i < last.len() && last[i].0 < address {
                if recent(&last[i]) {
                    merged.push(last[i]);
                }
                i += 1;
            }
            if i < last.len() && last[i].0 == address {
                i += 1;
            }
            merged.push((address, sample));
        }
        merged.extend(last[i..].iter().filter(|entry| recent(entry)));
        std::mem::swap(&mut self.last, &mut self.merged);
        let keep = (addresses.len() + RECENT_EXTRA).min(READ_AHEAD_MAX);
        if self.last.len() > keep {
            // the keep-th most recent sample; ties with it may stay, up to this sample's own
            let mut lasts: Vec<u64> = self.last.iter().map(|&(_, last)| last).collect();
            let (_, &mut cut, _) = lasts.select_nth_unstable_by(keep - 1, |a, b| b.cmp(a));
            self.last
                .retain(|&(_, last)| last > cut || (last == cut && cut == sample));
        }
    }

    pub fn addresses(&self) -> impl Iterator<Item = usize> + '_ {
        self.last
            .iter()
            .map(|&(address, _)| address)
            .take(READ_AHEAD_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_addresses_are_few_beyond_the_last_sample() {
        let mut recent = Recent::default();
        // 40 samples of 10 new addresses each, then one of 5 known ones
        for sample in 1..=40u64 {
            let addresses: Vec<usize> = (0..10).map(|i| (sample as usize) * 100 + i).collect();
            recent.seen(&addresses, sample);
        }
        // the most recent ones stay, whole samples of them: 40 and 39 (38 would pass 10 + 16)
        assert_eq!(recent.last.len(), 20);
        let has = |recent: &Recent, address| recent.addresses().any(|a| a == address);
        assert!((0..10).all(|i| has(&recent, 4000 + i)));
        assert!((0..10).all(|i| has(&recent, 3900 + i)));
        recent.seen(&[4000, 4001, 4002, 4003, 4004], 41);
        assert!(recent.last.len() <= 5 + RECENT_EXTRA);
        // and none met longer ago than RECENT_SAMPLES samples
        recent.seen(&[1], 41 + RECENT_SAMPLES);
        assert_eq!(recent.addresses().collect::<Vec<_>>(), vec![1]);
        // addresses met out of order or twice: each kept once, by address
        recent.seen(&[9, 3, 9], 42 + RECENT_SAMPLES);
        assert_eq!(recent.addresses().collect::<Vec<_>>(), vec![1, 3, 9]);
        recent.seen(&[3, 9], 43 + RECENT_SAMPLES);
        assert_eq!(recent.addresses().collect::<Vec<_>>(), vec![1, 3, 9]);
    }

    #[test]
    fn a_stack_is_read_ahead_up_to_the_highest_recent_top() {
        let first = AheadStack::next(None, 0x100, 0x1000, 0x1800, 1);
        assert_eq!((first.start, first.end), (0x1000, 0x1800 + STACK_SLACK));
        // a shallower stack keeps the higher top in reach while it is recent
        let lower = AheadStack::next(Some(first), 0x100, 0x1000, 0x1400, 2);
        assert_eq!(lower.end, 0x1800 + STACK_SLACK);
        let old = AheadStack::next(Some(lower), 0x100, 0x1000, 0x1400, 1 + RECENT_SAMPLES);
        assert_eq!(old.end, 0x1400 + STACK_SLACK);
        // a deeper one raises it; another C frame or chunk starts over
        let deeper = AheadStack::next(Some(old), 0x100, 0x1000, 0x2000, 70);
        assert_eq!((deeper.high, deeper.high_seen), (0x2000, 70));
        let moved = AheadStack::next(Some(deeper), 0x200, 0x1000, 0x1100, 71);
        assert_eq!(moved.end, 0x1100 + STACK_SLACK);
        // the thread's first frame, once known, stays known whatever the top does
        let rooted = AheadStack {
            root: 0x500,
            ..moved
        };
        assert_eq!(
            AheadStack::next(Some(rooted), 0x300, 0x2000, 0x2100, 72).root,
            0x500
        );
        assert_eq!(AheadStack::next(None, 0x300, 0x2000, 0x2100, 72).root, 0);
    }
}
