//! The paged KV cache on the device against a CPU reference: prefill and batched decode,
//! forks (copy-on-write), prefix hits, swap out and in, eviction under pressure, f32 and f16.

use std::collections::HashMap;

use common::gpu;
use wgalloc_core::kv::{Heads, KvCache, KvDtype, KvOptions, StepSeq};
use wgalloc_core::{DeviceBlock, Gpu, Usage};

mod common;

const LAYERS: u32 = 2;
const KV_HEADS: u32 = 2;
const Q_HEADS: u32 = 4;

struct Rng(u64);
impl Rng {
    fn f(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f()).collect()
    }
}

/// What a sequence holds, per layer: one `[kvHeads * headDim]` K and V per token.
#[derive(Clone, Default)]
struct Reference {
    k: Vec<Vec<Vec<f32>>>,
    v: Vec<Vec<Vec<f32>>>,
}

struct Bench {
    gpu: Gpu,
    cache: KvCache,
    dim: u32,
    refs: HashMap<u64, Reference>,
    rng: Rng,
    tol: f32,
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn block_of(gpu: &Gpu, data: &[f32]) -> DeviceBlock {
    let b = gpu.heap().unwrap().malloc(4 * data.len() as u64, Usage::Device).unwrap();
    b.write(&f32_bytes(data), 0).unwrap();
    b
}

impl Bench {
    fn new(dtype: KvDtype, dim: u32, blocks: u32) -> Bench {
        let gpu = gpu();
        let cache = gpu
            .heap()
            .unwrap()
            .kv_cache(KvOptions {
                layers: LAYERS,
                kv_heads: KV_HEADS,
                head_dim: dim,
                dtype,
                block_tokens: 4,
                num_blocks: Some(blocks),
                max_bytes: None,
                max_seqs: 8,
                max_seq_len: 256,
                prefix_caching: true,
            })
            .unwrap();
        let tol = if dtype == KvDtype::F32 { 1e-5 } else { 2e-3 };
        Bench { gpu, cache, dim, refs: HashMap::new(), rng: Rng(7), tol }
    }

    fn width(&self) -> usize {
        (KV_HEADS * self.dim) as usize
    }

    fn add(&mut self, prompt: &[u32], from: Option<u64>) -> (u64, u32) {
        let (seq, cached) = self.cache.add_sequence(prompt, 0).unwrap();
        let mut r = Reference { k: vec![vec![]; LAYERS as usize], v: vec![vec![]; LAYERS as usize] };
        if let Some(src) = from {
            let s = &self.refs[&src];
            for l in 0..LAYERS as usize {
                r.k[l] = s.k[l][..cached as usize].to_vec();
                r.v[l] = s.v[l][..cached as usize].to_vec();
            }
        }
        assert!(from.is_some() || cached == 0);
        self.refs.insert(seq, r);
        (seq, cached)
    }

    /// Appends `n` tokens to each sequence and writes fresh random K/V for them.
    fn step(&mut self, seqs: &[(u64, u32)]) {
        let w = self.width();
        let step: Vec<StepSeq> = seqs.iter().map(|&(seq, tokens)| StepSeq { seq, tokens }).collect();
        for &(seq, n) in seqs {
            let toks: Vec<u32> = (0..n).map(|i| seq as u32 * 1000 + self.cache.len(seq).unwrap() + i).collect();
            self.cache.append(seq, &toks).unwrap();
        }
        let mut stream = self.gpu.create_stream().unwrap();
        for l in 0..LAYERS {
            let (mut ks, mut vs) = (Vec::new(), Vec::new());
            for &(seq, n) in seqs {
                for _ in 0..n {
                    let (k, v) = (self.rng.vec(w), self.rng.vec(w));
                    ks.extend(&k);
                    vs.extend(&v);
                    let r = self.refs.get_mut(&seq).unwrap();
                    r.k[l as usize].push(k);
                    r.v[l as usize].push(v);
                }
            }
            let (kb, vb) = (block_of(&self.gpu, &ks), block_of(&self.gpu, &vs));
            self.cache.write(&mut stream, l, &step, &kb, &vb).unwrap();
        }
        stream.submit().unwrap();
    }

