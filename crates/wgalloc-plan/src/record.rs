//! Usage records and their validation into the dense form the planners use.

use crate::error::{add, PlanError};
use crate::radix::sort_by_key;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Name of the memory space of records that name none.
pub const DEFAULT_SPACE: &str = "default";

/// One buffer to place: `size` bytes live over the op indices `[first, last]` (inclusive).
///
/// Records are identified by `id`, never by lifetime: two records with the same
/// lifetime are still distinct buffers.
///
/// * `alignment`: any positive integer. The plan's own alignment applies too: the
///   record's offset is a multiple of both (their least common multiple, which is the
///   larger of the two when both are powers of two).
/// * `offset`: a fixed offset the planner keeps (offline-planned tensors). Fixed
///   records that overlap in time and memory are refused with `INVALID_ARGUMENT`.
/// * `preferred_offset`: kept when its bytes are free over the record's lifetime
///   (and aligned); otherwise the record is placed as usual.
/// * `shares_with`: the id of a record whose bytes this one reuses in place (an op
///   writing its output over a dead input). The two get one range; their lifetimes
///   may touch at one op index but not overlap further.
/// * `space`: memory space (a separate slab, planned on its own); default `"default"`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UsageRecord {
    pub id: String,
    pub size: u64,
    pub first: u64,
    pub last: u64,
    pub alignment: Option<u64>,
    pub offset: Option<u64>,
    pub preferred_offset: Option<u64>,
    pub shares_with: Option<String>,
    pub space: Option<String>,
}

impl UsageRecord {
    /// Record with no alignment, offset, sharing or space of its own.
    pub fn new(id: impl Into<String>, size: u64, first: u64, last: u64) -> Self {
        UsageRecord { id: id.into(), size, first, last, ..Default::default() }
    }

    /// Whether the two lifetimes share at least one op index.
    pub fn overlaps(&self, other: &UsageRecord) -> bool {
        self.first <= other.last && other.first <= self.last
    }

    /// The memory space name (`"default"` when none is given).
    pub fn space_name(&self) -> &str {
        self.space.as_deref().unwrap_or(DEFAULT_SPACE)
    }
}

pub(crate) fn check_alignment(what: &str, alignment: u64) -> Result<(), PlanError> {
    if alignment > 0 {
        Ok(())
    } else {
        Err(PlanError::BadAlignment { what: what.to_string(), alignment })
    }
}

pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Least common multiple of two positive alignments; `None` if it overflows u64.
pub(crate) fn lcm(a: u64, b: u64) -> Option<u64> {
    (a / gcd(a, b)).checked_mul(b)
}

/// Effective alignment of a record under a plan-wide alignment.
pub(crate) fn effective_alignment(r: &UsageRecord, plan_align: u64) -> Result<u64, PlanError> {
    let own = r.alignment.unwrap_or(1);
    check_alignment(&format!("record {:?}", r.id), own)?;
    lcm(own, plan_align.max(1)).ok_or_else(|| {
        PlanError::SizeOverflow(format!("record {:?}: alignment {own} with the plan's {plan_align}", r.id))
    })
}

/// Groups of records that share one range (`shares_with`, followed transitively):
/// `group[i]` is the index of the group's root record. Errors name unknown ids,
/// cycles, and members whose lifetimes overlap beyond one touching op index.
pub(crate) fn share_groups(records: &[UsageRecord]) -> Result<Vec<usize>, PlanError> {
    let n = records.len();
    let mut group: Vec<usize> = (0..n).collect();
    if records.iter().all(|r| r.shares_with.is_none()) {
        return Ok(group);
    }
    let by_id: HashMap<&str, usize> = records.iter().enumerate().map(|(i, r)| (r.id.as_str(), i)).collect();
    let mut parent: Vec<usize> = (0..n).collect();
    for (i, r) in records.iter().enumerate() {
        if let Some(base) = &r.shares_with {
            let &j = by_id.get(base.as_str()).ok_or_else(|| {
                PlanError::invalid(format!("record {:?}.sharesWith", r.id), "the id of a record", format!("{base:?}"))
                    .with_hint(format!("record {:?} shares with unknown record {base:?}", r.id))
            })?;
            if j == i {
                return Err(PlanError::invalid(
                    format!("record {:?}.sharesWith", r.id),
                    "another record's id",
                    format!("{base:?}"),
                )
                .with_hint(format!("record {:?} shares with itself", r.id)));
            }
            parent[i] = j;
        }
    }
    for i in 0..n {
        // Follow the chain to its root; a chain longer than n loops.
        let (mut cur, mut steps) = (i, 0);
        while parent[cur] != cur {
            cur = parent[cur];
            steps += 1;
            if steps > n {
                return Err(PlanError::invalid(
                    format!("record {:?}.sharesWith", records[i].id),
                    "a chain that ends",
                    "a cycle",
                )
                .with_hint(format!("record {:?} is part of a sharesWith cycle", records[i].id)));
            }
        }
        group[i] = cur;
    }
    // Members of one group take turns: sorted by start, each starts no earlier than
    // every earlier member ends (touching at one op index is the in-place hand-over).
    let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, &g) in group.iter().enumerate() {
        if g != i {
            members.entry(g).or_default().push(i);
        }
    }
    for (root, mut m) in members {
        m.push(root);
        m.sort_by_key(|&i| (records[i].first, records[i].last));
        let mut reach: Option<(u64, usize)> = None;
        for &i in &m {
            if let Some((end, j)) = reach {
                if records[i].first < end {
                    return Err(PlanError::invalid(
                        format!("record {:?}.first", records[i].id),
                        format!("at least {end} (after {:?}, which shares its range)", records[j].id),
                        records[i].first.to_string(),
                    )
                    .with_hint(format!(
                        "records {:?} and {:?} share one range but are both live over op {} to {}",
                        records[j].id,
                        records[i].id,
                        records[i].first,
                        end.min(records[i].last)
                    )));
                }
            }
            if reach.is_none_or(|(end, _)| records[i].last > end) {
                reach = Some((records[i].last, i));
            }
        }
    }
    Ok(group)
}

