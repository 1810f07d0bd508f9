// `wgalloc info [--json] [--backend b] [--adapter name]`: what device wgalloc opens.
import { type Backend, Gpu } from '../gpu.js'
import { parseCommand, str } from './command.js'
import { bytes, table } from './table.js'

export default async function info(argv: string[]): Promise<number> {
  const { values, exit } = parseCommand(argv, {
    usage: 'usage: wgalloc info [--json] [--backend vulkan|metal|dx12] [--adapter NAME] [--fallback]',
    options: {
      json: { type: 'boolean', default: false },
      backend: { type: 'string', multiple: true },
      adapter: { type: 'string' },
      fallback: { type: 'boolean', default: false },
    },
  })
  if (exit !== undefined) return exit
  const gpu = await Gpu.request({
    backends: values.backend as Backend[] | undefined,
    adapterName: str(values, 'adapter'),
    forceFallbackAdapter: values.fallback === true,
  })
  const info = gpu.info
  const budget = gpu.memoryBudget
  if (values.json) {
    console.log(JSON.stringify({ ...info, memoryBudget: budget }, null, 2))
    gpu.destroy()
    return 0
  }
  const rows = [
    ['adapter', info.adapterName],
    ['backend', info.backend],
    ['device type', info.deviceType],
    ['driver', `${info.driver} ${info.driverInfo}`.trim()],
    ['features', info.features.join(', ') || '(none)'],
    ['max buffer size', bytes(info.maxBufferSize)],
    ['max storage binding', bytes(info.maxStorageBufferBindingSize)],
    ['max uniform binding', bytes(info.maxUniformBufferBindingSize)],
    ['storage offset alignment', `${info.minStorageBufferOffsetAlignment} B`],
    ['uniform offset alignment', `${info.minUniformBufferOffsetAlignment} B`],
    ['timestamp period', info.timestampPeriodNs ? `${info.timestampPeriodNs} ns/tick` : 'n/a'],
    ['memory budget', `${bytes(budget.bytes)} (${budget.source})`],
  ]
  console.log(table(['property', 'value'], rows))
  gpu.destroy()
  return 0
}
