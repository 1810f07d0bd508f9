//! Changing shapes: a graph whose sizes and dispatch counts are expressions over named
//! dimensions (`"dims": ["batch"]`, `"size": "batch * 1024"`, `"dispatch": ["batch * 4"]`),
//! and a cache of executors keyed by the concrete dimensions a run asks for. Dimensions are
//! taken exactly, or rounded up to buckets the caller chooses: inputs are placed into the
//! bucket's shape with zeros elsewhere and outputs cut back to the asked one, row by row for a
//! tensor that declares its `shape`, at the end for one sized in bytes (see
//! Note [Buckets on inner dimensions]). Least recently used executors are released, so their
//! slabs return to the heap and memory stays bounded.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::bind::{check_dims_uniform, check_uniform_len, op_pipeline};
use super::executor::{
    check_binding_limit, check_params_given, CompileOptions, DeviceIo, Executor, RunOptions, RunOutput,
};
use super::graph::{dtype_bytes, shape_bytes, ExecGraph, Extent, GraphDoc, TensorDoc, TensorKind};
use super::lru::Lru;
use crate::context::Gpu;
use crate::error::{Error, Result};
use crate::heap::{Scope, ScopeCharge};
use crate::signal::lock;

/// A graph with symbolic dimensions, instantiated per concrete shape.
#[derive(Debug, Clone)]
pub struct SymbolicGraph {
    doc: GraphDoc,
    dims: Vec<String>,
}

/// Concrete values of every dimension, by name (sorted: usable as a cache key).
pub type Dims = BTreeMap<String, u64>;

impl SymbolicGraph {
    /// Parses the graph and checks every expression names declared dimensions only
    /// (by instantiating it with every dimension at 1).
    pub fn parse(text: &str) -> Result<SymbolicGraph> {
        let doc = super::graph::parse_doc(text)?;
        let dims = match &doc.dims {
            Some(d) if !d.is_empty() => d
                .iter()
                .enumerate()
                .map(|(i, n)| match is_name(n) {
                    true => Ok(n.clone()),
                    false => Err(Error::invalid(
                        format!("graph.dims[{i}]"),
                        "a name (letters, digits, _)",
                        crate::error::quoted(n),
                    )),
                })
                .collect::<Result<Vec<_>>>()?,
            _ => {
                return Err(Error::invalid(
                    "graph.dims",
                    "an array of dimension names",
                    match &doc.dims {
                        Some(_) => "an empty array".to_string(),
                        None => "undefined".to_string(),
                    },
                )
                .with_hint("a graph with changing shapes names its dimensions: \"dims\": [\"batch\"]"))
            }
        };
        let g = SymbolicGraph { doc, dims };
        g.instantiate(&g.dims.iter().map(|d| (d.clone(), 1)).collect())?;
        // A size and a shape that agree with every dimension at 1 may not elsewhere: check them
        // at distinct values too, so `"size": "b * 4"` with `"shape": ["b", "b"]` fails here.
        const PRIMES: [u64; 8] = [2, 3, 5, 7, 11, 13, 17, 19];
        let sample: Dims = g.dims.iter().zip(PRIMES.iter().cycle()).map(|(d, &p)| (d.clone(), p)).collect();
        for (i, t) in g.doc.tensors.iter().enumerate() {
            if t.size.is_some() && t.shape.is_some() {
                g.extents(i, t, &sample)?;
            }
        }
        Ok(g)
    }

    /// Tensor `id`: its index and entry.
    fn tensor(&self, id: &str) -> Option<(usize, &TensorDoc)> {
        self.doc.tensors.iter().enumerate().find(|(_, t)| t.id == id)
    }

    /// Tensor `t` (the `i`th) at `dims`: its shape and element bytes, or for a tensor sized in
    /// bytes one extent of its bytes; `None` for one without either (the parse refuses it). A
    /// size and shape that disagree at `dims` are `INVALID_ARGUMENT`.
    fn extents(&self, i: usize, t: &TensorDoc, dims: &Dims) -> Result<Option<Extents>> {
        let id = &t.id;
        let size = t.size.as_ref().map(|s| value(s, dims, &format!("tensors[{i}].size"))).transpose()?;
        let Some(entries) = &t.shape else {
            return Ok(size.map(|s| Extents { shape: vec![s], elem: 1 }));
        };
        let Some(elem) = t.dtype.as_deref().and_then(dtype_bytes) else { return Ok(None) };
        let shape = entries
            .iter()
            .enumerate()
            .map(|(k, x)| value(x, dims, &format!("tensors[{i}].shape[{k}]")))
            .collect::<Result<Vec<u64>>>()?;
        let bytes = shape_bytes(&shape, elem).ok_or_else(|| {
            Error::invalid(format!("tensors[{i}].shape"), "a size of at most 2^53 - 1 bytes", format!("{shape:?}"))
                .with_hint(format!("tensor '{id}' at {dims:?}: its size exceeds 2^53 - 1"))
        })?;
        if let Some(s) = size.filter(|&s| s != bytes) {
            return Err(Error::invalid(
                format!("tensors[{i}].size"),
                format!("{bytes} (its shape {shape:?})"),
                s.to_string(),
            )
            .with_hint(format!(
                "tensor '{id}' at {dims:?}: size {s} disagrees with shape {shape:?} ({bytes} bytes); give one of them"
            )));
        }
        Ok(Some(Extents { shape, elem }))
    }

    /// How tensor `id`'s bytes at `asked` sit in its bytes at `compiled` (the bucket's shape):
    /// `None` for a name that is no tensor of the graph.
    pub fn layout(&self, id: &str, asked: &Dims, compiled: &Dims) -> Result<Option<Layout>> {
        let Some((i, t)) = self.tensor(id) else { return Ok(None) };
        let (Some(a), Some(c)) = (self.extents(i, t, asked)?, self.extents(i, t, compiled)?) else { return Ok(None) };
        if let Some(k) = (0..a.shape.len()).find(|&k| a.shape[k] > c.shape[k]) {
            return Err(Error::invalid(
                format!("tensors '{id}'.shape[{k}]"),
                format!("at most {} (its extent at the bucket)", c.shape[k]),
                a.shape[k].to_string(),
            )
            .with_hint(format!(
                "tensor '{id}': extent {k} is {} at {asked:?} but {} at the bucket {compiled:?}; an extent must not \
                 shrink as a dimension grows",
                a.shape[k], c.shape[k]
            )));
        }
        Ok(Some(Layout { asked: a.shape, compiled: c.shape, elem: a.elem }))
    }

