// Every benchmark suite, in the order `npm run bench` runs them.
import type { Suite } from '../harness.js'
import { suites as exec } from './exec.js'
import { suites as heap } from './heap.js'
import { suites as host } from './host.js'
import { suites as kv } from './kv.js'
import { suites as planner } from './planner.js'
import { suites as profiler } from './profiler.js'
import { suites as serving } from './serving.js'
import { suites as transfer } from './transfer.js'

export const SUITES: Suite[] = [exec, heap, host, kv, planner, profiler, serving, transfer].flat()
