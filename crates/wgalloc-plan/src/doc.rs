//! The graph document: one JSON format read by the planner (the ONNX exports of
//! `bench/data/models`: sizes, lifetimes, steps), the executor (kernels, dispatch counts,
//! params bytes, dtypes) and graphs with changing shapes (`dims`, with sizes, shape entries,
//! workspaces and dispatch counts as expressions over them). It is parsed once, by serde,
//! into these types; each consumer then resolves what it reads ([`crate::graph::parse`] for
//! the planner, `ExecGraph` in the executor).
//!
//! Note [Unknown graph fields are refused]: every field of the format is declared here, and
//! any other one is refused naming its JSON path (`tensors[3].colour`): a misspelt `viewOf`
//! or `dispatch` would otherwise be dropped silently and give a plan or a run that is
//! wrong. The descriptive fields of the model exports (`model`, `license`, an op's `domain`,
//! ...) are part of the format and not read.

use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// A tensor's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TensorKind {
    /// Graph input: supplied by the caller on every run, never overwritten, not in the slab
    /// (unless planned there, see `GraphOptions::inputs_in_slab`).
    Input,
    /// Weight/constant: set at compile time, placed in the constant region.
    Param,
    Intermediate,
    /// Graph output: returned by every run, lives to the last step.
    Output,
    /// Bound at run time to a block the caller owns (a KV cache, recurrent state): never in
    /// the slab; ops may read and write it.
    External,
}

impl TensorKind {
    pub const ALL: [TensorKind; 5] =
        [TensorKind::Input, TensorKind::Param, TensorKind::Intermediate, TensorKind::Output, TensorKind::External];

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

/// A graph as written: tensors, ops, and whatever else the consumer reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GraphDoc {
    pub tensors: Vec<TensorDoc>,
    /// In execution order.
    pub ops: Vec<OpDoc>,
    /// WGSL kernels by id (executable graphs).
    #[serde(default)]
    pub kernels: BTreeMap<String, Kernel>,
    /// Dimension names: sizes, shape entries, workspaces and dispatch counts may then be
    /// expressions over them (graphs with changing shapes).
    pub dims: Option<Vec<String>>,
    /// Parallel steps (op indices), each op in exactly one, in execution order.
    #[serde(alias = "streams")]
    pub steps: Option<Vec<Vec<Exact>>>,
    /// Graph inputs listed apart from `tensors` (the model exports).
    #[serde(default)]
    pub graph_inputs: Vec<ListedTensor>,
    /// Params listed apart from `tensors`.
    #[serde(default)]
    pub params: Vec<ListedTensor>,
    // Descriptive fields of the model exports (see their README); not read.
    pub model: Option<Value>,
    pub source: Option<Value>,
    pub license: Option<Value>,
    pub runtime: Option<Value>,
    pub config: Option<Value>,
    pub kind: Option<Value>,
    pub input_shapes: Option<Value>,
    pub lower_bound: Option<Value>,
    pub naive_sum: Option<Value>,
    pub model_file_bytes: Option<Value>,
    pub weights_bytes: Option<Value>,
}

/// A tensor of `tensors`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TensorDoc {
    pub id: String,
    /// Bytes.
    pub size: Option<Extent>,
    /// Extents, outermost first; with `dtype` they make the size.
    pub shape: Option<Vec<Extent>>,
    /// Element type (the executor knows `f32`, `u32`, ...; the model exports use ONNX names).
    pub dtype: Option<String>,
    pub kind: Option<TensorKind>,
    /// The model exports' way to say `kind: "output"`.
    pub is_output: Option<bool>,
    /// Shares the bytes of this tensor (and extends its life).
    pub view_of: Option<String>,
    /// Reuses this tensor's range in place (see `crate::graph`).
    #[serde(alias = "inPlaceOf")]
    pub shares_with: Option<String>,
    /// First op index (planner graphs; the executor derives it from the ops).
    pub first: Option<Exact>,
    /// Last op index.
    pub last: Option<Exact>,
}

impl TensorDoc {
    /// The declared kind; without one an output when `isOutput`, else an intermediate.
    pub fn kind(&self) -> TensorKind {
        match self.kind {
            Some(k) => k,
            None if self.is_output == Some(true) => TensorKind::Output,
            None => TensorKind::Intermediate,
        }
    }
}

