//! Allocator settings: watermark ratios (MPS semantics and defaults) and the
//! debug verbosity mask, with their `WGALLOC_*` environment knobs.

use crate::error::{Error, Result};

/// MPS: the high watermark may be set up to twice the budget.
pub const HIGH_WATERMARK_UPPER_BOUND: f64 = 2.0;
pub const DEFAULT_HIGH_WATERMARK_RATIO: f64 = 1.7;
/// On unified memory (integrated and software adapters) MPS allows more before collecting.
pub const DEFAULT_LOW_WATERMARK_RATIO_UNIFIED: f64 = 1.4;
pub const DEFAULT_LOW_WATERMARK_RATIO_DISCRETE: f64 = 1.0;

/// Bits of `WGALLOC_DEBUG_ALLOCATOR`.
pub mod debug {
    /// Print the allocator's stats when the heap is dropped.
    pub const PROFILING: u32 = 1 << 0;
    /// Log every allocation from the driver and every block handed out.
    pub const ALLOCATIONS: u32 = 1 << 1;
    /// Log blocks served from the cache.
    pub const RECYCLES: u32 = 1 << 2;
    /// Log frees and segment releases.
    pub const RELEASES: u32 = 1 << 3;
    /// Only log blocks from the large pools.
    pub const LARGE_ONLY: u32 = 1 << 4;
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Watermarks {
    /// Hard limit as a fraction of the budget; 0 disables it.
    pub high: f64,
    /// Soft limit (garbage collection of cached segments); 0 disables it.
    pub low: f64,
}

impl Watermarks {
    pub fn defaults(unified_memory: bool) -> Self {
        let low =
            if unified_memory { DEFAULT_LOW_WATERMARK_RATIO_UNIFIED } else { DEFAULT_LOW_WATERMARK_RATIO_DISCRETE };
        Watermarks { high: DEFAULT_HIGH_WATERMARK_RATIO, low }
    }

    /// Defaults overridden by `WGALLOC_HIGH_WATERMARK_RATIO` / `WGALLOC_LOW_WATERMARK_RATIO`.
    /// A malformed value is an error that names the variable.
    pub fn from_env(unified_memory: bool) -> Result<Self> {
        let mut w = Self::defaults(unified_memory);
        if let Some(v) = env_ratio("WGALLOC_HIGH_WATERMARK_RATIO")? {
            w.high = v;
        }
        match env_ratio("WGALLOC_LOW_WATERMARK_RATIO")? {
            Some(v) => w.low = v,
            // With only the high ratio lowered below the default low one, follow it down.
            None if w.high > 0.0 && w.low > w.high => w.low = w.high,
            None => {}
        }
        w.validate().map_err(|e| match e {
            Error::InvalidArgument(mut a) => {
                let high = a.path.starts_with("high");
                a.path = if high { "WGALLOC_HIGH_WATERMARK_RATIO" } else { "WGALLOC_LOW_WATERMARK_RATIO" }.into();
                Error::InvalidArgument(a)
            }
            other => other,
        })?;
        Ok(w)
    }

    pub fn validate(&self) -> Result<()> {
        if !(0.0..=HIGH_WATERMARK_UPPER_BOUND).contains(&self.high) || self.high.is_nan() {
            return Err(Error::invalid(
                "highWatermarkRatio",
                format!("a high watermark ratio between 0 (disabled) and {HIGH_WATERMARK_UPPER_BOUND}"),
                self.high.to_string(),
            ));
        }
        let max_low = if self.high == 0.0 { HIGH_WATERMARK_UPPER_BOUND } else { self.high };
        if !(0.0..=max_low).contains(&self.low) || self.low.is_nan() {
            return Err(Error::invalid(
                "lowWatermarkRatio",
                format!("a low watermark ratio between 0 (disabled) and the high watermark ratio ({max_low})"),
                self.low.to_string(),
            ));
        }
        Ok(())
    }

    /// Bytes for a ratio of `budget` (0 = no limit).
    pub fn limit(ratio: f64, budget: u64) -> u64 {
        if ratio == 0.0 {
            u64::MAX
        } else {
            (ratio * budget as f64) as u64
        }
    }
}

fn env_ratio(name: &str) -> Result<Option<f64>> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => {
            v.trim().parse::<f64>().map(Some).map_err(|_| Error::invalid(name, "a number", format!("{v:?}")))
        }
        _ => Ok(None),
    }
}

/// `WGALLOC_DEBUG_ALLOCATOR`: a decimal or 0x-prefixed bit mask (see [`debug`]); empty or
/// unset is 0. Anything else is an error that names the variable.
pub fn debug_mask_from_env() -> Result<u32> {
    let Ok(v) = std::env::var("WGALLOC_DEBUG_ALLOCATOR") else { return Ok(0) };
    let v = v.trim();
    if v.is_empty() {
        return Ok(0);
    }
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => v.parse(),
    };
    parsed.map_err(|_| Error::invalid("WGALLOC_DEBUG_ALLOCATOR", "a bit mask such as 3 or 0x1f", format!("{v:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_validated() {
        assert!(Watermarks { high: 1.7, low: 1.4 }.validate().is_ok());
        assert!(Watermarks { high: 0.0, low: 1.9 }.validate().is_ok());
        assert!(Watermarks { high: 2.5, low: 1.0 }.validate().is_err());
        assert!(Watermarks { high: 1.0, low: 1.2 }.validate().is_err());
        assert!(Watermarks { high: -0.1, low: 0.0 }.validate().is_err());
        assert!(Watermarks { high: f64::NAN, low: 0.0 }.validate().is_err());
        assert_eq!(Watermarks::limit(0.0, 100), u64::MAX);
        assert_eq!(Watermarks::limit(0.5, 100), 50);
    }
}
