// Generates bench/data/traces/*.trace.json for the large real-model workloads: single requests
// at fixed input shapes, a 50-request serving mix of changing shapes per model, and a pipeline
// mixing two models. Dev-only (see README in bench/data/traces). Usage:
//   cd scripts/traces && npm install && npm run generate [-- trace-name-prefix ...]
// (npm run build, then node dist/generate.mjs [trace-name-prefix ...], skips the PyPI fetch.)

import fs from 'node:fs'
import path from 'node:path'
import { type ProfiledRun, profileRun } from './profile-run.mjs'
import { eagerEvents } from './eager-events.mjs'
import { peakLiveBytes, type TraceEvent, type TraceFields, type TraceSource, traceText } from './trace-format.mjs'
import { MODELS, SINGLES, MIXES, PIPELINES, SEED, PYPI_DIR, PACKAGE_DIR, type MixSpec, type PipelineSpec, type Shapes, rng } from './workloads.mjs'

/** A model's file and the trace fields that describe it. */
interface ModelInfo {
  key: string
  file: string
  meta: TraceSource
}

/** The fields of a package.json the generator reads. */
interface PackageJson {
  version: string
  license: string
}

const here = PACKAGE_DIR
const outDir = path.resolve(here, '../../bench/data/traces')
const ORT_VERSION = (JSON.parse(fs.readFileSync(path.join(here, 'node_modules/onnxruntime-node/package.json'), 'utf8')) as PackageJson).version
const RUNTIME = `onnxruntime-node@${ORT_VERSION} CPU, graphOptimizationLevel 'all', sequential execution`

// npm models live in node_modules; PyPI models in the wheel that fetch-pypi-models.mts unpacked.
function modelInfo(key: string): ModelInfo {
  const m = MODELS[key]
  let file: string
  let source: string
  let license: string
  if (m.pypi) {
    file = path.join(here, PYPI_DIR, `${m.pypi.name}-${m.pypi.version}`, m.path)
    source = `pypi:${m.pypi.name}@${m.pypi.version}/${m.path}`
    license = m.pypi.license
    if (!fs.existsSync(file)) throw new Error(`${file} is missing: run npm run fetch-pypi-models first`)
  } else {
    const pkgDir = path.join(here, 'node_modules', m.package) // package exports may hide package.json
    const pkgJson = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8')) as PackageJson
    file = path.join(pkgDir, m.path)
    source = `${m.package}@${pkgJson.version}/${m.path}`
    license = pkgJson.license
  }
  return {
    key,
    file,
    meta: { source, license, model: key, kind: m.kind, modelFileBytes: fs.statSync(file).size, runtime: RUNTIME },
  }
}

// One profiled run per distinct (model, shape); requests with equal shapes reuse its records.
const runCache = new Map<string, ProfiledRun>()
async function run(key: string, shapes: Shapes): Promise<ProfiledRun> {
  const id = `${key}|${JSON.stringify(shapes)}`
  if (!runCache.has(id)) {
    const info = modelInfo(key)
    process.stderr.write(`  run ${key} ${JSON.stringify(shapes)}\n`)
    runCache.set(id, await profileRun(info.file, shapes, SEED))
  }
  return runCache.get(id)!
}

const shapeName = (shapes: Shapes) =>
  Object.values(shapes)
    .map((d) => d.join('x'))
    .join('-')

function writeTrace(name: string, fields: TraceFields, events: TraceEvent[]) {
  const text = traceText(fields, events)
  const file = path.join(outDir, `${name}.trace.json`)
  fs.writeFileSync(file, text)
  console.log(
    `${path.basename(file)}\t${fields.trace}\t${fields.requests} req\t${events.length} events\t` + `peak ${peakLiveBytes(events)} B\t${text.length} B`,
  )
}

async function single(key: string, shapes: Shapes) {
  const { meta } = modelInfo(key)
  const events = eagerEvents(await run(key, shapes))
  writeTrace(`${key}.${shapeName(shapes)}`, { ...meta, trace: 'single', inputShapes: [shapes], requests: 1 }, events)
}

async function mix(key: string, spec: MixSpec) {
  const { meta } = modelInfo(key)
  const random = rng(SEED)
  const requests = Array.from({ length: spec.requests }, () => spec.draw(random))
  const events: TraceEvent[] = []
  for (const [k, shapes] of requests.entries()) events.push(...eagerEvents(await run(key, shapes), `r${k}:`))
  const distinctShapes = new Set(requests.map((s) => JSON.stringify(s))).size
  writeTrace(
    `${key}.mix`,
    {
      ...meta,
      trace: 'serving-mix',
      seed: SEED,
      mix: spec.description,
      requests: requests.length,
      distinctShapes,
      inputShapes: requests,
    },
    events,
  )
}

async function pipeline(name: string, spec: PipelineSpec) {
  const infos = spec.models.map(modelInfo)
  const random = rng(SEED)
  const requests = Array.from({ length: spec.requests }, () => spec.draw(random))
  const events: TraceEvent[] = []
  for (const [k, stages] of requests.entries()) {
    for (const [j, stage] of stages.entries()) {
      events.push(...eagerEvents(await run(stage.model, stage.shapes), `r${k}:${stage.model}#${j}:`))
    }
  }
  const distinctShapes = new Set(requests.flat().map((s) => JSON.stringify(s))).size
  writeTrace(
    name,
    {
      source: infos.map((i) => i.meta.source).join(' + '),
      license: [...new Set(infos.map((i) => i.meta.license))].join(' + '),
      model: name,
      kind: spec.kind,
      modelFileBytes: infos.reduce((a, i) => a + i.meta.modelFileBytes, 0),
      runtime: RUNTIME,
      trace: 'pipeline',
      seed: SEED,
      mix: spec.description,
      requests: requests.length,
      distinctShapes,
      inputShapes: requests.map((stages) => stages.map((s) => ({ model: s.model, ...s.shapes }))),
    },
    events,
  )
}

const filters = process.argv.slice(2)
const wanted = (name: string) => filters.length === 0 || filters.some((f) => name.startsWith(f))
fs.mkdirSync(outDir, { recursive: true })
for (const [key, shapesList] of Object.entries(SINGLES)) {
  for (const shapes of shapesList) if (wanted(`${key}.${shapeName(shapes)}`)) await single(key, shapes)
}
for (const [key, spec] of Object.entries(MIXES)) if (wanted(`${key}.mix`)) await mix(key, spec)
for (const [name, spec] of Object.entries(PIPELINES)) if (wanted(name)) await pipeline(name, spec)
