//! The executable graph: tensors, ops and WGSL kernels, parsed from JSON and
//! validated once, with every tensor's lifetime (producer op to last use,
//! through its views) derived from the op order.

use std::collections::HashMap;

use wgalloc_plan::doc::DocError;
pub use wgalloc_plan::doc::{Extent, GraphDoc, Kernel, OpDoc, TensorDoc, TensorKind};
pub use wgalloc_plan::graph::{Op, Tensor};

use crate::error::{Error, Result};

/// A validated graph with derived lifetimes.
#[derive(Debug, Clone)]
pub struct ExecGraph {
    /// The graph's dimensions and their values, in declaration order, when it is a symbolic
    /// graph instantiated at them (what the dims uniform holds, see `Note [The dims uniform]`);
    /// empty for a plain graph.
    pub dims: Vec<(String, u64)>,
    pub tensors: Vec<Tensor>,
    pub ops: Vec<Op>,
    pub kernels: HashMap<String, Kernel>,
    pub index: HashMap<String, usize>,
    /// Tensor index -> index of the tensor owning its bytes (itself unless a view).
    pub root: Vec<usize>,
    /// Per tensor: op that produces it (inputs and params: 0) and its last use (through views).
    pub first: Vec<usize>,
    pub last: Vec<usize>,
}

/// `INVALID_ARGUMENT` for the value at `path`: what it must be, and what it was.
pub(crate) fn invalid(
    path: impl std::fmt::Display,
    expected: impl std::fmt::Display,
    got: impl std::fmt::Display,
) -> Error {
    Error::invalid(path.to_string(), expected.to_string(), got.to_string())
}

/// The graph document of `text`: PARSE_ERROR when it is not JSON (every graph format starts
/// here), INVALID_ARGUMENT naming the JSON path of a bad or unknown field.
pub(crate) fn parse_doc(text: &str) -> Result<GraphDoc> {
    GraphDoc::parse(text).map_err(|e| match e {
        DocError::Syntax { message, .. } => Error::Parse(format!("graph is not valid JSON: {message}")),
        DocError::Field { path, expected, got } => invalid(path, expected, got),
    })
}

/// An integer of a plain graph (below 2^53); an expression needs `dims` (see [`SymbolicGraph`]).
///
/// [`SymbolicGraph`]: super::SymbolicGraph
fn uint(e: &Extent, path: &str) -> Result<u64> {
    match e {
        Extent::Int(n) if *n <= crate::MAX_SAFE_INTEGER => Ok(*n),
        Extent::Int(n) => Err(invalid(path, "a non-negative integer below 2^53", n)),
        Extent::Expr(x) => Err(invalid(path, "an integer", format!("\"{x}\""))
            .with_hint("dimension names and expressions need a graph with \"dims\", compiled with compileShapes")),
    }
}

impl ExecGraph {
    /// Parses and validates the graph JSON (see the executor docs for the format).
    pub fn parse(text: &str) -> Result<ExecGraph> {
        Self::from_doc(&parse_doc(text)?)
    }

    /// Validates a graph document whose sizes and dispatch counts are integers.
    pub fn from_doc(doc: &GraphDoc) -> Result<ExecGraph> {
        if let Some(t) = doc.graph_inputs.first().or(doc.params.first()) {
            let list = if doc.graph_inputs.is_empty() { "params" } else { "graphInputs" };
            return Err(invalid(
                list,
                "no entries: an executable graph lists every tensor in \"tensors\"",
                format!("'{}'", t.id),
            )
            .with_hint("list it in \"tensors\" with its kind"));
        }
        let tensors = doc.tensors.iter().enumerate().map(|(i, t)| tensor(t, i)).collect::<Result<Vec<_>>>()?;
        let ops = doc.ops.iter().enumerate().map(|(i, o)| op(o, i)).collect::<Result<Vec<_>>>()?;
        let kernels = doc.kernels.iter().map(|(id, k)| (id.clone(), k.clone())).collect();
        Self::new(tensors, ops, kernels)
    }

