//! The code object headers a sample's batch read ahead, as the last sample compared them with
//! the cached code objects: a header whose bytes have not changed since it was found to be the
//! cached code's is still that code's, and is not looked up and compared again.
//!
//! Up to 3.13 every sample checks the header of each code object its frames run (the object
//! may have been freed and its memory given to another). The batch reads the headers of the
//! code objects recent samples checked one after another, by address; most samples read the
//! same ones with the same bytes.

/// The headers read ahead by the last sample, by code object address, and which of them were
/// then the cached code's.
#[derive(Default)]
pub struct Compared {
    addresses: Vec<usize>,
    bytes: Vec<u8>,
    same: Vec<bool>,
    /// Where the last `find` found its address: a sample asks in order of address.
    cursor: std::cell::Cell<usize>,
}

impl Compared {
    /// Takes this sample's headers read ahead: those of `addresses` (sorted), one after
    /// another in `bytes` (`size` each), or None when they were not all read. A header stays
    /// known as the cached code's if it was so in the last sample, which read the same
    /// addresses, and its bytes are the same now.
    pub fn begin(&mut self, addresses: &[usize], bytes: Option<&[u8]>, size: usize) {
        let Some(bytes) = bytes.filter(|b| size > 0 && b.len() == addresses.len() * size) else {
            self.forget();
            return;
        };
        if self.addresses != addresses {
            self.addresses.clear();
            self.addresses.extend_from_slice(addresses);
            self.same.clear();
            self.same.resize(addresses.len(), false);
        } else if self.bytes != bytes {
            let now = bytes.chunks_exact(size);
            let then = self.bytes.chunks_exact(size);
            for ((same, now), then) in self.same.iter_mut().zip(now).zip(then) {
                *same = *same && now == then;
            }
        } else {
            return; // the same headers, byte for byte: nothing to take
        }
        self.bytes.clear();
        self.bytes.extend_from_slice(bytes);
    }

    /// Whether the header of the code object at `address`, as this sample read it ahead, is
    /// the cached code's.
    pub fn unchanged(&self, address: usize) -> bool {
        self.find(address).is_some_and(|i| self.same[i])
    }

    /// Notes that the code object at `address` is cached with the header this sample read
    /// ahead (it was compared with it, or loaded with it).
    pub fn settled(&mut self, address: usize) {
        if let Some(i) = self.find(address) {
            self.same[i] = true;
        }
    }

    /// Where `address` is among those read ahead: on from the last one found when it lies
    /// past it, as it does when asked in order.
    fn find(&self, address: usize) -> Option<usize> {
        let addresses = &self.addresses;
        let from = self.cursor.get();
        let from = match addresses.get(from) {
            Some(&at) if at <= address => from,
            _ => 0,
        };
        let i = from
            + addresses[from..]
                .iter()
                .take_while(|&&a| a < address)
                .count();
        self.cursor.set(i);
        (addresses.get(i) == Some(&address)).then_some(i)
    }

    /// Forgets every header: the cached code objects were dropped.
    pub fn forget(&mut self) {
        self.addresses.clear();
        self.bytes.clear();
        self.same.clear();
        self.cursor.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_is_known_while_its_bytes_and_the_addresses_read_stay() {
        let mut compared = Compared::default();
        let bytes = [1u8, 1, 2, 2, 3, 3];
        compared.begin(&[10, 20, 30], Some(&bytes), 2);
        // nothing is known before a sample settles it
        assert!(!compared.unchanged(20));
        compared.settled(20);
        compared.settled(30);
        compared.settled(99); // not read ahead: nothing to note
        assert!(compared.unchanged(20) && compared.unchanged(30));
        // the next sample: 30's header changed, 20's did not
        compared.begin(&[10, 20, 30], Some(&[1, 1, 2, 2, 3, 4]), 2);
        assert!(compared.unchanged(20));
        assert!(!compared.unchanged(30) && !compared.unchanged(10));
        // changed back: still unknown until settled again
        compared.begin(&[10, 20, 30], Some(&bytes), 2);
        assert!(!compared.unchanged(30) && compared.unchanged(20));
        // other addresses read ahead, or the headers not all read: nothing known
        compared.begin(&[20, 30], Some(&[2, 2, 3, 3]), 2);
        assert!(!compared.unchanged(20));
        compared.settled(20);
        compared.begin(&[20, 30], None, 2);
        assert!(!compared.unchanged(20));
        // the cache dropped
        compared.begin(&[20, 30], Some(&[2, 2, 3, 3]), 2);
        compared.settled(20);
        compared.forget();
        assert!(!compared.unchanged(20));
    }
}
