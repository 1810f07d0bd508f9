//! The host staging cache, after PyTorch's CachingHostAllocatorImpl. WebGPU's
//! pinned host memory is a mapped staging buffer (MAP_WRITE|COPY_SRC for
//! uploads, MAP_READ|COPY_DST for downloads); this caches them by size class.
//!
//! - A cache hit pops a free list under that class's lock: no driver call.
//! - `free` records a `StreamUse` per stream that used the block. The block is
//!   reusable once those submissions completed, and an upload block once it is
//!   mapped again: `map_async(Write)` is issued as soon as the work is submitted,
//!   and wgpu runs it after that work, so the map callback is the event.
//! - Pending blocks are processed inline on `alloc` (the seed's `process_events`)
//!   and, optionally, on a background thread.
//! - Private pools (the seed's graph-capture pools) keep their blocks apart
//!   from the default pool until released and emptied.

mod background;
mod block;
pub mod config;
mod helpers;
mod pool;
mod stats;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Instant;

pub use block::{HostBlock, LentBytes};
pub use config::{Direction, HostConfig};
pub use helpers::{Download, UploadItem, DOWNLOAD_DEPTH};
pub use stats::{BucketStats, DurationStat, HostStats, Stat};

use background::Background;
use config::{round_size, size_index};
use pool::{BlockPool, MapState, Pending, Staging};

use crate::context::Gpu;
use crate::error::{Error, Result};
use crate::scope::guarded_alloc;
use crate::signal::lock;

struct PrivatePool {
    pool: Arc<BlockPool>,
    /// begin calls not yet matched by `release_pool`; 0 means freeable.
    use_count: u64,
}

#[derive(Default)]
struct Pools {
    private: HashMap<u64, PrivatePool>,
    /// Pools being allocated to, most recent last.
    capturing: Vec<u64>,
}

/// Shared state of a device's host cache; reached through [`Host`].
pub(crate) struct HostCore {
    default_pool: Arc<BlockPool>,
    pools: RwLock<Pools>,
    /// Fast path: no lock on `pools` while no private pool is being allocated to.
    capturing: AtomicBool,
    stats: Mutex<HostStats>,
    max_cached: AtomicU64,
    round_threshold: AtomicU64,
    zero_copy: AtomicBool,
    pipeline_bytes: AtomicU64,
    next_id: AtomicU64,
    max_buffer_size: u64,
    background: Mutex<Option<Background>>,
    background_on: AtomicBool,
    /// Wakes the background thread when a block goes pending.
    wake: (Mutex<()>, Condvar),
}

/// A pool found for an alloc or a free: the default pool is borrowed, because cloning its
/// `Arc` would cost two atomics on every alloc and free; a private one is held.
enum PoolRef<'a> {
    Default(&'a BlockPool),
    Private(Arc<BlockPool>),
}

impl std::ops::Deref for PoolRef<'_> {
    type Target = BlockPool;

    fn deref(&self) -> &BlockPool {
        match self {
            PoolRef::Default(p) => p,
            PoolRef::Private(p) => p,
        }
    }
}

impl HostCore {
    fn new(gpu: &Gpu) -> Result<HostCore> {
        // `Gpu::request` attached the settings read at the open.
        let c = gpu.shared.services.get::<HostConfig>().map_or_else(HostConfig::default, |c| **c);
        Ok(HostCore {
            default_pool: Arc::new(BlockPool::new(0)),
            pools: RwLock::new(Pools::default()),
            capturing: AtomicBool::new(false),
            stats: Mutex::new(HostStats::default()),
            max_cached: AtomicU64::new(c.max_cached_bytes),
            round_threshold: AtomicU64::new(c.round_threshold),
            zero_copy: AtomicBool::new(c.zero_copy),
            pipeline_bytes: AtomicU64::new(c.pipeline_bytes),
            next_id: AtomicU64::new(1),
            max_buffer_size: gpu.limits().max_buffer_size,
            background: Mutex::new(None),
            // Started lazily on the first allocation when the environment asks for it.
            background_on: AtomicBool::new(c.background_thread),
            wake: (Mutex::new(()), Condvar::new()),
        })
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, HostStats> {
        lock(&self.stats)
    }

    fn pools_read(&self) -> std::sync::RwLockReadGuard<'_, Pools> {
        self.pools.read().unwrap_or_else(|p| p.into_inner())
    }

