// Runs one ONNX model once in onnxruntime-node (CPU, graphOptimizationLevel 'all', sequential
// execution, profiling on) and returns the ops that really ran, in execution order, with each
// op's input names and output tensors (name, dtype, shape, bytes). Node events of the profile are
// matched by name to the optimized graph that ONNX Runtime saved for the same session.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import ort from 'onnxruntime-node'
import type { Tensor } from 'onnxruntime-node'
import { type OnnxNode, readOnnxGraph } from './onnx-graph.mjs'
import { type Random, type Shapes, rng } from './workloads.mjs'

/** A tensor of the run: its name, element type, shape, and size in bytes. */
export interface TensorRecord {
  id: string
  dtype: string
  shape: number[]
  size: number
}

/**
 * An op that ran: its node's name, op type and domain (undefined for the default ONNX domain), the
 * names of the tensors it reads, and the tensors it writes.
 */
export interface ProfiledOp {
  name: string
  type: string
  domain: string | undefined
  inputs: string[]
  outputs: TensorRecord[]
}

/** What `profileRun` returns: the ops in execution order, the fed graph inputs, the graph output names. */
export interface ProfiledRun {
  ops: ProfiledOp[]
  graphInputs: TensorRecord[]
  graphOutputs: string[]
}

/** An event of the profile ONNX Runtime writes (a JSON array of Chrome trace events). */
interface ProfileEvent {
  cat: string
  name: string
  args: object
}

/** A `<node>_kernel_time` event: one op's run. The profiler writes its numbers as strings. */
interface KernelEvent extends ProfileEvent {
  cat: 'Node'
  args: {
    op_name: string
    node_index: string
    output_size: string
    /** One `{ <element type>: dims }` per output. */
    output_type_shape: Record<string, number[]>[]
  }
}

const ELEMENT_BYTES: Record<string, number> = {
  float: 4,
  float16: 2,
  double: 8,
  int8: 1,
  uint8: 1,
  int16: 2,
  uint16: 2,
  int32: 4,
  uint32: 4,
  int64: 8,
  uint64: 8,
  bool: 1,
}
const ORT_TYPE: Record<string, Tensor.Type> = { float: 'float32', int64: 'int64', int32: 'int32', uint8: 'uint8' }
const UNSUPPORTED_CONTROL_FLOW = new Set(['If', 'Loop', 'Scan'])

function makeFeeds(inputShapes: Shapes, dtypes: Record<string, string>, random: Random): Record<string, Tensor> {
  const feeds: Record<string, Tensor> = {}
  for (const [name, dims] of Object.entries(inputShapes)) {
    const count = dims.reduce((a, b) => a * b, 1)
    const type = ORT_TYPE[dtypes[name] ?? 'float']
    if (type !== 'float32') throw new Error(`input ${name}: only float inputs are generated`)
    const data = new Float32Array(count)
    for (let i = 0; i < count; i++) data[i] = random() * 2 - 1
    feeds[name] = new ort.Tensor(type, data, dims)
  }
  return feeds
}

const workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'wgalloc-traces-'))

/** The graph node a profiler `<node>_kernel_time` event times. */
const nodeName = (e: ProfileEvent) => e.name.slice(0, -'_kernel_time'.length)

/**
 * Nodes the model left unnamed are saved unnamed, while the profiler calls them
 * `<op>_<session node index>`. Optimizer passes number the nodes they add in graph order, so the
 * profiled names missing from the graph, by index, pair with its unnamed nodes in graph order.
 * The caller checks each pairing as any other node: the op types must agree, and every tensor must
 * be produced before it is read. Counts that differ pair nothing (the caller names a missing node).
 */
function nameUnnamedNodes(nodes: OnnxNode[], nodesByName: Map<string, OnnxNode>, nodeEvents: KernelEvent[]) {
  const unnamed = nodes.filter((n) => n.name === '')
  const missing = nodeEvents.filter((e) => !nodesByName.has(nodeName(e))).sort((a, b) => Number(a.args.node_index) - Number(b.args.node_index))
  if (missing.length !== unnamed.length) return
  for (const [k, e] of missing.entries()) nodesByName.set(nodeName(e), unnamed[k])
}

/**
 * Runs `modelPath` once on random inputs of `inputShapes` ({name: dims}) and returns
 * `{ ops, graphInputs, graphOutputs }`: ops in execution order as
 * `{ name, type, domain, inputs: [names], outputs: [{ id, dtype, shape, size }] }`.
 */
