//! The memory observer: what each op allocated and freed during a run (the seed's
//! FrameNodeId records), and the usage records a planner needs, derived from it.

use wgalloc_plan::UsageRecord;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObservedKind {
    Alloc,
    Free,
}

impl ObservedKind {
    pub const ALL: [ObservedKind; 2] = [ObservedKind::Alloc, ObservedKind::Free];

    pub fn as_str(self) -> &'static str {
        match self {
            ObservedKind::Alloc => "alloc",
            ObservedKind::Free => "free",
        }
    }
}

/// One allocation or free, attributed to the op that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedEvent {
    pub op: usize,
    pub op_name: String,
    pub kind: ObservedKind,
    pub tensor: String,
    pub size: u64,
    /// Where the bytes were: a heap block id (eager) or a slab index (planned), and the offset.
    pub location: u64,
    pub offset: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Observation {
    pub events: Vec<ObservedEvent>,
    pub ops: usize,
}

impl Observation {
    // One flat call per event keeps the executor's hot loops readable.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        &mut self,
        op: usize,
        op_name: &str,
        kind: ObservedKind,
        tensor: &str,
        size: u64,
        location: u64,
        offset: u64,
    ) {
        self.events.push(ObservedEvent {
            op,
            op_name: op_name.to_string(),
            kind,
            tensor: tensor.to_string(),
            size,
            location,
            offset,
        });
    }

    /// Usage records: each tensor lives from the op that allocated it to the op
    /// after which it was freed (the last op for tensors never freed).
    pub fn to_usage_records(&self) -> Vec<UsageRecord> {
        let last_op = self.ops.saturating_sub(1) as u64;
        let mut records: Vec<UsageRecord> = Vec::new();
        let mut open: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for e in &self.events {
            match e.kind {
                ObservedKind::Alloc => {
                    open.insert(&e.tensor, records.len());
                    records.push(UsageRecord::new(e.tensor.clone(), e.size, e.op as u64, last_op));
                }
                ObservedKind::Free => {
                    if let Some(i) = open.remove(e.tensor.as_str()) {
                        records[i].last = e.op as u64;
                    }
                }
            }
        }
        records
    }

    /// Peak of the sum of live observed bytes.
    pub fn peak_live_bytes(&self) -> u64 {
        let (mut live, mut peak) = (0u64, 0u64);
        for e in &self.events {
            match e.kind {
                ObservedKind::Alloc => {
                    live += e.size;
                    peak = peak.max(live);
                }
                ObservedKind::Free => live = live.saturating_sub(e.size),
            }
        }
        peak
    }
}
