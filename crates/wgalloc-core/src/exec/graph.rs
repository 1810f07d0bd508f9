//! The executable graph: tensors, ops and WGSL kernels, parsed from JSON and
//! validated once, with every tensor's lifetime (producer op to last use,
//! through its views) derived from the op order.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorKind {
    /// Supplied by the caller on every run.
    Input,
    /// A constant set at compile time; lives in the constant region.
    Param,
    Intermediate,
    /// Returned by every run; lives to the end of the graph.
    Output,
    /// A block the caller passes to every run (a KV cache, recurrent state): bound in place,
    /// never in the slab; ops may read and write it.
    External,
}

impl TensorKind {
    /// The kind's name in the graph format.
    pub fn as_str(self) -> &'static str {
        match self {
            TensorKind::Input => "input",
            TensorKind::Param => "param",
            TensorKind::Intermediate => "intermediate",
            TensorKind::Output => "output",
            TensorKind::External => "external",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Tensor {
    pub id: String,
    pub size: u64,
    pub kind: TensorKind,
    pub view_of: Option<String>,
    /// Element type used by the JS facade to type the returned arrays.
    pub dtype: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Op {
    pub name: String,
    /// Kernel id, or `None` for an op that only creates views (nothing to dispatch).
    pub kernel: Option<String>,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub dispatch: [u32; 3],
    /// Bytes of the uniform bound after the storage bindings.
    pub params: Option<Vec<u8>>,
    pub workspace: u64,
}

#[derive(Debug, Clone)]
pub struct Kernel {
    pub source: String,
    pub entry_point: String,
}

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

/// Graph text as JSON; PARSE_ERROR when it is not JSON (every graph format starts here).
pub(crate) fn parse_json(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| Error::Parse(format!("graph is not valid JSON: {e}")))
}

fn bad(path: impl Into<String>, expected: impl Into<String>, got: impl Into<String>) -> Error {
    Error::invalid(path, expected, got)
}

fn shown(v: &Value) -> String {
    crate::error::shown_json(v)
}

fn field<'a>(o: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a Value> {
    o.get(key).ok_or_else(|| {
        bad(format!("{path}.{key}"), "a value", "undefined").with_hint(format!("{path}.{key} is missing"))
    })
}

fn string(v: &Value, path: &str) -> Result<String> {
    v.as_str().map(str::to_string).ok_or_else(|| bad(path, "a string", shown(v)))
}

fn uint(v: &Value, path: &str) -> Result<u64> {
    v.as_u64()
        .filter(|&n| n <= crate::MAX_SAFE_INTEGER)
        .ok_or_else(|| bad(path, "a non-negative integer below 2^53", shown(v)))
}

fn strings(o: &Map<String, Value>, key: &str, path: &str) -> Result<Vec<String>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().enumerate().map(|(i, v)| string(v, &format!("{path}.{key}[{i}]"))).collect(),
        Some(v) => Err(bad(format!("{path}.{key}"), "an array of tensor ids", shown(v))),
    }
}

impl ExecGraph {
    /// Parses and validates the graph JSON (see the executor docs for the format).
    pub fn parse(text: &str) -> Result<ExecGraph> {
        Self::from_value(&parse_json(text)?)
    }