    /// Validates the graph and derives lifetimes.
    pub fn new(tensors: Vec<Tensor>, ops: Vec<Op>, kernels: HashMap<String, Kernel>) -> Result<ExecGraph> {
        let mut index = HashMap::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            if index.insert(t.id.clone(), i).is_some() {
                return Err(invalid(
                    format!("tensors[{i}].id"),
                    "an id no other tensor has",
                    crate::error::quoted(&t.id),
                )
                .with_hint("a tensor id is used twice"));
            }
        }
        // Views: resolve chains to their root; views of params are read-only aliases.
        let mut root = vec![0; tensors.len()];
        for i in 0..tensors.len() {
            let mut cur = i;
            let mut hops = 0;
            while let Some(base) = &tensors[cur].view_of {
                cur = *index.get(base).ok_or_else(|| {
                    invalid(
                        format!("tensors[{cur}].viewOf"),
                        "the id of a tensor of the graph",
                        crate::error::quoted(base),
                    )
                    .with_hint(format!("tensor '{}' is a view of unknown tensor '{base}'", tensors[cur].id))
                })?;
                hops += 1;
                if hops > tensors.len() {
                    return Err(invalid(format!("tensors[{i}].viewOf"), "a chain of views that ends", "a cycle")
                        .with_hint(format!("tensor '{}' is part of a cycle of views", tensors[i].id)));
                }
            }
            if tensors[cur].kind == TensorKind::Param && hops > 1 {
                return Err(invalid(format!("tensors[{i}].viewOf"), "a view of a param itself", "a view of a view")
                    .with_hint(format!(
                        "tensor '{}' is a view of a view of param '{}'; view the param directly",
                        tensors[i].id, tensors[cur].id
                    )));
            }
            // The caller's data gets storage of its own: an input or param view would write its
            // bytes over its base, and an external view of a planned tensor has no block to bind.
            let (kind, base_kind) = (tensors[i].kind, tensors[cur].kind);
            if hops > 0
                && (matches!(kind, TensorKind::Input | TensorKind::Param)
                    || (kind == TensorKind::External && base_kind != TensorKind::External))
            {
                return Err(invalid(
                    format!("tensors[{i}].viewOf"),
                    format!("no viewOf on a {} tensor", kind.as_str()),
                    crate::error::quoted(&tensors[cur].id),
                )
                .with_hint(format!(
                    "{} tensor '{}' cannot be a view: inputs, params and external tensors hold the caller's data in \
                     storage of their own; make the view an intermediate tensor",
                    kind.as_str(),
                    tensors[i].id
                )));
            }
            if tensors[i].size > tensors[cur].size {
                return Err(invalid(
                    format!("tensors[{i}].size"),
                    format!("at most {} bytes (its base '{}')", tensors[cur].size, tensors[cur].id),
                    tensors[i].size.to_string(),
                )
                .with_hint(format!("view '{}' is larger than its base", tensors[i].id)));
            }
            root[i] = cur;
        }
        let n = ops.len();
        let mut produced_at: Vec<Option<usize>> = vec![None; tensors.len()];
        let mut first = vec![0; tensors.len()];
        let mut last = vec![0; tensors.len()];
        for (k, op) in ops.iter().enumerate() {
            if op.outputs.is_empty() {
                return Err(invalid(format!("ops[{k}].outputs"), "at least one tensor", "none")
                    .with_hint(format!("op '{}' has no outputs; every op must write at least one tensor", op.name)));
            }
            if let Some(kid) = &op.kernel {
                if !kernels.contains_key(kid) {
                    return Err(invalid(
                        format!("ops[{k}].kernel"),
                        "the id of a kernel of the graph",
                        crate::error::quoted(kid),
                    )
                    .with_hint(format!("op '{}' uses unknown kernel '{kid}'", op.name)));
                }
                if op.dispatch.contains(&0) {
                    return Err(invalid(
                        format!("ops[{k}].dispatch"),
                        "sizes of at least 1",
                        format!("{:?}", op.dispatch),
                    )
                    .with_hint(format!("op '{}' dispatches no workgroup", op.name)));
                }
            }
            for id in &op.inputs {
                let &t = index.get(id).ok_or_else(|| {
                    invalid(format!("ops[{k}].inputs"), "ids of tensors of the graph", crate::error::quoted(id))
                        .with_hint(format!("op '{}' reads unknown tensor '{id}'", op.name))
                })?;
                let r = root[t];
                let available = matches!(tensors[r].kind, TensorKind::Input | TensorKind::Param | TensorKind::External)
                    || produced_at[t].is_some()
                    || produced_at[r].is_some();
                if !available {
                    return Err(invalid(
                        format!("ops[{k}].inputs"),
                        "tensors produced by an earlier op",
                        crate::error::quoted(id),
                    )
                    .with_hint(format!(
                        "op '{}' reads '{id}' before any op produces it (cycle or wrong op order)",
                        op.name
                    )));
                }
                last[r] = last[r].max(k);
            }
            for id in &op.outputs {
                let &t = index.get(id).ok_or_else(|| {
                    invalid(format!("ops[{k}].outputs"), "ids of tensors of the graph", crate::error::quoted(id))
                        .with_hint(format!("op '{}' writes unknown tensor '{id}'", op.name))
                })?;
                let r = root[t];
                if op.kernel.is_none() && r == t {
                    return Err(invalid(
                        format!("ops[{k}].outputs"),
                        "views (the op has no kernel)",
                        crate::error::quoted(id),
                    )
                    .with_hint(format!(
                        "op '{}' has no kernel, so it can only create views, but '{id}' is not a view",
                        op.name
                    )));
                }
                if op.kernel.is_some() && matches!(tensors[r].kind, TensorKind::Input | TensorKind::Param) {
                    return Err(invalid(
                        format!("ops[{k}].outputs"),
                        "tensors other than inputs and params",
                        crate::error::quoted(id),
                    )
                    .with_hint(format!("op '{}' writes '{id}', which is an input or param (read-only)", op.name)));
                }
                if produced_at[t].is_some() {
                    return Err(invalid(
                        format!("ops[{k}].outputs"),
                        "tensors no other op writes",
                        crate::error::quoted(id),
                    )
                    .with_hint(format!("tensor '{id}' is written by two ops; give each op its own output")));
                }
                if produced_at[r].is_none() {
                    first[r] = k;
                }
                produced_at[t] = Some(k);
                produced_at[r].get_or_insert(k);
                last[r] = last[r].max(k);
            }
        }
        for (i, t) in tensors.iter().enumerate() {
            let r = root[i];
            if r != i {
                continue;
            }
            match t.kind {
                TensorKind::Output => {
                    if produced_at[i].is_none() {
                        return Err(invalid(
                            format!("tensors[{i}]"),
                            "an output some op writes",
                            crate::error::quoted(&t.id),
                        )
                        .with_hint(format!("output '{}' is never produced", t.id)));
                    }
                    last[i] = n.saturating_sub(1);
                }
                TensorKind::Input | TensorKind::Param | TensorKind::External => first[i] = 0,
                TensorKind::Intermediate => {}
            }
        }
        // An output that is a view keeps its base alive to the end.
        for i in 0..tensors.len() {
            let r = root[i];
            if r != i && tensors[i].kind == TensorKind::Output {
                if tensors[r].kind == TensorKind::External {
                    return Err(invalid(
                        format!("tensors[{i}].viewOf"),
                        "no external tensor for an output",
                        crate::error::quoted(&tensors[r].id),
                    )
                    .with_hint(format!(
                        "output '{}' views external tensor '{}': an external block is the caller's already; read it \
                         after the run instead",
                        tensors[i].id, tensors[r].id
                    )));
                }
                if produced_at[r].is_none() && !matches!(tensors[r].kind, TensorKind::Input | TensorKind::Param) {
                    return Err(invalid(
                        format!("tensors[{i}].viewOf"),
                        "a tensor some op writes",
                        crate::error::quoted(&tensors[r].id),
                    )
                    .with_hint(format!(
                        "output '{}' views '{}', which is never produced",
                        tensors[i].id, tensors[r].id
                    )));
                }
                last[r] = n.saturating_sub(1);
            }
        }
        // Views share their root's lifetime.
        for i in 0..tensors.len() {
            first[i] = first[root[i]];
            last[i] = last[root[i]];
        }
        Ok(ExecGraph { dims: Vec::new(), tensors, ops, kernels, index, root, first, last })
    }

    pub fn tensor(&self, id: &str) -> Option<&Tensor> {
        self.index.get(id).map(|&i| &self.tensors[i])
    }

    /// Tensors that own their bytes and must be placed (inputs, intermediates, outputs).
    pub fn placed_roots(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.tensors.len())
            .filter(|&i| self.root[i] == i && !matches!(self.tensors[i].kind, TensorKind::Param | TensorKind::External))
    }

    pub fn outputs(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors.iter().filter(|t| t.kind == TensorKind::Output)
    }

    pub fn inputs(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors.iter().filter(|t| t.kind == TensorKind::Input)
    }

    /// External tensors (roots): a block for each comes with every run.
    pub fn externals(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors
            .iter()
            .enumerate()
            .filter(|&(i, t)| self.root[i] == i && t.kind == TensorKind::External)
            .map(|(_, t)| t)
    }
}

