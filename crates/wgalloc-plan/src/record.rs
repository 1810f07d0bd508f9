//! Usage records and their validation into the dense form the planners use.

use crate::error::{add, PlanError};
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

/// FxHash (rustc's): ids are hashed once each to find duplicates, where SipHash's
/// flood resistance buys nothing (the caller supplies both the ids and the work).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        for &b in chunks.remainder() {
            self.mix(u64::from(b));
        }
    }
    fn finish(&self) -> u64 {
        self.0
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
        let mut ids: HashSet<&str, BuildHasherDefault<IdHasher>> = HashSet::with_capacity_and_hasher(records.len(), Default::default());
        let mut total = 0u64;
        let mut align = Vec::with_capacity(records.len());
        for r in records {
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
            // Bounding the plain sum bounds every plan's height (before alignment padding).
            total = add(total, r.size, "sum of record sizes")?;
        }
        let mut pts: Vec<u64> = records.iter().flat_map(|r| [r.first, r.last]).collect();
        pts.sort_unstable();
        pts.dedup();
        let idx = |t: u64| pts.partition_point(|&p| p < t);
        Ok(Problem {
            size: records.iter().map(|r| r.size).collect(),
            align,
            first: records.iter().map(|r| idx(r.first)).collect(),
            last: records.iter().map(|r| idx(r.last)).collect(),
            points: pts.len(),
            times: pts,
        })
    }

    /// Lifetime length in compressed points (>= 1).
    pub fn span(&self, i: usize) -> usize {
        self.last[i] - self.first[i] + 1
    }
}
