//! Heap scopes: named, nested quotas over one device heap (a tenant, a model). Pure
//! bookkeeping: no wgpu, no device; the heap and the executors take charges here.
//!
//! Note [A scope's bytes are its live charges]: a scope's `allocated` equals the sum of the
//! bytes of the live [`ScopeCharge`]s taken against it or its descendants. Every charge is
//! taken whole against the scope and all its ancestors under one lock (checked first, then
//! charged: a refusal changes nothing but the refusing scope's count), and only a charge's
//! release or drop returns its bytes, exactly once. The holder of the memory holds the charge
//! (a block, an executor, weights, a KV cache), so the bytes return when the memory does, by
//! whichever path it goes: no caller keeps a second count that could drift from it.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{quoted, Error, QuotaExceeded, Result};

use crate::MAX_SAFE_INTEGER;

/// Index of a scope in its tree (never reused while the tree lives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScopeId(u32);

impl ScopeId {
    pub fn index(self) -> u32 {
        self.0
    }
}

/// What a scope holds now and held at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScopeStats {
    pub limit: u64,
    /// Bytes of live charges against the scope and its descendants.
    pub allocated: u64,
    /// The most `allocated` held at once.
    pub peak: u64,
    /// Live blocks malloc'd in this scope itself.
    pub active_blocks: u64,
    /// Charges refused for this scope's limit.
    pub quota_exceeded: u64,
}

struct Node {
    parent: Option<u32>,
    name: String,
    children: Vec<u32>,
    stats: ScopeStats,
    disposed: bool,
}

/// The scopes of one heap, shared by every handle of it (threads and attached workers too).
pub struct ScopeTree {
    budget: u64,
    nodes: Mutex<Vec<Node>>,
}

impl std::fmt::Debug for ScopeTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopeTree").field("budget", &self.budget).field("scopes", &self.nodes.lock().len()).finish()
    }
}

/// The names from the outermost scope down to `id`, joined with `/`.
fn path_of(nodes: &[Node], id: u32) -> String {
    let mut names = Vec::new();
    let mut at = Some(id);
    while let Some(i) = at {
        let node = &nodes[i as usize];
        names.push(node.name.as_str());
        at = node.parent;
    }
    names.reverse();
    names.join("/")
}

