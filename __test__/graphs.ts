// Small compute graphs for executor tests and the fuzzers: a chain of elementwise adds over
// f32 tensors, one of them read through a view, and a one-op copy.
import type { Graph, GraphOp, GraphTensor } from 'wgalloc'

/** c = (a + b) * scale over the first n elements. */
export const ADD = `
@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
struct P { scale: f32, n: u32 }
@group(0) @binding(3) var<uniform> p: P;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < p.n) { c[g.x] = (a[g.x] + b[g.x]) * p.scale; }
}`

/** ADD's uniform block: scale, n. */
export function params(scale: number, n: number): Uint8Array {
  const buf = new ArrayBuffer(16)
  new Float32Array(buf, 0, 1)[0] = scale
  new Uint32Array(buf, 4, 1)[0] = n
  return new Uint8Array(buf)
}

/**
 * x -> t0 -> ... -> y, each step (prev + w) * 1 with w a param, over `len` f32s;
 * op `viewAt` reads its input through a view.
 */
export function chain(n: number, { len = 256, viewAt = 3 }: { len?: number; viewAt?: number } = {}): Graph {
  const bytes = len * 4
  const tensors: GraphTensor[] = [
    { id: 'x', size: bytes, kind: 'input', dtype: 'f32' },
    { id: 'w', size: bytes, kind: 'param', dtype: 'f32' },
  ]
  const ops: GraphOp[] = []
  let prev = 'x'
  for (let i = 0; i < n; i++) {
    const out = i === n - 1 ? 'y' : `t${i}`
    tensors.push({ id: out, size: bytes, kind: i === n - 1 ? 'output' : 'intermediate', dtype: 'f32' })
    let input = prev
    if (i === viewAt) {
      tensors.push({ id: `${prev}_view`, size: bytes, viewOf: prev })
      input = `${prev}_view`
    }
    ops.push({ name: `add${i}`, kernel: 'add', inputs: [input, 'w'], outputs: [out], dispatch: [Math.ceil(len / 64)], params: params(1, len) })
    prev = out
  }
  return { kernels: { add: { source: ADD } }, tensors, ops }
}

/** A one-op graph of `size`-byte input and output (the kernel copies one u32): the smallest executor. */
export function copyGraph(size: number): Graph {
  const source =
    '@group(0) @binding(0) var<storage, read> x: array<u32>;\n@group(0) @binding(1) var<storage, read_write> y: array<u32>;\n@compute @workgroup_size(1) fn main() { y[0] = x[0]; }'
  return {
    kernels: { k: { source } },
    tensors: [
      { id: 'x', size, kind: 'input' },
      { id: 'y', size, kind: 'output' },
    ],
    ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y'], dispatch: [1] }],
  }
}

const DOUBLE = `
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < arrayLength(&y)) { y[g.x] = x[g.x] * 2.0; }
}`
/** y = 2x over 64 floats: the smallest graph every API call can run. */
export const DOUBLE_GRAPH: Graph = {
  kernels: { double: { source: DOUBLE } },
  tensors: [
    { id: 'x', size: 256, kind: 'input', dtype: 'f32' },
    { id: 'y', size: 256, kind: 'output', dtype: 'f32' },
  ],
  ops: [{ name: 'double', kernel: 'double', inputs: ['x'], outputs: ['y'], dispatch: [1] }],
}
/** DOUBLE_GRAPH with `batch` rows of 64 floats. */
export const DOUBLE_SHAPES: Graph = {
  ...DOUBLE_GRAPH,
  dims: ['batch'],
  tensors: DOUBLE_GRAPH.tensors.map((t) => ({ ...t, size: 'batch * 256' })),
  ops: DOUBLE_GRAPH.ops.map((op) => ({ ...op, dispatch: ['batch'] })),
}
/** An input of DOUBLE_GRAPH. */
export const DOUBLE_X = Float32Array.from({ length: 64 }, (_, i) => i)