    fn pools_write(&self) -> std::sync::RwLockWriteGuard<'_, Pools> {
        self.pools.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The pool allocations go to now.
    fn current_pool(&self) -> PoolRef<'_> {
        if !self.capturing.load(Ordering::Relaxed) {
            return PoolRef::Default(&self.default_pool);
        }
        let pools = self.pools_read();
        pools
            .capturing
            .last()
            .and_then(|id| pools.private.get(id))
            .map_or(PoolRef::Default(&self.default_pool), |p| PoolRef::Private(p.pool.clone()))
    }

    fn pool_of(&self, id: u64) -> Option<PoolRef<'_>> {
        if id == 0 {
            return Some(PoolRef::Default(&self.default_pool));
        }
        self.pools_read().private.get(&id).map(|p| PoolRef::Private(p.pool.clone()))
    }

    fn notify_background(&self) {
        if self.background_on.load(Ordering::Relaxed) {
            let _g = lock(&self.wake.0);
            self.wake.1.notify_all();
        }
    }
}

impl crate::profile::MemorySource for HostCore {
    fn sample(&self) -> crate::profile::MemorySample {
        crate::profile::MemorySample {
            counter: "host cache bytes",
            values: vec![("active", self.stats().active_bytes.current)],
            instants: Vec::new(),
        }
    }
}

impl Drop for HostCore {
    fn drop(&mut self) {
        if let Some(bg) = lock(&self.background).take() {
            bg.stop(&self.wake);
        }
    }
}

/// A device's host staging cache. Cheap to clone; all clones share one cache.
#[derive(Clone)]
pub struct Host {
    pub(crate) gpu: Gpu,
    pub(crate) core: Arc<HostCore>,
}

impl Gpu {
    /// The device's host staging cache (created on first use).
    pub fn host(&self) -> Result<Host> {
        let (core, attached) = self.shared.services.try_get_or_attach(|| HostCore::new(self).map(Arc::new))?;
        if attached {
            crate::profile::MemorySources::add(self, Arc::downgrade(core) as _);
        }
        Ok(Host { gpu: self.clone(), core: core.clone() })
    }
}

/// What processing a pending block decided.
enum Step {
    Ready(Staging),
    Wait(Pending),
    Discard(Staging),
}