export async function profileRun(modelPath: string, inputShapes: Shapes, seed: number): Promise<ProfiledRun> {
  const tag = `${path.basename(modelPath, '.onnx')}-${Object.values(inputShapes)
    .map((d) => d.join('x'))
    .join('-')}`
  // Node names made up by the optimizer (reorders, fusions) differ between sessions, so every
  // profiled session is matched to the optimized graph it saved itself.
  const optimizedPath = path.join(workDir, `${tag}.optimized.onnx`)
  const session = await ort.InferenceSession.create(modelPath, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    logSeverityLevel: 3,
    intraOpNumThreads: 2,
    enableProfiling: true,
    profileFilePrefix: path.join(workDir, tag),
    optimizedModelFilePath: optimizedPath,
  })
  const feeds = makeFeeds(inputShapes, {}, rng(seed))
  const results = await session.run(feeds)
  session.endProfiling()
  await session.release()

  const profileFile = fs
    .readdirSync(workDir)
    .filter((f) => f.startsWith(`${tag}_`) && f.endsWith('.json'))
    .map((f) => path.join(workDir, f))
    .sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs)[0]
  if (!profileFile) throw new Error(`no profile written for ${tag}`)
  const events = JSON.parse(fs.readFileSync(profileFile, 'utf8')) as ProfileEvent[]
  fs.rmSync(profileFile)

  const graph = readOnnxGraph(fs.readFileSync(optimizedPath))
  fs.rmSync(optimizedPath)
  const nodesByName = new Map(graph.nodes.map((n) => [n.name, n]))
  for (const n of graph.nodes) {
    if (UNSUPPORTED_CONTROL_FLOW.has(n.type)) throw new Error(`${modelPath}: control flow op ${n.type} is not handled`)
  }

  const nodeEvents = events.filter((e): e is KernelEvent => e.cat === 'Node' && e.name.endsWith('_kernel_time'))
  nameUnnamedNodes(graph.nodes, nodesByName, nodeEvents)
  const ops: ProfiledOp[] = []
  for (const e of nodeEvents) {
    const name = nodeName(e)
    const node = nodesByName.get(name)
    if (!node) throw new Error(`${tag}: profiled node ${name} is not in the optimized graph`)
    if (node.type !== e.args.op_name) throw new Error(`${tag}: node ${name} is ${node.type}, profile says ${e.args.op_name}`)
    const outNames = node.outputs.filter((o) => o !== '')
    const shapes = e.args.output_type_shape
    if (shapes.length !== outNames.length) throw new Error(`${tag}: node ${name} has ${outNames.length} outputs, profile ${shapes.length}`)
    const outputs = outNames.map((id, k): TensorRecord => {
      const [[dtype, shape]] = Object.entries(shapes[k])
      const bytes = ELEMENT_BYTES[dtype]
      if (!bytes) throw new Error(`${tag}: unknown element type ${dtype}`)
      return { id, dtype, shape, size: shape.reduce((a, b) => a * b, 1) * bytes }
    })
    const total = outputs.reduce((a, o) => a + o.size, 0)
    if (total !== Number(e.args.output_size)) {
      throw new Error(`${tag}: node ${name} outputs ${total} B by shape, profile says ${e.args.output_size}`)
    }
    ops.push({ name, type: node.type, domain: node.domain || undefined, inputs: node.inputs.filter((i) => i !== ''), outputs })
  }
  if (ops.length === 0) throw new Error(`${tag}: profile has no node events`)
  // Every tensor an op produces is produced before any op reads it.
  const producedAt = new Map(ops.flatMap((o, i) => o.outputs.map((out): [string, number] => [out.id, i])))
  for (const [i, op] of ops.entries()) {
    for (const input of op.inputs) {
      if ((producedAt.get(input) ?? -1) >= i) throw new Error(`${tag}: ${op.name} reads ${input} before it is produced`)
    }
  }

  const graphInputs: TensorRecord[] = Object.entries(feeds).map(([name, t]) => ({
    id: name,
    dtype: 'float',
    shape: [...t.dims],
    size: t.size * 4, // makeFeeds makes float32 tensors only
  }))
  const graphOutputs = graph.outputs
  // The recorded shape of every graph output must be the shape the run returned.
  for (const out of graphOutputs) {
    const rec = ops.flatMap((o) => o.outputs).find((o) => o.id === out)
    if (!rec) throw new Error(`${tag}: graph output ${out} was not produced by a profiled op`)
    if (rec.shape.join('x') !== results[out].dims.join('x')) {
      throw new Error(`${tag}: output ${out} recorded ${rec.shape} but the run returned ${results[out].dims}`)
    }
  }
  return { ops, graphInputs, graphOutputs }
}