    pub fn from_value(v: &Value) -> Result<ExecGraph> {
        let root = v.as_object().ok_or_else(|| bad("graph", "an object with tensors, ops and kernels", shown(v)))?;
        let mut kernels = HashMap::new();
        if let Some(ks) = root.get("kernels") {
            let ks = ks
                .as_object()
                .ok_or_else(|| bad("kernels", "an object of { id: { source, entryPoint } }", shown(ks)))?;
            for (id, k) in ks {
                let path = format!("kernels.{id}");
                let k = k.as_object().ok_or_else(|| bad(&path, "an object", shown(k)))?;
                kernels.insert(
                    id.clone(),
                    Kernel {
                        source: string(field(k, "source", &path)?, &format!("{path}.source"))?,
                        entry_point: k
                            .get("entryPoint")
                            .map(|e| string(e, &format!("{path}.entryPoint")))
                            .transpose()?
                            .unwrap_or_else(|| "main".into()),
                    },
                );
            }
        }
        let mut tensors = Vec::new();
        for (i, t) in field(root, "tensors", "graph")?
            .as_array()
            .ok_or_else(|| bad("graph.tensors", "an array", shown(&root["tensors"])))?
            .iter()
            .enumerate()
        {
            let path = format!("tensors[{i}]");
            let o = t.as_object().ok_or_else(|| bad(&path, "an object", shown(t)))?;
            let is_output = o.get("isOutput").and_then(Value::as_bool).unwrap_or(false);
            let kind = match o.get("kind").and_then(Value::as_str) {
                None if is_output => TensorKind::Output,
                None | Some("intermediate") => TensorKind::Intermediate,
                Some("input") => TensorKind::Input,
                Some("param") => TensorKind::Param,
                Some("output") => TensorKind::Output,
                Some("external") => TensorKind::External,
                Some(k) => {
                    return Err(bad(
                        format!("{path}.kind"),
                        "input, param, intermediate, output or external",
                        crate::error::quoted(k),
                    )
                    .with_hint("unknown kind"))
                }
            };
            let size = tensor_size(o, &path)?;
            if size == 0 {
                return Err(bad(format!("{path}.size"), "at least 1 byte", "0"));
            }
            let id = string(field(o, "id", &path)?, &format!("{path}.id"))?;
            if id == "__proto__" {
                // Results are JS objects keyed by id: this key would set their prototype.
                return Err(bad(format!("{path}.id"), "any id but '__proto__'", "'__proto__'")
                    .with_hint("'__proto__' cannot name a tensor (JS objects keyed by it lose it)"));
            }
            tensors.push(Tensor {
                id,
                size,
                kind,
                view_of: o.get("viewOf").map(|b| string(b, &format!("{path}.viewOf"))).transpose()?,
                dtype: dtype(o.get("dtype"), size, &path)?,
            });
        }
        let mut ops = Vec::new();
        for (i, op) in field(root, "ops", "graph")?
            .as_array()
            .ok_or_else(|| bad("graph.ops", "an array", shown(&root["ops"])))?
            .iter()
            .enumerate()
        {
            let path = format!("ops[{i}]");
            let o = op.as_object().ok_or_else(|| bad(&path, "an object", shown(op)))?;
            let dispatch = match o.get("dispatch") {
                None | Some(Value::Null) => [1, 1, 1],
                Some(Value::Array(d)) if !d.is_empty() && d.len() <= 3 => {
                    let mut out = [1u32; 3];
                    for (k, x) in d.iter().enumerate() {
                        out[k] = u32::try_from(uint(x, &format!("{path}.dispatch[{k}]"))?)
                            .map_err(|_| bad(format!("{path}.dispatch[{k}]"), "at most 4294967295", shown(x)))?;
                    }
                    out
                }
                Some(d) => return Err(bad(format!("{path}.dispatch"), "[x], [x, y] or [x, y, z]", shown(d))),
            };
            let params = match o.get("params") {
                None | Some(Value::Null) => None,
                Some(Value::Array(bytes)) => Some(
                    bytes
                        .iter()
                        .enumerate()
                        .map(|(k, b)| {
                            b.as_u64()
                                .filter(|&x| x < 256)
                                .map(|x| x as u8)
                                .ok_or_else(|| bad(format!("{path}.params[{k}]"), "a byte (0-255)", shown(b)))
                        })
                        .collect::<Result<Vec<u8>>>()?,
                ),
                Some(p) => return Err(bad(format!("{path}.params"), "an array of bytes", shown(p))),
            };
            ops.push(Op {
                name: o.get("name").and_then(Value::as_str).map_or_else(|| format!("op{i}"), str::to_string),
                kernel: o.get("kernel").map(|k| string(k, &format!("{path}.kernel"))).transpose()?,
                inputs: strings(o, "inputs", &path)?,
                outputs: strings(o, "outputs", &path)?,
                dispatch,
                params,
                workspace: o.get("workspace").map(|w| uint(w, &format!("{path}.workspace"))).transpose()?.unwrap_or(0),
            });
        }
        Self::new(tensors, ops, kernels)
    }