    /// Note [Buckets on inner dimensions]: a bucket rounds a dimension up, and the bytes of a
    /// run at the asked dimensions must be placed where the kernels, which index the bucket's
    /// shape, look for them. A tensor that declares its `shape` is placed row by row (zeros in
    /// every padded row and column; [`for_each_run`]), whatever dimension is bucketed. A tensor
    /// sized in bytes has no rows to go by: it is padded at its end, which is right only when
    /// the bucketed dimension is its outermost one. Its size expression is read as a product
    /// listing its factors outermost first (`"batch * 1024"`, `"b * s * 4"`), so an input or
    /// output is accepted only when no bucketed dimension occurs in its size, or the first
    /// factor is one bucketed dimension named alone and no other factor names a bucketed one.
    /// Anything else (`"s * 4"` after `"b"` bucketed on `s`, two bucketed dimensions, a sum
    /// or quotient involving one) is refused here, when the cache is made, naming the tensor
    /// and the dimension: silently padding it at the end gave wrong answers (a row sum over
    /// `b * s * 4` bytes at b=2, s=3 in bucket s=4 read [16, 50] instead of [6, 60]). A shape
    /// extent naming two bucketed dimensions (`"b * s"`) has no rows either, and is refused the
    /// same way. A shape extent is one dimension of the placement, padded at its end, so the
    /// same rule holds inside it: an extent `"b * s"` with `s` bucketed pads after `b * s` asked
    /// elements instead of after each `b`'s `s` (it gave [0, 1, 2, 3, 100, 101] for
    /// [0, 1, 100, 101, 200, 201]), and is refused; `"s * 4"` or `"b * s"` with `b` bucketed is
    /// placed right. External tensors are not placed (they are bound whole, in the bucket's
    /// shape) and intermediates stay inside the executor, so neither is checked.
    fn check_placeable(&self, bucketed: &[&String]) -> Result<()> {
        let is_bucketed = |n: &String| bucketed.contains(&n);
        for t in &self.doc.tensors {
            let id = &t.id;
            let kind = match t.kind() {
                k @ (TensorKind::Input | TensorKind::Output) => k.as_str(),
                _ => continue,
            };
            if let Some(entries) = &t.shape {
                for (k, x) in entries.iter().enumerate().filter_map(|(k, e)| Some((k, expr(e)?))) {
                    // An extent of one dimension (`"s"`, `"s + 1"`) is padded at its end as it should be.
                    let mut dims = names(x);
                    dims.sort();
                    dims.dedup();
                    if dims.len() == 1 && factors(x).is_none_or(|f| f.len() == 1) {
                        continue;
                    }
                    let Err(why) = padded_at_end(x, &is_bucketed, "extent") else { continue };
                    return Err(Error::invalid(
                        format!("tensors '{id}'.shape[{k}]"),
                        "an extent whose first factor is its only bucketed dimension",
                        crate::error::quoted(x),
                    )
                    .with_hint(format!(
                        "{kind} '{id}': shape extent \"{x}\" depends on a bucketed dimension, but {why}: an extent \
                         is padded at its end, which places its rows right only for a bucket on its outermost factor; \
                         give each dimension its own extent (\"shape\": [\"b\", \"s\", ...])"
                    )));
                }
                continue;
            }
            let Some(expr) = t.size.as_ref().and_then(expr) else { continue };
            let Some(d) = names(expr).into_iter().find(|n| is_bucketed(n)) else { continue };
            if let Err(why) = padded_at_end(expr, &is_bucketed, "size") {
                return Err(Error::invalid(
                    format!("tensors '{id}'.size"),
                    "a shape and dtype, or a size whose first factor is the bucketed dimension",
                    crate::error::quoted(expr),
                )
                .with_hint(format!(
                    "{kind} '{id}' is sized in bytes (\"{expr}\") and its size depends on bucketed dimension '{d}', \
                     but {why}: a byte-size tensor is padded at its end, which places rows right only for a bucket \
                     on its outermost dimension (its size lists its factors outermost first). Declare the tensor's \
                     shape and dtype (\"shape\": [...], \"dtype\": ...) so it is placed row by row"
                )));
            }
        }
        Ok(())
    }

    pub fn dims(&self) -> &[String] {
        &self.dims
    }

    /// The graph at `dims` (every declared dimension, each at least 1).
    pub fn instantiate(&self, dims: &Dims) -> Result<ExecGraph> {
        self.check_dims(dims)?;
        let mut doc = self.doc.clone();
        for (i, t) in doc.tensors.iter_mut().enumerate() {
            resolve(t.size.as_mut(), dims, || format!("tensors[{i}].size"))?;
            for (k, x) in t.shape.iter_mut().flatten().enumerate() {
                resolve(Some(x), dims, || format!("tensors[{i}].shape[{k}]"))?;
            }
        }
        for (i, op) in doc.ops.iter_mut().enumerate() {
            resolve(op.workspace.as_mut(), dims, || format!("ops[{i}].workspace"))?;
            for (k, x) in op.dispatch.iter_mut().flatten().enumerate() {
                resolve(Some(x), dims, || format!("ops[{i}].dispatch[{k}]"))?;
            }
        }
        let mut graph = ExecGraph::from_doc(&doc)?;
        graph.dims = self.dims.iter().map(|d| (d.clone(), dims[d])).collect();
        Ok(graph)
    }

    /// Every tensor's size at `dims`, without building the graph (a run needs only these).
    /// `INVALID_ARGUMENT` for a size that is not a whole number of its tensor's dtype, as a
    /// compile at `dims` would refuse it (a run below its bucket compiles at other dims).
    pub fn sizes(&self, dims: &Dims) -> Result<HashMap<String, u64>> {
        self.check_dims(dims)?;
        let mut sizes = HashMap::new();
        for (i, t) in self.doc.tensors.iter().enumerate() {
            let id = &t.id;
            let Some(e) = self.extents(i, t, dims)? else { continue };
            let bytes = shape_bytes(&e.shape, e.elem).ok_or_else(|| {
                Error::invalid(format!("tensor '{id}' at {dims:?}"), "a size below 2^53", "a larger size")
            })?;
            if let Some(dtype) = &t.dtype {
                super::graph::whole_elements(bytes, dtype, || format!("tensor '{id}' at {dims:?}"))?;
            }
            sizes.insert(id.to_string(), bytes);
        }
        Ok(sizes)
    }

    fn check_dims(&self, dims: &Dims) -> Result<()> {
        if let Some(d) = self.dims.iter().find(|d| !dims.contains_key(*d)) {
            return Err(Error::invalid(format!("dims.{d}"), "a positive integer", "undefined")
                .with_hint(format!("dimension '{d}' has no value (the graph declares {:?})", self.dims)));
        }
        if let Some(d) = dims.keys().find(|d| !self.dims.contains(d)) {
            return Err(Error::invalid(
                format!("dims.{d}"),
                format!("one of the graph's dimensions {:?}", self.dims),
                crate::error::quoted(d),
            )
            .with_hint(format!("'{d}' is not a dimension of the graph (it declares {:?})", self.dims)));
        }
        if let Some((d, _)) = dims.iter().find(|(_, &v)| v == 0 || v > crate::MAX_SAFE_INTEGER) {
            return Err(Error::invalid(format!("dims.{d}"), "a positive integer below 2^53", dims[d].to_string()));
        }
        Ok(())
    }
}

