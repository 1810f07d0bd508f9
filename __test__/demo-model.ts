// The demo model (js/demo/model.ts: a small transformer block and its weights), which the demo,
// profiler and viewer tests run. It is internal to the package, so its types are stated here.
import type { Graph } from 'wgalloc'

export interface ShapeOptions {
  seq?: number
  dim?: number
  heads?: number
  ffn?: number
}
export interface Shapes {
  seq: number
  dim: number
  heads: number
  ffn: number
  headDim: number
  hidden: number
}
export interface DemoData {
  params: Record<string, Float32Array>
  inputs: { x: Float32Array }
}

export const { shapes, graph, weights } = require('../dist/demo/model.js') as {
  shapes: (options?: ShapeOptions) => Shapes
  graph: (s: Shapes) => Graph
  weights: (s: Shapes, seed?: number) => DemoData
}