    /// Validates the graph and derives lifetimes.
    pub fn new(tensors: Vec<Tensor>, ops: Vec<Op>, kernels: HashMap<String, Kernel>) -> Result<ExecGraph> {
        let mut index = HashMap::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            if index.insert(t.id.clone(), i).is_some() {
                return Err(bad(format!("tensors[{i}].id"), "an id no other tensor has", crate::error::quoted(&t.id))
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
                    bad(format!("tensors[{cur}].viewOf"), "the id of a tensor of the graph", crate::error::quoted(base))
                        .with_hint(format!("tensor '{}' is a view of unknown tensor '{base}'", tensors[cur].id))
                })?;
                hops += 1;
                if hops > tensors.len() {
                    return Err(bad(format!("tensors[{i}].viewOf"), "a chain of views that ends", "a cycle")
                        .with_hint(format!("tensor '{}' is part of a cycle of views", tensors[i].id)));
                }
            }
            if tensors[cur].kind == TensorKind::Param && hops > 1 {
                return Err(bad(format!("tensors[{i}].viewOf"), "a view of a param itself", "a view of a view")
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
                return Err(bad(
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
                return Err(bad(
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
                return Err(bad(format!("ops[{k}].outputs"), "at least one tensor", "none")
                    .with_hint(format!("op '{}' has no outputs; every op must write at least one tensor", op.name)));
            }
            if let Some(kid) = &op.kernel {
                if !kernels.contains_key(kid) {
                    return Err(bad(
                        format!("ops[{k}].kernel"),
                        "the id of a kernel of the graph",
                        crate::error::quoted(kid),
                    )
                    .with_hint(format!("op '{}' uses unknown kernel '{kid}'", op.name)));
                }
                if op.dispatch.contains(&0) {
                    return Err(bad(format!("ops[{k}].dispatch"), "sizes of at least 1", format!("{:?}", op.dispatch))
                        .with_hint(format!("op '{}': dispatch sizes must be at least 1", op.name)));
                }
            }
            for id in &op.inputs {
                let &t = index.get(id).ok_or_else(|| {
                    bad(format!("ops[{k}].inputs"), "ids of tensors of the graph", crate::error::quoted(id))
                        .with_hint(format!("op '{}' reads unknown tensor '{id}'", op.name))
                })?;
                let r = root[t];
                let available = matches!(tensors[r].kind, TensorKind::Input | TensorKind::Param | TensorKind::External)
                    || produced_at[t].is_some()
                    || produced_at[r].is_some();
                if !available {
                    return Err(bad(
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
                    bad(format!("ops[{k}].outputs"), "ids of tensors of the graph", crate::error::quoted(id))
                        .with_hint(format!("op '{}' writes unknown tensor '{id}'", op.name))
                })?;
                let r = root[t];
                if op.kernel.is_none() && r == t {
                    return Err(bad(
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
                    return Err(bad(
                        format!("ops[{k}].outputs"),
                        "tensors other than inputs and params",
                        crate::error::quoted(id),
                    )
                    .with_hint(format!("op '{}' writes '{id}', which is an input or param (read-only)", op.name)));
                }
                if produced_at[t].is_some() {
                    return Err(bad(
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
                        return Err(bad(
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
                    return Err(bad(
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
                    return Err(bad(
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
        use serde_json::json;
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

/// A tensor's bytes: its `size`, or the product of its `shape` times its dtype's bytes (both
/// given: they must agree). Shape entries are integers here; a symbolic graph resolves its
/// expressions before (see `SymbolicGraph::instantiate`).
fn tensor_size(o: &Map<String, Value>, path: &str) -> Result<u64> {
    let size = o.get("size").map(|s| uint(s, &format!("{path}.size"))).transpose()?;
    let Some(shape) = o.get("shape") else {
        return size.ok_or_else(|| {
            bad(format!("{path}.size"), "a size in bytes, or shape and dtype", "undefined").with_hint("size is missing")
        });
    };
    let Value::Array(extents) = shape else {
        return Err(bad(format!("{path}.shape"), "an array of sizes (integers, or dimension names)", shown(shape)));
    };
    let mut extent = Vec::with_capacity(extents.len());
    for (k, x) in extents.iter().enumerate() {
        if x.is_string() {
            return Err(bad(format!("{path}.shape[{k}]"), "an integer", shown(x))
                .with_hint("dimension names and expressions need a graph with \"dims\", compiled with compileShapes"));
        }
        extent.push(uint(x, &format!("{path}.shape[{k}]"))?);
    }
    let dtype = match o.get("dtype") {
        Some(Value::String(d)) => d.as_str(),
        None | Some(Value::Null) => {
            return Err(bad(format!("{path}.dtype"), "a dtype with the shape", "undefined")
                .with_hint("a shape needs a dtype: the bytes of one element make its size"))
        }
        Some(other) => return Err(bad(format!("{path}.dtype"), "a string", shown(other))),
    };
    let Some(elem) = dtype_bytes(dtype) else {
        let names = DTYPES.map(|(n, _)| n).join(", ");
        return Err(bad(format!("{path}.dtype"), format!("one of {names}"), crate::error::quoted(dtype))
            .with_hint("unknown dtype"));
    };
    let bytes = shape_bytes(&extent, elem)
        .ok_or_else(|| bad(format!("{path}.shape"), "a size of at most 2^53 - 1 bytes", format!("{extent:?}")))?;
    match size {
        Some(s) if s != bytes => {
            Err(bad(format!("{path}.size"), format!("{bytes} (shape {extent:?} of {dtype})"), s.to_string())
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

/// A tensor's `dtype`: absent, or one of [`DTYPES`] that divides its size (see [`whole_elements`]).
fn dtype(v: Option<&Value>, size: u64, path: &str) -> Result<Option<String>> {
    let name = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(d)) => d.as_str(),
        Some(other) => return Err(bad(format!("{path}.dtype"), "a string", shown(other))),
    };
    if !DTYPES.iter().any(|(n, _)| *n == name) {
        let names = DTYPES.map(|(n, _)| n).join(", ");
        return Err(bad(format!("{path}.dtype"), format!("one of {names}"), crate::error::quoted(name))
            .with_hint("unknown dtype"));
    }
    whole_elements(size, name, || path.to_string())?;
    Ok(Some(name.to_string()))
}

/// The rule for a tensor of a known dtype: `size` bytes hold a whole number of its elements, since
/// outputs come back as that typed array and a remainder would be dropped. Every size a tensor
/// takes is checked here: the graph's at parse, and a shape executor's at the dimensions a run asks
/// for (below its bucket, where the compiled graph's sizes do not tell). `what` names the tensor in
/// the error. An unknown dtype passes (the graph's parse refuses it).
pub(crate) fn whole_elements(size: u64, dtype: &str, what: impl FnOnce() -> String) -> Result<()> {
    match DTYPES.iter().find(|(n, _)| *n == dtype) {
        Some(&(_, bytes)) if !size.is_multiple_of(bytes) => Err(bad(
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
