//! Heap scopes on a device: every way a charge is taken and returned (Note [A scope's bytes
//! are its live charges]) — blocks freed, dropped or leased, executors released or dropped,
//! shape caches growing past their limit, weights and KV caches held by several owners, nested
//! limits, disposed scopes.

use std::collections::HashMap;
use std::sync::Arc;

use common::gpu;
use wgalloc_core::exec::{
    CompileOptions, DeviceIo, Dims, ExecGraph, RunOptions, ShapeCache, ShapePolicy, SymbolicGraph,
};
use wgalloc_core::{Error, Usage};

mod common;

fn quota(e: Error) -> wgalloc_core::QuotaExceeded {
    match e {
        Error::QuotaExceeded(q) => *q,
        other => panic!("expected QUOTA_EXCEEDED, got {other:?}"),
    }
}

#[test]
fn a_block_in_a_scope_is_charged_its_aligned_size_until_freed() {
    let heap = gpu().heap().unwrap();
    let align = heap.alignment();
    let s = heap.scope("tenant", 4 * align).unwrap();
    let (a, _) = heap.malloc_in(&s, 1, Usage::Device).unwrap();
    assert_eq!(a.size(), align);
    let stats = s.stats();
    assert_eq!((stats.allocated, stats.peak, stats.active_blocks), (align, align, 1));
    let (b, _) = heap.malloc_in(&s, 3 * align, Usage::Device).unwrap();
    // One byte more is a whole aligned block more: refused before the heap allocates.
    let before = heap.stats().active_blocks.current;
    let e = quota(heap.malloc_in(&s, 1, Usage::Device).unwrap_err());
    assert_eq!((e.scope.as_str(), e.limit, e.allocated, e.requested), ("tenant", 4 * align, 4 * align, align));
    assert_eq!(heap.stats().active_blocks.current, before, "a refused malloc allocated nothing");
    assert_eq!(s.stats().quota_exceeded, 1);
    a.free().unwrap();
    assert_eq!((s.stats().allocated, s.stats().active_blocks), (3 * align, 1));
    // A second free is DOUBLE_FREE and returns nothing twice.
    assert_eq!(a.free().unwrap_err().code(), "DOUBLE_FREE");
    assert_eq!(s.stats().allocated, 3 * align);
    drop(a);
    assert_eq!(s.stats().allocated, 3 * align);
    b.free().unwrap();
    assert_eq!((s.stats().allocated, s.stats().active_blocks), (0, 0));
}

#[test]
fn a_block_dropped_without_free_or_freed_while_leased_returns_its_charge_when_it_goes() {
    let heap = gpu().heap().unwrap();
    let s = heap.scope("tenant", 1 << 20).unwrap();
    let (a, _) = heap.malloc_in(&s, 4096, Usage::Device).unwrap();
    drop(a);
    assert_eq!((s.stats().allocated, s.stats().active_blocks), (0, 0));
    // Freed while leased: the block stays live, and charged, until the lease ends.
    let (b, _) = heap.malloc_in(&s, 4096, Usage::Shared).unwrap();
    let b = Arc::new(b);
    let lease = b.lease().unwrap();
    b.free().unwrap();
    assert_eq!(s.stats().allocated, 4096);
    drop(lease);
    assert!(b.is_freed());
    assert_eq!(s.stats().allocated, 0);
    // Heap teardown: the device goes, and the blocks with their handles.
    let (c, _) = heap.malloc_in(&s, 4096, Usage::Device).unwrap();
    heap.gpu().destroy();
    drop(c);
    assert_eq!((s.stats().allocated, s.stats().active_blocks), (0, 0));
}

