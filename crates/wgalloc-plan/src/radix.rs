//! Stable LSD radix sort of (key, payload) pairs. The planner and the checker each
//! sort 10^4 to 10^6 such pairs by time, offset or size (the payload is a record
//! index); comparison sorts cost several times more there.

/// Bits per digit: 1 to 3 passes for the times, sizes and offsets of real traces.
const DIGIT: u32 = 11;
const MASK: usize = (1 << DIGIT) - 1;

/// Sorts `v` by key (the first of each pair), stably. Only the digits in which
/// keys differ take a pass; each pass also counts the next digit.
pub(crate) fn sort_by_key(v: &mut Vec<(u64, u64)>) {
    let (mut any, mut all) = (0u64, !0u64);
    for &(k, _) in v.iter() {
        any |= k;
        all &= k;
    }
    let differ = any ^ all;
    let shifts: Vec<u32> = (0..64).step_by(DIGIT as usize).filter(|&s| (differ >> s) as usize & MASK != 0).collect();
    let Some(&first) = shifts.first() else { return };
    let (mut at, mut next) = (vec![0usize; MASK + 1], vec![0usize; MASK + 1]);
    for &(k, _) in v.iter() {
        at[(k >> first) as usize & MASK] += 1;
    }
    let mut buf = vec![(0, 0); v.len()];
    for (d, &s) in shifts.iter().enumerate() {
        let mut sum = 0;
        for a in at.iter_mut() {
            (*a, sum) = (sum, sum + *a);
        }
        next.fill(0);
        // The last pass counts a digit nobody reads (cheaper than a second loop).
        let ns = shifts.get(d + 1).copied().unwrap_or(0);
        for &x in v.iter() {
            let k = (x.0 >> s) as usize & MASK;
            buf[at[k]] = x;
            at[k] += 1;
            next[(x.0 >> ns) as usize & MASK] += 1;
        }
        std::mem::swap(v, &mut buf);
        std::mem::swap(&mut at, &mut next);
    }
    debug_assert!(v.is_sorted_by_key(|x| x.0));
}

#[cfg(test)]
mod tests {
    use super::sort_by_key;

    #[test]
    fn matches_a_stable_sort() {
        let mut next = crate::test_rng::below(0x9E37_79B9_7F4A_7C15u64);
        for (n, bits) in [(0, 64), (1, 64), (500, 1), (500, 5), (2000, 11), (2000, 12), (2000, 40), (3000, 64)] {
            let mut v: Vec<(u64, u64)> =
                (0..n).map(|i| (if bits == 64 { next(u64::MAX) } else { (1 << 50) + next(1 << bits) }, i)).collect();
            let mut want = v.clone();
            want.sort_by_key(|x| x.0);
            sort_by_key(&mut v);
            assert_eq!(v, want, "n {n} bits {bits}");
        }
    }
}