/// A tensor's extents at some dimensions: its shape and the bytes of one element (a tensor
/// sized in bytes is one extent of `elem` 1).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Extents {
    shape: Vec<u64>,
    elem: u64,
}

/// Where a tensor's bytes at a run's asked dimensions go in the executor's (bucketed) tensor:
/// its extents at both, each asked extent at most its compiled one, and the bytes of an element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub asked: Vec<u64>,
    pub compiled: Vec<u64>,
    pub elem: u64,
}

impl Layout {
    /// Whether the asked bytes are a prefix of the compiled ones (one copy moves them).
    pub fn is_prefix(&self) -> bool {
        run_count(&self.asked, &self.compiled) <= 1
    }
}

/// The outermost dimension of the runs [`for_each_run`] makes, and their bytes: the dimensions
/// inside it are copied whole in both tensors, so they make one contiguous run with it.
fn run_split(asked: &[u64], from: &[u64], to: &[u64], elem: u64) -> (usize, u64) {
    let mut len = elem;
    for k in (0..asked.len()).rev() {
        len *= asked[k];
        if k == 0 || asked[k] != from[k] || asked[k] != to[k] {
            return (k, len);
        }
    }
    (0, len)
}

/// How many runs copy a box of `asked` between tensors of shapes `asked` and `compiled`.
fn run_count(asked: &[u64], compiled: &[u64]) -> u64 {
    let (p, _) = run_split(asked, asked, compiled, 1);
    asked[..p].iter().product()
}

/// Copies the box `asked` (per extent, from index 0) from a row-major tensor of shape `from`
/// to one of shape `to` (every `asked[k] <= from[k], to[k]`), `elem` bytes an element, as
/// contiguous runs: `f(source offset, destination offset, bytes)`, in order. Innermost extents
/// copied whole in both merge into their outer one, so a bucket on the outermost dimension is
/// one run and a bucket on an inner one a run per row (see Note [Buckets on inner dimensions]).
pub fn for_each_run(asked: &[u64], from: &[u64], to: &[u64], elem: u64, mut f: impl FnMut(u64, u64, u64)) {
    assert!(from.len() == asked.len() && to.len() == asked.len(), "one extent per dimension");
    if asked.contains(&0) {
        return;
    }
    let strides = |shape: &[u64]| {
        let mut s = vec![0; shape.len()];
        let mut acc = elem;
        for k in (0..shape.len()).rev() {
            s[k] = acc;
            acc *= shape[k];
        }
        s
    };
    let (sf, st) = (strides(from), strides(to));
    let (p, len) = run_split(asked, from, to, elem);
    let mut idx = vec![0u64; p];
    loop {
        let src = idx.iter().zip(&sf).map(|(i, s)| i * s).sum();
        let dst = idx.iter().zip(&st).map(|(i, s)| i * s).sum();
        f(src, dst, len);
        // The next index over the outer extents, innermost fastest.
        let Some(k) = (0..p).rev().find(|&k| idx[k] + 1 < asked[k]) else { return };
        idx[k] += 1;
        idx[k + 1..].fill(0);
    }
}

/// The names an expression refers to (dimensions; unknown names are the parse's to refuse).
fn names(expr: &str) -> Vec<String> {
    tokenize(expr).unwrap_or_default().into_iter().filter(|t| is_name(t)).collect()
}

/// Whether `expr` (a size or a shape extent, `what`) is placed right when padded at its end: no
/// bucketed dimension in it, or its first factor is one bucketed dimension named alone and no
/// other factor names one (Note [Buckets on inner dimensions]); else why not.
fn padded_at_end(expr: &str, is_bucketed: &impl Fn(&String) -> bool, what: &str) -> std::result::Result<(), String> {
    let Some(d) = names(expr).into_iter().find(|n| is_bucketed(n)) else { return Ok(()) };
    let factors = factors(expr);
    let first_alone = |f: &Vec<String>| f.len() == 1 && is_bucketed(&f[0]);
    match &factors {
        None => Err(format!("its {what} is not a product")),
        Some(f) if first_alone(&f[0]) => match f[1..].iter().flatten().find(|n| is_bucketed(n)) {
            Some(other) => Err(format!("'{other}' is bucketed too")),
            None => Ok(()),
        },
        Some(_) => Err(format!("'{d}' is not the first factor of its {what}")),
    }
}

/// The tokens of each top-level factor of `expr` when it is a product (`"b * (s + 1) * 4"`:
/// `[[b], [(, s, +, 1, )], [4]]`), outermost first; `None` when a `+`, `-` or `/` joins its
/// top level.
fn factors(expr: &str) -> Option<Vec<Vec<String>>> {
    let tokens = tokenize(expr).ok()?;
    let mut out = vec![Vec::new()];
    let mut depth = 0usize;
    for t in tokens {
        match t.as_str() {
            "(" => depth += 1,
            ")" => depth = depth.saturating_sub(1),
            "*" if depth == 0 => {
                out.push(Vec::new());
                continue;
            }
            "+" | "-" | "/" if depth == 0 => return None,
            _ => {}
        }
        out.last_mut().expect("one factor at least").push(t);
    }
    // A parenthesized product is its factors (`"(b * s) * 16"` is `b`, `s`, `16`).
    let mut flat = Vec::with_capacity(out.len());
    for f in out {
        let wrapped = f.len() > 2 && f[0] == "(" && f[f.len() - 1] == ")" && encloses(&f);
        match wrapped.then(|| factors(&f[1..f.len() - 1].join(" "))).flatten() {
            Some(inner) => flat.extend(inner),
            None => flat.push(f),
        }
    }
    Some(flat)
}

/// Whether the parenthesis opening `tokens` closes at its last token (`(a) * (b)` does not).
fn encloses(tokens: &[String]) -> bool {
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate() {
        match t.as_str() {
            "(" => depth += 1,
            ")" => {
                depth -= 1;
                if depth == 0 {
                    return i == tokens.len() - 1;
                }
            }
            _ => {}
        }
    }
    false
}

