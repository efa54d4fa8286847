//! The hasher of the aggregator's maps: rustc-hash's Fx accumulation, which is fast but close
//! to linear in its input, finished with the murmur3 64-bit mixer, so that keys that differ in
//! regular steps (frame ids that are cache indices, lines, code addresses a fixed stride apart)
//! still spread over the table. Without the mixer, such stacks collide into long probe chains.

use std::hash::{BuildHasherDefault, Hasher};

/// Fx accumulation with a final avalanche.
#[derive(Default, Clone)]
pub(crate) struct MixHasher(rustc_hash::FxHasher);

impl std::fmt::Debug for MixHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MixHasher")
    }
}

impl Hasher for MixHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.0.write_u8(i);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.0.write_u32(i);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0.write_u64(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.0.write_usize(i);
    }
    #[inline]
    fn finish(&self) -> u64 {
        mix64(self.0.finish())
    }
}

/// murmur3's 64-bit finalizer: every input bit flips about half the output bits.
#[inline]
pub(crate) fn mix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// `BuildHasher` for [`MixHasher`].
pub(crate) type MixBuild = BuildHasherDefault<MixHasher>;
