//! What the heap needs to know about a stream to defer a free correctly: work recorded but not
//! yet submitted may still touch a freed block. The streams (encoders, submissions) are
//! `wgalloc-core`'s; each keeps its marks here up to date.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// Work to run once a stream's unsubmitted work is out (or never will be).
type Deferred = Box<dyn FnOnce() + Send>;

/// A stream's submission marks, shared by the stream and the blocks recorded on it.
#[derive(Default)]
pub struct StreamMarks {
    submits: AtomicU64,
    last_seq: AtomicU64,
    has_pending: AtomicBool,
    dropped: AtomicBool,
    /// Run once the unsubmitted work is submitted or dropped with the stream (the runtime
    /// defers destroying a buffer that work names, so the work is not refused as a whole).
    deferred: Mutex<Vec<Deferred>>,
}

impl std::fmt::Debug for StreamMarks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamMarks")
            .field("submits", &self.submits)
            .field("last_seq", &self.last_seq)
            .field("has_pending", &self.has_pending)
            .field("dropped", &self.dropped)
            .field("deferred", &self.deferred.lock().len())
            .finish()
    }
}

impl StreamMarks {
    /// Whether nothing this stream recorded can still touch memory: it was dropped
    /// (so it records nothing more) with no unsubmitted work, and its last submission
    /// completed. A block may then forget it.
    pub fn retired(&self, completed: u64) -> bool {
        self.dropped.load(Ordering::Acquire)
            && !self.has_pending.load(Ordering::Acquire)
            && self.last_seq.load(Ordering::Acquire) <= completed
    }

    /// Whether work recorded on the stream may still be submitted (it may name any block the
    /// stream was recorded on, at the place it had then). A dropped stream's never is.
    pub fn has_unsubmitted(&self) -> bool {
        self.has_pending.load(Ordering::Acquire) && !self.dropped.load(Ordering::Acquire)
    }

    /// Work was recorded and is not submitted yet.
    pub fn recorded(&self) {
        self.has_pending.store(true, Ordering::Release);
    }

    /// Everything recorded so far went out in submission `seq`. Written in the reverse of the
    /// order [`StreamUse::capture`] reads them.
    pub fn submitted(&self, seq: u64) {
        self.last_seq.store(seq, Ordering::Release);
        self.has_pending.store(false, Ordering::Release);
        self.submits.fetch_add(1, Ordering::AcqRel);
    }

    /// The stream is gone: work it left unsubmitted never runs.
    pub fn dropped(&self) {
        self.dropped.store(true, Ordering::Release);
        self.run_deferred();
    }

    /// `f` waits for this stream's unsubmitted work: [`StreamMarks::run_deferred`] runs it.
    pub fn defer(&self, f: impl FnOnce() + Send + 'static) {
        self.deferred.lock().push(Box::new(f));
    }

    /// The work is out (or gone): what waited only for it runs.
    pub fn run_deferred(&self) {
        for f in std::mem::take(&mut *self.deferred.lock()) {
            f();
        }
    }
}

/// A stream's position when a block it used was freed.
#[derive(Debug, Clone)]
pub struct StreamUse {
    marks: Arc<StreamMarks>,
    /// Submission that covers the block's use, if already known.
    seq: u64,
    /// `submits` at free time, when the use was still unsubmitted.
    waiting_for_submit: Option<u64>,
}

impl StreamUse {
    pub fn capture(marks: &Arc<StreamMarks>) -> Self {
        // Read in the reverse of the order `submit` writes them, so a concurrent
        // submit is either seen whole or waited for, never missed.
        let submits = marks.submits.load(Ordering::Acquire);
        let pending = marks.has_pending.load(Ordering::Acquire);
        StreamUse {
            marks: marks.clone(),
            seq: marks.last_seq.load(Ordering::Acquire),
            waiting_for_submit: pending.then_some(submits),
        }
    }

    /// The submission sequence this use resolves to, once it is known: `None`
    /// while the stream has not yet submitted the work recorded before the free.
    /// Work of a stream dropped unsubmitted never runs, so it resolves to 0.
    pub fn resolved_seq(&self) -> Option<u64> {
        match self.waiting_for_submit {
            None => Some(self.seq),
            Some(_) if self.marks.dropped.load(Ordering::Acquire) => Some(0),
            Some(at) if self.marks.submits.load(Ordering::Acquire) > at => {
                Some(self.marks.last_seq.load(Ordering::Acquire))
            }
            Some(_) => None,
        }
    }
}
