//! MiniMalloc CSV: header `id,lower,upper,size` (optional `alignment`, `offset`),
//! half-open lifetimes `[lower, upper)`, so `first = lower` and `last = upper - 1`.
//! An `offset` column (MiniMalloc's fixed buffers, and its solution files) is read as
//! fixed offsets; an empty cell leaves the record free. The legacy `start,end` header
//! (inclusive `end`) is read too. Strict mode (the default) refuses unknown columns.

use crate::error::PlanError;
use crate::record::UsageRecord;
use std::fmt::Write;

const COLUMNS: [&str; 8] = ["id", "lower", "upper", "start", "end", "size", "alignment", "offset"];

/// Parses MiniMalloc CSV, refusing unknown columns. Errors name the 1-based line and the column.
pub fn parse(text: &str) -> Result<Vec<UsageRecord>, PlanError> {
    parse_with(text, true)
}

/// [`parse`]; with `strict` false unknown columns are ignored.
pub fn parse_with(text: &str, strict: bool) -> Result<Vec<UsageRecord>, PlanError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        return Ok(Vec::new());
    };
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    // A known column given twice is ambiguous (which value counts?), strict or not.
    if let Some(c) = COLUMNS.iter().find(|&&k| cols.iter().filter(|&&c| c == k).count() > 1) {
        return Err(PlanError::parse(1, *c, "column given twice"));
    }
    let col = |name: &str| cols.iter().position(|c| *c == name);
    let need = |name: &str| col(name).ok_or_else(|| PlanError::parse(1, name, "missing column"));
    let id_c = need("id")?;
    let size_c = need("size")?;
    // Half-open lower/upper, or legacy inclusive start/end.
    let (lo_c, hi_c, inclusive) = match (col("lower"), col("upper")) {
        (Some(l), Some(u)) => (l, u, false),
        _ => (need("start")?, need("end")?, true),
    };
    if strict {
        if let Some(c) = cols.iter().find(|c| !COLUMNS.contains(c)) {
            return Err(PlanError::parse(
                1,
                *c,
                format!("unknown column (known: {}); pass strict: false to ignore it", COLUMNS.join(", ")),
            ));
        }
    }
    let align_c = col("alignment");
    let offset_c = col("offset");
    let mut out = Vec::new();
    for (i, line) in lines {
        let ln = i + 1;
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != cols.len() {
            return Err(PlanError::parse(ln, "", format!("expected {} fields, found {}", cols.len(), fields.len())));
        }
        let num = |c: usize| -> Result<u64, PlanError> {
            fields[c]
                .parse::<u64>()
                .map_err(|_| PlanError::parse(ln, cols[c], format!("{:?} is not a non-negative integer", fields[c])))
        };
        let (lo, hi) = (num(lo_c)?, num(hi_c)?);
        let last = if inclusive {
            hi
        } else if hi > lo {
            hi - 1
        } else {
            return Err(PlanError::parse(ln, cols[hi_c], format!("empty lifetime [{lo}, {hi})")));
        };
        if lo > last {
            return Err(PlanError::parse(ln, cols[hi_c], format!("end {hi} before start {lo}")));
        }
        let opt = |c: Option<usize>| match c {
            Some(c) if !fields[c].is_empty() => num(c).map(Some),
            _ => Ok(None),
        };
        let (alignment, offset) = (opt(align_c)?, opt(offset_c)?);
        if fields[id_c].is_empty() {
            return Err(PlanError::parse(ln, "id", "empty id"));
        }
        let mut r = UsageRecord::new(fields[id_c], num(size_c)?, lo, last);
        (r.alignment, r.offset) = (alignment, offset);
        out.push(r);
    }
    Ok(out)
}

/// Writes MiniMalloc CSV (`alignment` column only if some record has one).
/// With `offsets`, an `offset` column is added (MiniMalloc's solution format); without,
/// fixed offsets are written there. Preferred offsets, sharing and spaces have no
/// column: such records are refused.
pub fn write(records: &[UsageRecord], offsets: Option<&[u64]>) -> Result<String, PlanError> {
    if let Some(o) = offsets {
        if o.len() != records.len() {
            return Err(PlanError::invalid(
                "offsets",
                format!("{} offsets (one per record)", records.len()),
                o.len().to_string(),
            )
            .with_hint(format!("{} records but {} offsets", records.len(), o.len())));
        }
    }
    let with_align = records.iter().any(|r| r.alignment.is_some());
    let mut s = String::from("id,lower,upper,size");
    if with_align {
        s.push_str(",alignment");
    }
    let offsets: Option<Vec<Option<u64>>> = match offsets {
        Some(o) => Some(o.iter().map(|&x| Some(x)).collect()),
        None if records.iter().any(|r| r.offset.is_some()) => Some(records.iter().map(|r| r.offset).collect()),
        None => None,
    };
    if offsets.is_some() {
        s.push_str(",offset");
    }
    s.push('\n');
    for (i, r) in records.iter().enumerate() {
        if r.preferred_offset.is_some() || r.shares_with.is_some() || r.space.is_some() {
            return Err(PlanError::invalid(
                format!("record {:?}", r.id),
                "no preferredOffset, sharesWith or space (no CSV column)",
                "one of them",
            )
            .with_hint(format!(
                "record {:?}: preferredOffset, sharesWith and space have no CSV column (write JSON)",
                r.id
            )));
        }
        if r.id.contains([',', '\n', '\r']) {
            return Err(PlanError::invalid(
                format!("record {:?}.id", r.id),
                "an id without commas or line breaks (CSV)",
                format!("{:?}", r.id),
            )
            .with_hint(format!("id {:?} cannot be written to CSV", r.id)));
        }
        let upper =
            r.last.checked_add(1).ok_or_else(|| PlanError::SizeOverflow(format!("record {:?}: last + 1", r.id)))?;
        let _ = write!(s, "{},{},{},{}", r.id, r.first, upper, r.size);
        if with_align {
            let _ = write!(s, ",{}", r.alignment.map(|a| a.to_string()).unwrap_or_default());
        }
        if let Some(o) = &offsets {
            let _ = write!(s, ",{}", o[i].map(|x| x.to_string()).unwrap_or_default());
        }
        s.push('\n');
    }
    Ok(s)
}
