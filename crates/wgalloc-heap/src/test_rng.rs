//! Deterministic xorshift numbers for the crate's unit tests.

/// Returns `next(m)`: a number in `0..m` (m > 0) from a xorshift64 sequence seeded with `seed`.
pub(crate) fn below(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed;
    move |m| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    }
}