fn is_name(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Replaces an expression in place by its value at `dims`; integers stay as they are.
fn resolve(slot: Option<&mut Extent>, dims: &Dims, path: impl FnOnce() -> String) -> Result<()> {
    if let Some(x @ Extent::Expr(_)) = slot {
        *x = Extent::Int(value(x, dims, &path())?);
    }
    Ok(())
}

/// An extent's value at `dims`.
fn value(x: &Extent, dims: &Dims, path: &str) -> Result<u64> {
    match x {
        Extent::Int(n) => Ok(*n),
        Extent::Expr(expr) => eval(expr, dims).map_err(|e| {
            Error::invalid(path, "an expression over the graph's dims", crate::error::quoted(expr)).with_hint(e)
        }),
    }
}

/// An extent's expression, if it is one.
fn expr(x: &Extent) -> Option<&str> {
    match x {
        Extent::Expr(e) => Some(e),
        Extent::Int(_) => None,
    }
}

/// Evaluates `+ - * /` (integer, `/` rounding up, as sizes want), parentheses, integers and
/// dimension names, with overflow and negative results refused.
pub fn eval(expr: &str, dims: &Dims) -> std::result::Result<u64, String> {
    let tokens = tokenize(expr)?;
    let mut p = Parser { tokens: &tokens, at: 0, depth: 0, dims };
    let v = p.sum()?;
    if p.at != tokens.len() {
        return Err(format!("unexpected '{}' in \"{expr}\"", tokens[p.at]));
    }
    u64::try_from(v).map_err(|_| format!("\"{expr}\" is negative ({v})"))
}

fn tokenize(expr: &str) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = expr.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if "+-*/()".contains(c) {
            out.push(c.to_string());
            chars.next();
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let mut word = String::new();
            while let Some(&c) = chars.peek().filter(|c| c.is_ascii_alphanumeric() || **c == '_') {
                word.push(c);
                chars.next();
            }
            out.push(word);
        } else {
            return Err(format!("unexpected character '{c}' in \"{expr}\""));
        }
    }
    Ok(out)
}

/// Parentheses nested deeper than this are refused: the parser recurses once per level, and
/// runs evaluate on threads with small stacks.
const MAX_NESTING: usize = 64;

struct Parser<'a> {
    tokens: &'a [String],
    at: usize,
    /// Parentheses open at `at`.
    depth: usize,
    dims: &'a Dims,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.at).map(String::as_str)
    }

    fn sum(&mut self) -> std::result::Result<i128, String> {
        let mut v = self.product()?;
        while let Some(op @ ("+" | "-")) = self.peek() {
            let plus = op == "+";
            self.at += 1;
            let r = self.product()?;
            v = if plus { v + r } else { v - r };
            check(v)?;
        }
        Ok(v)
    }

    fn product(&mut self) -> std::result::Result<i128, String> {
        let mut v = self.atom()?;
        while let Some(op @ ("*" | "/")) = self.peek() {
            let times = op == "*";
            self.at += 1;
            let r = self.atom()?;
            v = if times {
                v * r
            } else if r == 0 {
                return Err("division by zero".into());
            } else {
                (v + r - 1).div_euclid(r)
            };
            check(v)?;
        }
        Ok(v)
    }

    fn atom(&mut self) -> std::result::Result<i128, String> {
        let Some(t) = self.peek().map(str::to_string) else { return Err("expression ends early".into()) };
        self.at += 1;
        if t == "(" {
            if self.depth == MAX_NESTING {
                return Err(format!("parentheses nest deeper than {MAX_NESTING}"));
            }
            self.depth += 1;
            let v = self.sum()?;
            self.depth -= 1;
            if self.peek() != Some(")") {
                return Err("missing ')'".into());
            }
            self.at += 1;
            return Ok(v);
        }
        // Every operand is checked, so a product of two stays far inside i128.
        let v = match (t.parse::<u64>(), self.dims.get(&t)) {
            (Ok(n), _) => n as i128,
            (_, Some(&v)) => v as i128,
            _ => return Err(format!("unknown dimension '{t}'")),
        };
        check(v)?;
        Ok(v)
    }
}

fn check(v: i128) -> std::result::Result<(), String> {
    if v.unsigned_abs() > crate::MAX_SAFE_INTEGER as u128 {
        return Err("value exceeds 2^53 - 1".into());
    }
    Ok(())
}

/// Copies a device input or output below its bucket may take (one per contiguous run): more
/// are refused, pointing to host bytes.
pub const MAX_DEVICE_RUNS: u64 = 4096;

/// How a run's dimensions map to a compiled shape.
#[derive(Debug, Clone, Default)]
pub enum ShapePolicy {
    /// One executor per distinct shape.
    #[default]
    Exact,
    /// Per dimension, sorted sizes: a value rounds up to the smallest bucket that holds it
    /// (dimensions without buckets stay exact; above the largest bucket is refused).
    Buckets(HashMap<String, Vec<u64>>),
}

/// How the cache has been used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShapeCacheStats {
    /// Runs served by an executor compiled earlier.
    pub hits: u64,
    /// Runs that compiled a new executor.
    pub misses: u64,
    /// Executors released to stay within the capacity.
    pub evictions: u64,
    /// Executors held now.
    pub cached: u64,
    /// Device bytes the held executors hold (slabs and constants).
    pub device_bytes: u64,
}

/// Executors of one symbolic graph by concrete shape, least recently used released first.
pub struct ShapeCache {
    gpu: Gpu,
    graph: SymbolicGraph,
    policy: ShapePolicy,
    state: Mutex<CacheState>,
}

struct CacheState {
    entries: Lru<Dims, Arc<Executor>>,
    stats: ShapeCacheStats,
    /// Times `clear` ran: a compile that saw it run meanwhile must not fill the cleared cache.
    clears: u64,
    /// The options of every compile, until `close` takes them: then runs claimed before compile
    /// with the ones they hold, nothing is cached, and what the options hold (shared weights)
    /// goes once the last such run ended, not when the cache itself is dropped.
    options: Option<Arc<CompileOptions>>,
    /// The scope charged with the cached executors' device bytes ([`ShapeCache::charge_to`]):
    /// Note [Shape caches are charged as they grow].
    charge: Option<ScopeCharge>,
}

/// One run of a shape cache, claimed before it starts ([`ShapeCache::claim`]): it holds the
/// compile options, so a `close()` from then on lets the run complete (compiling for itself if
/// it must).
pub struct ShapeClaim<C: std::ops::Deref<Target = ShapeCache>> {
    cache: C,
    options: Arc<CompileOptions>,
}

impl<C: std::ops::Deref<Target = ShapeCache>> ShapeClaim<C> {
    /// Runs as [`ShapeCache::run`] does.
    pub async fn run(
        self,
        dims: &Dims,
        inputs: &HashMap<String, Vec<u8>>,
        io: &DeviceIo,
        options: RunOptions,
    ) -> Result<RunOutput> {
        let cache = &*self.cache;
        // Before any compile: a shape the run cannot return is refused whatever is cached.
        let asked = cache.graph.sizes(dims)?;
        let (exe, shape, cached) = cache.lookup(dims, &self.options)?;
        let out = cache.run_at(&exe, &shape, dims, &asked, inputs, io, options).await;
        if !cached {
            exe.release();
        }
        out
    }
}

