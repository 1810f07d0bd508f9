//! Device blocks as numeric ids on the JS hot path.
//!
//! A napi-rs class instance per block costs a wrapped object, and every `#[napi]` method call
//! goes through napi-rs's global borrow registry (a `Mutex<HashMap>` insert and remove).
//! Together they cost several times the allocator itself. So a JS heap object is a block owner
//! of the core heap (`BlockOwner`): its blocks live only in the heap's slab, under their ids.
//! `heapMalloc` and `heapFree` are two raw N-API functions taking numbers, the facade's
//! `DeviceBlock` is a plain JS object holding the id, and it asks for a native handle
//! (`heap.blockHandle(id)`, a borrowed handle) only when an operation needs the block's buffer.

use std::collections::HashMap;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::{Arc, RwLock};

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use wgalloc_core::heap::{self as core_heap, BlockOwner, HeapEventKind, Scope, Usage};

use crate::error::{coded, invalid, invalid_hint, to_u64, IntoNapi};

/// Owners by slot: the raw functions receive the slot as a number (no napi object to unwrap).
static OWNERS: RwLock<Vec<Option<Arc<BlockOwner>>>> = RwLock::new(Vec::new());

/// A heap object's place in [`OWNERS`], released when the JS heap object is collected. The
/// owner goes with its last holder (a run in flight may hold it), and gives back every block
/// it still holds.
pub(crate) struct Slot {
    pub(crate) index: u32,
    pub(crate) owner: Arc<BlockOwner>,
}

impl Slot {
    pub(crate) fn new(heap: &core_heap::Heap) -> Result<Slot> {
        let owner = Arc::new(heap.owner().napi()?);
        let mut owners = OWNERS.write().unwrap_or_else(|p| p.into_inner());
        let index = match owners.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                owners.push(None);
                owners.len() - 1
            }
        };
        owners[index] = Some(owner.clone());
        Ok(Slot { index: index as u32, owner })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut owners = OWNERS.write().unwrap_or_else(|p| p.into_inner());
        owners[self.index as usize] = None;
    }
}

fn with_owner<R>(slot: f64, f: impl FnOnce(&BlockOwner) -> Result<R>) -> Result<R> {
    let owners = OWNERS.read().unwrap_or_else(|p| p.into_inner());
    let index = (slot >= 0.0 && slot.fract() == 0.0).then_some(slot as usize);
    match index.and_then(|i| owners.get(i)).and_then(Option::as_ref) {
        Some(o) => f(o),
        None => Err(invalid_hint("slot", "the slot of a live heap", slot.to_string(), "internal: use gpu.heap")),
    }
}

/// The owner at `slot`, for calls that take blocks by id.
pub(crate) fn owner(slot: u32) -> Result<Arc<BlockOwner>> {
    let owners = OWNERS.read().unwrap_or_else(|p| p.into_inner());
    owners
        .get(slot as usize)
        .cloned()
        .flatten()
        .ok_or_else(|| invalid_hint("slot", "the slot of a live heap", slot.to_string(), "internal: use gpu.heap"))
}

/// Handles of the live blocks named by `ids` (tensor -> block id), taken before the call returns.
pub(crate) fn blocks(
    owner: &BlockOwner,
    ids: HashMap<String, f64>,
    what: &str,
) -> Result<HashMap<String, Arc<wgalloc_core::DeviceBlock>>> {
    ids.into_iter()
        .map(|(name, id)| match owner.block(to_u64(id, what)?) {
            Ok(block) => Ok((name, Arc::new(block))),
            Err(e) => Err(coded(e.code(), &format!("{what} '{name}': block {id} was freed; allocate a new block"))),
        })
        .collect()
}

/// Raw N-API plumbing: argument reads and the error throw, with panics caught at the boundary.
mod raw {
    use super::*;

