//! Record orders for greedy placement. All orders are deterministic (ties by index).

use crate::bound::load_profile;
use crate::index::Stabbing;
use crate::radix::sort_by_key;
use crate::record::Problem;
use std::cmp::Reverse;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// Size, non-increasing (stable: Pisarchyk & Lee's order).
    Size,
    /// Lifetime length (in distinct time points), then size.
    Lifetime,
    /// Size x lifetime length.
    Area,
    /// Total size of the records it overlaps in time (its conflict weight), then size.
    Conflict,
    /// Pisarchyk & Lee's operator breadth: ops by live bytes, their records by size.
    Breadth,
    /// TFLite's ArenaPlanner: records live over the whole run (graph inputs kept to
    /// the end) first, by index; then the rest by size, ties by start.
    InputsFirst,
}

impl Order {
    pub const ALL: [Order; 6] =
        [Order::Breadth, Order::Size, Order::Area, Order::Lifetime, Order::Conflict, Order::InputsFirst];

    pub fn as_str(self) -> &'static str {
        match self {
            Order::Size => "size",
            Order::Lifetime => "lifetime",
            Order::Area => "area",
            Order::Conflict => "conflict",
            Order::Breadth => "breadth",
            Order::InputsFirst => "inputsFirst",
        }
    }

    pub fn compute(self, p: &Problem) -> Vec<usize> {
        let mut v: Vec<usize> = (0..p.len()).collect();
        match self {
            Order::Size => return size_order(p),
            Order::Lifetime => v.sort_by_key(|&i| (Reverse(p.span(i)), Reverse(p.size[i]))),
            Order::Area => v.sort_by_key(|&i| (Reverse(p.size[i] as u128 * p.span(i) as u128), Reverse(p.size[i]))),
            Order::Conflict => {
                let w = conflict_weights(p);
                v.sort_by_key(|&i| (Reverse(w[i]), Reverse(p.size[i])));
            }
            Order::Breadth => return breadth_order(p),
            Order::InputsFirst => {
                let end = p.points.saturating_sub(1);
                v.sort_by_key(|&i| {
                    let whole = p.first[i] == 0 && p.last[i] == end;
                    (!whole, if whole { 0 } else { !p.size[i] }, p.first[i], i)
                });
            }
        }
        v
    }
}

/// Records by size, non-increasing, ties by index: a stable radix sort by `!size`.
fn size_order(p: &Problem) -> Vec<usize> {
    let mut v: Vec<(u64, u64)> = (0..p.len()).map(|i| (!p.size[i], i as u64)).collect();
    sort_by_key(&mut v);
    v.into_iter().map(|(_, i)| i as usize).collect()
}

/// For each record, the total size of all records overlapping it (itself included):
/// those starting at or before its end minus those ending before its start.
fn conflict_weights(p: &Problem) -> Vec<u128> {
    let n = p.len();
    let mut by_first: Vec<(usize, u128)> = (0..n).map(|i| (p.first[i], p.size[i] as u128)).collect();
    let mut by_last: Vec<(usize, u128)> = (0..n).map(|i| (p.last[i], p.size[i] as u128)).collect();
    by_first.sort_unstable();
    by_last.sort_unstable();
    let prefix = |v: &[(usize, u128)]| {
        let mut acc = 0u128;
        std::iter::once(0)
            .chain(v.iter().map(|x| {
                acc += x.1;
                acc
            }))
            .collect::<Vec<_>>()
    };
    let (pf, pl) = (prefix(&by_first), prefix(&by_last));
    (0..n)
        .map(|i| {
            let started = pf[by_first.partition_point(|x| x.0 <= p.last[i])];
            let ended = pl[by_last.partition_point(|x| x.0 < p.first[i])];
            started - ended
        })
        .collect()
}

/// Greedy by breadth: time points by live bytes (non-increasing); at each point the
/// records live there and not yet ordered, by size (non-increasing).
fn breadth_order(p: &Problem) -> Vec<usize> {
    let load = load_profile(p);
    let mut pts: Vec<usize> = (0..p.points).collect();
    pts.sort_by_key(|&t| Reverse(load[t]));
    let mut stab = Stabbing::new(p.points, &p.first, &p.last);
    let mut taken = vec![false; p.len()];
    let mut out = Vec::with_capacity(p.len());
    let mut live = Vec::new();
    for t in pts {
        if out.len() == p.len() {
            break;
        }
        live.clear();
        stab.live_at(t, &taken, &mut live);
        live.sort_by_key(|&i| (Reverse(p.size[i]), i));
        for &i in &live {
            taken[i] = true;
        }
        out.extend_from_slice(&live);
    }
    out
}
