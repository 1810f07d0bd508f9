//! `Weights`: param bytes uploaded once and bound in place by every executor compiled with them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi_derive::napi;
use wgalloc_core::exec::Weights as CoreWeights;

use crate::error::{coded, to_u64, IntoNapi};
use crate::gpu::Gpu;

/// Shared weights (`gpu.createWeights(params)`): one device copy of the params that any number of
/// executors, on this thread or on workers (`Weights.attach(weights.shareHandle())`), bind without
/// copying. The copy goes back to the heap once `release()` ran and no executor uses it.
#[napi]
pub struct Weights {
    inner: Mutex<Option<Arc<CoreWeights>>>,
}

impl Weights {
    pub(crate) fn get(&self) -> Result<Arc<CoreWeights>> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| coded("USE_AFTER_FREE", "these weights were released; create them again"))
    }
}

#[napi]
impl Weights {
    /// Device bytes of the one copy (0 once released).
    #[napi(catch_unwind, getter)]
    pub fn device_bytes(&self) -> f64 {
        self.get().map_or(0.0, |w| w.device_bytes() as f64)
    }

    /// The param ids the store holds, sorted.
    #[napi(catch_unwind, getter)]
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.get().map(|w| w.ids().map(String::from).collect()).unwrap_or_default();
        ids.sort();
        ids
    }

    /// True once `release()` ran.
    #[napi(catch_unwind, getter)]
    pub fn released(&self) -> bool {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).is_none()
    }

    /// A process-wide handle: pass it to a worker and call `Weights.attach(handle)` there.
    /// It does not keep the weights alive.
    #[napi(catch_unwind)]
    pub fn share_handle(&self) -> Result<f64> {
        Ok(self.get()?.share_handle() as f64)
    }

    /// The weights behind a handle from `shareHandle()`, while something still holds them.
    #[napi(catch_unwind, writable = true, configurable = true)]
    pub fn attach(handle: f64) -> Result<Weights> {
        let w = CoreWeights::attach(to_u64(handle, "handle")?).napi()?;
        Ok(Weights { inner: Mutex::new(Some(w)) })
    }

    /// Lets go of this handle's reference; executors compiled with the weights keep theirs.
    /// Returns false if it was already released.
    #[napi(catch_unwind)]
    pub fn release(&self) -> bool {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).take().is_some()
    }

    /// Charges the device bytes to `scope` until they go back to the heap, when the last holder
    /// (this handle or an executor using the weights) lets go (`QUOTA_EXCEEDED` when they do
    /// not fit).
    /// @internal
    #[napi(catch_unwind)]
    pub fn charge_to(&self, scope: &crate::heap::HeapScope) -> Result<()> {
        self.get()?.charge_to(&scope.inner).napi()
    }
}

#[napi]
impl Gpu {
    /// Uploads `params` (param id -> bytes) once, for executors to share (`compile(graph, { weights })`).
    /// @internal
    #[napi(catch_unwind)]
    pub fn create_weights_native(&self, params: HashMap<String, Uint8Array>) -> Result<Weights> {
        let params = params.into_iter().map(|(k, v)| (k, v.to_vec())).collect();
        let w = self.inner.create_weights(params).napi()?;
        Ok(Weights { inner: Mutex::new(Some(w)) })
    }
}