impl ExecGraph {
    /// The graph in its JSON format (what [`ExecGraph::parse`] reads).
    pub fn to_json(&self) -> String {
        use serde_json::{json, Map, Value};
        let tensors: Vec<Value> = self
            .tensors
            .iter()
            .map(|t| {
                let mut v = json!({ "id": t.id, "size": t.size, "kind": t.kind.as_str() });
                if let Some(b) = &t.view_of {
                    v["viewOf"] = json!(b);
                }
                if let Some(d) = &t.dtype {
                    v["dtype"] = json!(d);
                }
                v
            })
            .collect();
        let ops: Vec<Value> = self
            .ops
            .iter()
            .map(|o| {
                let mut v = json!({ "name": o.name, "inputs": o.inputs, "outputs": o.outputs, "dispatch": o.dispatch });
                if let Some(k) = &o.kernel {
                    v["kernel"] = json!(k);
                }
                if let Some(p) = &o.params {
                    v["params"] = json!(p);
                }
                if o.workspace > 0 {
                    v["workspace"] = json!(o.workspace);
                }
                v
            })
            .collect();
        let kernels: Map<String, Value> = self
            .kernels
            .iter()
            .map(|(id, k)| (id.clone(), json!({ "source": k.source, "entryPoint": k.entry_point })))
            .collect();
        json!({ "tensors": tensors, "ops": ops, "kernels": kernels }).to_string()
    }
}

