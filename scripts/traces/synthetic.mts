// Writes bench/data/synthetic: eager alloc/free traces generated from the tensor shapes of
// architectures the recorded traces lack (attention over changing sequence lengths, U-Net skip
// connections, a training step, KV-cache decoding, a YOLO-style detector, an LSTM). Nothing runs:
// each model is a list of ops with output sizes (fp32), and the events follow the recorded
// traces' rule (an op allocates its outputs, then frees every tensor it used last; the request's
// output is freed when the request ends). A held-out check of the heap's segment policy, which
// was tuned on the recorded traces only. Usage: `npm run synthetic` (no model files needed).
//
// `npm run synthetic -- --seed N --out DIR` writes a fresh draw instead: every shape, single or
// mixed, drawn from the mixes' ranges with seed N. The committed set was looked at while the
// policy was tuned; a fresh draw was not, so it measures how the policy does on workloads nobody
// tuned it on (`cargo run -p wgalloc-core --release --example heap_replay DIR`).

import * as fs from 'node:fs'
import * as path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'

import { peakLiveBytes, type TraceEvent, traceText } from './trace-format.mjs'
import { type Random, rng } from './workloads.mjs'

const { values: args } = parseArgs({ options: { seed: { type: 'string' }, out: { type: 'string' } } })
if ((args.seed === undefined) !== (args.out === undefined)) throw new Error('a fresh draw takes both --seed N and --out DIR')
const FRESH_SEED = args.seed === undefined ? undefined : Number(args.seed)
if (FRESH_SEED !== undefined && !Number.isSafeInteger(FRESH_SEED)) throw new Error(`--seed takes an integer, got '${args.seed}'`)
const outDir = args.out === undefined ? path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../bench/data/synthetic') : path.resolve(args.out)
const SEED = 20241127
const F32 = 4

/** A model as ops over named tensors; `op` returns its outputs' names. */
class Program {
  private ops: { inputs: string[]; outputs: string[] }[] = []
  private sizes = new Map<string, number>()

  input(bytes: number): string {
    return this.op([], [bytes])[0]
  }

  op(inputs: string[], outputBytes: number[]): string[] {
    const outputs = outputBytes.map((bytes) => {
      const name = `t${this.sizes.size + 1}`
      this.sizes.set(name, bytes)
      return name
    })
    this.ops.push({ inputs, outputs })
    return outputs
  }

  /** One output. */
  one(inputs: string[], bytes: number): string {
    return this.op(inputs, [bytes])[0]
  }

  /** Eager events: outputs allocated, then tensors whose last use this op was freed; `output` at the end. */
  events(output: string, prefix: string): TraceEvent[] {
    const last = new Map<string, number>()
    this.ops.forEach(({ inputs, outputs }, i) => {
      for (const t of [...outputs, ...inputs]) last.set(t, i)
    })
    const events: TraceEvent[] = []
    this.ops.forEach(({ inputs, outputs }, i) => {
      for (const t of outputs) events.push({ op: 'alloc', id: prefix + t, size: this.sizes.get(t)! })
      for (const t of new Set([...inputs, ...outputs])) {
        if (last.get(t) === i && t !== output) events.push({ op: 'free', id: prefix + t })
      }
    })
    events.push({ op: 'free', id: prefix + output })
    return events
  }
}

/** A BERT-base encoder (12 layers, hidden 768, 12 heads, FFN 3072) over `seq` tokens; pooled output. */
function bert(p: Program, batch: number, seq: number): string {
  const [h, heads, ffn, bsh] = [768, 12, 3072, batch * seq * 768 * F32]
  let x = p.input(bsh)
  for (let layer = 0; layer < 12; layer++) {
    const qkv = p.one([x], 3 * bsh)
    const [q, k, v] = p.op([qkv], [bsh, bsh, bsh])
    const scores = p.one([q, k], batch * heads * seq * seq * F32)
    const probs = p.one([scores], batch * heads * seq * seq * F32)
    const context = p.one([probs, v], bsh)
    const projected = p.one([context], bsh)
    const normed = p.one([p.one([projected, x], bsh)], bsh)
    const up = p.one([normed], (bsh / h) * ffn)
    const down = p.one([p.one([up], (bsh / h) * ffn)], bsh)
    x = p.one([p.one([down, normed], bsh)], bsh)
  }
  return p.one([x], batch * h * F32)
}

