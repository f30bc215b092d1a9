//! A fast hasher for the native readers' own tables (FxHash's mixing, as in rustc).
//!
//! Only for keys that come from the profile being read and are looked up to count them: a
//! crafted input could make them collide and cost time, never wrong results, and the input is
//! bounded by the readers' size limit.

/// A hasher for keys that are not chosen by an attacker to collide (FxHash's mixing).
#[derive(Default, Clone, Copy)]
pub struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().unwrap_or_default()));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }

    fn write_u8(&mut self, b: u8) {
        self.add(u64::from(b));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl Fx {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

pub type FxBuild = std::hash::BuildHasherDefault<Fx>;
