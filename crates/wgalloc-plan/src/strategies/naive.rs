//! Bump allocation: records in input order, each at the next aligned offset.

use crate::error::{add, align_up, PlanError};
use crate::record::Problem;

/// Fixed records keep their offsets; every other record goes above all of them
/// (preferred offsets are ignored).
pub(crate) fn plan(p: &Problem) -> Result<Vec<u64>, PlanError> {
    let mut top = (0..p.len()).filter_map(|i| p.fixed[i].map(|o| o + p.size[i])).max().unwrap_or(0);
    let mut out = Vec::with_capacity(p.len());
    for i in 0..p.len() {
        if let Some(o) = p.fixed[i] {
            out.push(o);
            continue;
        }
        if p.size[i] == 0 {
            out.push(0);
            continue;
        }
        let o = align_up(top, p.align[i])?;
        top = add(o, p.size[i], "naive slab")?;
        out.push(o);
    }
    Ok(out)
}