fn tensor(t: &TensorDoc, i: usize) -> Result<Tensor> {
    let path = format!("tensors[{i}]");
    let size = tensor_size(t, &path)?;
    if size == 0 {
        return Err(invalid(format!("{path}.size"), "at least 1 byte", "0 bytes"));
    }
    if t.id == "__proto__" {
        // Results are JS objects keyed by id: this key would set their prototype.
        return Err(invalid(format!("{path}.id"), "a name other than '__proto__'", "'__proto__'")
            .with_hint("'__proto__' cannot name a tensor (JS objects keyed by it lose it)"));
    }
    if let Some(d) = &t.dtype {
        check_dtype(d, size, &path)?;
    }
    Ok(Tensor { view_of: t.view_of.clone(), dtype: t.dtype.clone(), ..Tensor::new(t.id.clone(), size, t.kind()) })
}

fn op(o: &OpDoc, i: usize) -> Result<Op> {
    let path = format!("ops[{i}]");
    let dispatch = match &o.dispatch {
        None => [1, 1, 1],
        Some(d) if !d.is_empty() && d.len() <= 3 => {
            let mut out = [1u32; 3];
            for (k, x) in d.iter().enumerate() {
                let at = format!("{path}.dispatch[{k}]");
                let n = uint(x, &at)?;
                out[k] = u32::try_from(n).map_err(|_| invalid(&at, "at most 4294967295", n))?;
            }
            out
        }
        Some(d) => {
            return Err(invalid(format!("{path}.dispatch"), "[x], [x, y] or [x, y, z]", format!("{} counts", d.len())))
        }
    };
    Ok(Op {
        name: o.name.clone().unwrap_or_else(|| format!("op{i}")),
        inputs: o.inputs.clone(),
        outputs: o.outputs.clone(),
        workspace: o.workspace.as_ref().map(|w| uint(w, &format!("{path}.workspace"))).transpose()?.unwrap_or(0),
        op_type: o.op_type.clone().unwrap_or_default(),
        kernel: o.kernel.clone(),
        dispatch,
        params: o.params.clone(),
    })
}

