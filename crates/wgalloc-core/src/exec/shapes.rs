//! Changing shapes: a graph whose sizes and dispatch counts are expressions over named
//! dimensions (`"dims": ["batch"]`, `"size": "batch * 1024"`, `"dispatch": ["batch * 4"]`),
//! and a cache of executors keyed by the concrete dimensions a run asks for. Dimensions are
//! taken exactly, or rounded up to buckets the caller chooses (then a bucketed dimension must
//! be the outermost one of every tensor it sizes: inputs are zero-padded at the end and
//! outputs cut to the requested size). Least recently used executors are released, so their
//! slabs return to the heap and memory stays bounded.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::bind::{check_uniform_len, op_pipeline};
use super::executor::{
    check_binding_limit, check_params_given, CompileOptions, DeviceIo, Executor, RunOptions, RunOutput,
};
use super::graph::ExecGraph;
use super::lru::Lru;
use crate::context::Gpu;
use crate::error::{Error, Result};
use crate::signal::lock;

/// A graph with symbolic dimensions, instantiated per concrete shape.
#[derive(Debug, Clone)]
pub struct SymbolicGraph {
    value: Value,
    dims: Vec<String>,
}

/// Concrete values of every dimension, by name (sorted: usable as a cache key).
pub type Dims = BTreeMap<String, u64>;

impl SymbolicGraph {
    /// Parses the graph and checks every expression names declared dimensions only
    /// (by instantiating it with every dimension at 1).
    pub fn parse(text: &str) -> Result<SymbolicGraph> {
        let value = super::graph::parse_json(text)?;
        let dims = match value.get("dims") {
            Some(Value::Array(d)) if !d.is_empty() => d
                .iter()
                .enumerate()
                .map(|(i, n)| match n.as_str() {
                    Some(s) if is_name(s) => Ok(s.to_string()),
                    _ => Err(Error::invalid(format!("graph.dims[{i}] must be a name (letters, digits, _)"))),
                })
                .collect::<Result<Vec<_>>>()?,
            _ => {
                return Err(Error::invalid("a graph with changing shapes names its dimensions: \"dims\": [\"batch\"]"))
            }
        };
        let g = SymbolicGraph { value, dims };
        g.instantiate(&g.dims.iter().map(|d| (d.clone(), 1)).collect())?;
        Ok(g)
    }

    pub fn dims(&self) -> &[String] {
        &self.dims
    }

    /// The graph at `dims` (every declared dimension, each at least 1).
    pub fn instantiate(&self, dims: &Dims) -> Result<ExecGraph> {
        self.check_dims(dims)?;
        let mut v = self.value.clone();
        if let Some(tensors) = v.get_mut("tensors").and_then(Value::as_array_mut) {
            for (i, t) in tensors.iter_mut().enumerate() {
                resolve(t.get_mut("size"), dims, &format!("tensors[{i}].size"))?;
            }
        }
        if let Some(ops) = v.get_mut("ops").and_then(Value::as_array_mut) {
            for (i, op) in ops.iter_mut().enumerate() {
                resolve(op.get_mut("workspace"), dims, &format!("ops[{i}].workspace"))?;
                if let Some(d) = op.get_mut("dispatch").and_then(Value::as_array_mut) {
                    for (k, x) in d.iter_mut().enumerate() {
                        resolve(Some(x), dims, &format!("ops[{i}].dispatch[{k}]"))?;
                    }
                }
            }
        }
        ExecGraph::from_value(&v)
    }

    /// Every tensor's size at `dims`, without building the graph (a run needs only these).
    /// `INVALID_ARGUMENT` for a size that is not a whole number of its tensor's dtype, as a
    /// compile at `dims` would refuse it (a run below its bucket compiles at other dims).
    pub fn sizes(&self, dims: &Dims) -> Result<HashMap<String, u64>> {
        self.check_dims(dims)?;
        let tensors = self.value.get("tensors").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        tensors
            .iter()
            .enumerate()
            .filter_map(|(i, t)| Some((i, t.get("id")?.as_str()?, t.get("size")?, t.get("dtype"))))
            .map(|(i, id, size, dtype)| {
                let bytes = match size {
                    Value::String(expr) => {
                        eval(expr, dims).map_err(|e| Error::invalid(format!("tensors[{i}].size: {e}")))?
                    }
                    v => v.as_u64().unwrap_or(0),
                };
                if let Some(dtype) = dtype.and_then(Value::as_str) {
                    super::graph::whole_elements(bytes, dtype, || format!("tensor '{id}' at {dims:?}"))?;
                }
                Ok((id.to_string(), bytes))
            })
            .collect()
    }

