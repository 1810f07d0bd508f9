//! A planning request as the JS API makes it: input text in a named format, and options by
//! name. Telling the formats apart and reading the options are the planner's; the binding only
//! converts JS values.

use crate::error::{invalid, PlanError};
use crate::graph::{self, Graph, GraphOptions, GraphRecords, WorkspaceMode};
use crate::options::PlanOptions;
use crate::record::{UsageRecord, DEFAULT_SPACE};
use crate::strategy::Strategy;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How the input text is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Records JSON ([`crate::json`]).
    Records,
    /// A graph document ([`crate::doc`]).
    Graph,
    /// JSON that is a graph when it has a `tensors` array, else records.
    Json,
    /// MiniMalloc CSV ([`crate::csv`]).
    Csv,
}

impl Format {
    pub const ALL: [Format; 4] = [Format::Records, Format::Graph, Format::Json, Format::Csv];

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Records => "records",
            Format::Graph => "graph",
            Format::Json => "json",
            Format::Csv => "csv",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Self, PlanError> {
        Format::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| invalid("format", "records, graph, json or csv", format!("unknown input format {s:?}")))
    }
}

/// A parsed input: records, or a graph to build them from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanInput {
    Records(Vec<UsageRecord>),
    Graph(Graph),
}

impl PlanInput {
    /// Parses `text` as `format`; `strict` false ignores unknown record fields and CSV columns
    /// (a graph's unknown fields are always refused, see Note [Unknown graph fields are refused]).
    pub fn parse(format: Format, text: &str, strict: bool) -> Result<PlanInput, PlanError> {
        let graph = match format {
            Format::Csv => return Ok(PlanInput::Records(crate::csv::parse_with(text, strict)?)),
            Format::Records => false,
            Format::Graph => true,
            // JSON as the caller wrote it (integers above 2^53 stay exact).
            Format::Json => crate::json::has_tensors_array(text)?,
        };
        Ok(match graph {
            true => PlanInput::Graph(graph::parse(text)?),
            false => PlanInput::Records(crate::json::parse_records_with(text, strict)?),
        })
    }

    /// The records to plan, and for a graph what [`graph::build_records`] made of it.
    pub fn into_records(self, options: &GraphOptions) -> Result<(Vec<UsageRecord>, Option<GraphRecords>), PlanError> {
        match self {
            PlanInput::Records(r) => Ok((r, None)),
            PlanInput::Graph(g) => {
                let built = graph::build_records(&g, options)?;
                Ok((built.records.clone(), Some(built)))
            }
        }
    }
}

/// The options of a planning request as the JS API names them (numbers already integers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestOptions {
    pub strategy: Option<String>,
    pub alignment: Option<u64>,
    /// Capacity of the default space.
    pub capacity: Option<u64>,
    /// Capacities of named spaces.
    pub capacities: HashMap<String, u64>,
    pub strict: Option<bool>,
    pub time_limit_ms: Option<u64>,
    /// Graphs: `shared`, `unique` or `inSlab`.
    pub workspace: Option<String>,
    pub multistream: Option<bool>,
    pub in_place: Option<bool>,
    pub inputs_in_slab: Option<bool>,
}

/// [`RequestOptions`] read: the planner's options, a graph's, and whether parsing is strict.
pub struct Request {
    pub plan: PlanOptions,
    pub graph: GraphOptions,
    pub strict: bool,
}

impl RequestOptions {
    /// Reads the names and checks the options agree; `INVALID_ARGUMENT` naming the option.
    pub fn resolve(self) -> Result<Request, PlanError> {
        let mut capacities = self.capacities;
        if let Some(c) = self.capacity {
            if capacities.contains_key(DEFAULT_SPACE) {
                // Two limits for one space: neither silently wins.
                return Err(invalid(
                    "capacity",
                    format!("one limit of the default space (capacity or capacities.{DEFAULT_SPACE})"),
                    format!("capacity and capacities.{DEFAULT_SPACE} both limit the default space; give one"),
                ));
            }
            capacities.insert(DEFAULT_SPACE.to_string(), c);
        }
        let strategy = self.strategy.as_deref().map(str::parse).transpose()?.unwrap_or(Strategy::Best);
        let alignment = self.alignment.unwrap_or(1);
        let graph = GraphOptions {
            workspace: self.workspace.as_deref().map(str::parse).transpose()?.unwrap_or(WorkspaceMode::Shared),
            multistream: self.multistream.unwrap_or(false),
            constant_alignment: alignment.max(1),
            in_place: self.in_place.unwrap_or(false),
            inputs_in_slab: self.inputs_in_slab.unwrap_or(false),
        };
        let plan = PlanOptions {
            strategy,
            alignment,
            capacities,
            time_limit: self.time_limit_ms.map(Duration::from_millis),
            ..Default::default()
        };
        Ok(Request { plan, graph, strict: self.strict.unwrap_or(true) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_invalid_arguments() {
        for f in Format::ALL {
            assert_eq!(f.as_str().parse::<Format>().unwrap(), f);
        }
        for m in WorkspaceMode::ALL {
            assert_eq!(m.as_str().parse::<WorkspaceMode>().unwrap(), m);
        }
        assert_eq!("yaml".parse::<Format>().unwrap_err().code(), "INVALID_ARGUMENT");
        let bad = RequestOptions { workspace: Some("bogus".into()), ..Default::default() };
        assert!(bad.resolve().err().unwrap().to_string().contains("unknown workspace mode \"bogus\""));
        let both = RequestOptions {
            capacity: Some(8),
            capacities: [(DEFAULT_SPACE.to_string(), 16)].into(),
            ..Default::default()
        };
        assert_eq!(both.resolve().err().unwrap().code(), "INVALID_ARGUMENT");
    }

    #[test]
    fn json_is_told_apart_by_its_tensors() {
        let g = r#"{"ops":[{"inputs":[],"outputs":["a"]}],"tensors":[{"id":"a","size":8}]}"#;
        assert!(matches!(PlanInput::parse(Format::Json, g, true).unwrap(), PlanInput::Graph(_)));
        let r = r#"[{"id":"a","size":8,"first":0,"last":0}]"#;
        assert!(matches!(PlanInput::parse(Format::Json, r, true).unwrap(), PlanInput::Records(_)));
        let e = PlanInput::parse(Format::Graph, r#"{"ops":[],"tensors":[],"colour":1}"#, false).unwrap_err();
        assert_eq!((e.code(), e.to_string().starts_with("colour: expected a field")), ("PARSE_ERROR", true), "{e}");
    }
}