impl ScopeTree {
    /// A tree whose top-level limits are at most `budget` bytes.
    pub fn new(budget: u64) -> Arc<ScopeTree> {
        Arc::new(ScopeTree { budget, nodes: Mutex::new(Vec::new()) })
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// A new scope under `parent` (top level for `None`). The name is unique among the live
    /// siblings and holds no `/` (which joins a path's names); the limit is positive and at most
    /// the parent's (the budget at top level).
    pub fn create(&self, parent: Option<ScopeId>, name: &str, limit: u64) -> Result<ScopeId> {
        if name.is_empty() {
            return Err(Error::invalid("options.name", "a non-empty string", "''").in_call("scope"));
        }
        if name.contains('/') {
            return Err(Error::invalid("options.name", "a name without '/'", quoted(name))
                .in_call("scope")
                .with_hint("'/' separates the names in a scope's path"));
        }
        if limit == 0 || limit > MAX_SAFE_INTEGER {
            return Err(Error::invalid("options.limit", "a positive integer of bytes below 2^53", limit.to_string())
                .in_call("scope")
                .with_hint(format!("the limit of scope '{name}'")));
        }
        let mut nodes = self.nodes.lock();
        let siblings: Vec<u32> = match parent {
            Some(p) => {
                let node = nodes.get(p.0 as usize).ok_or_else(|| {
                    Error::invalid("parent", "a scope of this heap", format!("scope #{}", p.0)).in_call("scope")
                })?;
                if node.disposed {
                    return Err(Error::invalid(
                        "parent",
                        "a live scope",
                        format!("'{}', disposed", path_of(&nodes, p.0)),
                    )
                    .in_call("scope"));
                }
                if limit > node.stats.limit {
                    return Err(Error::invalid(
                        "options.limit",
                        format!("at most {} (the parent scope '{}' limit)", node.stats.limit, path_of(&nodes, p.0)),
                        limit.to_string(),
                    )
                    .in_call("scope")
                    .with_hint(format!("the limit of scope '{name}'")));
                }
                node.children.clone()
            }
            None => {
                if limit > self.budget {
                    return Err(Error::invalid(
                        "options.limit",
                        format!("at most {} (the device's memory budget)", self.budget),
                        limit.to_string(),
                    )
                    .in_call("scope")
                    .with_hint(format!("the limit of scope '{name}'")));
                }
                (0..nodes.len() as u32).filter(|&i| nodes[i as usize].parent.is_none()).collect()
            }
        };
        // A disposed scope's name can be used again.
        if siblings.iter().any(|&i| !nodes[i as usize].disposed && nodes[i as usize].name == name) {
            return Err(Error::invalid("options.name", "a name no live sibling has", quoted(name))
                .in_call("scope")
                .with_hint(format!("scope '{name}' exists already here; names are unique among siblings")));
        }
        let id = u32::try_from(nodes.len())
            .map_err(|_| Error::invalid("scope", "at most 2^32 scopes per heap", "one more"))?;
        nodes.push(Node {
            parent: parent.map(|p| p.0),
            name: name.to_owned(),
            children: Vec::new(),
            stats: ScopeStats { limit, ..ScopeStats::default() },
            disposed: false,
        });
        if let Some(p) = parent {
            nodes[p.0 as usize].children.push(id);
        }
        Ok(ScopeId(id))
    }

    /// Charges `bytes` to `scope` and its ancestors, or to none of them: `QUOTA_EXCEEDED` naming
    /// the first (innermost) scope the bytes would take past its limit. `is_block`: the charge is
    /// a block malloc'd in `scope` (counted in its `active_blocks`). Disposed: INVALID_ARGUMENT.
    pub fn try_charge(&self, scope: ScopeId, bytes: u64, is_block: bool) -> Result<()> {
        self.charge_inner(scope, bytes, is_block, true)
    }

    /// [`ScopeTree::try_charge`]; `peak`: raise the peaks now (else [`ScopeTree::note_peak`] later).
    fn charge_inner(&self, scope: ScopeId, bytes: u64, is_block: bool, peak: bool) -> Result<()> {
        let mut nodes = self.nodes.lock();
        let nodes = &mut *nodes;
        let node = nodes
            .get(scope.0 as usize)
            .ok_or_else(|| Error::invalid("scope", "a scope of this heap", format!("scope #{}", scope.0)))?;
        if node.disposed {
            return Err(Error::invalid("scope", "a live scope", format!("'{}', disposed", path_of(nodes, scope.0)))
                .with_hint("allocate from a live scope"));
        }
        let mut at = Some(scope.0);
        while let Some(i) = at {
            let s = &nodes[i as usize];
            if s.stats.allocated.saturating_add(bytes) > s.stats.limit {
                let (limit, allocated) = (s.stats.limit, s.stats.allocated);
                nodes[i as usize].stats.quota_exceeded += 1;
                return Err(Error::QuotaExceeded(Box::new(QuotaExceeded {
                    scope: path_of(nodes, i),
                    limit,
                    allocated,
                    requested: bytes,
                })));
            }
            at = s.parent;
        }
        let mut at = Some(scope.0);
        while let Some(i) = at {
            let s = &mut nodes[i as usize];
            s.stats.allocated += bytes;
            if peak {
                s.stats.peak = s.stats.peak.max(s.stats.allocated);
            }
            at = s.parent;
        }
        if is_block {
            nodes[scope.0 as usize].stats.active_blocks += 1;
        }
        Ok(())
    }

    /// Raises the peaks of `scope` and its ancestors to what they hold now.
    fn note_peak(&self, scope: ScopeId) {
        let mut nodes = self.nodes.lock();
        let mut at = Some(scope.0);
        while let Some(i) = at {
            let s = &mut nodes[i as usize];
            s.stats.peak = s.stats.peak.max(s.stats.allocated);
            at = s.parent;
        }
    }

    /// Returns `bytes` charged with [`ScopeTree::try_charge`] (disposed scopes too).
    pub fn uncharge(&self, scope: ScopeId, bytes: u64, is_block: bool) {
        let mut nodes = self.nodes.lock();
        let Some(node) = nodes.get_mut(scope.0 as usize) else { return };
        if is_block {
            node.stats.active_blocks = node.stats.active_blocks.saturating_sub(1);
        }
        let mut at = Some(scope.0);
        while let Some(i) = at {
            let s = &mut nodes[i as usize];
            debug_assert!(s.stats.allocated >= bytes, "scope '{}' returned more than it was charged", s.name);
            s.stats.allocated = s.stats.allocated.saturating_sub(bytes);
            at = s.parent;
        }
    }

    pub fn stats(&self, scope: ScopeId) -> ScopeStats {
        self.nodes.lock().get(scope.0 as usize).map_or_else(ScopeStats::default, |n| n.stats)
    }

    pub fn name(&self, scope: ScopeId) -> String {
        self.nodes.lock().get(scope.0 as usize).map_or_else(String::new, |n| n.name.clone())
    }

    /// Names from the outermost scope down, joined with `/`.
    pub fn path(&self, scope: ScopeId) -> String {
        let nodes = self.nodes.lock();
        if scope.0 as usize >= nodes.len() {
            return String::new();
        }
        path_of(&nodes, scope.0)
    }

    pub fn parent(&self, scope: ScopeId) -> Option<ScopeId> {
        self.nodes.lock().get(scope.0 as usize).and_then(|n| n.parent).map(ScopeId)
    }

    pub fn is_disposed(&self, scope: ScopeId) -> bool {
        self.nodes.lock().get(scope.0 as usize).is_none_or(|n| n.disposed)
    }

    /// Ends `scope` and its descendants: later charges are refused; live ones still return.
    pub fn dispose(&self, scope: ScopeId) {
        let mut nodes = self.nodes.lock();
        if scope.0 as usize >= nodes.len() {
            return;
        }
        // Iterative: scopes may nest deeper than the stack.
        let mut stack = vec![scope.0];
        while let Some(i) = stack.pop() {
            let node = &mut nodes[i as usize];
            node.disposed = true;
            stack.extend_from_slice(&node.children);
        }
    }

    /// Every live scope, depth first (parents before children, siblings in creation order),
    /// for metrics. Disposed scopes are left out, and with them their children (disposed too).
    pub fn list(&self) -> Vec<ScopeId> {
        let nodes = self.nodes.lock();
        let mut out = Vec::new();
        let mut stack: Vec<u32> =
            (0..nodes.len() as u32).rev().filter(|&i| nodes[i as usize].parent.is_none()).collect();
        while let Some(i) = stack.pop() {
            let node = &nodes[i as usize];
            if node.disposed {
                continue;
            }
            out.push(ScopeId(i));
            stack.extend(node.children.iter().rev());
        }
        out
    }

    /// The live scope at `path` (names joined with `/`).
    pub fn find(&self, path: &str) -> Option<ScopeId> {
        let nodes = self.nodes.lock();
        let mut level: Vec<u32> = (0..nodes.len() as u32).filter(|&i| nodes[i as usize].parent.is_none()).collect();
        let mut found = None;
        for name in path.split('/') {
            let i = *level.iter().find(|&&i| !nodes[i as usize].disposed && nodes[i as usize].name == name)?;
            found = Some(ScopeId(i));
            level = nodes[i as usize].children.clone();
        }
        found
    }
}

/// A scope of a tree: the handle Rust callers and the binding keep.
#[derive(Clone)]
pub struct Scope {
    tree: Arc<ScopeTree>,
    id: ScopeId,
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").field("path", &self.path()).field("stats", &self.stats()).finish()
    }
}

