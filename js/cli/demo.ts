// `wgalloc demo [--seq 64] [--dim 128] [--heads 4] [--ffn 4] [--runs 10] [--strategy best]
//   [--out DIR] [--json]`: a transformer encoder block, eager vs planned, against a CPU
// reference (see js/demo/). It writes plan.svg and trace.json into DIR (default wgalloc-demo/).
import { join } from 'node:path'
import { runDemo } from '../demo/index.js'
import { WgallocError, messageOf } from '../errors.js'
import { parseCommand, positiveInt, str } from './command.js'
import { bytes, table } from './table.js'
import { makeDirs } from '../internal/make-dirs.js'

const USAGE = `usage: wgalloc demo [--seq 64] [--dim 128] [--heads 4] [--ffn 4] [--runs 10] [--strategy best] [--out DIR] [--json]

  --out DIR       folder for plan.svg and trace.json (default: wgalloc-demo, created if missing)
  --svg FILE      write the plan picture here instead
  --trace FILE    write the profiled run here instead`

type Figures = Awaited<ReturnType<typeof runDemo>>

const ms = (x: number) => `${x.toFixed(2)} ms`
const times = (x: number) => `${x.toFixed(2)}x`

function report(f: Figures): string {
  const m = f.model
  const p = f.planning
  const mem = f.memory
  const a = f.accuracy
  const out: string[] = []
  out.push(`transformer encoder block, f32: seq ${m.seq}, dim ${m.dim}, heads ${m.heads} (head dim ${m.headDim}), ffn ${m.ffn}x (hidden ${m.hidden})`)
  out.push(`${m.ops} ops, ${m.intermediates} intermediate tensors + ${m.views} view, params ${bytes(m.paramBytes)}; ${f.device.adapter} on ${f.device.backend}`)

  out.push(
    '',
    `1. planning the executor's ${p.records} usage records (alignment ${p.alignment} B; naive sum ${bytes(p.naiveBytes)}, lower bound ${bytes(p.lowerBound)})`,
    '',
  )
  out.push(
    table(
      ['strategy', 'slab bytes', 'slab', 'vs lower bound', 'vs naive', 'optimal', 'time ms'],
      p.strategies.map((s) => [
        s.strategy,
        s.slabSize,
        bytes(s.slabSize),
        Number(s.ratio.toFixed(4)),
        Number(s.ofNaive.toFixed(3)),
        s.optimal ? 'yes' : 'no',
        Number(s.timeMs.toFixed(2)),
      ]),
    ),
  )

  out.push('', `2. device memory: eager (heap block per tensor, freed after last use) vs planned (${f.plan.strategy} slab + params)`, '')
  out.push(
    table(
      ['figure', 'bytes', ''],
      [
        ['eager peak reserved (heap segments)', mem.eagerPeakReservedBytes, bytes(mem.eagerPeakReservedBytes)],
        ['eager peak allocated (blocks)', mem.eagerPeakAllocatedBytes, bytes(mem.eagerPeakAllocatedBytes)],
        ['eager peak live activations', mem.eagerPeakActivationBytes, bytes(mem.eagerPeakActivationBytes)],
        ['planned slab (activations)', mem.plannedSlabBytes, bytes(mem.plannedSlabBytes)],
        ['planned params (constant region)', mem.plannedConstantBytes, bytes(mem.plannedConstantBytes)],
        ['planned device bytes', mem.plannedDeviceBytes, bytes(mem.plannedDeviceBytes)],
      ],
    ),
  )
  out.push(`planned device bytes = ${(mem.plannedDeviceBytes / mem.eagerPeakReservedBytes).toFixed(3)} x eager peak reserved`)
  out.push('(eager also frees each weight after its last use; the executor keeps its weights resident for the next run)')

  out.push('', `3. run time, median of ${f.time.runs} runs each (upload, dispatch, read back)`, '')
  out.push(
    table(
      ['mode', 'median'],
      [
        ['eager', ms(f.time.eagerMs)],
        ['planned', ms(f.time.plannedMs)],
      ],
    ),
  )
  out.push(`planned is ${times(f.time.speedup)} as fast as eager`)

  out.push('', '4. accuracy against the CPU reference (float64 loops in JS)', '')
  out.push(
    table(
      ['check', 'result'],
      [
        ['max abs error (planned vs CPU)', `${a.maxAbsError.toExponential(2)} (max |reference| ${a.maxAbsReference.toFixed(3)})`],
        ['tolerance 1e-3 x max(1, max |reference|)', `${a.tolerance.toExponential(2)}: ${a.ok ? 'ok' : 'FAILED'}`],
        ['eager == planned', a.eagerEqualsPlanned ? 'yes, bit for bit' : `NO (max abs diff ${a.eagerMaxAbsDiff.toExponential(2)})`],
        ['plan checked on the device', a.planCheckedOnDevice ? 'yes (poisoned outputs, live tensors unchanged)' : 'no'],
      ],
    ),
  )

  out.push(
    '',
    f.svg ? `5. wrote the ${f.plan.strategy} plan (${bytes(f.plan.slabSize)}, ${f.plan.ratio.toFixed(4)} x lower bound) to ${f.svg}` : '5. no SVG written',
  )
  if (f.trace) out.push(`   wrote a profiled eager + planned run to ${f.trace} (open in ui.perfetto.dev or chrome://tracing)`)
  out.push('')
  for (const path of [f.svg, f.trace]) if (path) out.push(`wrote ${path}`)
  out.push(`\ndone in ${(f.wallMs / 1000).toFixed(1)} s`)
  return out.join('\n')
}

export default async function demo(argv: string[]): Promise<number> {
  const { values, exit } = parseCommand(argv, {
    usage: USAGE,
    options: {
      seq: { type: 'string', default: '64' },
      dim: { type: 'string', default: '128' },
      heads: { type: 'string', default: '4' },
      ffn: { type: 'string', default: '4' },
      runs: { type: 'string', default: '10' },
      strategy: { type: 'string', default: 'best' },
      out: { type: 'string', default: 'wgalloc-demo' },
      svg: { type: 'string' },
      trace: { type: 'string' },
      json: { type: 'boolean', default: false },
    },
  })
  if (exit !== undefined) return exit
  const out = str(values, 'out') ?? 'wgalloc-demo'
  const svg = str(values, 'svg')
  const trace = str(values, 'trace')
  if (svg === undefined || trace === undefined) {
    try {
      makeDirs(out)
    } catch (err) {
      throw new WgallocError('IO_ERROR', `cannot create ${out}: ${messageOf(err)}`, { cause: err })
    }
  }
  let figures: Figures
  try {
    figures = await runDemo({
      seq: positiveInt(values, 'seq'),
      dim: positiveInt(values, 'dim'),
      heads: positiveInt(values, 'heads'),
      ffn: positiveInt(values, 'ffn'),
      runs: positiveInt(values, 'runs'),
      strategy: str(values, 'strategy'),
      svg: svg ?? join(out, 'plan.svg'),
      trace: trace ?? join(out, 'trace.json'),
    })
  } catch (err) {
    // Option errors from the demo's own checks read like the other CLI errors.
    throw err instanceof RangeError && WgallocError.is(err.cause, 'INVALID_ARGUMENT') ? err.cause : err
  }
  if (values.json) {
    console.log(JSON.stringify(figures))
    // stdout is the figures' JSON: the files written are named on stderr.
    for (const path of [figures.svg, figures.trace]) if (path) console.error(`wrote ${path}`)
  } else {
    console.log(report(figures))
  }
  return figures.accuracy.ok && figures.accuracy.eagerEqualsPlanned ? 0 : 1
}
