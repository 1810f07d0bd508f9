//! `ShapeExecutor`: a graph with symbolic dimensions and its executors cached by concrete shape.

use std::collections::HashMap;
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use wgalloc_core::exec::{Dims, ShapeCache, ShapePolicy, SymbolicGraph};

use crate::error::{invalid_hint, to_u64, IntoNapi};
use crate::exec::{compile_options, owned, result, run_arguments, CompileGraphOptions, ExecRunOptions, RunResult};
use crate::gpu::Gpu;

/// How a shape executor maps dimensions to compiled shapes.
#[napi(object)]
pub struct ShapeOptions {
    /// Per dimension, the sizes to round up to (e.g. `{ batch: [1, 2, 4, 8, 16] }`); dimensions
    /// without buckets compile per exact value.
    pub buckets: Option<HashMap<String, Vec<f64>>>,
    /// Executors kept at most; the least recently used is released first (default 8).
    pub capacity: Option<u32>,
}

/// How a shape executor has been used.
#[napi(object)]
pub struct ShapeExecutorStats {
    /// Runs served by an executor compiled earlier.
    pub hits: f64,
    /// Runs that compiled a new executor.
    pub misses: f64,
    /// Executors released to stay within the capacity.
    pub evictions: f64,
    /// Executors held now.
    pub cached: f64,
    /// Device bytes the held executors hold (slabs and constants).
    pub device_bytes: f64,
}

/// A graph with symbolic dimensions (`"dims": ["batch"]`, sizes and dispatch counts as
/// expressions): each run names its dimensions, and the executor for that shape (exact, or
/// rounded up to a bucket) is compiled once and kept while it is among the most recently used.
#[napi]
pub struct ShapeExecutor {
    inner: Arc<ShapeCache>,
}

fn dims(map: HashMap<String, f64>) -> Result<Dims> {
    map.into_iter().map(|(k, v)| Ok((k.clone(), to_u64(v, &format!("dimension '{k}'"))?))).collect()
}

#[napi]
impl ShapeExecutor {
    /// The graph's dimension names.
    #[napi(catch_unwind, getter)]
    pub fn dims(&self) -> Vec<String> {
        self.inner.graph().dims().to_vec()
    }

    /// The shape a run at `dims` uses (its buckets applied).
    #[napi(catch_unwind)]
    pub fn shape_of(&self, dims_: HashMap<String, f64>) -> Result<HashMap<String, f64>> {
        let shape = self.inner.concrete(&dims(dims_)?).napi()?;
        Ok(shape.into_iter().map(|(k, v)| (k, v as f64)).collect())
    }

    /// Native form of `run(dims, inputs, options)`: inputs sized for `dims`, outputs too.
    /// @internal
    #[napi(catch_unwind, ts_return_type = "Promise<RunResult>")]
    pub fn run_native<'env>(
        &self,
        env: &'env Env,
        dims_: HashMap<String, f64>,
        inputs: HashMap<String, Uint8Array>,
        options: Option<ExecRunOptions>,
    ) -> Result<PromiseRaw<'env, RunResult>> {
        let d = dims(dims_)?;
        let inputs = owned(Some(inputs));
        let (opts, owner, io, given) = run_arguments(options)?;
        // Leased now: a free() before the run recorded its work takes effect after it.
        let leases = io.lease().napi()?;
        // Claimed now: a release() right after this call lets the run complete.
        let claim = ShapeCache::claim(self.inner.clone()).napi()?;
        env.spawn_future(async move {
            let ended = opts.clone();
            let out = claim.run(&d, &inputs, &io, opts).await;
            crate::exec::drop_cancel_token(&ended);
            drop(leases);
            result(out.napi()?, owner.as_deref(), &given)
        })
    }

    /// Native form of `warmup(shapes)`: compiles the executors of `shapes` off the JS thread.
    /// @internal
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn warm_up_native<'env>(
        &self,
        env: &'env Env,
        shapes: Vec<HashMap<String, f64>>,
    ) -> Result<PromiseRaw<'env, ()>> {
        let cache = self.inner.clone();
        let shapes = shapes.into_iter().map(dims).collect::<Result<Vec<_>>>()?;
        env.spawn_future(async move { cache.warm_up(&shapes).napi() })
    }

    /// Hits, misses, evictions and what the cached executors hold.
    #[napi(catch_unwind)]
    pub fn stats(&self) -> ShapeExecutorStats {
        let s = self.inner.stats();
        ShapeExecutorStats {
            hits: s.hits as f64,
            misses: s.misses as f64,
            evictions: s.evictions as f64,
            cached: s.cached as f64,
            device_bytes: s.device_bytes as f64,
        }
    }

    /// Releases every cached executor (their slabs return to the heap); later runs compile again.
    #[napi(catch_unwind)]
    pub fn clear(&self) {
        self.inner.clear()
    }

    /// Releases every cached executor and the compile options (shared weights) for good: later runs
    /// are `USE_AFTER_FREE`; a run called before completes, releasing what it compiled when it ends.
    /// @internal
    #[napi(catch_unwind)]
    pub fn release(&self) {
        self.inner.close()
    }

    /// Charges the cached executors' device bytes to `scope` as they come and go.
    /// @internal
    #[napi(catch_unwind)]
    pub fn charge_to(&self, scope: &crate::heap::HeapScope) -> Result<()> {
        self.inner.charge_to(&scope.inner).napi()
    }
}

#[napi]
impl Gpu {
    /// Native form of the facade's `compileShapes()`.
    /// @internal
    #[napi(catch_unwind)]
    pub fn compile_shapes_native(
        &self,
        graph_json: String,
        shape: Option<ShapeOptions>,
        options: Option<CompileGraphOptions>,
    ) -> Result<ShapeExecutor> {
        let graph = SymbolicGraph::parse(&graph_json).napi()?;
        let (options, records) = compile_options(options)?;
        if records.is_some() {
            return Err(invalid_hint(
                "options.records",
                "none (a shape executor plans each shape)",
                "usage records",
                "usage records describe one shape",
            ));
        }
        let shape = shape.unwrap_or(ShapeOptions { buckets: None, capacity: None });
        let policy = match shape.buckets {
            None => ShapePolicy::Exact,
            Some(b) => ShapePolicy::Buckets(
                b.into_iter()
                    .map(|(d, sizes)| {
                        let sizes =
                            sizes.into_iter().map(|s| to_u64(s, &format!("buckets.{d}"))).collect::<Result<_>>()?;
                        Ok((d, sizes))
                    })
                    .collect::<Result<_>>()?,
            ),
        };
        let capacity = shape.capacity.unwrap_or(8) as usize;
        let cache = ShapeCache::new(&self.inner, graph, policy, capacity, options).napi()?;
        Ok(ShapeExecutor { inner: Arc::new(cache) })
    }
}
