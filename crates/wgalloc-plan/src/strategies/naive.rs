//! Bump allocation: records in input order, each at the next aligned offset.

use crate::error::{add, align_up, PlanError};
use crate::record::Problem;

pub(crate) fn plan(p: &Problem) -> Result<Vec<u64>, PlanError> {
    let mut top = 0u64;
    let mut out = Vec::with_capacity(p.len());
    for i in 0..p.len() {
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