impl ShapeCache {
    /// `options` apply to every compile (`records` are refused: they describe one shape).
    pub fn new(
        gpu: &Gpu,
        graph: SymbolicGraph,
        policy: ShapePolicy,
        capacity: usize,
        options: CompileOptions,
    ) -> Result<ShapeCache> {
        if capacity == 0 {
            return Err(Error::invalid("capacity", "at least 1", "0")
                .with_hint("a shape cache holds at least 1 executor (capacity >= 1)"));
        }
        if options.records.is_some() {
            return Err(Error::invalid(
                "options.records",
                "none (a shape cache plans each shape itself)",
                "usage records",
            )
            .with_hint("usage records describe one shape; a shape cache plans each shape itself"));
        }
        if let ShapePolicy::Buckets(b) = &policy {
            for (d, sizes) in b {
                if !graph.dims.contains(d) {
                    return Err(Error::invalid(
                        format!("buckets.{d}"),
                        format!("a dimension of the graph {:?}", graph.dims),
                        crate::error::quoted(d),
                    )
                    .with_hint(format!("buckets given for '{d}', which is not a dimension of the graph")));
                }
                if sizes.is_empty() || sizes.contains(&0) {
                    return Err(Error::invalid(
                        format!("buckets.{d}"),
                        "a non-empty list of positive sizes",
                        format!("{sizes:?}"),
                    ));
                }
            }
            let mut bucketed: Vec<&String> = b.keys().collect();
            bucketed.sort();
            graph.check_placeable(&bucketed)?;
        }
        let state = CacheState {
            entries: Lru::new(capacity),
            stats: ShapeCacheStats::default(),
            clears: 0,
            options: Some(Arc::new(options)),
            charge: None,
        };
        let cache = ShapeCache { gpu: gpu.clone(), graph, policy, state: Mutex::new(state) };
        cache.check_at_sample_shape()?;
        Ok(cache)
    }

    /// The smallest shape the policy runs at: every dimension at 1, or at its smallest bucket.
    fn sample_shape(&self) -> Dims {
        let smallest = |d: &String| match &self.policy {
            ShapePolicy::Buckets(b) => b.get(d).and_then(|sizes| sizes.iter().copied().min()).unwrap_or(1),
            ShapePolicy::Exact => 1,
        };
        self.graph.dims.iter().map(|d| (d.clone(), smallest(d))).collect()
    }

    /// Note [Shape executors fail early]: a shape cache compiles a shape's executor at its first
    /// run, so a kernel that does not compile, bindings that do not match, a missing param or
    /// short op params would surface in production, at the first request of each shape. What
    /// does not depend on the shape is checked here, at the sample shape and without taking any
    /// device memory: every op's pipeline is built (WGSL compiled, bindings matched against the
    /// op; the pipelines are cached for the compiles to come), op params are long enough for
    /// the kernel's uniform, a dims uniform fits the graph's dims, every param has data, and no
    /// tensor exceeds the binding limit.
    fn check_at_sample_shape(&self) -> Result<()> {
        let shape = self.sample_shape();
        let graph = self.graph.instantiate(&shape)?;
        let options = self.options()?;
        check_binding_limit(&graph, self.gpu.limits().max_storage_buffer_binding_size)?;
        check_params_given(&graph, &options.params, options.weights.as_deref())?;
        for op in &graph.ops {
            let Some(pipeline) = op_pipeline(&self.gpu, &graph, op)? else { continue };
            check_dims_uniform(&pipeline, &graph.dims, &format!("op '{}'", op.name))?;
            if let Some(params) = &op.params {
                check_uniform_len(&pipeline, params.len(), &format!("op '{}'", op.name))?;
            }
        }
        Ok(())
    }

    /// Compiles the executors of `shapes` now (each rounded up to its bucket), so the first
    /// requests of those shapes find them cached.
    pub fn warm_up(&self, shapes: &[Dims]) -> Result<()> {
        for dims in shapes {
            self.executor(dims)?;
        }
        Ok(())
    }

    /// The shape `dims` runs at under the policy.
    pub fn concrete(&self, dims: &Dims) -> Result<Dims> {
        self.graph.check_dims(dims)?;
        let ShapePolicy::Buckets(buckets) = &self.policy else { return Ok(dims.clone()) };
        dims.iter()
            .map(|(d, &v)| match buckets.get(d) {
                None => Ok((d.clone(), v)),
                Some(sizes) => match sizes.iter().copied().filter(|&b| b >= v).min() {
                    Some(b) => Ok((d.clone(), b)),
                    None => Err(Error::invalid(
                        format!("dims.{d}"),
                        format!("at most {} (its largest bucket)", sizes.iter().max().copied().unwrap_or(0)),
                        v.to_string(),
                    )
                    .with_hint(format!(
                        "{d} = {v} is above its largest bucket ({}); add a bucket",
                        sizes.iter().max().copied().unwrap_or(0)
                    ))),
                },
            })
            .collect()
    }

    /// The executor for `dims` (compiled on a miss), and the shape it runs at. When the cache
    /// was cleared while it compiled, the executor comes back released (nothing may keep it).
    /// `USE_AFTER_FREE` once closed.
    pub fn executor(&self, dims: &Dims) -> Result<(Arc<Executor>, Dims)> {
        let options = self.options()?;
        let (exe, shape, cached) = self.lookup(dims, &options)?;
        if !cached {
            exe.release();
        }
        Ok((exe, shape))
    }

    /// The compile options; `USE_AFTER_FREE` once closed.
    fn options(&self) -> Result<Arc<CompileOptions>> {
        lock(&self.state)
            .options
            .clone()
            .ok_or_else(|| Error::UseAfterFree("this shape executor was released; compile the shapes again".into()))
    }

    /// [`Self::executor`] compiling with `options`, and whether the cache holds it: not when the
    /// cache was cleared or closed while it compiled (the caller runs it once, then releases it).
    fn lookup(&self, dims: &Dims, options: &CompileOptions) -> Result<(Arc<Executor>, Dims, bool)> {
        let shape = self.concrete(dims)?;
        let clears = {
            let mut st = lock(&self.state);
            if let Some(exe) = st.hit(&shape) {
                return Ok((exe, shape, true));
            }
            st.clears
        };
        // Compiled outside the lock: other shapes keep running meanwhile.
        let exe = Arc::new(self.gpu.compile(self.graph.instantiate(&shape)?, options.clone())?);
        let mut st = lock(&self.state);
        if st.options.is_none() || st.clears != clears {
            return Ok((exe, shape, false));
        }
        if let Some(first) = st.hit(&shape) {
            // Another run compiled this shape meanwhile: one executor per shape.
            exe.release();
            return Ok((first, shape, true));
        }
        let st = &mut *st;
        if let Some(charge) = st.charge.as_mut() {
            // Note [Shape caches are charged as they grow]: the charge follows the cached
            // executors' bytes, checked before the new executor is cached. One that would take
            // the scope past its limit is released at once and the run fails with
            // QUOTA_EXCEEDED; the cache and its charge stay as they were.
            let held: u64 = st.entries.values().map(|e| e.device_bytes()).sum();
            let evicted = st.entries.victim().map_or(0, |e| e.device_bytes());
            if let Err(e) = charge.resize(held - evicted + exe.device_bytes()) {
                exe.release();
                return Err(e.into());
            }
        }
        st.stats.misses += 1;
        if let Some(old) = st.entries.insert(shape.clone(), exe.clone()) {
            old.release();
            st.stats.evictions += 1;
        }
        Ok((exe, shape, true))
    }