/// A tensor's bytes: its `size`, or the product of its `shape` times its dtype's bytes (both
/// given: they must agree). Shape entries are integers here; a symbolic graph resolves its
/// expressions before (see `SymbolicGraph::instantiate`).
fn tensor_size(t: &TensorDoc, path: &str) -> Result<u64> {
    let size = t.size.as_ref().map(|s| uint(s, &format!("{path}.size"))).transpose()?;
    let Some(shape) = &t.shape else {
        return size.ok_or_else(|| {
            invalid(format!("{path}.size"), "a size in bytes, or shape and dtype", "undefined")
                .with_hint("size is missing")
        });
    };
    let extent =
        shape.iter().enumerate().map(|(k, x)| uint(x, &format!("{path}.shape[{k}]"))).collect::<Result<Vec<_>>>()?;
    let Some(dtype) = t.dtype.as_deref() else {
        return Err(invalid(format!("{path}.dtype"), "a dtype, since a shape is given", "undefined")
            .with_hint("a shape needs a dtype: the bytes of one element make its size"));
    };
    let Some(elem) = dtype_bytes(dtype) else {
        let names = DTYPES.map(|(n, _)| n).join(", ");
        return Err(invalid(format!("{path}.dtype"), format!("one of {names}"), crate::error::quoted(dtype))
            .with_hint("unknown dtype"));
    };
    let bytes = shape_bytes(&extent, elem)
        .ok_or_else(|| invalid(format!("{path}.shape"), "a size of at most 2^53 - 1 bytes", format!("{extent:?}")))?;
    match size {
        Some(s) if s != bytes => {
            Err(invalid(format!("{path}.size"), format!("{bytes} (shape {extent:?} of {dtype})"), s.to_string())
                .with_hint("the size disagrees with the shape; give one of them"))
        }
        _ => Ok(bytes),
    }
}

/// Bytes of a tensor of `shape` with `elem`-byte elements; `None` past 2^53 - 1.
pub(crate) fn shape_bytes(shape: &[u64], elem: u64) -> Option<u64> {
    shape.iter().try_fold(elem, |acc, &n| acc.checked_mul(n).filter(|&b| b <= crate::MAX_SAFE_INTEGER))
}

/// Bytes of one element of `dtype`; `None` for an unknown dtype.
pub(crate) fn dtype_bytes(dtype: &str) -> Option<u64> {
    DTYPES.iter().find(|(n, _)| *n == dtype).map(|&(_, b)| b)
}

