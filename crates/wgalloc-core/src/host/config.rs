//! Host-cache settings and size classes. Sizes round up to a power of two (one
//! free list per log2 class, as in PyTorch's CachingHostAllocator); above the
//! rounding threshold they round to a multiple of 2 MiB instead, because pure
//! power-of-two rounding wastes up to half of every large block.

use crate::error::{align_up, Error, LimitOom, OomSource, Result};

/// One free list per log2 size class.
pub const NUM_CLASSES: usize = 64;
/// Smallest staging buffer: keeps tiny requests in a handful of classes.
pub const MIN_BLOCK: u64 = 16;
/// Granule of sizes above the rounding threshold.
pub const ROUND_GRANULE: u64 = 2 << 20;
/// Default threshold: a 33 MiB request becomes 34 MiB, not 64 MiB.
pub const DEFAULT_ROUND_THRESHOLD: u64 = 32 << 20;
/// Default bytes per upload submission. On lavapipe 4 MiB pieces upload 256 MiB in
/// 19-20 ms against 24-25 ms for 16 MiB ones and 24 ms for 2 MiB ones (more submissions).
pub const DEFAULT_PIPELINE_BYTES: u64 = 4 << 20;
/// Smallest piece: below it every transfer costs one submission per few bytes (64 KiB in
/// 4-byte pieces took seconds).
pub const MIN_PIPELINE_BYTES: u64 = 64 << 10;
/// Largest piece: staging memory per transfer stays bounded.
pub const MAX_PIPELINE_BYTES: u64 = 1 << 30;

/// Transfer direction of a staging block: it decides the buffer's usages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// MAP_WRITE | COPY_SRC: the host writes, the GPU copies out.
    Upload,
    /// MAP_READ | COPY_DST: the GPU copies in, the host reads.
    Download,
}

impl Direction {
    pub const ALL: [Direction; 2] = [Direction::Upload, Direction::Download];

    pub fn parse(name: &str) -> Option<Direction> {
        match name {
            "upload" => Some(Direction::Upload),
            "download" => Some(Direction::Download),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Upload => "upload",
            Direction::Download => "download",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn usages(self) -> wgpu::BufferUsages {
        match self {
            Direction::Upload => wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            Direction::Download => wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        }
    }
}

/// Settings of a device's host cache; change them with `Host::configure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostConfig {
    /// Bytes of idle cached blocks kept; a freed block beyond it is released to the driver.
    /// `u64::MAX` (the default) keeps everything until `empty_cache`.
    pub max_cached_bytes: u64,
    /// Requests above this many bytes round to a multiple of 2 MiB instead of a power of two.
    pub round_threshold: u64,
    /// Process freed blocks' events on a background thread instead of only inline on alloc.
    pub background_thread: bool,
    /// Expose mapped memory to JS without a copy (external ArrayBuffers). Off forces the copy path.
    pub zero_copy: bool,
    /// `upload`/`upload_many` stage and submit at most this many bytes at a time, so the
    /// device copies one piece while the host writes the next and a piece is still in the
    /// CPU cache when it is copied. A non-zero multiple of 4.
    pub pipeline_bytes: u64,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            max_cached_bytes: u64::MAX,
            round_threshold: DEFAULT_ROUND_THRESHOLD,
            background_thread: false,
            zero_copy: true,
            pipeline_bytes: DEFAULT_PIPELINE_BYTES,
        }
    }
}

impl HostConfig {
    /// Defaults overridden by `WGALLOC_HOST_BACKGROUND_THREAD`, `WGALLOC_HOST_MAX_CACHED_BYTES`,
    /// `WGALLOC_HOST_ROUND_THRESHOLD`, `WGALLOC_HOST_ZERO_COPY` and `WGALLOC_HOST_PIPELINE_BYTES`.
    pub fn from_env() -> Result<Self> {
        let mut c = HostConfig::default();
        if let Some(v) = env_flag("WGALLOC_HOST_BACKGROUND_THREAD")? {
            c.background_thread = v;
        }
        if let Some(v) = env_flag("WGALLOC_HOST_ZERO_COPY")? {
            c.zero_copy = v;
        }
        if let Some(v) = env_u64("WGALLOC_HOST_MAX_CACHED_BYTES")? {
            c.max_cached_bytes = v;
        }
        if let Some(v) = env_u64("WGALLOC_HOST_ROUND_THRESHOLD")? {
            c.round_threshold = v;
        }
        if let Some(v) = env_u64("WGALLOC_HOST_PIPELINE_BYTES")? {
            c.pipeline_bytes = v;
        }
        c.validate()?;
        Ok(c)
    }

