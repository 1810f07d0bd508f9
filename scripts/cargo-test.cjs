'use strict'
// `cargo test --workspace` for the host target, named explicitly: `napi build`
// passes `--target`, so without it cargo would build every dependency a second
// time under target/debug.
const { spawnSync, execFileSync } = require('node:child_process')

const host = /host: (\S+)/.exec(execFileSync('rustc', ['-vV'], { encoding: 'utf8' }))[1]
const r = spawnSync('cargo', ['test', '--workspace', '--target', host, ...process.argv.slice(2)], { stdio: 'inherit' })
process.exit(r.status ?? 1)
