//! Shared weights: param bytes uploaded once into one heap block that every executor
//! compiled with it binds in place, on any thread. The block goes back to the heap when
//! the last holder (the creator's handle or an executor) lets go.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use super::bind::binding_size;
use crate::context::Gpu;
use crate::error::{align_up, checked_add, Error, Result};
use crate::heap::{DeviceBlock, Scope, ScopeCharge, Usage};
use crate::signal::lock;

#[derive(Debug)]
pub struct Weights {
    block: DeviceBlock,
    /// Param id -> (offset in the block, bytes).
    entries: HashMap<String, (u64, u64)>,
    /// The scope charged with the block ([`Weights::charge_to`]), returned with it when the last
    /// holder lets go (Note [A scope's bytes are its live charges]).
    charge: Mutex<Option<ScopeCharge>>,
}

/// Handles of live weight stores, for other threads to attach to. Weak: a handle keeps nothing alive.
static REGISTRY: Mutex<Vec<(u64, Weak<Weights>)>> = Mutex::new(Vec::new());
static NEXT_HANDLE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Gpu {
    /// Uploads `params` (id -> bytes) once into one heap block, each at an aligned offset.
    pub fn create_weights(&self, params: HashMap<String, Vec<u8>>) -> Result<Arc<Weights>> {
        self.check_alive()?;
        let heap = self.heap()?;
        let alignment = heap.alignment();
        let mut ids: Vec<&String> = params.keys().collect();
        ids.sort(); // a stable layout for the same params
        let mut entries = HashMap::with_capacity(ids.len());
        let mut size = 0u64;
        for id in ids {
            let len = params[id].len() as u64;
            if len == 0 {
                return Err(
                    Error::invalid(format!("params.{id}"), "at least one byte", "0 bytes").in_call("createWeights")
                );
            }
            let at = align_up(size, alignment)?;
            entries.insert(id.clone(), (at, len));
            size = checked_add(at, binding_size(len)?, "weights")?;
        }
        if size == 0 {
            return Err(Error::invalid("params", "at least one param", "none")
                .in_call("createWeights")
                .with_hint("pass { id: bytes } for each param"));
        }
        let block = heap.malloc(size, Usage::Device)?;
        for (id, &(at, len)) in &entries {
            let mut bytes = params[id].clone();
            bytes.resize(binding_size(len)? as usize, 0);
            block.write(&bytes, at)?;
        }
        Ok(Arc::new(Weights { block, entries, charge: Mutex::new(None) }))
    }
}

impl Weights {
    /// Where param `id` is in the block and its bytes, if the store has it.
    pub fn entry(&self, id: &str) -> Option<(u64, u64)> {
        self.entries.get(id).copied()
    }

    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    pub(crate) fn block(&self) -> &DeviceBlock {
        &self.block
    }

    /// The heap holding the store.
    pub fn heap(&self) -> &crate::heap::Heap {
        self.block.heap()
    }

    /// Device bytes the store holds (once, however many executors bind it).
    pub fn device_bytes(&self) -> u64 {
        self.block.size()
    }

    /// Charges the store's device bytes to `scope` until the block goes back to the heap, with the
    /// last holder (`QUOTA_EXCEEDED` when they do not fit; nothing charged). Once per store.
    pub fn charge_to(&self, scope: &Scope) -> Result<()> {
        self.heap().charge_once(&mut lock(&self.charge), scope, self.device_bytes(), "createWeights", "set of weights")
    }

    /// A process-wide handle another thread passes to [`Weights::attach`]. It does not keep the store alive.
    pub fn share_handle(self: &Arc<Self>) -> u64 {
        let mut reg = lock(&REGISTRY);
        reg.retain(|(_, w)| w.strong_count() > 0);
        if let Some((h, _)) = reg.iter().find(|(_, w)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(self))) {
            return *h;
        }
        let h = NEXT_HANDLE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        reg.push((h, Arc::downgrade(self)));
        h
    }

    /// The store behind a handle from [`Weights::share_handle`], while something still holds it.
    pub fn attach(handle: u64) -> Result<Arc<Weights>> {
        let reg = lock(&REGISTRY);
        reg.iter().find(|(h, _)| *h == handle).and_then(|(_, w)| w.upgrade()).ok_or_else(|| {
            Error::invalid("handle", "the handle of live weights", handle.to_string()).with_hint(
                "no live weights have it: keep the weights (or an executor using them) alive until every worker \
                 attached",
            )
        })
    }
}

impl Drop for Weights {
    fn drop(&mut self) {
        // The heap defers reuse until the GPU work that read the block completed.
        let _ = self.block.free();
    }
}