    pub(super) unsafe fn args<const N: usize>(
        env: sys::napi_env,
        info: sys::napi_callback_info,
    ) -> [sys::napi_value; N] {
        let mut argc = N;
        let mut argv = [ptr::null_mut(); N];
        sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut());
        argv
    }

    pub(super) unsafe fn number(env: sys::napi_env, value: sys::napi_value, what: &str) -> Result<f64> {
        let mut out = 0.0;
        if value.is_null() || sys::napi_get_value_double(env, value, &mut out) != sys::Status::napi_ok {
            return Err(invalid(what, "a number", "a value of another type"));
        }
        Ok(out)
    }

    /// The four f64 slots the facade passes for a block's fields.
    pub(super) unsafe fn scratch<'a>(env: sys::napi_env, value: sys::napi_value) -> Result<&'a mut [f64; 4]> {
        float64s(env, value)
            .ok()
            .and_then(|s| s.get_mut(..4))
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| invalid_hint("scratch", "a Float64Array of 4", "another value", "internal"))
    }

    /// A Float64Array argument's elements, writable in place.
    pub(super) unsafe fn float64s<'a>(env: sys::napi_env, value: sys::napi_value) -> Result<&'a mut [f64]> {
        let (mut kind, mut len, mut data) = (0, 0usize, ptr::null_mut());
        let status =
            sys::napi_get_typedarray_info(env, value, &mut kind, &mut len, &mut data, ptr::null_mut(), ptr::null_mut());
        if status != sys::Status::napi_ok || kind != sys::TypedarrayType::float64_array {
            return Err(invalid_hint("out", "a Float64Array", "another value", "internal"));
        }
        if len == 0 || data.is_null() {
            return Ok(&mut []);
        }
        Ok(std::slice::from_raw_parts_mut(data as *mut f64, len))
    }

    /// Runs `f`, returning its number or throwing its error (a panic becomes a thrown error,
    /// not an abort across the FFI boundary).
    pub(super) unsafe fn finish(env: sys::napi_env, f: impl FnOnce() -> Result<Option<f64>>) -> sys::napi_value {
        let result = catch_unwind(AssertUnwindSafe(f))
            .unwrap_or_else(|_| Err(coded("INTERNAL", "wgalloc panicked in a heap call; please report it")));
        let mut out = ptr::null_mut();
        match result {
            Ok(Some(v)) => {
                sys::napi_create_double(env, v, &mut out);
            }
            Ok(None) => {
                sys::napi_get_undefined(env, &mut out);
            }
            Err(e) => {
                let msg = CString::new(e.reason.replace('\0', " ")).unwrap_or_default();
                sys::napi_throw_error(env, ptr::null(), msg.as_ptr());
            }
        }
        out
    }
}

/// A malloc's size and usage code (0 device, 1 shared) as JS passes them, checked in the same
/// words as the heap's own check, so malloc(0) and malloc(-5) read alike.
#[inline]
pub(crate) fn malloc_request(size: f64, usage: f64) -> Result<(u64, Usage)> {
    if !(size >= 1.0 && size.fract() == 0.0 && size <= wgalloc_core::MAX_SAFE_INTEGER as f64) {
        return Err(invalid("size", "an integer from 1 to 2^53-1 bytes", crate::error::js_number(size)));
    }
    let usage = match usage {
        0.0 => Usage::Device,
        1.0 => Usage::Shared,
        u => return Err(invalid("usage", "'device' or 'shared'", u.to_string())),
    };
    Ok((size as u64, usage))
}

/// `heapMalloc(slot, size, usage, scratch)`: allocates a block the slot's owner holds, writes
/// `[size, requestedSize, offset, pool index]` into `scratch` and returns the id.
/// `usage`: 0 device, 1 shared.
unsafe extern "C" fn heap_malloc(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let [slot, size, usage, scratch] = raw::args::<4>(env, info);
    raw::finish(env, || {
        let slot = raw::number(env, slot, "slot")?;
        let (size, usage) = malloc_request(raw::number(env, size, "size")?, raw::number(env, usage, "usage")?)?;
        let out = raw::scratch(env, scratch)?;
        with_owner(slot, |owner| {
            let a = owner.malloc(size, usage).napi()?;
            *out = [a.size as f64, a.requested as f64, a.offset as f64, a.pool.index() as f64];
            Ok(Some(a.id as f64))
        })
    })
}

