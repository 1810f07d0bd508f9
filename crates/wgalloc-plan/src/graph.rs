//! Usage records from a tensor graph, as AITemplate's memory planning builds them:
//! params and graph inputs stay out of the slab (params get a constant region),
//! graph outputs live to the last step, views share their base's bytes and extend
//! its lifetime, op workspaces are shared, unique, or planned inside the slab, and
//! ops grouped into parallel steps widen lifetimes to whole steps (AITemplate's
//! simple multistream).
//!
//! Input: a graph document ([`crate::doc`]), as in `bench/data/models/*.json` —
//! `ops: [{inputs, outputs, workspace?, type?}]`, `tensors: [{id, size, first, last,
//! viewOf?, sharesWith? (alias inPlaceOf), isOutput?, kind?}]`, `graphInputs?: [{id, size}]`, `params?: [{id, size}]`,
//! and optionally `steps` (alias `streams`): a list of parallel steps, each a list
//! of op indices, covering every op exactly once, in execution order. Unknown fields are
//! refused, naming their JSON path (see Note [Unknown graph fields are refused]).
//!
//! In-place sharing generalises views: a tensor with `sharesWith` (or `inPlaceOf`)
//! is its own record but reuses its base's range (one offset), its lifetime checked
//! by the planner to only hand over from the base's. With [`GraphOptions::in_place`]
//! the builder finds such pairs itself: an elementwise op (ONNX type in
//! [`IN_PLACE_OPS`]) whose output has the size of an input that dies at that op, read
//! by no other op of its step, writes over it.

use crate::doc::{DocError, Extent, GraphDoc, TensorDoc};
use crate::error::{add, align_up, PlanError};
use crate::record::{check_alignment, UsageRecord};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

pub use crate::doc::TensorKind;

/// A tensor with its size resolved: what the planner and the executor read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    pub id: String,
    pub size: u64,
    /// First op index, or [`FROM_OPS`]: the first op that reads or writes it (inputs: 0).
    pub first: u64,
    pub last: u64,
    pub view_of: Option<String>,
    /// Tensor whose range this one reuses in place (see the module docs).
    pub shares_with: Option<String>,
    pub kind: TensorKind,
    /// Element type (the executor types returned arrays by it).
    pub dtype: Option<String>,
}

impl Tensor {
    /// A tensor of `kind` with no view, sharing, dtype or declared lifetime.
    pub fn new(id: impl Into<String>, size: u64, kind: TensorKind) -> Tensor {
        Tensor { id: id.into(), size, first: FROM_OPS, last: 0, view_of: None, shares_with: None, kind, dtype: None }
    }
}

/// A tensor's `first` when the graph gives none (executable graphs): derived from the ops.
pub const FROM_OPS: u64 = u64::MAX;

/// An op with its counts resolved. The kernel fields are the executor's (a planner graph has
/// none: `kernel` `None`, `dispatch` `[1, 1, 1]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// Its name, `op<index>` when the graph gives none.
    pub name: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// Scratch bytes the op needs while it runs.
    pub workspace: u64,
    /// Operator type (ONNX `op_type`), empty when not given.
    pub op_type: String,
    /// Kernel id, or `None` for an op that only creates views (nothing to dispatch).
    pub kernel: Option<String>,
    pub dispatch: [u32; 3],
    /// Bytes of the uniform bound after the storage bindings.
    pub params: Option<Vec<u8>>,
}

impl Op {
    /// An op with no workspace, type or kernel.
    pub fn new(name: impl Into<String>, inputs: Vec<String>, outputs: Vec<String>) -> Op {
        Op {
            name: name.into(),
            inputs,
            outputs,
            workspace: 0,
            op_type: String::new(),
            kernel: None,
            dispatch: [1, 1, 1],
            params: None,
        }
    }
}

/// Elementwise ONNX op types that may write their output over a same-sized input.
pub const IN_PLACE_OPS: [&str; 24] = [
    "Abs",
    "Add",
    "BatchNormalization",
    "Clip",
    "Div",
    "Dropout",
    "Elu",
    "Erf",
    "Exp",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "LeakyRelu",
    "Log",
    "Mul",
    "Neg",
    "Pow",
    "Relu",
    "Selu",
    "Sigmoid",
    "Softplus",
    "Sqrt",
    "Sub",
];

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Graph {
    pub ops: Vec<Op>,
    pub tensors: Vec<Tensor>,
    /// Parallel steps (op indices); `None` = one op per step.
    pub steps: Option<Vec<Vec<usize>>>,
}