/// A tensor of `graphInputs` or `params`: its kind is the list's.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListedTensor {
    pub id: String,
    pub size: Extent,
    pub shape: Option<Vec<Extent>>,
    pub dtype: Option<String>,
    pub last: Option<Exact>,
}

/// An op.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OpDoc {
    pub name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub inputs: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub outputs: Vec<String>,
    /// Scratch bytes the op needs while it runs.
    pub workspace: Option<Extent>,
    /// Operator type (ONNX `op_type`): elementwise ones may run in place.
    #[serde(rename = "type")]
    pub op_type: Option<String>,
    /// Kernel id (executable graphs); none for an op that only creates views.
    pub kernel: Option<String>,
    /// Workgroup counts, one to three.
    pub dispatch: Option<Vec<Extent>>,
    /// Bytes of the uniform bound after the storage bindings.
    pub params: Option<Vec<u8>>,
    // Descriptive fields of the model exports; not read.
    pub index: Option<Value>,
    pub domain: Option<Value>,
    pub branch: Option<Value>,
}

/// A WGSL compute kernel.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Kernel {
    pub source: String,
    /// The `@compute` function to run.
    #[serde(default = "main")]
    pub entry_point: String,
}

fn main() -> String {
    "main".into()
}

/// A list that may be written `null` for empty.
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A size, shape entry, workspace or dispatch count: an integer, or (in a graph with `dims`)
/// an expression over the dimensions such as `"batch * 1024"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extent {
    Int(u64),
    Expr(String),
}

