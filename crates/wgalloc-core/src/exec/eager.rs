//! Eager execution for comparison: each op's outputs come from the heap when the
//! op runs and go back after their last use, as an eager runtime does. Each op is
//! its own submission, so a freed block waits (in the heap's pending list) only
//! for the op that last used it.

use std::collections::HashMap;

use super::bind::{self, binding_size, Range, Step};
use super::executor::{check_inputs, RunOutput};
use super::graph::{ExecGraph, TensorKind};
use super::observer::{Observation, ObservedKind};
use crate::context::Gpu;
use crate::error::{Error, Result};
use crate::heap::{BlockBinding, DeviceBlock, Usage};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EagerOptions {
    pub observe: bool,
}

impl Gpu {
    /// Runs `graph` eagerly on `inputs` with `params` (one for every param tensor).
    pub async fn run_eager(
        &self,
        graph: &ExecGraph,
        inputs: &HashMap<String, Vec<u8>>,
        params: &HashMap<String, Vec<u8>>,
        options: EagerOptions,
    ) -> Result<RunOutput> {
        self.check_alive()?;
        if let Some(t) = graph.externals().next() {
            return Err(Error::invalid(
                format!("graph.tensors '{}'.kind", t.id),
                "no external tensor in an eager run (it binds host data only)",
                "'external'",
            )
            .with_hint("compile the graph (gpu.compile) and pass a DeviceBlock for the external tensor"));
        }
        check_inputs(graph, inputs, &HashMap::new())?;
        super::executor::check_binding_limit(graph, self.limits().max_storage_buffer_binding_size)?;
        super::executor::check_params_given(graph, params, None)?;
        let heap = self.heap()?;
        let n = graph.ops.len();
        let mut obs = options.observe.then(|| Observation { events: Vec::new(), ops: n });
        let mut blocks: Vec<Option<DeviceBlock>> = (0..graph.tensors.len()).map(|_| None).collect();
        let alloc =
            |i: usize, op: usize, blocks: &mut Vec<Option<DeviceBlock>>, obs: &mut Option<Observation>| -> Result<()> {
                let t = &graph.tensors[i];
                let block = heap.malloc(binding_size(t.size)?, Usage::Device)?;
                if let Some(o) = obs.as_mut() {
                    let op_name = graph.ops.get(op).map_or("", |o| o.name.as_str());
                    o.record(op, op_name, ObservedKind::Alloc, &t.id, t.size, block.id(), block.offset()?);
                }
                blocks[i] = Some(block);
                Ok(())
            };
        // Inputs and params exist before the first op.
        for (i, t) in graph.tensors.iter().enumerate() {
            if graph.root[i] != i {
                continue;
            }
            let bytes = match t.kind {
                TensorKind::Input => inputs[&t.id].clone(),
                TensorKind::Param => params[&t.id].clone(),
                _ => continue,
            };
            if bytes.len() as u64 != t.size {
                return Err(Error::invalid(
                    format!("params.{}", t.id),
                    format!("{} bytes (the param needs them)", t.size),
                    format!("{} bytes", bytes.len()),
                ));
            }
            alloc(i, 0, &mut blocks, &mut obs)?;
            let mut padded = bytes;
            padded.resize(binding_size(t.size)? as usize, 0);
            blocks[i].as_ref().expect("just allocated").write(&padded, 0)?;
        }
        let block_of = |blocks: &Vec<Option<DeviceBlock>>, id: &str| -> Result<(BlockBinding, u64)> {
            let i = graph.index[id];
            let b =
                blocks[graph.root[i]].as_ref().ok_or_else(|| Error::Internal(format!("tensor '{id}' has no block")))?;
            Ok((b.binding()?, binding_size(graph.tensors[i].size)?))
        };
        let mut stream = self.create_stream()?;
        let mut uniforms = Vec::new();
        for (k, op) in graph.ops.iter().enumerate() {
            for id in &op.outputs {
                let r = graph.root[graph.index[id]];
                if blocks[r].is_none() {
                    alloc(r, k, &mut blocks, &mut obs)?;
                }
            }
            let workspace =
                if op.workspace > 0 { Some(heap.malloc(binding_size(op.workspace)?, Usage::Device)?) } else { None };
            // The op's blocks stay where they are until its submission.
            let mut bound = Vec::new();
            let mut ws = None;
            if let Some(pipeline) = bind::op_pipeline(self, graph, op)? {
                bind::check_dims_uniform(&pipeline, &[], &format!("op '{}' (eager run)", op.name))?;
                bound =
                    op.inputs.iter().chain(&op.outputs).map(|id| block_of(&blocks, id)).collect::<Result<Vec<_>>>()?;
                let mut storage: Vec<Range> = bound.iter().map(|(at, size)| Range::at(at, 0, *size)).collect();
                ws = workspace.as_ref().map(DeviceBlock::binding).transpose()?;
                if let Some(at) = &ws {
                    storage.push(Range::at(at, 0, binding_size(op.workspace)?));
                }
                let uniform = bind::op_uniform(self, op, &pipeline)?;
                let bind_group = bind::bind_group(self, &op.name, &pipeline, &storage, uniform.as_ref())?;
                bind::encode(
                    &mut stream,
                    &[&Step { pipeline, bind_group, dispatch: op.dispatch, name: op.name.clone(), dims: None }],
                )?;
                uniforms.extend(uniform);
            }
            let event = stream.submit()?;
            drop((bound, ws));
            // Everything this op touched is in use until its submission completes.
            let touched = op.inputs.iter().chain(&op.outputs).map(|id| graph.root[graph.index[id]]);
            for r in touched {
                if let Some(b) = &blocks[r] {
                    heap.record_use(b.id(), event.seq());
                }
            }
            if let Some(ws) = workspace {
                heap.record_use(ws.id(), event.seq());
                ws.free()?;
            }
            // Free what this op used last; what lives to the last op (outputs and
            // their bases) stays until the outputs are read.
            for r in (0..graph.tensors.len()).filter(|&r| graph.root[r] == r && graph.last[r] == k && k + 1 < n) {
                if let Some(b) = blocks[r].take() {
                    if let Some(o) = obs.as_mut() {
                        o.record(
                            k,
                            &op.name,
                            ObservedKind::Free,
                            &graph.tensors[r].id,
                            graph.tensors[r].size,
                            b.id(),
                            b.offset()?,
                        );
                    }
                    b.free()?;
                }
            }
        }
        // Every output's copy is submitted before any is awaited, so the waits overlap.
        let mut reads = Vec::new();
        for t in graph.outputs() {
            let i = graph.index[&t.id];
            let b = blocks[graph.root[i]]
                .as_ref()
                .ok_or_else(|| Error::Internal(format!("output '{}' has no block", t.id)))?;
            reads.push((t.id.clone(), b.start_read(0, t.size)?));
        }
        let mut outputs = Vec::with_capacity(reads.len());
        for (id, read) in reads {
            outputs.push((id, read.finish().await?));
        }
        for uniform in uniforms {
            uniform.free()?;
        }
        for b in blocks.into_iter().flatten() {
            b.free()?;
        }
        Ok(RunOutput { outputs, observation: obs, ..Default::default() })
    }
}
