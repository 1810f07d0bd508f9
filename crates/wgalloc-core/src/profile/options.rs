//! What the profiler records and prints: the trace mode of `start()` and the
//! `WGALLOC_PROFILE` flags, which mirror MPSProfiler's log options by name.

use crate::error::{Error, Result};

/// How traced work appears in the trace: spans (`interval`), instants (`event`), or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mode {
    pub interval: bool,
    pub event: bool,
}

pub const MODES: &str = "'interval', 'event' or 'interval,event'";

impl Mode {
    /// Every mode, as `as_str` names them.
    pub const ALL: [Mode; 3] = [
        Mode { interval: true, event: false },
        Mode { interval: false, event: true },
        Mode { interval: true, event: true },
    ];

    pub fn parse(s: &str) -> Result<Mode> {
        let mut m = Mode::default();
        for part in s.split(',').map(str::trim) {
            match part {
                "interval" => m.interval = true,
                "event" => m.event = true,
                other => {
                    return Err(Error::invalid("mode", MODES, crate::error::quoted(other))
                        .with_hint(format!("unknown profiler mode in '{s}'")))
                }
            }
        }
        Ok(m)
    }

    pub fn as_str(self) -> &'static str {
        match (self.interval, self.event) {
            (true, true) => "interval,event",
            (false, true) => "event",
            _ => "interval",
        }
    }
}

/// `WGALLOC_PROFILE` flags (comma-separated). Bit values follow MPSProfiler's LogOptions.
pub mod flags {
    pub const OPERATION_INFO: u32 = 1 << 0;
    pub const COPY_INFO: u32 = 1 << 1;
    pub const FALLBACK_INFO: u32 = 1 << 2;
    pub const ALL_STATS: u32 = 1 << 3;
    pub const OPERATION_STATS: u32 = 1 << 4;
    pub const COPY_STATS: u32 = 1 << 5;
    pub const FALLBACK_STATS: u32 = 1 << 6;
    pub const INCLUDE_GPU_TIME: u32 = 1 << 7;
    pub const INCLUDE_KERNEL_TIME: u32 = 1 << 8;
    pub const INCLUDE_BUFFER_ID: u32 = 1 << 9;
    /// Not a log option: also trace (`interval`/`event`) from process start.
    pub const TRACE_INTERVAL: u32 = 1 << 10;
    pub const TRACE_EVENT: u32 = 1 << 11;
    /// Block after each profiled submission until the GPU finished it.
    pub const WAIT_UNTIL_COMPLETED: u32 = 1 << 12;

    pub const NAMES: [(&str, u32); 13] = [
        ("operation-info", OPERATION_INFO),
        ("copy-info", COPY_INFO),
        ("fallback-info", FALLBACK_INFO),
        ("all-stats", ALL_STATS),
        ("operation-stats", OPERATION_STATS),
        ("copy-stats", COPY_STATS),
        ("fallback-stats", FALLBACK_STATS),
        ("gpu-time", INCLUDE_GPU_TIME),
        ("kernel-time", INCLUDE_KERNEL_TIME),
        ("buffer-id", INCLUDE_BUFFER_ID),
        ("interval", TRACE_INTERVAL),
        ("event", TRACE_EVENT),
        ("wait-until-completed", WAIT_UNTIL_COMPLETED),
    ];
}

/// Parses `WGALLOC_PROFILE`: comma-separated flag names (case-insensitive, `_` or `-`),
/// or `all`. Empty means off.
pub fn parse_flags(value: &str) -> Result<u32> {
    let mut bits = 0;
    for raw in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let name = raw.to_lowercase().replace('_', "-");
        bits |= match name.as_str() {
            "all" => flags::NAMES
                .iter()
                .filter(|(n, _)| !matches!(*n, "wait-until-completed" | "event"))
                .fold(0, |a, (_, b)| a | b),
            _ => flags::NAMES.iter().find(|(n, _)| *n == name).map(|(_, b)| *b).ok_or_else(|| {
                let valid: Vec<&str> = flags::NAMES.iter().map(|(n, _)| *n).collect();
                Error::invalid(
                    "WGALLOC_PROFILE",
                    format!("flags from all, {}", valid.join(", ")),
                    crate::error::quoted(raw),
                )
                .with_hint("unknown WGALLOC_PROFILE flag")
            })?,
        };
    }
    Ok(bits)
}

/// Flags that ask for stats tables at exit.
pub fn wants_stats_at_exit(bits: u32) -> bool {
    bits & (flags::ALL_STATS | flags::OPERATION_STATS | flags::COPY_STATS | flags::FALLBACK_STATS) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_flags_parse_and_reject_unknown_names() {
        assert_eq!(Mode::parse("interval,event").unwrap(), Mode { interval: true, event: true });
        assert_eq!(Mode::parse("event").unwrap().as_str(), "event");
        let e = Mode::parse("intervals").unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(e.to_string().contains("'interval,event'"));
        assert_eq!(parse_flags("").unwrap(), 0);
        assert_eq!(parse_flags("OPERATION_STATS, gpu-time").unwrap(), flags::OPERATION_STATS | flags::INCLUDE_GPU_TIME);
        assert!(wants_stats_at_exit(parse_flags("all").unwrap()));
        let e = parse_flags("op-stats").unwrap_err();
        assert!(e.to_string().contains("operation-stats"), "{e}");
    }
}