/** A ViT-B/16 classifier at `image` pixels square. */
function vit(p: Program, batch: number, image: number): string {
  const seq = (image / 16) ** 2 + 1
  const bsh = batch * seq * 768 * F32
  let x = p.one([p.input(batch * 3 * image * image * F32)], bsh)
  for (let layer = 0; layer < 12; layer++) {
    const normed = p.one([x], bsh)
    const [q, k, v] = [p.one([normed], bsh), p.one([normed], bsh), p.one([normed], bsh)]
    const probs = p.one([p.one([q, k], batch * 12 * seq * seq * F32)], batch * 12 * seq * seq * F32)
    x = p.one([p.one([p.one([probs, v], bsh)], bsh), x], bsh)
    const up = p.one([p.one([x], bsh)], 4 * bsh)
    x = p.one([p.one([p.one([up], 4 * bsh)], bsh), x], bsh)
  }
  return p.one([x], batch * 1000 * F32)
}

/** A latent-diffusion-style U-Net: 4 levels of two residual blocks, skips concatenated on the way up. */
function unet(p: Program, batch: number, height: number, width: number): string {
  const base = 128
  let [c, h, w] = [base, height, width]
  let x = p.one([p.input(batch * 4 * height * width * F32)], batch * c * h * w * F32)
  const skips: { t: string; c: number }[] = []
  for (let level = 0; level < 4; level++) {
    for (let block = 0; block < 2; block++) {
      const bytes = batch * c * h * w * F32
      const conv = p.one([p.one([p.one([x], bytes)], bytes)], bytes)
      x = p.one([conv, x], bytes)
      skips.push({ t: x, c })
    }
    if (level < 3) {
      ;[h, w, c] = [h / 2, w / 2, Math.min(2 * c, 512)]
      x = p.one([x], batch * c * h * w * F32)
    }
  }
  for (let level = 0; level < 4; level++) {
    for (let block = 0; block < 2; block++) {
      const skip = skips.pop()!
      const joined = batch * (c + skip.c) * h * w * F32
      const normed = p.one([p.one([x, skip.t], joined)], joined)
      x = p.one([p.one([normed], batch * c * h * w * F32)], batch * c * h * w * F32)
    }
    if (level < 3) {
      ;[h, w, c] = [h * 2, w * 2, Math.max(c / 2, base)]
      x = p.one([x], batch * c * h * w * F32)
    }
  }
  return p.one([x], batch * 4 * height * width * F32)
}

/** A ResNet-50-sized training step: the forward pass keeps every activation, the backward pass frees them in reverse. */
function resnetTrainingStep(p: Program, batch: number): string {
  let x = p.input(batch * 3 * 224 * 224 * F32)
  const saved = [{ t: x, bytes: batch * 3 * 224 * 224 * F32 }]
  for (const [c, hw, blocks] of [
    [64, 112, 1],
    [256, 56, 3],
    [512, 28, 4],
    [1024, 14, 6],
    [2048, 7, 3],
  ]) {
    for (let i = 0; i < 3 * blocks; i++) {
      const bytes = batch * c * hw * hw * F32
      x = p.one([x], bytes)
      saved.push({ t: x, bytes })
    }
  }
  let grad = p.one([p.one([x], F32)], batch * 2048 * 7 * 7 * F32)
  for (const a of saved.slice(0, -1).reverse()) grad = p.one([grad, a.t], a.bytes)
  return grad
}