    /// Runs at `dims`: inputs sized for `dims` (host bytes or blocks) are placed into the
    /// compiled shape with zeros elsewhere, and outputs (read back, into blocks or left on the
    /// device) are cut to their size at `dims`, row by row for tensors with a shape (Note
    /// [Buckets on inner dimensions]); external blocks are bound whole at the compiled shape, and
    /// the dims uniform holds `dims`. Runs sharing a shape's executor take turns in the order
    /// they reach it. `USE_AFTER_FREE` once closed.
    pub async fn run(
        &self,
        dims: &Dims,
        inputs: &HashMap<String, Vec<u8>>,
        io: &DeviceIo,
        options: RunOptions,
    ) -> Result<RunOutput> {
        ShapeCache::claim(self)?.run(dims, inputs, io, options).await
    }

    /// Claims `cache` for one run now, before the run starts (a caller that returns before its
    /// run is polled claims first, so a `close()` right after lets that run complete).
    /// `USE_AFTER_FREE` once closed.
    pub fn claim<C: std::ops::Deref<Target = ShapeCache>>(cache: C) -> Result<ShapeClaim<C>> {
        let options = cache.options()?;
        Ok(ShapeClaim { cache, options })
    }

    /// Runs `exe`, compiled at `shape`, for a run at `dims`, whose tensors have `asked` sizes:
    /// host inputs placed into the compiled shape with zeros elsewhere and host outputs cut
    /// back, row by row where a tensor's layout asks for it (Note [Buckets on inner
    /// dimensions]); device blocks likewise, by one GPU copy per contiguous run; the dims
    /// uniform holds `dims`.
    #[allow(clippy::too_many_arguments)]
    async fn run_at(
        &self,
        exe: &Executor,
        shape: &Dims,
        dims: &Dims,
        asked: &HashMap<String, u64>,
        inputs: &HashMap<String, Vec<u8>>,
        io: &DeviceIo,
        options: RunOptions,
    ) -> Result<RunOutput> {
        let exact = shape == dims;
        let layout = |id: &str| if exact { Ok(None) } else { self.graph.layout(id, dims, shape) };
        let mut padded = HashMap::with_capacity(inputs.len());
        for (id, bytes) in inputs {
            let want = asked.get(id).copied();
            if want.is_some_and(|w| w != bytes.len() as u64) {
                return Err(Error::invalid(
                    format!("inputs.{id}"),
                    format!("{} bytes", want.unwrap_or(0)),
                    format!("{} bytes", bytes.len()),
                )
                .with_hint(format!(
                    "input '{id}' must be {} bytes at {dims:?}, got {}",
                    want.unwrap_or(0),
                    bytes.len()
                )));
            }
            let Some(t) = exe.graph().tensor(id) else {
                padded.insert(id.clone(), bytes.clone());
                continue;
            };
            let b = match layout(id)? {
                Some(l) if want.is_some() && !l.is_prefix() => {
                    let mut b = vec![0u8; t.size as usize];
                    for_each_run(&l.asked, &l.asked, &l.compiled, l.elem, |s, d, n| {
                        let (s, d, n) = (s as usize, d as usize, n as usize);
                        b[d..d + n].copy_from_slice(&bytes[s..s + n]);
                    });
                    b
                }
                _ => {
                    let mut b = bytes.clone();
                    b.resize(t.size as usize, 0);
                    b
                }
            };
            padded.insert(id.clone(), b);
        }
        let mut io = io.clone();
        io.dims = Some(self.graph.dims.iter().map(|d| dims[d]).collect());
        if !exact {
            self.device_runs(exe, shape, dims, asked, &mut io)?;
        }
        let mut out = exe.run_io(&padded, &io, options).await?;
        if !exact {
            for (id, bytes) in &mut out.outputs {
                let Some(&size) = asked.get(id) else { continue };
                match layout(id)? {
                    Some(l) if !l.is_prefix() => {
                        let mut cut = vec![0u8; size as usize];
                        for_each_run(&l.asked, &l.compiled, &l.asked, l.elem, |s, d, n| {
                            let (s, d, n) = (s as usize, d as usize, n as usize);
                            cut[d..d + n].copy_from_slice(&bytes[s..s + n]);
                        });
                        *bytes = cut;
                    }
                    _ => bytes.truncate(size as usize),
                }
            }
        }
        Ok(out)
    }