impl Scope {
    /// A top-level scope of `tree`.
    pub fn top(tree: &Arc<ScopeTree>, name: &str, limit: u64) -> Result<Scope> {
        Ok(Scope { id: tree.create(None, name, limit)?, tree: tree.clone() })
    }

    /// The scope `id` of `tree`.
    pub fn of(tree: &Arc<ScopeTree>, id: ScopeId) -> Scope {
        Scope { tree: tree.clone(), id }
    }

    /// The scope at `index` of `tree` ([`ScopeId::index`]); INVALID_ARGUMENT if it has none.
    pub fn at(tree: &Arc<ScopeTree>, index: u32) -> Result<Scope> {
        if index as usize >= tree.nodes.lock().len() {
            return Err(Error::invalid("scope", "a scope of this heap", format!("scope #{index}")));
        }
        Ok(Scope::of(tree, ScopeId(index)))
    }

    /// A child scope: its charges count against it and against this scope.
    pub fn child(&self, name: &str, limit: u64) -> Result<Scope> {
        Ok(Scope { id: self.tree.create(Some(self.id), name, limit)?, tree: self.tree.clone() })
    }

    pub fn id(&self) -> ScopeId {
        self.id
    }

    pub fn tree(&self) -> &Arc<ScopeTree> {
        &self.tree
    }