/// How op workspaces are provided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkspaceMode {
    /// One region of the largest workspace, reused by every op.
    #[default]
    Shared,
    /// AITemplate's unique workspaces: one region per op, laid end to end.
    Unique,
    /// One buffer per op inside the slab, live only during its step (usually smaller).
    InSlab,
}

impl WorkspaceMode {
    pub const ALL: [WorkspaceMode; 3] = [WorkspaceMode::Shared, WorkspaceMode::Unique, WorkspaceMode::InSlab];

    /// The mode's name in the options (`workspace: "inSlab"`).
    pub fn as_str(self) -> &'static str {
        match self {
            WorkspaceMode::Shared => "shared",
            WorkspaceMode::Unique => "unique",
            WorkspaceMode::InSlab => "inSlab",
        }
    }
}

impl fmt::Display for WorkspaceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorkspaceMode {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Self, PlanError> {
        WorkspaceMode::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| {
            crate::error::invalid("workspace", "shared, unique or inSlab", format!("unknown workspace mode {s:?}"))
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GraphOptions {
    pub workspace: WorkspaceMode,
    /// Widen lifetimes to the graph's parallel steps (needs `steps`).
    pub multistream: bool,
    /// Alignment of constant-region offsets (AITemplate uses 64).
    pub constant_alignment: u64,
    /// Let elementwise ops write their output over a dying input (see the module docs).
    pub in_place: bool,
    /// Plan graph inputs into the slab, from the start to their last use, as an executor does
    /// (it uploads them there); by default they stay in the caller's buffers.
    pub inputs_in_slab: bool,
}

/// Where a tensor's bytes are, for tensors that are not slab records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// In the slab, at the planned offset of record `base`.
    Slab { base: String },
    /// In the constant region at this offset.
    Constant { offset: u64 },
    /// A graph input (caller's own buffer), `base` names it.
    Input { base: String },
    /// An external tensor (the caller's block, bound at run time), `base` names it.
    External { base: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Workspace {
    /// Shared mode: the largest per-op workspace.
    pub shared_size: u64,
    /// Unique mode: the sum of per-op workspaces ...
    pub unique_size: u64,
    /// ... and each op's offset in that region: (op index, offset).
    pub unique_offsets: Vec<(usize, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GraphRecords {
    /// Slab records (non-view intermediates and outputs; workspaces in `InSlab` mode,
    /// with ids `workspace:<op index>`). Lifetimes are in steps.
    pub records: Vec<UsageRecord>,
    /// Params: (id, offset) in the constant region.
    pub constants: Vec<(String, u64)>,
    pub constant_size: u64,
    /// Every view and non-slab tensor, with where its bytes live.
    pub aliases: Vec<(String, Location)>,
    pub workspace: Workspace,
    /// Number of time steps (ops, or parallel steps in multistream mode).
    pub steps: u64,
    /// Records written in place over another: (record id, base record id), declared
    /// or found by [`GraphOptions::in_place`].
    pub in_place: Vec<(String, String)>,
}

/// Parses the graph JSON (see [`crate::doc`]): text that is not JSON and a bad or unknown
/// field are `PARSE_ERROR`, the field named by its JSON path.
pub fn parse(text: &str) -> Result<Graph, PlanError> {
    from_doc(&GraphDoc::parse(text).map_err(doc_error)?)
}

/// A document's parse error as the planner reports it (as its records' errors: `PARSE_ERROR`).
pub fn doc_error(e: DocError) -> PlanError {
    match e {
        DocError::Syntax { line, message } => PlanError::Parse { line, field: String::new(), message },
        DocError::Field { path, expected, got } => PlanError::bad_field(path, expected, got),
    }
}

/// A count of the planner's: an integer, or a decimal string (exact above 2^53 - 1).
fn count(e: &Extent, path: impl FnOnce() -> String) -> Result<u64, PlanError> {
    match e {
        Extent::Int(n) => Ok(*n),
        Extent::Expr(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().map_err(|_| PlanError::SizeOverflow(format!("{}: {s} does not fit in 64 bits", path())))
        }
        Extent::Expr(s) => Err(PlanError::parse(
            0,
            path(),
            format!("expected a non-negative integer, got {s:?} (expressions over dims are for compileShapes)"),
        )),
    }
}

/// The planner's graph from a document: sizes (an integer or decimal string each), kinds and
/// declared lifetimes; graph inputs and params listed apart join the tensors.
pub fn from_doc(doc: &GraphDoc) -> Result<Graph, PlanError> {
    let mut g = Graph::default();
    for (i, o) in doc.ops.iter().enumerate() {
        g.ops.push(Op {
            name: o.name.clone().unwrap_or_else(|| format!("op{i}")),
            inputs: o.inputs.clone(),
            outputs: o.outputs.clone(),
            workspace: o
                .workspace
                .as_ref()
                .map(|w| count(w, || format!("ops[{i}].workspace")))
                .transpose()?
                .unwrap_or(0),
            op_type: o.op_type.clone().unwrap_or_default(),
            kernel: o.kernel.clone(),
            dispatch: [1, 1, 1],
            params: o.params.clone(),
        });
    }
    for (i, t) in doc.tensors.iter().enumerate() {
        g.tensors.push(tensor(t, i)?);
    }
    for (key, kind, list) in
        [("graphInputs", TensorKind::Input, &doc.graph_inputs), ("params", TensorKind::Param, &doc.params)]
    {
        for (i, t) in list.iter().enumerate() {
            g.tensors.push(Tensor {
                first: 0,
                last: t.last.map_or(0, |x| x.0),
                dtype: t.dtype.clone(),
                ..Tensor::new(t.id.clone(), count(&t.size, || format!("{key}[{i}].size"))?, kind)
            });
        }
    }
    g.steps = doc.steps.as_ref().map(|s| s.iter().map(|step| step.iter().map(|x| x.0 as usize).collect()).collect());
    Ok(g)
}

fn tensor(t: &TensorDoc, i: usize) -> Result<Tensor, PlanError> {
    let size = t.size.as_ref().ok_or_else(|| {
        PlanError::parse(
            0,
            format!("tensors[{i}].size"),
            "expected a size in bytes, got nothing (the field is missing)",
        )
    })?;
    Ok(Tensor {
        id: t.id.clone(),
        size: count(size, || format!("tensors[{i}].size"))?,
        first: t.first.map_or(FROM_OPS, |x| x.0),
        last: t.last.map_or(0, |x| x.0),
        view_of: t.view_of.clone(),
        shares_with: t.shares_with.clone(),
        kind: t.kind(),
        dtype: t.dtype.clone(),
    })
}

/// Builds slab records and the placements of everything else.
pub fn build_records(g: &Graph, opts: &GraphOptions) -> Result<GraphRecords, PlanError> {
    let calign = opts.constant_alignment.max(1);
    check_alignment("constant region", calign)?;
    let n_ops = g.ops.len();
    // Time of each op: its own index, or its parallel step.
    let step_of: Vec<u64> = match (&g.steps, opts.multistream) {
        (Some(steps), true) => {
            let mut s = vec![u64::MAX; n_ops];
            for (k, step) in steps.iter().enumerate() {
                for &op in step {
                    match s.get_mut(op) {
                        Some(x) if *x == u64::MAX => *x = k as u64,
                        Some(_) => {
                            return Err(PlanError::invalid(
                                format!("steps[{k}]"),
                                "ops in one step each",
                                format!("op {op}, in an earlier step too"),
                            )
                            .with_hint(format!("op {op} appears in two steps")))
                        }
                        None => {
                            return Err(PlanError::invalid(
                                format!("steps[{k}]"),
                                format!("op indices below {n_ops}"),
                                op.to_string(),
                            )
                            .with_hint(format!("step {k} names unknown op {op}")))
                        }
                    }
                }
            }
            if let Some(op) = s.iter().position(|&x| x == u64::MAX) {
                return Err(PlanError::invalid("steps", "every op in a step", format!("op {op} in none"))
                    .with_hint(format!("op {op} is in no step")));
            }
            s
        }
        (None, true) => {
            return Err(PlanError::invalid("graph.steps", "parallel steps (multistream needs them)", "undefined"))
        }
        _ => (0..n_ops as u64).collect(),
    };
    let n_steps = step_of.iter().max().map_or(0, |&m| m + 1);
    let end = n_steps.saturating_sub(1);

    let mut by_id: HashMap<&str, usize> = HashMap::with_capacity(g.tensors.len());
    for (i, t) in g.tensors.iter().enumerate() {
        if by_id.insert(t.id.as_str(), i).is_some() {
            return Err(PlanError::DuplicateId { id: t.id.clone() });
        }
        if t.first != FROM_OPS && t.first > t.last {
            return Err(PlanError::InvalidLifetime { id: t.id.clone(), first: t.first, last: t.last });
        }
    }
    // Lifetimes in steps: declared range widened by every op that touches the tensor.
    let to_step = |op: u64| step_of.get(op as usize).copied().unwrap_or(end);
    let mut life: Vec<(u64, u64)> = g
        .tensors
        .iter()
        .map(|t| match (t.first, t.kind) {
            // Inputs exist from the start; anything else from the first op that touches it.
            (FROM_OPS, TensorKind::Input | TensorKind::External) => (0, to_step(t.last)),
            (FROM_OPS, _) => (end, to_step(t.last)),
            (first, _) => (to_step(first), to_step(t.last)),
        })
        .collect();
    for (k, op) in g.ops.iter().enumerate() {
        // Names the graph does not declare (a model's weights, kept outside the slab) are not planned.
        for name in op.inputs.iter().chain(&op.outputs) {
            if let Some(&i) = by_id.get(name.as_str()) {
                life[i] = (life[i].0.min(step_of[k]), life[i].1.max(step_of[k]));
            }
        }
    }
    for (i, t) in g.tensors.iter().enumerate() {
        if t.kind == TensorKind::Output {
            life[i].1 = end;
        }
        // Derived from the ops but touched by none: live at its last step only.
        life[i].0 = life[i].0.min(life[i].1);
    }
    // Resolve every view to its root; a view extends its root's lifetime.
    let mut root = vec![usize::MAX; g.tensors.len()];
    for (i, slot) in root.iter_mut().enumerate() {
        let mut chain = vec![i];
        let mut cur = i;
        while let Some(base) = &g.tensors[cur].view_of {
            cur = *by_id
                .get(base.as_str())
                .ok_or_else(|| PlanError::UnknownView { id: g.tensors[cur].id.clone(), view_of: base.clone() })?;
            if chain.contains(&cur) || chain.len() > g.tensors.len() {
                return Err(PlanError::ViewCycle { id: g.tensors[i].id.clone() });
            }
            chain.push(cur);
        }
        *slot = cur;
    }
    // A view shares its root's offset: past the root's size it would overlap what lies beyond.
    for (i, &r) in root.iter().enumerate() {
        let (view, base) = (&g.tensors[i], &g.tensors[r]);
        if view.size > base.size {
            return Err(PlanError::invalid(
                format!("tensors[{i}].size"),
                format!("at most {} bytes (its base '{}')", base.size, base.id),
                view.size.to_string(),
            )
            .with_hint(format!("view '{}' is larger than its base", view.id)));
        }
    }
    for i in 0..g.tensors.len() {
        let r = root[i];
        if r != i {
            life[r].1 = life[r].1.max(life[i].1);
        }
    }
    let shares = in_place_bases(g, opts, &by_id, &root, &life, &step_of)?;
    let mut out = GraphRecords { steps: n_steps, ..Default::default() };
    let mut coffset = 0u64;
    let mut const_at: HashMap<usize, u64> = HashMap::new();
    for (i, t) in g.tensors.iter().enumerate() {
        if root[i] != i {
            continue;
        }
        match t.kind {
            TensorKind::Param => {
                let o = align_up(coffset, calign)?;
                coffset = add(o, t.size, "constant region")?;
                out.constants.push((t.id.clone(), o));
                const_at.insert(i, o);
            }
            TensorKind::Input if !opts.inputs_in_slab => {}
            TensorKind::External => {}
            TensorKind::Input => out.records.push(UsageRecord::new(t.id.clone(), t.size, life[i].0, life[i].1)),
            TensorKind::Intermediate | TensorKind::Output => {
                let mut r = UsageRecord::new(t.id.clone(), t.size, life[i].0, life[i].1);
                if let Some(b) = shares[i] {
                    r.shares_with = Some(g.tensors[b].id.clone());
                    out.in_place.push((t.id.clone(), g.tensors[b].id.clone()));
                }
                out.records.push(r);
            }
        }
    }
    out.constant_size = coffset;
    for (i, t) in g.tensors.iter().enumerate() {
        let r = root[i];
        let base = g.tensors[r].id.clone();
        let loc = match g.tensors[r].kind {
            TensorKind::Param => Location::Constant { offset: const_at.get(&r).copied().unwrap_or(0) },
            TensorKind::Input if !opts.inputs_in_slab => Location::Input { base },
            TensorKind::External => Location::External { base },
            TensorKind::Input if r == i => continue,
            _ if r != i => Location::Slab { base },
            _ => continue,
        };
        let outside = matches!(g.tensors[r].kind, TensorKind::External)
            || (g.tensors[r].kind == TensorKind::Input && !opts.inputs_in_slab);
        if r != i || outside {
            out.aliases.push((t.id.clone(), loc));
        }
    }
    // Workspaces.
    for (k, op) in g.ops.iter().enumerate() {
        if op.workspace == 0 {
            continue;
        }
        out.workspace.shared_size = out.workspace.shared_size.max(op.workspace);
        out.workspace.unique_offsets.push((k, out.workspace.unique_size));
        out.workspace.unique_size = add(out.workspace.unique_size, op.workspace, "unique workspace")?;
        if opts.workspace == WorkspaceMode::InSlab {
            out.records.push(UsageRecord::new(format!("workspace:{k}"), op.workspace, step_of[k], step_of[k]));
        }
    }
    Ok(out)
}

/// For each tensor, the slab root whose range it reuses in place: declared
/// (`sharesWith`, resolved through views) or, with `opts.in_place`, found at an
/// elementwise op whose same-sized input dies there. Lifetimes are checked by the planner.
fn in_place_bases(
    g: &Graph,
    opts: &GraphOptions,
    by_id: &HashMap<&str, usize>,
    root: &[usize],
    life: &[(u64, u64)],
    step_of: &[u64],
) -> Result<Vec<Option<usize>>, PlanError> {
    let slab = |i: usize| matches!(g.tensors[i].kind, TensorKind::Intermediate | TensorKind::Output);
    let mut shares: Vec<Option<usize>> = vec![None; g.tensors.len()];
    for (i, t) in g.tensors.iter().enumerate() {
        let Some(base) = &t.shares_with else { continue };
        let &b = by_id.get(base.as_str()).ok_or_else(|| {
            PlanError::invalid(format!("tensor {:?}.sharesWith", t.id), "the id of a tensor", format!("{base:?}"))
                .with_hint(format!("tensor {:?} shares with unknown tensor {base:?}", t.id))
        })?;
        let b = root[b];
        if root[i] != i || !slab(i) || !slab(b) || b == i {
            return Err(PlanError::invalid(
                format!("tensor {:?}.sharesWith", t.id),
                "a slab tensor (not a view, input or param)",
                format!("{base:?}"),
            )
            .with_hint(format!(
                "tensor {:?} cannot share {base:?} in place: both must be slab tensors (not views, inputs or params)",
                t.id
            )));
        }
        shares[i] = Some(b);
    }
    if !opts.in_place {
        return Ok(shares);
    }
    // Who reads each tensor, to see that an input dies at this op alone.
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); g.tensors.len()];
    for (k, op) in g.ops.iter().enumerate() {
        for name in &op.inputs {
            if let Some(&x) = by_id.get(name.as_str()) {
                readers[root[x]].push(k);
            }
        }
    }
    let mut taken = vec![false; g.tensors.len()];
    for b in shares.iter().flatten() {
        taken[*b] = true;
    }
    for (k, op) in g.ops.iter().enumerate() {
        if !IN_PLACE_OPS.contains(&op.op_type.as_str()) {
            continue;
        }
        let step = step_of[k];
        for out_name in &op.outputs {
            let Some(&o) = by_id.get(out_name.as_str()) else { continue };
            if root[o] != o || !slab(o) || shares[o].is_some() || life[o].0 != step {
                continue;
            }
            let base = op.inputs.iter().filter_map(|n| by_id.get(n.as_str()).copied()).find(|&x| {
                root[x] == x
                    && g.tensors[x].kind == TensorKind::Intermediate
                    && !taken[x]
                    && x != o
                    && g.tensors[x].size == g.tensors[o].size
                    && life[x].1 == step
                    && readers[x].iter().all(|&r| r == k || step_of[r] < step)
            });
            if let Some(x) = base {
                taken[x] = true;
                shares[o] = Some(x);
            }
        }
    }
    Ok(shares)
}