    fn check_dims(&self, dims: &Dims) -> Result<()> {
        if let Some(d) = self.dims.iter().find(|d| !dims.contains_key(*d)) {
            return Err(Error::invalid(format!("dimension '{d}' has no value (the graph declares {:?})", self.dims)));
        }
        if let Some(d) = dims.keys().find(|d| !self.dims.contains(d)) {
            return Err(Error::invalid(format!("'{d}' is not a dimension of the graph (it declares {:?})", self.dims)));
        }
        if let Some((d, _)) = dims.iter().find(|(_, &v)| v == 0 || v > crate::MAX_SAFE_INTEGER) {
            return Err(Error::invalid(format!("dimension '{d}' must be a positive integer")));
        }
        Ok(())
    }
}

fn is_name(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Replaces a string expression in place by its value; numbers stay as they are.
fn resolve(slot: Option<&mut Value>, dims: &Dims, path: &str) -> Result<()> {
    if let Some(v) = slot {
        if let Value::String(expr) = v {
            *v = Value::from(eval(expr, dims).map_err(|e| Error::invalid(format!("{path}: {e}")))?);
        }
    }
    Ok(())
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
        let out = ShapeCache::run_at(&exe, &shape, dims, &asked, inputs, io, options).await;
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
            return Err(Error::invalid("a shape cache holds at least 1 executor (capacity >= 1)"));
        }
        if options.records.is_some() {
            return Err(Error::invalid("usage records describe one shape; a shape cache plans each shape itself"));
        }
        if let ShapePolicy::Buckets(b) = &policy {
            for (d, sizes) in b {
                if !graph.dims.contains(d) {
                    return Err(Error::invalid(format!(
                        "buckets given for '{d}', which is not a dimension of the graph"
                    )));
                }
                if sizes.is_empty() || sizes.contains(&0) {
                    return Err(Error::invalid(format!("buckets of '{d}' must be positive sizes")));
                }
            }
        }
        let state = CacheState {
            entries: Lru::new(capacity),
            stats: ShapeCacheStats::default(),
            clears: 0,
            options: Some(Arc::new(options)),
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
    /// the kernel's uniform, every param has data, and no tensor exceeds the binding limit.
    fn check_at_sample_shape(&self) -> Result<()> {
        let shape = self.sample_shape();
        let graph = self.graph.instantiate(&shape)?;
        let options = self.options()?;
        check_binding_limit(&graph, self.gpu.limits().max_storage_buffer_binding_size)?;
        check_params_given(&graph, &options.params, options.weights.as_deref())?;
        for op in &graph.ops {
            if let (Some(pipeline), Some(params)) = (op_pipeline(&self.gpu, &graph, op)?, &op.params) {
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
                    None => Err(Error::invalid(format!(
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
        st.stats.misses += 1;
        if let Some(old) = st.entries.insert(shape.clone(), exe.clone()) {
            old.release();
            st.stats.evictions += 1;
        }
        Ok((exe, shape, true))
    }

    /// Runs at `dims`: inputs sized for `dims` (host bytes or blocks) are zero-padded to the
    /// compiled shape, and outputs (read back, into blocks or left on the device) are cut to
    /// their size at `dims`. Runs sharing a shape's executor take turns in the order they reach
    /// it. `USE_AFTER_FREE` once closed.
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

    /// Runs `exe`, compiled at `shape`, for a run at `dims`, whose tensors have `asked` sizes.
    async fn run_at(
        exe: &Executor,
        shape: &Dims,
        dims: &Dims,
        asked: &HashMap<String, u64>,
        inputs: &HashMap<String, Vec<u8>>,
        io: &DeviceIo,
        options: RunOptions,
    ) -> Result<RunOutput> {
        let mut padded = HashMap::with_capacity(inputs.len());
        for (id, bytes) in inputs {
            let want = asked.get(id).copied();
            if want.is_some_and(|w| w != bytes.len() as u64) {
                return Err(Error::invalid(format!(
                    "input '{id}' must be {} bytes at {dims:?}, got {}",
                    want.unwrap_or(0),
                    bytes.len()
                )));
            }
            let mut b = bytes.clone();
            if let Some(t) = exe.graph().tensor(id) {
                b.resize(t.size as usize, 0);
            }
            padded.insert(id.clone(), b);
        }
        // Device inputs and outputs move the bytes of the asked shape; the executor zeroes the
        // rest of an input, as `padded` does for host bytes.
        let resized;
        let io = if shape != dims {
            resized = DeviceIo { bytes: asked.clone(), ..io.clone() };
            &resized
        } else {
            io
        };
        let mut out = exe.run_io(&padded, io, options).await?;
        if shape != dims {
            for (id, bytes) in &mut out.outputs {
                if let Some(&size) = asked.get(id) {
                    bytes.truncate(size as usize);
                }
            }
        }
        Ok(out)
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
    }

    /// [`Self::clear`], for good: later runs are `USE_AFTER_FREE`, a run claimed before compiles
    /// for itself (when it must) and releases its executor when it ends, and the compile options
    /// go (shared weights let go once no executor and no such run holds them).
    pub fn close(&self) {
        let options = lock(&self.state).options.take();
        self.clear();
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