    /// Charges `bytes` held elsewhere until the returned charge drops (see [`ScopeTree::try_charge`]).
    pub fn charge(&self, bytes: u64) -> Result<ScopeCharge> {
        self.tree.try_charge(self.id, bytes, false)?;
        Ok(ScopeCharge { tree: self.tree.clone(), scope: self.id, bytes, block: false })
    }

    /// A block's charge of `bytes`, its peak raised by [`ScopeCharge::settle`] once the block exists.
    pub fn charge_block(&self, bytes: u64) -> Result<ScopeCharge> {
        self.tree.charge_inner(self.id, bytes, true, false)?;
        Ok(ScopeCharge { tree: self.tree.clone(), scope: self.id, bytes, block: true })
    }

    pub fn stats(&self) -> ScopeStats {
        self.tree.stats(self.id)
    }

    pub fn name(&self) -> String {
        self.tree.name(self.id)
    }

    pub fn path(&self) -> String {
        self.tree.path(self.id)
    }

    pub fn is_disposed(&self) -> bool {
        self.tree.is_disposed(self.id)
    }

    pub fn dispose(&self) {
        self.tree.dispose(self.id)
    }
}

/// Bytes charged to a scope and its ancestors, returned once: by [`ScopeCharge::release`] or on
/// drop (Note [A scope's bytes are its live charges]).
pub struct ScopeCharge {
    tree: Arc<ScopeTree>,
    scope: ScopeId,
    bytes: u64,
    block: bool,
}

impl std::fmt::Debug for ScopeCharge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopeCharge").field("scope", &self.scope).field("bytes", &self.bytes).finish()
    }
}

impl ScopeCharge {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn scope(&self) -> Scope {
        Scope { tree: self.tree.clone(), id: self.scope }
    }

    /// Charges `bytes` in place of what it holds (a shape executor that grew or shrank). Growing
    /// past a limit is `QUOTA_EXCEEDED` and leaves the charge as it was.
    pub fn resize(&mut self, bytes: u64) -> Result<()> {
        if bytes > self.bytes {
            self.tree.try_charge(self.scope, bytes - self.bytes, false)?;
        } else if bytes < self.bytes {
            self.tree.uncharge(self.scope, self.bytes - bytes, false);
        }
        self.bytes = bytes;
        Ok(())
    }

    /// A block's charge once the block exists: its real size (the allocator's, when it differs
    /// from the size charged up front), counted towards the peaks.
    pub fn settle(&mut self, bytes: u64) {
        if bytes > self.bytes {
            let mut nodes = self.tree.nodes.lock();
            let mut at = Some(self.scope.0);
            while let Some(i) = at {
                let s = &mut nodes[i as usize];
                s.stats.allocated += bytes - self.bytes;
                at = s.parent;
            }
        } else if bytes < self.bytes {
            self.tree.uncharge(self.scope, self.bytes - bytes, false);
        }
        self.bytes = bytes;
        self.tree.note_peak(self.scope);
    }

    /// Returns the bytes now (as dropping does).
    pub fn release(self) {}
}

