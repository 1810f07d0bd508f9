// Minimal ONNX protobuf reader: just the node list and graph inputs/outputs of a model's
// main graph, which is all the trace generator needs (no weights are decoded).
// Field numbers from onnx.proto: ModelProto.graph = 7; GraphProto.node = 1, input = 11,
// output = 12; NodeProto.input = 1, output = 2, name = 3, op_type = 4, domain = 7;
// ValueInfoProto.name = 1.

/** A node of the graph: its name, op type and domain, and its input and output tensor names. */
export interface OnnxNode {
  name: string
  type: string
  domain: string
  inputs: string[]
  outputs: string[]
}

/** A model's main graph: its nodes in graph order and the names of its inputs and outputs. */
export interface OnnxGraph {
  nodes: OnnxNode[]
  inputs: string[]
  outputs: string[]
}

/** A protobuf field read by `fields`: a varint's value, or where a length-delimited field's bytes lie. */
type Field = { field: number; wire: 0; value: bigint } | LengthDelimited
type LengthDelimited = { field: number; wire: 2; start: number; end: number }

function* fields(buf: Buffer, start = 0, end = buf.length): Generator<Field> {
  let pos = start
  const varint = () => {
    let value = 0n
    let shift = 0n
    for (;;) {
      const byte = buf[pos++]
      value |= BigInt(byte & 0x7f) << shift
      if (byte < 0x80) return value
      shift += 7n
    }
  }
  while (pos < end) {
    const key = Number(varint())
    const field = key >>> 3
    const wire = key & 7
    if (wire === 0) {
      yield { field, wire, value: varint() }
    } else if (wire === 1) {
      pos += 8
    } else if (wire === 2) {
      const len = Number(varint())
      yield { field, wire, start: pos, end: pos + len }
      pos += len
    } else if (wire === 5) {
      pos += 4
    } else {
      throw new Error(`unsupported protobuf wire type ${wire} at byte ${pos}`)
    }
  }
}

const text = (buf: Buffer, f: LengthDelimited) => buf.toString('utf8', f.start, f.end)

function readNode(buf: Buffer, f: LengthDelimited): OnnxNode {
  const node: OnnxNode = { name: '', type: '', domain: '', inputs: [], outputs: [] }
  for (const g of fields(buf, f.start, f.end)) {
    if (g.wire !== 2) continue
    if (g.field === 1) node.inputs.push(text(buf, g))
    else if (g.field === 2) node.outputs.push(text(buf, g))
    else if (g.field === 3) node.name = text(buf, g)
    else if (g.field === 4) node.type = text(buf, g)
    else if (g.field === 7) node.domain = text(buf, g)
  }
  return node
}

function readValueInfoName(buf: Buffer, f: LengthDelimited): string {
  for (const g of fields(buf, f.start, f.end)) if (g.field === 1 && g.wire === 2) return text(buf, g)
  return ''
}

/** Reads the main graph of an ONNX model file: `{ nodes, inputs, outputs }`. */
export function readOnnxGraph(buf: Buffer): OnnxGraph {
  for (const f of fields(buf)) {
    if (f.field !== 7 || f.wire !== 2) continue
    const graph: OnnxGraph = { nodes: [], inputs: [], outputs: [] }
    for (const g of fields(buf, f.start, f.end)) {
      if (g.wire !== 2) continue
      if (g.field === 1) graph.nodes.push(readNode(buf, g))
      else if (g.field === 11) graph.inputs.push(readValueInfoName(buf, g))
      else if (g.field === 12) graph.outputs.push(readValueInfoName(buf, g))
    }
    return graph
  }
  throw new Error('no graph in ONNX model')
}
