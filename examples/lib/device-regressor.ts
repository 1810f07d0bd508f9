// The training example's model on the device: parameters and Adam's moments are heap
// blocks for the whole run, updated in place. A training step records forward, loss,
// backward and the optimizer on one stream; every activation and gradient is a heap
// block malloc'd for the step and freed right after the dispatch that last reads it.
// A freed block waits until the step's work ran, then the heap's cache serves the next
// step's requests with it.

import type { ComputeKernel, DeviceBlock, Gpu, Stream } from 'wgalloc'
import { createKernels, launch, type Launch } from './kernels'
import { PARAMS, paramSizes, type ParamId, type RegressorShape, type State } from './regressor'

const IN = 2
const F32 = 4

const bytes = (a: Float32Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength)

/** A block's first `n` floats (a block is rounded up to the storage offset alignment). */
export async function readF32(block: DeviceBlock, n: number): Promise<Float32Array> {
  const b = await block.read(0, n * F32)
  return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength))
}

/** What one recorded step leaves to the caller: the batch loss, and on request the gradients. */
export interface StepBlocks {
  /** One f32: the batch's mean squared error. The caller reads and frees it. */
  loss: DeviceBlock
  /** With `keepGradients`: each parameter's gradient, for the caller to read and free. */
  gradients?: Record<ParamId, DeviceBlock>
}

export class DeviceRegressor {
  readonly sizes: Record<ParamId, number>
  /** Parameters, then `m_<id>` and `v_<id>` (Adam's moments), as in `State`. */
  private readonly blocks: Record<string, DeviceBlock> = {}
  private readonly k: Record<'linear' | 'mse' | 'linear_grad_w' | 'linear_grad_x_tanh' | 'adam_inplace', ComputeKernel>

  /** Allocates the parameters and moments and writes `state` into them (ordered before the first step). */
  constructor(
    private readonly gpu: Gpu,
    readonly shape: RegressorShape,
    state: State,
  ) {
    this.sizes = paramSizes(shape)
    this.k = createKernels(gpu, 'linear', 'mse', 'linear_grad_w', 'linear_grad_x_tanh', 'adam_inplace')
    for (const key of Object.keys(state)) {
      const block = gpu.heap.malloc(state[key].byteLength)
      block.write(bytes(state[key]))
      this.blocks[key] = block
    }
  }

  /** Bytes the parameters and moments hold on the heap. */
  get stateBytes(): number {
    return Object.values(this.blocks).reduce((n, b) => n + b.size, 0)
  }

  /**
   * Records one training step on `stream` (without submitting): batch `x` [batch, 2] and
   * `y` [batch] are written to fresh blocks, `hyper` is Adam's for this step.
   */
  step(stream: Stream, x: Float32Array, y: Float32Array, hyper: Float32Array, { keepGradients = false } = {}): StepBlocks {
    const { batch: B, hidden: H } = this.shape
    const p = this.blocks
    const heap = this.gpu.heap
    const alloc = (elements: number): DeviceBlock => heap.malloc(elements * F32)
    const run = (l: Launch, blocks: DeviceBlock[]): void => stream.dispatch(this.k[l.kernel as keyof typeof this.k], blocks, l.dispatch, l.params)
    const free = (...blocks: DeviceBlock[]): void => {
      for (const b of blocks) b.free()
    }

    const xb = alloc(B * IN)
    const yb = alloc(B)
    xb.write(bytes(x))
    yb.write(bytes(y))
    // Forward.
    const h1 = alloc(B * H)
    run(launch.linear(B, H, IN, 'tanh'), [xb, p.w1, p.b1, h1])
    const h2 = alloc(B * H)
    run(launch.linear(B, H, H, 'tanh'), [h1, p.w2, p.b2, h2])
    const pred = alloc(B)
    run(launch.linear(B, 1, H, 'none'), [h2, p.w3, p.b3, pred])
    // Loss and its gradient.
    const dpred = alloc(B)
    const loss = alloc(1)
    run(launch.mse(B), [pred, yb, dpred, loss])
    free(pred, yb)
    // Backward.
    const g = {} as Record<ParamId, DeviceBlock>
    for (const id of PARAMS) g[id] = alloc(this.sizes[id])
    run(launch.linearGradW(B, 1, H), [h2, dpred, g.w3, g.b3])
    const dz2 = alloc(B * H)
    run(launch.linearGradXTanh(B, 1, H), [dpred, p.w3, h2, dz2])
    free(dpred, h2)
    run(launch.linearGradW(B, H, H), [h1, dz2, g.w2, g.b2])
    const dz1 = alloc(B * H)
    run(launch.linearGradXTanh(B, H, H), [dz2, p.w2, h1, dz1])
    free(dz2, h1)
    run(launch.linearGradW(B, H, IN), [xb, dz1, g.w1, g.b1])
    free(xb, dz1)
    // Adam, in place; it runs after every backward dispatch that reads the weights.
    for (const id of PARAMS) run(launch.adamInPlace(this.sizes[id], hyper), [p[id], g[id], p[`m_${id}`], p[`v_${id}`]])
    if (keepGradients) return { loss, gradients: g }
    free(...Object.values(g))
    return { loss }
  }

  /** The parameter and moment blocks by tensor id (`w1`, `m_w1`, `v_w1`, ...): a graph binds them in place. */
  get stateBlocks(): Readonly<Record<string, DeviceBlock>> {
    return this.blocks
  }

  /** Writes parameters and moments (a checkpoint restore). */
  writeState(state: State): void {
    for (const [key, block] of Object.entries(this.blocks)) block.write(state[key])
  }

  /** Reads the parameters and moments back (a checkpoint), once earlier work completed. */
  async readState(): Promise<State> {
    const state: State = {}
    for (const id of PARAMS) {
      for (const key of [id, `m_${id}`, `v_${id}`]) state[key] = await readF32(this.blocks[key], this.sizes[id])
    }
    return state
  }

  /** Frees the parameters and moments. */
  free(): void {
    for (const b of Object.values(this.blocks)) b.free()
  }
}