impl Drop for ScopeCharge {
    fn drop(&mut self) {
        self.tree.uncharge(self.scope, self.bytes, self.block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(e: Error) -> QuotaExceeded {
        match e {
            Error::QuotaExceeded(q) => *q,
            other => panic!("expected QUOTA_EXCEEDED, got {other:?}"),
        }
    }

    #[test]
    fn a_scope_by_index_is_the_same_scope_and_an_unknown_index_is_refused() {
        let tree = ScopeTree::new(1 << 20);
        let model = Scope::top(&tree, "model", 1000).unwrap();
        let kv = model.child("kv", 600).unwrap();
        let again = Scope::at(&tree, kv.id().index()).unwrap();
        let _charge = again.charge(100).unwrap();
        assert_eq!((kv.stats().allocated, model.stats().allocated), (100, 100));
        let e = Scope::at(&tree, 2).unwrap_err();
        assert_eq!(
            (e.code(), e.to_string().as_str()),
            ("INVALID_ARGUMENT", "scope: expected a scope of this heap, got scope #2")
        );
    }

    #[test]
    fn charges_count_against_every_ancestor_and_return_on_drop() {
        let tree = ScopeTree::new(1 << 20);
        let model = Scope::top(&tree, "model", 1000).unwrap();
        let kv = model.child("kv", 600).unwrap();
        let a = kv.charge(500).unwrap();
        let b = model.charge(450).unwrap();
        assert_eq!((model.stats().allocated, kv.stats().allocated), (950, 500));
        // The parent is full first: named, with its figures, and nothing charged anywhere.
        let e = quota(kv.charge(60).unwrap_err());
        assert_eq!(e, QuotaExceeded { scope: "model".into(), limit: 1000, allocated: 950, requested: 60 });
        assert_eq!((model.stats().allocated, kv.stats().allocated), (950, 500));
        assert_eq!((model.stats().quota_exceeded, kv.stats().quota_exceeded), (1, 0));
        let e = quota(kv.charge(101).unwrap_err());
        assert_eq!(e.scope, "model/kv");
        assert_eq!(kv.stats().quota_exceeded, 1);
        drop(a);
        assert_eq!((model.stats().allocated, kv.stats().allocated), (450, 0));
        b.release();
        assert_eq!(
            model.stats(),
            ScopeStats { limit: 1000, allocated: 0, peak: 950, active_blocks: 0, quota_exceeded: 1 }
        );
    }

    #[test]
    fn names_limits_and_paths_are_checked() {
        let tree = ScopeTree::new(1000);
        let a = Scope::top(&tree, "a", 1000).unwrap();
        for (name, limit, msg) in [
            ("", 10, "non-empty"),
            ("x/y", 10, "a name without '/'"),
            ("z", 0, "positive integer"),
            ("a", 10, "exists already"),
            ("big", 1001, "memory budget"),
        ] {
            let e = Scope::top(&tree, name, limit).unwrap_err();
            assert!(e.to_string().contains(msg), "{name} {limit}: {e}");
        }
        let e = a.child("c", 1001).unwrap_err();
        assert!(e.to_string().contains("(the parent scope 'a' limit)"), "{e}");
        let c = a.child("c", 10).unwrap();
        assert_eq!(c.path(), "a/c");
        assert_eq!(tree.find("a/c"), Some(c.id()));
        assert_eq!(tree.find("a/d"), None);
        // The same name under another parent is another scope.
        let b = Scope::top(&tree, "b", 10).unwrap();
        assert_eq!(b.child("c", 10).unwrap().path(), "b/c");
    }

    #[test]
    fn dispose_refuses_new_charges_and_still_returns_live_ones() {
        let tree = ScopeTree::new(1000);
        let a = Scope::top(&tree, "a", 1000).unwrap();
        let c = a.child("c", 100).unwrap();
        let live = c.charge(60).unwrap();
        a.dispose();
        assert!(c.is_disposed(), "the subtree goes with it");
        let e = c.charge(1).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(e.to_string().contains("'a/c', disposed"), "{e}");
        assert!(a.child("d", 1).is_err());
        assert_eq!(a.stats().allocated, 60);
        drop(live);
        assert_eq!((a.stats().allocated, c.stats().allocated), (0, 0));
        // The name is free again, and the list leaves the disposed scopes out.
        let again = Scope::top(&tree, "a", 10).unwrap();
        assert_ne!(again.id(), a.id());
        assert_eq!(tree.list(), vec![again.id()]);
        assert_eq!(tree.find("a"), Some(again.id()));
    }

    #[test]
    fn list_is_depth_first_in_creation_order() {
        let tree = ScopeTree::new(1000);
        let a = Scope::top(&tree, "a", 100).unwrap();
        let b = Scope::top(&tree, "b", 100).unwrap();
        let a1 = a.child("1", 10).unwrap();
        let a2 = a.child("2", 10).unwrap();
        let a11 = a1.child("x", 10).unwrap();
        let b1 = b.child("1", 10).unwrap();
        a2.dispose();
        let paths: Vec<String> = tree.list().into_iter().map(|s| tree.path(s)).collect();
        assert_eq!(paths, ["a", "a/1", "a/1/x", "b", "b/1"]);
        let _ = (a11, b1);
    }

    #[test]
    fn resize_grows_within_the_limit_and_fails_leaving_the_charge() {
        let tree = ScopeTree::new(1000);
        let a = Scope::top(&tree, "a", 100).unwrap();
        let mut c = a.charge(10).unwrap();
        c.resize(90).unwrap();
        assert_eq!(a.stats().allocated, 90);
        let e = quota(c.resize(101).unwrap_err());
        assert_eq!((e.allocated, e.requested), (90, 11));
        assert_eq!((a.stats().allocated, c.bytes()), (90, 90));
        c.resize(5).unwrap();
        assert_eq!((a.stats().allocated, a.stats().peak), (5, 90));
        drop(c);
        assert_eq!(a.stats().allocated, 0);
    }

    #[test]
    fn block_charges_count_blocks_and_reach_the_peak_when_settled() {
        let tree = ScopeTree::new(1000);
        let a = Scope::top(&tree, "a", 100).unwrap();
        let mut block = a.charge_block(32).unwrap();
        assert_eq!(a.stats(), ScopeStats { limit: 100, allocated: 32, peak: 0, active_blocks: 1, quota_exceeded: 0 });
        block.settle(48);
        assert_eq!((a.stats().allocated, a.stats().peak), (48, 48));
        drop(block);
        assert_eq!((a.stats().allocated, a.stats().active_blocks), (0, 0));
    }

    #[test]
    fn the_invariant_holds_under_random_charges() {
        // Note [A scope's bytes are its live charges], checked against a plain sum.
        let tree = ScopeTree::new(1 << 30);
        let root = Scope::top(&tree, "r", 1 << 20).unwrap();
        let kids = [root.child("a", 1 << 19).unwrap(), root.child("b", 1 << 18).unwrap()];
        let grand = kids[0].child("g", 1 << 17).unwrap();
        let scopes = [root.clone(), kids[0].clone(), kids[1].clone(), grand.clone()];
        let mut below = crate::test_rng::below(7);
        let mut live: Vec<ScopeCharge> = Vec::new();
        for _ in 0..2000 {
            if below(3) == 0 && !live.is_empty() {
                let i = below(live.len() as u64) as usize;
                live.swap_remove(i);
            } else {
                let s = &scopes[below(4) as usize];
                if let Ok(c) = s.charge(below(1 << 16)) {
                    live.push(c);
                }
            }
            let under = |s: &Scope| -> u64 {
                live.iter()
                    .filter(|c| {
                        let mut at = Some(c.scope);
                        while let Some(i) = at {
                            if i == s.id() {
                                return true;
                            }
                            at = tree.parent(i);
                        }
                        false
                    })
                    .map(|c| c.bytes)
                    .sum()
            };
            for s in &scopes {
                assert_eq!(s.stats().allocated, under(s), "{}", s.path());
                assert!(s.stats().allocated <= s.stats().limit);
            }
        }
    }
}