    /// Device blocks of a run at `dims` below its bucket `shape`: each input and output block
    /// moves the asked bytes (`io.bytes`), by one copy when they are a prefix of the tensor and
    /// by the runs of [`for_each_run`] otherwise (`io.runs`), each whole 4-byte words and at most
    /// [`MAX_DEVICE_RUNS`]; what cannot be copied so is refused, as is an external block smaller
    /// than the bucket's tensor (external tensors are bound whole, never padded or cut).
    fn device_runs(
        &self,
        exe: &Executor,
        shape: &Dims,
        dims: &Dims,
        asked: &HashMap<String, u64>,
        io: &mut DeviceIo,
    ) -> Result<()> {
        io.bytes = asked.clone();
        let g = exe.graph();
        for t in g.externals() {
            if let Some(block) = io.inputs.get(&t.id).filter(|b| b.requested_size() < t.size) {
                let shapes = match self.graph.layout(&t.id, dims, shape)? {
                    Some(l) if l.elem > 1 || l.asked.len() > 1 => {
                        format!("shape {:?} asked, {:?} in the bucket", l.asked, l.compiled)
                    }
                    _ => format!("{} bytes asked", asked.get(&t.id).copied().unwrap_or(0)),
                };
                return Err(Error::invalid(
                    format!("inputs.{}", t.id),
                    "a block sized for shapeOf(dims)",
                    "a block of another size",
                )
                .with_hint(format!(
                    "external tensor '{}': its block holds {} bytes, but a run at {dims:?} binds the tensor whole in \
                     its bucket's shape ({shapes}: {} bytes, at {shape:?}): external tensors are bound in place, \
                     never padded or cut. Size the block for shapeOf(dims), the dimensions the run compiles at, and \
                     lay it out in that shape",
                    t.id,
                    block.requested_size(),
                    t.size,
                )));
            }
        }
        let mut moved: Vec<(&str, &str)> = io
            .inputs
            .keys()
            .filter(|id| g.tensor(id).is_some_and(|t| t.kind == super::graph::TensorKind::Input))
            .map(|id| ("input", id.as_str()))
            .collect();
        moved.extend(
            g.outputs()
                .filter(|t| io.outputs_on_device || io.outputs_into.contains_key(&t.id))
                .map(|t| ("output", t.id.as_str())),
        );
        let mut runs = HashMap::new();
        for (role, id) in moved {
            let Some(l) = self.graph.layout(id, dims, shape)? else { continue };
            if l.is_prefix() {
                continue;
            }
            let count = run_count(&l.asked, &l.compiled);
            let (from, to) = if role == "input" { (&l.asked, &l.compiled) } else { (&l.compiled, &l.asked) };
            let mut copies = Vec::new();
            let mut aligned = true;
            if count <= MAX_DEVICE_RUNS {
                for_each_run(&l.asked, from, to, l.elem, |s, d, n| {
                    aligned &= s % 4 == 0 && d % 4 == 0 && n % 4 == 0;
                    copies.push((s, d, n));
                });
            }
            if count > MAX_DEVICE_RUNS || !aligned {
                let why = if aligned {
                    format!("{count} copies, above the {MAX_DEVICE_RUNS} a run makes per block")
                } else {
                    "rows that are not whole 4-byte words (GPU copies move words)".to_string()
                };
                return Err(Error::invalid(
                    format!("{role}s.{id}"),
                    "host bytes, or a block laid out in the bucket's shape",
                    "a block in the asked shape",
                )
                .with_hint(format!(
                    "device {role} '{id}': a run at {dims:?} has it in shape {:?}, placed row by row into its bucket's \
                     shape {:?} (at {shape:?}), which takes {why}. Pass host bytes instead, or a block laid out in \
                     the bucket's shape with the run at shapeOf(dims)",
                    l.asked, l.compiled
                )));
            }
            runs.insert(id.to_string(), copies);
        }
        io.runs = runs;
        Ok(())
    }

    pub fn stats(&self) -> ShapeCacheStats {
        let st = lock(&self.state);
        ShapeCacheStats {
            cached: st.entries.len() as u64,
            device_bytes: st.entries.values().map(|e| e.device_bytes()).sum(),
            ..st.stats
        }
    }

    pub fn graph(&self) -> &SymbolicGraph {
        &self.graph
    }

    /// Releases every executor (their slabs return to the heap), and any compiled meanwhile
    /// once its run ends.
    pub fn clear(&self) {
        let mut st = lock(&self.state);
        st.clears += 1;
        for e in st.entries.drain() {
            e.release();
        }
        if let Some(charge) = st.charge.as_mut() {
            let _ = charge.resize(0); // a shrink always succeeds
        }
    }

    /// Charges the cached executors' device bytes to `scope` from now on, as they come and go
    /// (Note [Shape caches are charged as they grow]); returned at `close()` or drop.
    pub fn charge_to(&self, scope: &Scope) -> Result<()> {
        let heap = self.gpu.heap()?;
        let mut st = lock(&self.state);
        let held: u64 = st.entries.values().map(|e| e.device_bytes()).sum();
        heap.charge_once(&mut st.charge, scope, held, "compileShapes", "shape executor")
    }

    /// [`Self::clear`], for good: later runs are `USE_AFTER_FREE`, a run claimed before compiles
    /// for itself (when it must) and releases its executor when it ends, and the compile options
    /// go (shared weights let go once no executor and no such run holds them).
    pub fn close(&self) {
        let (options, charge) = {
            let mut st = lock(&self.state);
            (st.options.take(), st.charge.take())
        };
        self.clear();
        drop(charge);
        drop(options); // outside the lock: the last hold on shared weights frees their block
    }
}