    /// Rejects settings the cache cannot work with.
    pub fn validate(&self) -> Result<()> {
        let p = self.pipeline_bytes;
        if !(MIN_PIPELINE_BYTES..=MAX_PIPELINE_BYTES).contains(&p) || !p.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT) {
            return Err(Error::invalid(
                "pipelineBytes",
                format!("a multiple of 4 from {MIN_PIPELINE_BYTES} to {MAX_PIPELINE_BYTES}"),
                p.to_string(),
            )
            .with_hint(format!(
                "pipelineBytes {p} must be a multiple of 4 from {MIN_PIPELINE_BYTES} (64 KiB) to \
                 {MAX_PIPELINE_BYTES} (1 GiB); the default is {DEFAULT_PIPELINE_BYTES} (4 MiB)"
            )));
        }
        Ok(())
    }
}

fn env_flag(name: &str) -> Result<Option<bool>> {
    match std::env::var(name).ok().as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some("1" | "true" | "yes" | "on") => Ok(Some(true)),
        Some("0" | "false" | "no" | "off") => Ok(Some(false)),
        Some(other) => Err(Error::invalid(name, "a flag: 1 or 0", crate::error::quoted(other))),
    }
}

fn env_u64(name: &str) -> Result<Option<u64>> {
    match std::env::var(name).ok().as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse::<u64>()
            .map(Some)
            .map_err(|_| Error::invalid(name, "a non-negative integer of bytes", crate::error::quoted(v))),
    }
}

/// The staging size a request of `size` bytes gets (at most `max_buffer_size`).
pub fn round_size(size: u64, round_threshold: u64, max_buffer_size: u64) -> Result<u64> {
    let rounded = if size > round_threshold {
        align_up(size, ROUND_GRANULE)?
    } else {
        size.checked_next_power_of_two()
            .ok_or_else(|| {
                Error::invalid("size", "a size that rounds to a power of two below 2^64", size.to_string())
                    .with_hint(format!("size {size} overflows when rounded to a power of two"))
            })?
            .max(MIN_BLOCK)
    };
    if rounded <= max_buffer_size {
        return Ok(rounded);
    }
    // Near the device limit, round only to whole words rather than fail.
    let words = align_up(size, wgpu::COPY_BUFFER_ALIGNMENT)?;
    if words <= max_buffer_size {
        Ok(words)
    } else {
        let oom = LimitOom::new(OomSource::MaxBufferSize, "allocating a staging buffer", "split the transfer");
        Err(oom.requested(size).limit(max_buffer_size).into())
    }
}

/// The size class of a staging size: ceil(log2(size)).
pub fn size_index(size: u64) -> usize {
    if size <= 1 {
        0
    } else {
        (64 - (size - 1).leading_zeros()) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_classes() {
        let max = 1 << 40;
        assert_eq!(round_size(1, DEFAULT_ROUND_THRESHOLD, max).unwrap(), MIN_BLOCK);
        assert_eq!(round_size(17, DEFAULT_ROUND_THRESHOLD, max).unwrap(), 32);
        assert_eq!(round_size(1 << 20, DEFAULT_ROUND_THRESHOLD, max).unwrap(), 1 << 20);
        assert_eq!(round_size((32 << 20) + 1, DEFAULT_ROUND_THRESHOLD, max).unwrap(), 34 << 20);
        assert_eq!(round_size((32 << 20) + 1, u64::MAX, max).unwrap(), 64 << 20);
        // Near the device limit: whole words instead of a power of two.
        assert_eq!(round_size(1000, u64::MAX, 1002).unwrap(), 1000);
        assert_eq!(round_size(1001, u64::MAX, 1004).unwrap(), 1004);
        assert_eq!(round_size(2000, u64::MAX, 1002).unwrap_err().code(), "OUT_OF_MEMORY");
        assert_eq!(size_index(1), 0);
        assert_eq!(size_index(16), 4);
        assert_eq!(size_index(17), 5);
        assert_eq!(size_index(34 << 20), 26);
        assert_eq!(size_index(1 << 53), 53);
    }
}