    /// Attention of the last `n` positions of each sequence, every layer, against the CPU.
    fn check(&mut self, seqs: &[(u64, u32)]) {
        let d = self.dim as usize;
        let step: Vec<StepSeq> = seqs.iter().map(|&(seq, tokens)| StepSeq { seq, tokens }).collect();
        let rows: usize = seqs.iter().map(|s| s.1 as usize).sum();
        let qn = rows * Q_HEADS as usize * d;
        for l in 0..LAYERS as usize {
            let q = self.rng.vec(qn);
            let qb = block_of(&self.gpu, &q);
            let out = self.gpu.heap().unwrap().malloc(4 * qn as u64, Usage::Device).unwrap();
            let mut stream = self.gpu.create_stream().unwrap();
            self.cache
                .attention(&mut stream, l as u32, &step, Heads { query_heads: Q_HEADS, scale: None }, &qb, &out)
                .unwrap();
            stream.submit().unwrap();
            let got: Vec<f32> = pollster::block_on(out.read(0, 4 * qn as u64))
                .unwrap()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            let mut row = 0;
            for &(seq, n) in seqs {
                let r = &self.refs[&seq];
                let len = r.k[l].len();
                for i in 0..n as usize {
                    let visible = len - n as usize + i + 1;
                    for h in 0..Q_HEADS as usize {
                        let kvh = h / (Q_HEADS / KV_HEADS) as usize;
                        let qv = &q[(row * Q_HEADS as usize + h) * d..][..d];
                        let scores: Vec<f32> = (0..visible)
                            .map(|t| {
                                let k = &r.k[l][t][kvh * d..][..d];
                                qv.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() / (d as f32).sqrt()
                            })
                            .collect();
                        let m = scores.iter().cloned().fold(f32::MIN, f32::max);
                        let e: Vec<f32> = scores.iter().map(|s| (s - m).exp()).collect();
                        let sum: f32 = e.iter().sum();
                        for dd in 0..d {
                            let want: f32 = (0..visible).map(|t| e[t] * r.v[l][t][kvh * d + dd]).sum::<f32>() / sum;
                            let g = got[(row * Q_HEADS as usize + h) * d + dd];
                            assert!(
                                (g - want).abs() <= self.tol,
                                "seq {seq} layer {l} row {i} head {h} dim {dd}: {g} vs {want}"
                            );
                        }
                    }
                    row += 1;
                }
            }
        }
    }
}

fn prefill_decode_fork_prefix_swap(dtype: KvDtype, dim: u32) {
    let mut b = Bench::new(dtype, dim, 40);
    let (a, _) = b.add(&[], None);
    let (c, _) = b.add(&[], None);
    b.step(&[(a, 10), (c, 3)]);
    b.check(&[(a, 10), (c, 3)]); // prefill rows, causal
    for _ in 0..5 {
        b.step(&[(a, 1), (c, 1)]);
        b.check(&[(a, 1), (c, 1)]); // batched decode, different lengths
    }
    // Fork: the shared partial block is copied on the first write of either side.
    let f = b.cache.fork(a).unwrap();
    b.refs.insert(f, b.refs[&a].clone());
    b.step(&[(f, 1)]);
    b.step(&[(a, 2)]);
    b.check(&[(a, 1), (f, 1), (c, 1)]);
    assert_eq!(b.cache.stats().copies_on_write, 1);
    // Prefix hit: a prompt equal to a's first 8 tokens' ids takes its first two blocks.
    let prompt: Vec<u32> = (0..12).map(|i| a as u32 * 1000 + i).collect();
    let (p, cached) = b.add(&prompt, Some(a));
    assert_eq!(cached, 8);
    b.step(&[(p, 4)]);
    b.check(&[(p, 4), (a, 1)]);
    // Swap out, let others take the blocks, swap back in: the same attention.
    b.cache.swap_out(c).unwrap();
    let (x, _) = b.add(&[], None);
    b.step(&[(x, 20)]);
    pollster::block_on(b.cache.swap_in(c)).unwrap();
    b.check(&[(c, 4), (x, 1)]);
    b.step(&[(c, 1)]);
    b.check(&[(c, 1)]);
}

#[test]
fn f32_pools_match_the_cpu_reference() {
    prefill_decode_fork_prefix_swap(KvDtype::F32, 16);
}

#[test]
fn f16_pools_match_the_cpu_reference_within_tolerance() {
    prefill_decode_fork_prefix_swap(KvDtype::F16, 8);
}

#[test]
fn head_dims_past_one_per_thread_and_long_rows() {
    // 80 dims: threads hold two dims each; 150 tokens: three chunks of the online softmax.
    let mut b = Bench::new(KvDtype::F32, 80, 60);
    let (a, _) = b.add(&[], None);
    b.step(&[(a, 150)]);
    b.check(&[(a, 3)]);
}

#[test]
fn a_full_cache_refuses_and_changes_nothing_on_the_device() {
    let mut b = Bench::new(KvDtype::F32, 8, 4);
    let (a, _) = b.add(&[], None);
    b.step(&[(a, 14)]);
    let err = b.cache.append(a, &[1, 2, 3]).unwrap_err();
    assert_eq!(err.code(), "KV_CACHE_FULL");
    assert!(err.to_string().contains("needs 1 blocks; 0 are free"), "{err}");
    b.check(&[(a, 2)]);
    // Eviction under pressure: a freed sequence's cached blocks go to the next one.
    b.cache.free(a).unwrap();
    let (n, _) = b.add(&[], None);
    b.step(&[(n, 16)]);
    b.check(&[(n, 16)]);
    assert!(b.cache.stats().evictions >= 1);
}