/** GPT-2-small decoding: a prompt pass, then `steps` tokens, each layer's K and V caches grown by a concatenation. */
function gptDecode(p: Program, batch: number, prompt: number, steps: number): string {
  const h = 768
  const caches: [string, string][] = []
  let x = p.input(batch * prompt * h * F32)
  for (let layer = 0; layer < 12; layer++) {
    const [k, v] = [p.one([x], batch * prompt * h * F32), p.one([x], batch * prompt * h * F32)]
    caches.push([k, v])
    const probs = p.one([p.one([x, k], batch * 12 * prompt * prompt * F32)], batch * 12 * prompt * prompt * F32)
    const up = p.one([p.one([probs, v], batch * prompt * h * F32)], 4 * batch * prompt * h * F32)
    x = p.one([up, x], batch * prompt * h * F32)
  }
  for (let t = prompt + 1; t <= prompt + steps; t++) {
    x = p.one([x], batch * h * F32)
    for (let layer = 0; layer < 12; layer++) {
      const [q, kNew, vNew] = [p.one([x], batch * h * F32), p.one([x], batch * h * F32), p.one([x], batch * h * F32)]
      const k = p.one([caches[layer][0], kNew], batch * t * h * F32)
      const v = p.one([caches[layer][1], vNew], batch * t * h * F32)
      caches[layer] = [k, v]
      const probs = p.one([p.one([q, k], batch * 12 * t * F32)], batch * 12 * t * F32)
      x = p.one([p.one([p.one([probs, v], batch * h * F32)], 4 * batch * h * F32), x], batch * h * F32)
    }
  }
  return p.one([x, ...caches.flat()], batch * h * F32)
}

/** A YOLO-style detector: a CSP backbone, then a top-down feature pyramid over its last three levels. */
function yolo(p: Program, batch: number, height: number, width: number): string {
  let [c, h, w] = [32, height / 2, width / 2]
  let x = p.one([p.input(batch * 3 * height * width * F32)], batch * c * h * w * F32)
  const levels: { t: string; c: number; h: number; w: number }[] = []
  for (const [level, blocks] of [1, 2, 3, 3, 1].entries()) {
    ;[c, h, w] = [2 * c, Math.floor(h / 2), Math.floor(w / 2)]
    x = p.one([x], batch * c * h * w * F32)
    for (let i = 0; i < blocks; i++) {
      const half = p.one([x], (batch * c * h * w * F32) / 2)
      const inner = p.one([p.one([half], (batch * c * h * w * F32) / 2), x], batch * c * h * w * F32)
      x = p.one([p.one([inner, half], (3 * batch * c * h * w * F32) / 2)], batch * c * h * w * F32)
    }
    if (level >= 2) levels.push({ t: x, c, h, w })
  }
  let top = levels.pop()!
  const heads: string[] = []
  for (let f = levels.pop(); f; f = levels.pop()) {
    const up = p.one([top.t], batch * top.c * f.h * f.w * F32)
    const merged = p.one([p.one([up, f.t], batch * (top.c + f.c) * f.h * f.w * F32)], batch * f.c * f.h * f.w * F32)
    top = { ...f, t: merged }
    heads.push(p.one([merged], batch * 255 * f.h * f.w * F32))
  }
  return p.one(heads, batch * 25200 * 85 * F32)
}

/** An LSTM layer (hidden 1024) over `steps` time steps; its outputs concatenated at the end. */
function lstm(p: Program, batch: number, steps: number): string {
  const h = 1024
  const x = p.input(batch * steps * h * F32)
  let [hidden, cell] = [p.input(batch * h * F32), p.input(batch * h * F32)]
  const outputs: string[] = []
  for (let t = 0; t < steps; t++) {
    const gates = p.one([x, hidden], 4 * batch * h * F32)
    cell = p.one([gates, cell], batch * h * F32)
    hidden = p.one([gates, cell], batch * h * F32)
    outputs.push(hidden)
  }
  return p.one([...outputs, cell], batch * steps * h * F32)
}

type Model = (p: Program, ...shape: number[]) => string

const MODELS: Record<string, { build: Model; kind: string; shape: string }> = {
  bert: { build: bert as Model, kind: 'BERT-base encoder', shape: 'batch x tokens' },
  vit: { build: vit as Model, kind: 'ViT-B/16 image classifier', shape: 'batch x pixels (square)' },
  unet: { build: unet as Model, kind: 'latent-diffusion-style U-Net', shape: 'batch x latent height x width' },
  'resnet-train': { build: resnetTrainingStep as Model, kind: 'ResNet-50-sized training step', shape: 'batch' },
  'gpt-decode': { build: gptDecode as Model, kind: 'GPT-2-small decoding with a KV cache', shape: 'batch x prompt x steps' },
  yolo: { build: yolo as Model, kind: 'YOLO-style detector with a feature pyramid', shape: 'batch x height x width' },
  lstm: { build: lstm as Model, kind: 'LSTM layer', shape: 'batch x steps' },
}