/// `heapMallocIn(slot, scope, size, usage, scratch)`: as `heapMalloc`, charged to the scope at
/// index `scope` of the heap's tree (and its ancestors): `QUOTA_EXCEEDED` before the heap
/// allocates when it does not fit. The block's record holds the charge.
unsafe extern "C" fn heap_malloc_in(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let [slot, scope, size, usage, scratch] = raw::args::<5>(env, info);
    raw::finish(env, || {
        let slot = raw::number(env, slot, "slot")?;
        let scope = raw::number(env, scope, "scope")?;
        let (size, usage) = malloc_request(raw::number(env, size, "size")?, raw::number(env, usage, "usage")?)?;
        let out = raw::scratch(env, scratch)?;
        with_owner(slot, |owner| {
            let index = u32::try_from(scope as i64).ok().filter(|_| scope.fract() == 0.0).ok_or_else(|| {
                invalid_hint("scope", "a scope index", scope.to_string(), "internal: use scope.malloc")
            })?;
            let scope = Scope::at(owner.heap().scopes(), index).napi()?;
            let a = owner.malloc_in(&scope, size, usage).napi()?;
            *out = [a.size as f64, a.requested as f64, a.offset as f64, a.pool.index() as f64];
            Ok(Some(a.id as f64))
        })
    })
}

/// `heapFree(slot, id)`: frees a block the slot's owner holds (`DOUBLE_FREE` if it does not).
unsafe extern "C" fn heap_free(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let [slot, id] = raw::args::<2>(env, info);
    raw::finish(env, || {
        let slot = raw::number(env, slot, "slot")?;
        let id = to_u64(raw::number(env, id, "id")?, "id")?;
        with_owner(slot, |owner| owner.free(id).napi())?;
        Ok(None)
    })
}

/// Numbers per event written by `heapTakeEvents`.
const EVENT_NUMBERS: usize = 6;

/// Event kinds by the number `heapTakeEvents` reports.
const EVENT_KINDS: [HeapEventKind; 6] = HeapEventKind::ALL;

/// `heapTakeEvents(slot, out)`: moves the oldest recorded allocator events into the
/// Float64Array `out`, six numbers each (kind in [`EVENT_KINDS`] order, block id, segment
/// id, offset, size, pool index; -1 for none), as many as fit; returns how many. The memory
/// history drains the queue this way: no array is created per batch.
unsafe extern "C" fn heap_take_events(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let [slot, out] = raw::args::<2>(env, info);
    raw::finish(env, || {
        let slot = raw::number(env, slot, "slot")?;
        let out = raw::float64s(env, out)?;
        with_owner(slot, |owner| {
            let mut i = 0;
            let n = owner.heap().drain_events(out.len() / EVENT_NUMBERS, |e| {
                out[i..i + EVENT_NUMBERS].copy_from_slice(&[
                    EVENT_KINDS.iter().position(|k| *k == e.kind).unwrap_or(0) as f64,
                    e.block_id.map_or(-1.0, |b| b as f64),
                    e.segment_id.map_or(-1.0, f64::from),
                    e.offset.map_or(-1.0, |o| o as f64),
                    e.size as f64,
                    e.pool.index() as f64,
                ]);
                i += EVENT_NUMBERS;
            });
            Ok(Some(n as f64))
        })
    })
}

/// Adds `heapMalloc` and `heapFree` to the module's exports (once per JS environment, so
/// worker threads get them too).
#[napi(catch_unwind, module_exports)]
pub fn register_block_functions(exports: Object) -> Result<()> {
    let value = exports.value();
    let functions: [(&str, sys::napi_callback); 4] = [
        ("heapMalloc", Some(heap_malloc)),
        ("heapMallocIn", Some(heap_malloc_in)),
        ("heapFree", Some(heap_free)),
        ("heapTakeEvents", Some(heap_take_events)),
    ];
    for (name, cb) in functions {
        let mut f = ptr::null_mut();
        // SAFETY: env and exports come from napi-rs's module init; the callbacks are 'static.
        unsafe {
            let status = sys::napi_create_function(
                value.env,
                name.as_ptr().cast(),
                name.len() as isize,
                cb,
                ptr::null_mut(),
                &mut f,
            );
            if status != sys::Status::napi_ok {
                return Err(coded("INTERNAL", &format!("could not create {name}")));
            }
            let key = CString::new(name).expect("no NUL in a function name");
            if sys::napi_set_named_property(value.env, value.value, key.as_ptr(), f) != sys::Status::napi_ok {
                return Err(coded("INTERNAL", &format!("could not export {name}")));
            }
        }
    }
    Ok(())
}