#[test]
fn nested_limits_and_disposed_scopes() {
    let heap = gpu().heap().unwrap();
    let model = heap.scope("model", 256 << 10).unwrap();
    let kv = model.child("kv-cache", 128 << 10).unwrap();
    let (x, _) = heap.malloc_in(&kv, 100 << 10, Usage::Device).unwrap();
    let (y, _) = heap.malloc_in(&model, 150 << 10, Usage::Device).unwrap();
    assert_eq!(model.stats().allocated, 250 << 10);
    let e = quota(heap.malloc_in(&kv, 10 << 10, Usage::Device).unwrap_err());
    assert_eq!(e.scope, "model", "the parent is full first");
    assert_eq!(kv.stats().allocated, 100 << 10);
    assert!(model.child("big", 512 << 10).is_err());
    model.dispose();
    let e = heap.malloc_in(&kv, 4, Usage::Device).unwrap_err();
    assert!(e.to_string().contains("'model/kv-cache', disposed"), "{e}");
    // Live blocks of a disposed scope stay valid and still return their bytes.
    x.free().unwrap();
    y.free().unwrap();
    assert_eq!((model.stats().allocated, kv.stats().allocated), (0, 0));
    assert!(heap.scopes().list().is_empty());
    // A scope of another device is refused.
    let other = gpu().heap().unwrap().scope("elsewhere", 1 << 20).unwrap();
    assert_eq!(heap.malloc_in(&other, 4, Usage::Device).unwrap_err().code(), "INVALID_ARGUMENT");
}

#[test]
fn the_scope_tree_is_one_per_device_heap() {
    let gpu = gpu();
    let a = gpu.heap().unwrap();
    let s = a.scope("shared", 1 << 20).unwrap();
    let b = gpu.heap().unwrap();
    assert_eq!(b.scopes().find("shared"), Some(s.id()));
    let (block, _) = b.malloc_in(&s, 4096, Usage::Device).unwrap();
    assert_eq!(a.scopes().stats(s.id()).allocated, 4096);
    drop(block);
    assert_eq!(s.stats().allocated, 0);
}

#[test]
fn an_executor_charged_to_a_scope_returns_its_charge_on_release_or_drop() {
    let gpu = gpu();
    let heap = gpu.heap().unwrap();
    let s = heap.scope("model", 64 << 20).unwrap();
    let graph = || ExecGraph::parse(&common::chain_graph_json(3, 4096)).unwrap();
    let options = || CompileOptions { params: common::zero_w(4096), ..Default::default() };
    let exe = gpu.compile(graph(), options()).unwrap();
    exe.charge_to(&s).unwrap();
    let bytes = exe.device_bytes();
    assert!(bytes > 0);
    assert_eq!(s.stats().allocated, bytes);
    assert!(exe.charge_to(&s).is_err(), "once per executor");
    drop(exe);
    assert_eq!(s.stats().allocated, 0, "dropped without release()");
    let exe = gpu.compile(graph(), options()).unwrap();
    exe.charge_to(&s).unwrap();
    exe.release();
    assert_eq!(s.stats().allocated, 0);
    drop(exe);
    assert_eq!(s.stats().allocated, 0, "returned once");
    // Too small a scope: refused, nothing charged.
    let tiny = heap.scope("tiny", 256).unwrap();
    let exe = gpu.compile(graph(), options()).unwrap();
    let e = quota(exe.charge_to(&tiny).unwrap_err());
    assert_eq!((e.scope.as_str(), e.requested), ("tiny", exe.device_bytes()));
    assert_eq!(tiny.stats().allocated, 0);
}

#[test]
fn weights_and_kv_caches_return_their_charge_with_their_memory() {
    use wgalloc_core::kv::{KvDtype, KvOptions};
    let gpu = gpu();
    let heap = gpu.heap().unwrap();
    let s = heap.scope("served-model", 64 << 20).unwrap();
    // Weights: the block lives while any executor compiled with it does, and so does the charge.
    let weights = gpu.create_weights(common::zero_w(4096)).unwrap();
    weights.charge_to(&s).unwrap();
    assert_eq!(s.stats().allocated, weights.device_bytes());
    let again = wgalloc_core::exec::Weights::attach(weights.share_handle()).unwrap();
    assert!(again.charge_to(&s).is_err(), "once per store, from any handle");
    drop(again);
    let graph = ExecGraph::parse(&common::chain_graph_json(2, 4096)).unwrap();
    let exe = gpu.compile(graph, CompileOptions { weights: Some(weights.clone()), ..Default::default() }).unwrap();
    let store_bytes = weights.device_bytes();
    drop(weights);
    assert_eq!(s.stats().allocated, store_bytes, "an executor still binds the weights");
    exe.release();
    drop(exe);
    assert_eq!((s.stats().allocated, s.stats().active_blocks), (0, 0), "gone with the last holder");
    // A KV cache: charged its pools and table until its last clone drops.
    let options = KvOptions {
        layers: 2,
        kv_heads: 2,
        head_dim: 16,
        dtype: KvDtype::F32,
        block_tokens: 4,
        num_blocks: Some(16),
        max_bytes: None,
        max_seqs: 4,
        max_seq_len: 64,
        prefix_caching: false,
    };
    let cache = heap.kv_cache(options.clone()).unwrap();
    cache.charge_to(&s).unwrap();
    assert_eq!(s.stats().allocated, cache.bytes());
    let clone = cache.clone();
    assert!(clone.charge_to(&s).is_err(), "once per cache");
    drop(cache);
    assert_eq!(s.stats().allocated, clone.bytes(), "a clone still holds the pools");
    drop(clone);
    assert_eq!(s.stats().allocated, 0);
    let tiny = heap.scope("tiny", 256).unwrap();
    let cache = heap.kv_cache(options).unwrap();
    let e = quota(cache.charge_to(&tiny).unwrap_err());
    assert_eq!((e.scope.as_str(), e.requested), ("tiny", cache.bytes()));
    assert_eq!(tiny.stats().allocated, 0);
}