function write(name: string, model: string, requests: number[][], trace = requests.length > 1 ? 'serving-mix' : 'single') {
  const { build, kind, shape } = MODELS[model]
  const events = requests.flatMap((s, k) => {
    const p = new Program()
    return p.events(build(p, ...s), requests.length > 1 ? `r${k}:` : '')
  })
  const doc = {
    source: `synthetic:${model}`,
    license: 'MIT',
    model,
    kind,
    runtime: 'none: generated from the architecture tensor shapes by scripts/traces/synthetic.mts (fp32)',
    trace,
    inputShapes: requests.map((s) => ({ [shape]: s })),
    requests: requests.length,
  }
  fs.writeFileSync(path.join(outDir, `${name}.trace.json`), traceText(doc, events))
  console.log(`${name}\t${requests.length} req\t${events.length} events\tpeak ${peakLiveBytes(events)} B`)
}

const pick = (random: Random, options: number[]) => options[Math.floor(random() * options.length)]
const between = (random: Random, lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1))

fs.mkdirSync(outDir, { recursive: true })
const singles: [string, number[][]][] = [
  [
    'bert',
    [
      [1, 128],
      [8, 128],
      [1, 512],
      [4, 384],
      [32, 64],
    ],
  ],
  [
    'vit',
    [
      [1, 224],
      [8, 224],
      [2, 384],
    ],
  ],
  [
    'unet',
    [
      [1, 64, 64],
      [2, 96, 96],
      [1, 128, 128],
    ],
  ],
  ['resnet-train', [[1], [8], [32]]],
  [
    'gpt-decode',
    [
      [1, 128, 64],
      [4, 256, 32],
    ],
  ],
  [
    'yolo',
    [
      [1, 640, 640],
      [1, 1280, 736],
      [4, 640, 640],
    ],
  ],
  [
    'lstm',
    [
      [16, 200],
      [64, 100],
    ],
  ],
]
const random = rng(FRESH_SEED ?? SEED)
const mixes: [string, number, () => number[]][] = [
  ['bert', 50, () => [between(random, 1, 8), pick(random, [16, 32, 64, 96, 128, 192, 256, 384, 512])]],
  ['vit', 40, () => [between(random, 1, 8), pick(random, [224, 256, 320, 384])]],
  ['unet', 30, () => [between(random, 1, 2), pick(random, [32, 48, 64, 80, 96]), pick(random, [32, 48, 64, 80, 96])]],
  ['resnet-train', 10, () => [pick(random, [4, 8, 16, 32])]],
  ['gpt-decode', 20, () => [between(random, 1, 4), pick(random, [32, 64, 128, 256]), 16]],
  ['yolo', 40, () => [between(random, 1, 2), pick(random, [320, 416, 512, 640, 768]), pick(random, [320, 416, 512, 640, 768])]],
]
if (FRESH_SEED === undefined) {
  for (const [model, shapes] of singles) for (const s of shapes) write(`${model}.${s.join('x')}`, model, [s])
} else {
  // Three singles per model, drawn from the ranges its mix draws from (an LSTM has no mix).
  const lstmShape = () => [pick(random, [8, 16, 32, 64]), pick(random, [50, 100, 200])]
  const written = new Set<string>()
  for (const [model, , draw] of [...mixes, ['lstm', 0, lstmShape] as const]) {
    for (let k = 0; k < 3; k++) {
      const shape = draw()
      const name = `${model}.${shape.join('x')}`
      if (!written.has(name)) write(name, model, [shape])
      written.add(name)
    }
  }
}
for (const [model, count, draw] of mixes) write(`${model}.mix`, model, Array.from({ length: count }, draw))
// A training loop: the same step again and again.
const stepBatch = FRESH_SEED === undefined ? 32 : pick(random, [4, 8, 16, 32])
write(
  `resnet-train.steps${stepBatch}`,
  'resnet-train',
  Array.from({ length: 10 }, () => [stepBatch]),
  'training-steps',
)