impl<'de> Deserialize<'de> for Extent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Extent;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a non-negative integer or an expression over the graph's dims")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Extent, E> {
                Ok(Extent::Int(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Extent, E> {
                u64::try_from(v).map(Extent::Int).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Extent, E> {
                Ok(Extent::Expr(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A non-negative integer: a JSON integer, or a decimal string (for values above 2^53 - 1,
/// which JS numbers round).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exact(pub u64);

impl<'de> Deserialize<'de> for Exact {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Exact;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a non-negative integer")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Exact, E> {
                Ok(Exact(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Exact, E> {
                u64::try_from(v).map(Exact).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Exact, E> {
                match v.bytes().all(|b| b.is_ascii_digit()).then(|| v.parse().ok()).flatten() {
                    Some(n) => Ok(Exact(n)),
                    None => Err(E::invalid_value(Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Why a graph text is not a graph document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocError {
    /// The text is not JSON (`line` is 1-based).
    Syntax { line: usize, message: String },
    /// Well-formed JSON with a bad field: its JSON path (`tensors[3].kind`, `graph` for the
    /// root), what the format takes there, and what was found.
    Field { path: String, expected: String, got: String },
}

impl fmt::Display for DocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DocError::Syntax { message, .. } => f.write_str(message),
            DocError::Field { path, expected, got } => write!(f, "{path}: expected {expected}, got {got}"),
        }
    }
}

impl GraphDoc {
    /// Parses graph JSON text; a bad field is named by its JSON path.
    pub fn parse(text: &str) -> Result<GraphDoc, DocError> {
        let mut de = serde_json::Deserializer::from_str(text);
        let doc = serde_path_to_error::deserialize(&mut de).map_err(doc_error)?;
        de.end().map_err(|e| DocError::Syntax { line: e.line(), message: e.to_string() })?;
        Ok(doc)
    }
}

fn doc_error(e: serde_path_to_error::Error<serde_json::Error>) -> DocError {
    let path = match e.path().to_string() {
        p if p == "." || p.is_empty() => "graph".to_string(),
        p => p,
    };
    let inner = e.into_inner();
    if !inner.is_data() {
        return DocError::Syntax { line: inner.line(), message: inner.to_string() };
    }
    // serde's message without its position: the path says where.
    let full = inner.to_string();
    let message = full.rsplit_once(" at line ").map_or(full.as_str(), |(m, _)| m);
    let ticked = |s: &str| s.split('`').nth(1).unwrap_or(s).to_string();
    // The path names an unknown or repeated field already, a missing one not.
    let within = |field: &str| match path.rsplit_once('.') {
        Some((_, last)) if last == field => path.clone(),
        _ if path == field => path.clone(),
        _ if path == "graph" => field.to_string(),
        _ => format!("{path}.{field}"),
    };
    let (path, expected, got) = if let Some(rest) = message.strip_prefix("unknown field ") {
        let (field, known) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let field = ticked(field);
        let known = known.trim_start_matches("one of ").replace('`', "");
        (within(&field), format!("a field of the graph format ({known})"), format!("unknown field {field:?}"))
    } else if let Some(field) = message.strip_prefix("missing field ") {
        let field = ticked(field);
        (within(&field), "a value".to_string(), "nothing (the field is missing)".to_string())
    } else if let Some(field) = message.strip_prefix("duplicate field ") {
        (within(&ticked(field)), "one value, under one name".to_string(), "it twice (or with its alias)".to_string())
    } else if let Some((got, expected)) = message.split_once(", expected ") {
        let got = got.trim_start_matches("invalid type: ").trim_start_matches("invalid value: ");
        let got = got.trim_start_matches("unknown variant ");
        (path, plain(expected), got.to_string())
    } else {
        (path, "valid".to_string(), message.to_string())
    };
    DocError::Field { path, expected, got }
}

/// serde's name of an expected type in the format's words.
fn plain(expected: &str) -> String {
    match expected {
        "a sequence" => "an array".into(),
        "a map" => "an object".into(),
        "u64" | "usize" => "a non-negative integer".into(),
        "u8" => "a byte (0-255)".into(),
        "a boolean" => "true or false".into(),
        e if e.starts_with("struct ") => "an object".into(),
        e => e.replace('`', "'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_error(text: &str) -> String {
        match GraphDoc::parse(text) {
            Err(e @ DocError::Field { .. }) => e.to_string(),
            other => panic!("{text}: expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn errors_name_the_json_path() {
        let t = |tensor: &str| format!(r#"{{"ops":[],"tensors":[{{"id":"a","size":4}},{tensor}]}}"#);
        for (text, want) in [
            (t(r#"{"id":"b","size":4,"colour":"red"}"#), "tensors[1].colour: expected a field of the graph format"),
            (t(r#"{"id":"b","size":4,"kind":"weird"}"#), "tensors[1].kind: expected one of 'input'"),
            (t(r#"{"id":"b","size":-4}"#), "tensors[1].size: expected a non-negative integer or an expression"),
            (t(r#"{"id":"b","size":1.5}"#), "tensors[1].size: expected"),
            (t(r#"{"size":4}"#), "tensors[1].id: expected a value"),
            (
                t(r#"{"id":"b","size":4,"sharesWith":"a","inPlaceOf":"a"}"#),
                "tensors[1].sharesWith: expected one value, under one name",
            ),
            (r#"{"ops":[],"tensors":5}"#.into(), "tensors: expected an array, got integer `5`"),
            (r#"{"ops":[{"params":[300]}],"tensors":[]}"#.into(), "ops[0].params[0]: expected a byte (0-255)"),
            (
                r#"{"ops":[],"tensors":[],"steps":[[0]],"streams":[[0]]}"#.into(),
                "steps: expected one value, under one name",
            ),
            (r#"{"ops":[],"tensors":[],"kernels":{"k":{"source":"","entry":"x"}}}"#.into(), "kernels.k.entry"),
            (r#"[]"#.into(), "graph: expected an object"),
        ] {
            let e = field_error(&text);
            assert!(e.contains(want), "{text}: expected '{want}', got '{e}'");
        }
        assert!(matches!(GraphDoc::parse(r#"{"ops":[],"tensors":["#), Err(DocError::Syntax { .. })));
        assert!(matches!(GraphDoc::parse(r#"{"ops":[],"tensors":[]} x"#), Err(DocError::Syntax { .. })));
    }

    #[test]
    fn aliases_nulls_and_expressions() {
        let g = GraphDoc::parse(
            r#"{"dims":["b"],"streams":[[0]],"ops":[{"inputs":null,"outputs":["a"],"dispatch":["b * 4",1]}],
                "tensors":[{"id":"a","size":"b * 16","inPlaceOf":"x","first":"0","last":0}]}"#,
        )
        .unwrap();
        assert_eq!(g.steps, Some(vec![vec![Exact(0)]]));
        assert_eq!(g.tensors[0].shares_with.as_deref(), Some("x"));
        assert_eq!(g.tensors[0].size, Some(Extent::Expr("b * 16".into())));
        assert_eq!(g.ops[0].dispatch, Some(vec![Extent::Expr("b * 4".into()), Extent::Int(1)]));
        assert!(g.ops[0].inputs.is_empty());
        assert_eq!(g.tensors[0].kind(), TensorKind::Intermediate);
    }
}