impl CacheState {
    /// The cached executor of `shape`, now the most recently used.
    fn hit(&mut self, shape: &Dims) -> Option<Arc<Executor>> {
        let exe = self.entries.get(shape)?.clone();
        self.stats.hits += 1;
        Some(exe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(asked: &[u64], from: &[u64], to: &[u64], elem: u64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        for_each_run(asked, from, to, elem, |s, d, n| out.push((s, d, n)));
        out
    }

    /// Places `x` of shape `asked` into a zeroed tensor of shape `compiled` (f32 elements).
    fn place(x: &[f32], asked: &[u64], compiled: &[u64]) -> Vec<f32> {
        let src: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut dst = vec![0u8; compiled.iter().product::<u64>() as usize * 4];
        for_each_run(asked, asked, compiled, 4, |s, d, n| {
            dst[d as usize..(d + n) as usize].copy_from_slice(&src[s as usize..(s + n) as usize])
        });
        dst.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    #[test]
    fn rows_are_placed_into_the_bucket_and_cut_back() {
        // b=2, s=3 in the bucket s=4: per-row placement keeps the rows apart.
        let x = [1.0, 2.0, 3.0, 10.0, 20.0, 30.0];
        let placed = place(&x, &[2, 3], &[2, 4]);
        assert_eq!(placed, [1.0, 2.0, 3.0, 0.0, 10.0, 20.0, 30.0, 0.0]);
        let sums: Vec<f32> = placed.chunks(4).map(|r| r.iter().sum()).collect();
        assert_eq!(sums, [6.0, 60.0], "row sums at the bucket's shape");
        // Padding the flat tensor at its end (what a byte size gives) mixes the rows.
        let mut flat = x.to_vec();
        flat.resize(8, 0.0);
        let wrong: Vec<f32> = flat.chunks(4).map(|r| r.iter().sum()).collect();
        assert_eq!(wrong, [16.0, 50.0]);
        // Cut back: the runs in the other direction give the asked bytes again.
        assert_eq!(runs(&[2, 3], &[2, 4], &[2, 3], 4), [(0, 0, 12), (16, 12, 12)]);
        assert_eq!(runs(&[2, 3], &[2, 3], &[2, 4], 4), [(0, 0, 12), (12, 16, 12)]);
    }

    #[test]
    fn whole_inner_extents_merge_into_one_run() {
        // A bucket on the outermost dimension: one run, as a byte size pads.
        assert_eq!(runs(&[3, 4, 5], &[3, 4, 5], &[8, 4, 5], 2), [(0, 0, 120)]);
        assert!(Layout { asked: vec![3, 4], compiled: vec![8, 4], elem: 4 }.is_prefix());
        assert!(!Layout { asked: vec![3, 4], compiled: vec![3, 8], elem: 4 }.is_prefix());
        // A bucket on the middle one: a run per outer index, inner extents whole.
        assert_eq!(runs(&[2, 3, 5], &[2, 3, 5], &[2, 4, 5], 1), [(0, 0, 15), (15, 20, 15)]);
        // Every extent padded: a run per row of the innermost extent.
        let r = runs(&[2, 2, 3], &[2, 2, 3], &[3, 4, 4], 4);
        assert_eq!(r, [(0, 0, 12), (12, 16, 12), (24, 64, 12), (36, 80, 12)]);
        assert_eq!(run_count(&[2, 2, 3], &[3, 4, 4]), 4);
        // A scalar, an exact shape, and an empty box.
        assert_eq!(runs(&[], &[], &[], 4), [(0, 0, 4)]);
        assert_eq!(runs(&[5, 6], &[5, 6], &[5, 6], 4), [(0, 0, 120)]);
        assert!(runs(&[0, 6], &[2, 6], &[2, 6], 4).is_empty());
    }

    fn graph(tensors: &str) -> SymbolicGraph {
        let k = r#"{"source": "@group(0) @binding(0) var<storage, read_write> a: array<f32>; @group(0) @binding(1) var<storage, read_write> b: array<f32>; @compute @workgroup_size(1) fn main() {}"}"#;
        let json = format!(
            r#"{{"dims": ["b", "s"], "kernels": {{"k": {k}}}, "tensors": [{tensors}, {{"id": "y", "size": "b * 4", "kind": "output"}}], "ops": [{{"kernel": "k", "inputs": ["x"], "outputs": ["y"]}}]}}"#
        );
        SymbolicGraph::parse(&json).unwrap()
    }

    fn placeable(g: &SymbolicGraph, bucketed: &[&str]) -> std::result::Result<(), String> {
        let names: Vec<String> = bucketed.iter().map(|s| s.to_string()).collect();
        g.check_placeable(&names.iter().collect::<Vec<_>>()).map_err(|e| format!("{}: {e}", e.code()))
    }

    #[test]
    fn byte_sizes_take_buckets_on_their_first_factor_only() {
        let bytes = graph(r#"{"id": "x", "size": "b * s * 4", "kind": "input"}"#);
        assert_eq!(placeable(&bytes, &["b"]), Ok(()));
        assert_eq!(placeable(&bytes, &[]), Ok(()));
        let e = placeable(&bytes, &["s"]).unwrap_err();
        assert!(e.starts_with("INVALID_ARGUMENT"), "{e}");
        assert!(e.contains("input 'x'") && e.contains("'s' is not the first factor") && e.contains("shape"), "{e}");
        let e = placeable(&bytes, &["b", "s"]).unwrap_err();
        assert!(e.contains("'s' is bucketed too"), "{e}");
        let sum = graph(r#"{"id": "x", "size": "(b + 1) * 4", "kind": "input"}"#);
        assert!(placeable(&sum, &["b"]).unwrap_err().contains("not the first factor"));
        let sum = graph(r#"{"id": "x", "size": "b * 4 + 4", "kind": "input"}"#);
        assert!(placeable(&sum, &["b"]).unwrap_err().contains("its size is not a product"));
        let later = graph(r#"{"id": "x", "size": "4 * b", "kind": "input"}"#);
        assert!(placeable(&later, &["b"]).unwrap_err().contains("'b' is not the first factor"));
        // Outputs are checked too (here y: "b * 4"); intermediates are not.
        let g = graph(r#"{"id": "x", "size": 16, "kind": "input"}, {"id": "t", "size": "s * b * 4"}"#);
        assert_eq!(placeable(&g, &["b"]), Ok(()));
        // A shaped tensor takes a bucket on any dimension, but not two in one extent.
        let shaped = graph(r#"{"id": "x", "shape": ["b", "s"], "dtype": "f32", "kind": "input"}"#);
        assert_eq!(placeable(&shaped, &["s"]), Ok(()));
        assert_eq!(placeable(&shaped, &["b", "s"]), Ok(()));
        let joint = graph(r#"{"id": "x", "shape": ["b * s"], "dtype": "f32", "kind": "input"}"#);
        assert!(placeable(&joint, &["b", "s"]).unwrap_err().contains("'s' is bucketed too"));
        // Inside an extent the rule of byte sizes holds: padded at its end, "b * s" is right for a
        // bucket on b only. One dimension, however written, is padded right.
        assert_eq!(placeable(&joint, &["b"]), Ok(()));
        let e = placeable(&joint, &["s"]).unwrap_err();
        assert!(e.contains("shape[0]") && e.contains("'s' is not the first factor of its extent"), "{e}");
        let one = graph(r#"{"id": "x", "shape": ["b", "s + 1", "4 * s"], "dtype": "f32", "kind": "input"}"#);
        assert!(placeable(&one, &["s"]).unwrap_err().contains("shape[2]"));
        let one = graph(r#"{"id": "x", "shape": ["b", "s + 1", "s * 4"], "dtype": "f32", "kind": "input"}"#);
        assert_eq!(placeable(&one, &["s"]), Ok(()));
        // A parenthesized product is its factors.
        let nested = graph(r#"{"id": "x", "size": "(b * s) * 16", "kind": "input"}"#);
        assert_eq!(placeable(&nested, &["b"]), Ok(()));
        assert!(placeable(&nested, &["s"]).is_err());
    }

    #[test]
    fn shapes_give_sizes_and_layouts_at_any_dims() {
        let g = graph(
            r#"{"id": "x", "shape": ["b", "s + 1"], "dtype": "f16", "size": "b * (s + 1) * 2", "kind": "input"}"#,
        );
        let at = |b, s| Dims::from([("b".to_string(), b), ("s".to_string(), s)]);
        assert_eq!(g.sizes(&at(2, 3)).unwrap()["x"], 16);
        let l = g.layout("x", &at(2, 3), &at(2, 4)).unwrap().unwrap();
        assert_eq!(l, Layout { asked: vec![2, 4], compiled: vec![2, 5], elem: 2 });
        assert_eq!(g.instantiate(&at(3, 1)).unwrap().tensor("x").unwrap().size, 12);
        // A size that agrees with the shape at 1s but not elsewhere is refused at parse.
        let k = r#"{"source": "@compute @workgroup_size(1) fn main() {}"}"#;
        let bad = format!(
            r#"{{"dims": ["b"], "kernels": {{"k": {k}}}, "tensors": [{{"id": "x", "shape": ["b", "b"], "dtype": "u8", "size": "b", "kind": "input"}}], "ops": []}}"#
        );
        let e = SymbolicGraph::parse(&bad).unwrap_err().to_string();
        assert!(e.contains("size 2 disagrees with shape [2, 2]"), "{e}");
        let no_dtype = bad.replace(r#""dtype": "u8", "size": "b", "#, "");
        let e = SymbolicGraph::parse(&no_dtype).unwrap_err().to_string();
        assert!(e.contains("shape needs a dtype"), "{e}");
    }
}