/// FxHash (rustc's mixing, a string's tail taken as one word): ids are hashed once
/// each to find duplicates, where SipHash's flood resistance buys nothing (the caller
/// supplies both the ids and the work).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            // One word for the tail (short ids are all tail), its length in the top byte.
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            word[7] = rest.len() as u8;
            self.mix(u64::from_le_bytes(word));
        }
    }
    fn finish(&self) -> u64 {
        // A product's high bits are its well-mixed ones; the table indexes by the low bits.
        self.0.rotate_left(26)
    }
}

impl IdHasher {
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Records validated and reduced to what placement needs: sizes, effective
/// alignments and lifetimes compressed to dense point indices (order-preserving,
/// so overlap is unchanged).
#[derive(Debug, Clone)]
pub(crate) struct Problem {
    pub size: Vec<u64>,
    pub align: Vec<u64>,
    pub first: Vec<usize>,
    pub last: Vec<usize>,
    /// Number of distinct compressed time points.
    pub points: usize,
    /// Original op index of each compressed point (ascending).
    pub times: Vec<u64>,
    /// Fixed offset of each record, if any (kept by every strategy).
    pub fixed: Vec<Option<u64>>,
    /// Preferred offset of each record, if any (kept where it fits).
    pub preferred: Vec<Option<u64>>,
}

impl Problem {
    pub fn len(&self) -> usize {
        self.size.len()
    }

    /// Validates records (lifetimes, unique ids, alignments, total size fits u64)
    /// and compresses time. A record's effective alignment is the least common
    /// multiple of its own and `default_align` (the larger, for powers of two).
    pub fn new(records: &[UsageRecord], default_align: u64) -> Result<Problem, PlanError> {
        check_alignment("plan options", default_align)?;
        let mut ids: HashSet<&str, BuildHasherDefault<IdHasher>> =
            HashSet::with_capacity_and_hasher(records.len(), Default::default());
        let n = records.len();
        let mut total = 0u64;
        let (mut size, mut align) = (Vec::with_capacity(n), Vec::with_capacity(n));
        // Lifetime ends as (time, slot): slot 2i is record i's first, 2i + 1 its last.
        let mut ends: Vec<(u64, u64)> = Vec::with_capacity(2 * n);
        for (i, r) in records.iter().enumerate() {
            if r.first > r.last {
                return Err(PlanError::InvalidLifetime { id: r.id.clone(), first: r.first, last: r.last });
            }
            if !ids.insert(r.id.as_str()) {
                return Err(PlanError::DuplicateId { id: r.id.clone() });
            }
            let a = effective_alignment(r, default_align)?;
            if let Some(o) = r.offset {
                if o % a != 0 {
                    return Err(PlanError::invalid(
                        format!("record {:?}.offset", r.id),
                        format!("a multiple of its alignment {a}"),
                        o.to_string(),
                    )
                    .with_hint(format!("record {:?}: fixed offset {o} is not a multiple of its alignment {a}", r.id)));
                }
                add(o, r.size, &format!("record {:?}: fixed offset + size", r.id))?;
            }
            align.push(a);
            size.push(r.size);
            // Bounding the plain sum bounds every plan's height (before alignment padding).
            total = add(total, r.size, "sum of record sizes")?;
            ends.push((r.first, 2 * i as u64));
            ends.push((r.last, 2 * i as u64 + 1));
        }
        // Compress time: a point per distinct end time, in order.
        sort_by_key(&mut ends);
        let (mut first, mut last) = (vec![0; n], vec![0; n]);
        let mut times: Vec<u64> = Vec::new();
        for (t, slot) in ends {
            if times.last() != Some(&t) {
                times.push(t);
            }
            let slot = slot as usize;
            let point = if slot % 2 == 1 { &mut last[slot / 2] } else { &mut first[slot / 2] };
            *point = times.len() - 1;
        }
        let fixed = records.iter().map(|r| r.offset).collect();
        let preferred = records.iter().map(|r| r.preferred_offset).collect();
        Ok(Problem { size, align, first, last, points: times.len(), times, fixed, preferred })
    }

    /// Whether some record has a fixed or preferred offset (the exact search and the
    /// online linear scan assume every record is free to move).
    pub fn pinned(&self, i: usize) -> bool {
        self.fixed[i].is_some() || self.preferred[i].is_some()
    }

    /// Lifetime length in compressed points (>= 1).
    pub fn span(&self, i: usize) -> usize {
        self.last[i] - self.first[i] + 1
    }
}
