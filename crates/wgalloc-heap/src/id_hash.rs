//! A multiplicative hasher for the heap's integer keys (block and segment ids):
//! much cheaper than SipHash on the allocation fast path, and the keys come from
//! the allocator itself, never from an adversary.

use std::hash::Hasher;

const K: u64 = 0x9e37_79b9_7f4a_7c15;

#[derive(Default)]
pub struct IdHasher(u64);

impl IdHasher {
    fn mix(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(K);
    }
}

impl Hasher for IdHasher {
    /// Folds the high bits down: the table indexes buckets by the low bits, which
    /// for keys with zero low bits (aligned values) would otherwise all collide.
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.mix(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }
    fn write_u32(&mut self, n: u32) {
        self.mix(u64::from(n));
    }
}