/// Element types of graph tensors and their sizes in bytes (f16 comes back as Uint16Array).
const DTYPES: [(&str, u64); 7] = [("f32", 4), ("u32", 4), ("i32", 4), ("u16", 2), ("f16", 2), ("i8", 1), ("u8", 1)];

/// A tensor's `dtype`: one of [`DTYPES`] that divides its size (see [`whole_elements`]).
fn check_dtype(name: &str, size: u64, path: &str) -> Result<()> {
    if !DTYPES.iter().any(|(n, _)| *n == name) {
        let names = DTYPES.map(|(n, _)| n).join(", ");
        return Err(invalid(format!("{path}.dtype"), format!("one of {names}"), crate::error::quoted(name))
            .with_hint("unknown dtype"));
    }
    whole_elements(size, name, || path.to_string())
}

/// The rule for a tensor of a known dtype: `size` bytes hold a whole number of its elements, since
/// outputs come back as that typed array and a remainder would be dropped. Every size a tensor
/// takes is checked here: the graph's at parse, and a shape executor's at the dimensions a run asks
/// for (below its bucket, where the compiled graph's sizes do not tell). `what` names the tensor in
/// the error. An unknown dtype passes (the graph's parse refuses it).
pub(crate) fn whole_elements(size: u64, dtype: &str, what: impl FnOnce() -> String) -> Result<()> {
    match DTYPES.iter().find(|(n, _)| *n == dtype) {
        Some(&(_, bytes)) if !size.is_multiple_of(bytes) => Err(invalid(
            what(),
            format!("a whole number of {dtype} elements ({bytes} bytes each)"),
            format!("{size} bytes"),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(json: &str) -> Result<ExecGraph> {
        ExecGraph::parse(json)
    }

    const K: &str = r#""kernels": {"k": {"source": "@compute @workgroup_size(1) fn main() {}"}}"#;

    fn graph_err(r: &Result<ExecGraph>) -> String {
        r.as_ref().err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn validation_errors() {
        let base = |tensors: &str, ops: &str| format!(r#"{{ {K}, "tensors": [{tensors}], "ops": [{ops}] }}"#);
        let ok = graph(&base(
            r#"{"id":"x","size":16,"kind":"input"},{"id":"a","size":16},{"id":"av","size":8,"viewOf":"a"},{"id":"y","size":16,"kind":"output"}"#,
            r#"{"kernel":"k","inputs":["x"],"outputs":["a"]},{"kernel":"k","inputs":["av"],"outputs":["y"]}"#,
        ))
        .unwrap();
        let a = ok.index["a"];
        assert_eq!((ok.first[a], ok.last[a]), (0, 1));
        let y = ok.index["y"];
        assert_eq!((ok.first[y], ok.last[y]), (1, 1), "an output starts at its producer");
        assert_eq!(ok.last[ok.index["y"]], 1);
        let cases = [
            (
                r#"{"id":"x","size":16,"kind":"input"}"#,
                r#"{"kernel":"nope","inputs":["x"],"outputs":["x"]}"#,
                "unknown kernel",
            ),
            (
                r#"{"id":"a","size":16},{"id":"b","size":16}"#,
                r#"{"kernel":"k","inputs":["b"],"outputs":["a"]},{"kernel":"k","inputs":["a"],"outputs":["b"]}"#,
                "before any op",
            ),
            (r#"{"id":"a","size":16}"#, r#"{"kernel":"k","inputs":[],"outputs":[]}"#, "no outputs"),
            (
                r#"{"id":"p","size":16,"kind":"param"},{"id":"v1","size":8,"viewOf":"p"},{"id":"v2","size":8,"viewOf":"v1"},{"id":"o","size":4}"#,
                r#"{"kernel":"k","inputs":["v2"],"outputs":["o"]}"#,
                "view of a view of param",
            ),
            (r#"{"id":"a","size":16,"viewOf":"b"},{"id":"b","size":16,"viewOf":"a"}"#, r#""#, "cycle"),
            (
                r#"{"id":"w","size":16,"kind":"param"},{"id":"x","size":16,"kind":"input","viewOf":"w"},{"id":"y","size":16}"#,
                r#"{"kernel":"k","inputs":["x"],"outputs":["y"]}"#,
                "input tensor 'x' cannot be a view",
            ),
            (
                r#"{"id":"x","size":16,"kind":"input"},{"id":"p","size":16,"kind":"param","viewOf":"x"},{"id":"y","size":16}"#,
                r#"{"kernel":"k","inputs":["x","p"],"outputs":["y"]}"#,
                "param tensor 'p' cannot be a view",
            ),
            (
                r#"{"id":"x","size":16,"kind":"input"},{"id":"s","size":16,"kind":"external","viewOf":"x"},{"id":"y","size":16}"#,
                r#"{"kernel":"k","inputs":["s"],"outputs":["y"]}"#,
                "external tensor 's' cannot be a view",
            ),
            (r#"{"id":"a","size":0}"#, r#""#, "at least 1 byte"),
            (r#"{"id":"a","shape":[2,3]}"#, r#""#, "a shape needs a dtype"),
            (
                r#"{"id":"a","shape":[2,3],"dtype":"f32","size":20}"#,
                r#""#,
                "tensors[0].size: expected 24 (shape [2, 3] of f32), got 20",
            ),
            (r#"{"id":"a","shape":["b",3],"dtype":"f32"}"#, r#""#, "need a graph with \"dims\""),
            (r#"{"id":"a","shape":[2,0],"dtype":"f32"}"#, r#""#, "at least 1 byte"),
            (r#"{"id":"a"}"#, r#""#, "tensors[0].size: expected a size in bytes, or shape and dtype, got undefined"),
            (r#"{"id":"__proto__","size":4}"#, r#""#, "cannot name a tensor"),
            (
                r#"{"id":"x","size":16,"kind":"input"},{"id":"a","size":16}"#,
                r#"{"kernel":"k","inputs":["x"],"outputs":["a"],"dispatch":[0]}"#,
                "at least 1",
            ),
        ];
        let shaped = graph(&base(
            r#"{"id":"x","shape":[2,3],"dtype":"f32","kind":"input"},{"id":"y","shape":[2],"dtype":"u16","size":4,"kind":"output"}"#,
            r#"{"kernel":"k","inputs":["x"],"outputs":["y"]}"#,
        ))
        .unwrap();
        assert_eq!((shaped.tensors[0].size, shaped.tensors[1].size), (24, 4), "size = product x dtype bytes");
        // Unknown fields are refused naming their path; a bad one names what it must be.
        let unknown = graph(&base(r#"{"id":"x","size":16,"kind":"input","dtpye":"f32"}"#, r#""#));
        assert!(graph_err(&unknown).starts_with("tensors[0].dtpye: expected a field of the graph format"));
        assert_eq!(unknown.err().map(|e| e.code()), Some("INVALID_ARGUMENT"));
        let kind = graph_err(&graph(&base(r#"{"id":"x","size":16,"kind":"weight"}"#, r#""#)));
        assert!(kind.starts_with("tensors[0].kind: expected one of 'input', 'param'"), "{kind}");
        let op = graph_err(&graph(&base(r#"{"id":"x","size":16}"#, r#"{"kernel":"k","outputs":["x"],"dispach":[1]}"#)));
        assert!(op.starts_with("ops[0].dispach: expected a field"), "{op}");
        assert_eq!(graph(r#"{"tensors": ["#).err().map(|e| e.code()), Some("PARSE_ERROR"));
        let mut wrong = Vec::new();
        for (tensors, ops, needle) in cases {
            let err = graph_err(&graph(&base(tensors, ops)));
            if !err.contains(needle) {
                wrong.push(format!("expected '{needle}', got '{err}'"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