const ROW: usize = 1024;

fn symbolic_chain() -> SymbolicGraph {
    let mut v: serde_json::Value = serde_json::from_str(&common::chain_graph_json(2, ROW)).unwrap();
    for t in v["tensors"].as_array_mut().unwrap() {
        if t["id"] != "w" {
            t["size"] = format!("batch * {ROW}").into();
        }
    }
    for op in v["ops"].as_array_mut().unwrap() {
        op["dispatch"] = serde_json::json!([format!("batch * {}", ROW / 256)]);
    }
    v["dims"] = serde_json::json!(["batch"]);
    SymbolicGraph::parse(&v.to_string()).unwrap()
}

fn batch(n: u64) -> Dims {
    Dims::from([("batch".to_string(), n)])
}

#[test]
fn a_shape_cache_is_charged_as_it_grows_and_a_miss_past_the_limit_changes_nothing() {
    let gpu = gpu();
    let heap = gpu.heap().unwrap();
    let options = CompileOptions { params: common::zero_w(ROW), ..Default::default() };
    let cache = ShapeCache::new(&gpu, symbolic_chain(), ShapePolicy::Exact, 2, options).unwrap();
    // The executor of batch 1 alone: its bytes size the limit.
    let probe = ShapeCache::new(
        &gpu,
        symbolic_chain(),
        ShapePolicy::Exact,
        1,
        CompileOptions { params: common::zero_w(ROW), ..Default::default() },
    )
    .unwrap();
    probe.warm_up(&[batch(1)]).unwrap();
    let one = probe.stats().device_bytes;
    probe.close();
    let s = heap.scope("shapes", 3 * one).unwrap();
    cache.charge_to(&s).unwrap();
    cache.warm_up(&[batch(1)]).unwrap();
    assert_eq!(s.stats().allocated, cache.stats().device_bytes);
    // Batch 64 is far past the limit: refused, and the cache keeps what it held.
    let before = cache.stats();
    let allocated = heap.stats().allocated_bytes.current;
    let e = quota(cache.warm_up(&[batch(64)]).unwrap_err());
    assert_eq!(e.scope, "shapes");
    assert_eq!(cache.stats().cached, before.cached);
    assert_eq!(cache.stats().device_bytes, before.device_bytes);
    assert_eq!(s.stats().allocated, before.device_bytes);
    assert_eq!(heap.stats().allocated_bytes.current, allocated, "the refused executor's slabs went back");
    // A run at a cached shape still works.
    let inputs = HashMap::from([("x".to_string(), vec![0u8; ROW])]);
    pollster::block_on(cache.run(&batch(1), &inputs, &DeviceIo::default(), RunOptions::default())).unwrap();
    // Growing within the limit, then evicting (capacity 2): the charge follows the bytes.
    cache.warm_up(&[batch(2), batch(1)]).unwrap();
    assert_eq!(s.stats().allocated, cache.stats().device_bytes);
    cache.clear();
    assert_eq!(s.stats().allocated, 0);
    cache.warm_up(&[batch(1)]).unwrap();
    drop(cache);
    assert_eq!(s.stats().allocated, 0, "a dropped cache returns its charge");
}