impl Host {
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// True if both handles reach the same device's cache.
    pub fn same_cache(&self, other: &Host) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }

    /// A staging block of at least `size` bytes for `dir`. Upload blocks come mapped.
    pub fn alloc(&self, size: u64, dir: Direction) -> Result<HostBlock> {
        self.gpu.check_alive()?;
        if size == 0 || size > crate::MAX_SAFE_INTEGER {
            return Err(Error::invalid("size", "1 to 2^53-1 bytes", size.to_string()).in_call("host.alloc"));
        }
        let core = &self.core;
        let rounded = round_size(size, core.round_threshold.load(Ordering::Relaxed), core.max_buffer_size)?;
        let pool = core.current_pool();
        // The background thread serves the default pool; private pools are always processed inline.
        if pool.id != 0 || !self.ensure_background() {
            self.process_pool(&pool);
        }
        let index = size_index(rounded);
        let mut hit = pool.take(dir, index, rounded);
        if hit.is_none() && self.collect_ready(&pool) {
            hit = pool.take(dir, index, rounded);
        }
        let staging = match hit {
            Some(s) => {
                let mut st = core.stats();
                st.cache_hits += 1;
                st.activate(size_index(s.size), s.size, size);
                s
            }
            None => {
                let s = self.create(&pool, dir, rounded)?;
                let mut st = core.stats();
                st.cache_misses += 1;
                st.activate(index, s.size, size);
                s
            }
        };
        let id = core.next_id.fetch_add(1, Ordering::Relaxed);
        Ok(HostBlock::new(self.clone(), id, size, staging))
    }

    /// On a miss with blocks pending: the pending list is processed again (map callbacks of
    /// finished work may have run since). No device poll here: it would wait for the device
    /// locks the poller holds while GPU work runs (Note [One submission thread] in `lane.rs`);
    /// the poller runs the callbacks. Returns whether any block became free.
    fn collect_ready(&self, pool: &BlockPool) -> bool {
        let before = pool.pending_len();
        if before == 0 {
            return false;
        }
        self.process_pool(pool) < before
    }

    /// Creates a staging buffer; on a driver out-of-memory, releases idle cached blocks and retries once.
    fn create(&self, pool: &BlockPool, dir: Direction, size: u64) -> Result<Staging> {
        let device = self.gpu.device();
        let attempt = || {
            let t0 = Instant::now();
            let buffer = guarded_alloc(device, "creating a staging buffer", size, || {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(match dir {
                        Direction::Upload => "wgalloc upload staging",
                        Direction::Download => "wgalloc download staging",
                    }),
                    size,
                    usage: dir.usages(),
                    mapped_at_creation: dir == Direction::Upload,
                })
            })?;
            let mut staging = Staging { buffer, size, dir, pool: pool.id, map: MapState::Unmapped };
            if dir == Direction::Upload {
                match staging.mapped_ptr() {
                    Ok(p) => staging.map = MapState::Mapped(p),
                    Err(e) => return Err(e),
                }
            }
            Ok((staging, t0.elapsed()))
        };
        let (staging, took) = match attempt() {
            Ok(v) => v,
            Err(Error::OutOfMemory(_)) if self.release_cached(pool) > 0 => attempt()?,
            Err(e) => return Err(e),
        };
        pool.live.fetch_add(1, Ordering::Relaxed);
        self.core.stats().driver_alloc(size_index(size), size, took);
        Ok(staging)
    }

    /// Releases a staging buffer to the driver. The caller has deactivated it.
    fn release(&self, pool: Option<&BlockPool>, staging: Staging) -> u64 {
        let t0 = Instant::now();
        let size = staging.size;
        // Dropped, not destroyed: the block owns the only handle, and `destroy` would wait
        // for wgpu's resource lock, which the poller holds while the GPU is busy.
        drop(staging);
        let took = t0.elapsed();
        if let Some(p) = pool {
            p.live.fetch_sub(1, Ordering::Relaxed);
        }
        self.core.stats().driver_free(size_index(size), size, took);
        size
    }

    fn release_cached(&self, pool: &BlockPool) -> u64 {
        pool.drain_free().into_iter().map(|s| self.release(Some(pool), s)).sum()
    }

    /// A block became reusable: back to its free list, or to the driver above `max_cached_bytes`.
    /// `requested`: the bytes its caller asked for, when it is being freed now (0 when those
    /// were already released, as for a block that waited in the pending list).
    fn recycle(&self, pool: &BlockPool, staging: Staging, requested: u64) {
        let index = size_index(staging.size);
        let over = {
            let mut st = self.core.stats();
            st.requested_bytes.sub(requested);
            st.deactivate(index, staging.size);
            st.cached_bytes() > self.core.max_cached.load(Ordering::Relaxed)
        };
        if over {
            self.release(Some(pool), staging);
        } else {
            pool.put(index, staging);
        }
    }

    /// A block that cannot be reused goes back to the driver; `requested` as for `recycle`.
    fn discard(&self, pool: Option<&BlockPool>, staging: Staging, requested: u64) {
        {
            let mut st = self.core.stats();
            st.requested_bytes.sub(requested);
            st.deactivate(size_index(staging.size), staging.size);
        }
        self.release(pool, staging);
    }

    /// Takes a freed block back (called by `HostBlock::free`).
    pub(crate) fn on_free(&self, mut p: Pending) {
        let requested = p.requested;
        let Some(pool) = self.core.pool_of(p.staging.pool) else {
            // Its private pool is gone (cannot happen while the pool counts the block live).
            self.discard(None, p.staging, requested);
            return;
        };
        // A mapped buffer cannot be in use by the GPU: reusable at once.
        let step = if let MapState::Mapped(_) = p.staging.map {
            if p.staging.dir == Direction::Download {
                p.staging.unmap();
            }
            Step::Ready(p.staging)
        } else {
            self.advance(p)
        };
        match step {
            Step::Ready(s) => self.recycle(&pool, s, requested),
            Step::Discard(s) => self.discard(Some(&pool), s, requested),
            Step::Wait(p) => {
                {
                    let mut st = self.core.stats();
                    st.requested_bytes.sub(requested);
                    st.pending_blocks += 1;
                    st.pending_bytes += p.staging.size;
                }
                pool.push_pending(p);
                self.core.notify_background();
            }
        }
    }

    /// Moves a pending block as far as it can go without blocking.
    fn advance(&self, mut p: Pending) -> Step {
        let tracker = &self.gpu.shared.tracker;
        loop {
            match &p.staging.map {
                MapState::Mapping(slot) => {
                    if !slot.is_done() {
                        return Step::Wait(p);
                    }
                    // Whether the map succeeded shows in the buffer itself (the slot's
                    // value may have gone to a `map()` caller).
                    match (p.staging.dir, p.staging.mapped_ptr()) {
                        (Direction::Upload, Ok(ptr)) => {
                            p.staging.map = MapState::Mapped(ptr);
                            return Step::Ready(p.staging);
                        }
                        (Direction::Upload, Err(_)) => return Step::Discard(p.staging),
                        (Direction::Download, _) => p.staging.unmap(),
                    }
                }
                MapState::Mapped(_) => {
                    if p.staging.dir == Direction::Download {
                        p.staging.unmap();
                    }
                    return Step::Ready(p.staging);
                }
                MapState::Unmapped => {
                    let Some(target) = p.target() else { return Step::Wait(p) };
                    if tracker.lost_reason().is_some() {
                        return Step::Discard(p.staging);
                    }
                    return match p.staging.dir {
                        Direction::Upload => {
                            p.staging.start_map(&self.gpu);
                            Step::Wait(p)
                        }
                        Direction::Download => match tracker.is_complete(target) {
                            Ok(true) => Step::Ready(p.staging),
                            Ok(false) => Step::Wait(p),
                            Err(_) => Step::Discard(p.staging),
                        },
                    };
                }
            }
        }
    }

    /// Processes `pool`'s pending blocks; returns how many are still waiting.
    fn process_pool(&self, pool: &BlockPool) -> usize {
        let batch = pool.take_pending();
        if batch.is_empty() {
            return 0;
        }
        let mut waiting = Vec::new();
        for p in batch {
            let size = p.staging.size;
            match self.advance(p) {
                Step::Wait(p) => {
                    waiting.push(p);
                    continue;
                }
                Step::Ready(s) => self.recycle(pool, s, 0),
                Step::Discard(s) => self.discard(Some(pool), s, 0),
            }
            let mut st = self.core.stats();
            st.pending_blocks -= 1;
            st.pending_bytes -= size;
        }
        let n = waiting.len();
        pool.restore_pending(waiting);
        n
    }

    /// Returns freed blocks whose GPU work completed to their free lists (done on every alloc).
    pub fn process_events(&self) {
        self.process_pool(&self.core.default_pool);
        let private: Vec<_> = self.core.pools_read().private.values().map(|p| p.pool.clone()).collect();
        for pool in private {
            self.process_pool(&pool);
        }
    }

    /// Releases every idle cached block of the default pool, and of released private
    /// pools (removing those left empty). Returns the bytes released.
    pub fn empty_cache(&self) -> u64 {
        let mut released = {
            let pool = &self.core.default_pool;
            self.process_pool(pool);
            self.release_cached(pool)
        };
        let freeable: Vec<_> =
            self.core.pools_read().private.values().filter(|p| p.use_count == 0).map(|p| p.pool.clone()).collect();
        for pool in &freeable {
            self.process_pool(pool);
            released += self.release_cached(pool);
        }
        let mut pools = self.core.pools_write();
        pools.private.retain(|_, p| p.use_count > 0 || p.pool.live.load(Ordering::Relaxed) > 0);
        released
    }

    /// Allocations until `end_allocate_to_pool(id)` come from private pool `id` (created on first use).
    pub fn begin_allocate_to_pool(&self, id: u64) -> Result<()> {
        if id == 0 {
            return Err(Error::invalid("id", "a pool id from 1", "0")
                .in_call("beginAllocateToPool")
                .with_hint("0 is the default pool"));
        }
        let mut pools = self.core.pools_write();
        if pools.capturing.contains(&id) {
            return Err(Error::invalid("id", "a pool not being allocated to", id.to_string()).with_hint(format!(
                "beginAllocateToPool: already allocating to pool {id}; call endAllocateToPool({id}) first"
            )));
        }
        pools
            .private
            .entry(id)
            .and_modify(|p| p.use_count += 1)
            .or_insert_with(|| PrivatePool { pool: Arc::new(BlockPool::new(id)), use_count: 1 });
        pools.capturing.push(id);
        self.core.capturing.store(true, Ordering::Relaxed);
        Ok(())
    }

    pub fn end_allocate_to_pool(&self, id: u64) -> Result<()> {
        let mut pools = self.core.pools_write();
        let Some(at) = pools.capturing.iter().position(|&p| p == id) else {
            return Err(Error::invalid("id", "a pool being allocated to", id.to_string()).with_hint(format!(
                "endAllocateToPool: not allocating to pool {id}; call beginAllocateToPool({id}) first"
            )));
        };
        pools.capturing.remove(at);
        self.core.capturing.store(!pools.capturing.is_empty(), Ordering::Relaxed);
        Ok(())
    }

    /// Drops one hold on pool `id`; at zero, `empty_cache` may free its idle blocks.
    pub fn release_pool(&self, id: u64) -> Result<()> {
        let mut pools = self.core.pools_write();
        match pools.private.get_mut(&id) {
            Some(p) if p.use_count > 0 => {
                p.use_count -= 1;
                Ok(())
            }
            _ => Err(Error::invalid("id", "a held pool", id.to_string())
                .in_call("releasePool")
                .with_hint("it was never begun, or was released already")),
        }
    }

    /// Ids of private pools that still exist, with their use counts.
    pub fn private_pools(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<_> = self.core.pools_read().private.iter().map(|(&id, p)| (id, p.use_count)).collect();
        v.sort_unstable();
        v
    }

    /// Statistics, after processing pending blocks so the figures are current.
    pub fn stats(&self) -> HostStats {
        self.process_events();
        self.core.stats().clone()
    }

    /// Statistics as they stand, without processing pending blocks first.
    pub fn raw_stats(&self) -> HostStats {
        self.core.stats().clone()
    }

    pub fn reset_peak_stats(&self) {
        self.core.stats().reset_peak();
    }

    pub fn reset_accumulated_stats(&self) {
        self.core.stats().reset_accumulated();
    }

    /// Counts a JS view: zero-copy, or a copy because external ArrayBuffers were refused.
    pub fn note_view(&self, zero_copy: bool) {
        let mut st = self.core.stats();
        if zero_copy {
            st.zero_copy_views += 1;
        } else {
            st.copy_fallbacks += 1;
        }
    }

    pub fn config(&self) -> HostConfig {
        let c = &self.core;
        HostConfig {
            max_cached_bytes: c.max_cached.load(Ordering::Relaxed),
            round_threshold: c.round_threshold.load(Ordering::Relaxed),
            background_thread: c.background_on.load(Ordering::Relaxed),
            zero_copy: c.zero_copy.load(Ordering::Relaxed),
            pipeline_bytes: c.pipeline_bytes.load(Ordering::Relaxed),
        }
    }

    /// Applies new settings. Lowering `max_cached_bytes` releases idle blocks over it.
    pub fn configure(&self, config: HostConfig) -> Result<()> {
        config.validate()?;
        let c = &self.core;
        c.pipeline_bytes.store(config.pipeline_bytes, Ordering::Relaxed);
        c.max_cached.store(config.max_cached_bytes, Ordering::Relaxed);
        c.round_threshold.store(config.round_threshold, Ordering::Relaxed);
        c.zero_copy.store(config.zero_copy, Ordering::Relaxed);
        c.background_on.store(config.background_thread, Ordering::Relaxed);
        if config.background_thread {
            self.ensure_background();
        } else if let Some(bg) = lock(&c.background).take() {
            bg.stop(&c.wake);
        }
        self.trim_to_cap();
        Ok(())
    }

    /// Releases idle blocks of the default pool until the cache fits `max_cached_bytes`.
    fn trim_to_cap(&self) {
        let cap = self.core.max_cached.load(Ordering::Relaxed);
        if self.core.stats().cached_bytes() <= cap {
            return;
        }
        let pool = &self.core.default_pool;
        let mut cached = pool.drain_free();
        cached.sort_unstable_by_key(|s| s.size);
        // Keep the smallest blocks that fit; release the rest.
        for s in cached {
            if self.core.stats().cached_bytes() > cap {
                self.release(Some(pool), s);
            } else {
                pool.put(size_index(s.size), s);
            }
        }
    }

    /// Bytes staged per upload submission: the `pipelineBytes` setting, within the buffer limit.
    pub(crate) fn pipeline_bytes(&self) -> u64 {
        let max = self.core.max_buffer_size / wgpu::COPY_BUFFER_ALIGNMENT * wgpu::COPY_BUFFER_ALIGNMENT;
        self.core.pipeline_bytes.load(Ordering::Relaxed).min(max)
    }

    /// Whether zero-copy JS views are allowed (the `zeroCopy` setting).
    pub fn zero_copy(&self) -> bool {
        self.core.zero_copy.load(Ordering::Relaxed)
    }

    /// Starts the background thread if configured; returns whether it runs.
    fn ensure_background(&self) -> bool {
        let c = &self.core;
        if !c.background_on.load(Ordering::Relaxed) {
            return false;
        }
        let mut bg = lock(&c.background);
        if bg.is_none() {
            match Background::spawn(Arc::downgrade(c), Arc::downgrade(&self.gpu.shared)) {
                Ok(b) => *bg = Some(b),
                Err(_) => {
                    c.background_on.store(false, Ordering::Relaxed);
                    return false;
                }
            }
        }
        true
    }
}
