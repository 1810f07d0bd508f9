//! Usage records and their validation into the dense form the planners use.

use crate::error::{add, PlanError};
use crate::radix::sort_by_key;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// One buffer to place: `size` bytes live over the op indices `[first, last]` (inclusive).
///
/// Records are identified by `id`, never by lifetime: two records with the same
/// lifetime are still distinct buffers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UsageRecord {
    pub id: String,
    pub size: u64,
    pub first: u64,
    pub last: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alignment: Option<u64>,
}

impl UsageRecord {
    /// Record with no alignment of its own.
    pub fn new(id: impl Into<String>, size: u64, first: u64, last: u64) -> Self {
        UsageRecord { id: id.into(), size, first, last, alignment: None }
    }

    /// Whether the two lifetimes share at least one op index.
    pub fn overlaps(&self, other: &UsageRecord) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

pub(crate) fn check_alignment(what: &str, alignment: u64) -> Result<(), PlanError> {
    if alignment.is_power_of_two() {
        Ok(())
    } else {
        Err(PlanError::BadAlignment { what: what.to_string(), alignment })
    }
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
}

impl Problem {
    pub fn len(&self) -> usize {
        self.size.len()
    }

    /// Validates records (lifetimes, unique ids, alignments, total size fits u64)
    /// and compresses time. `default_align` applies to records without their own;
    /// a record's effective alignment is the larger of the two (both powers of two).
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
            let a = match r.alignment {
                Some(a) => {
                    check_alignment(&format!("record {:?}", r.id), a)?;
                    a.max(default_align)
                }
                None => default_align,
            };
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
        Ok(Problem { size, align, first, last, points: times.len(), times })
    }

    /// Lifetime length in compressed points (>= 1).
    pub fn span(&self, i: usize) -> usize {
        self.last[i] - self.first[i] + 1
    }
}
