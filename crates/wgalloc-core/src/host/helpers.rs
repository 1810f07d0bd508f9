//! One-call transfers through the cache: what most users want instead of
//! managing blocks and streams themselves.

use std::collections::VecDeque;
use std::sync::Arc;

use super::{Direction, Host, HostBlock};
use crate::error::{align_up, Error, Result};
use crate::heap::DeviceBlock;
use crate::stream::{Event, Stream};
use crate::transfer::{aligned_range, check_copy_source, WORD};

/// Pieces of a pipelined `download` in flight at once: enough to keep the device copying while
/// the host reads the oldest, few enough to bound staging memory (3 x `pipeline_bytes`).
pub const DOWNLOAD_DEPTH: usize = 3;

/// One copy of an `upload_many` batch: `data` goes to `dst` at byte `offset`.
#[derive(Clone, Copy)]
pub struct UploadItem<'a> {
    pub dst: &'a DeviceBlock,
    pub offset: u64,
    pub data: &'a [u8],
}

/// A validated item, or a slice of one, with its length padded to whole words.
struct Piece<'a> {
    item: UploadItem<'a>,
    padded: u64,
}

impl Host {
    /// Copies `data` into `dst` at `offset` through cached upload blocks and submits,
    /// in pieces of `pipeline_bytes` (see [`Host::upload_many`]). Returns the last
    /// submission's event; the staging blocks are back in the cache once it ran.
    pub fn upload(&self, dst: &DeviceBlock, offset: u64, data: &[u8]) -> Result<Event> {
        if data.is_empty() {
            return Err(Error::invalid("data", "at least 1 byte", "0 bytes").in_call("upload"));
        }
        self.upload_pieces(&[UploadItem { dst, offset, data }], "upload")
    }

    /// Uploads every item. The items are split into pieces of at most `pipeline_bytes`
    /// and packed back to back into cached staging blocks of that size; each block is
    /// submitted as soon as it is written, so the device copies it while the host writes
    /// the next. Returns the last submission's event (queue order makes it cover all).
    /// Every item is checked before anything is written; a failure later (out of
    /// memory, a lost device) can leave the pieces before it uploaded.
    pub fn upload_many(&self, items: &[UploadItem<'_>]) -> Result<Event> {
        self.upload_pieces(items, "uploadBatch")
    }

    /// `what` names the caller's API in errors.
    fn upload_pieces(&self, items: &[UploadItem<'_>], what: &str) -> Result<Event> {
        let pieces = self.pieces(items, what)?;
        let mut stream = self.gpu.create_stream()?;
        let mut event = None;
        for run in runs(&pieces, self.pipeline_bytes()) {
            let block = self.stage_run(&mut stream, run)?;
            event = Some(stream.submit()?);
            // Freed after the submit, so the block's remap is requested at once.
            block.free()?;
        }
        event.ok_or_else(|| Error::invalid("items", "at least one item", "none").in_call("uploadBatch"))
    }

    /// As [`Host::upload_many`], recording the copies on `stream` without submitting.
    /// The staging blocks are freed with the stream recorded: each is reused only once
    /// the stream's next submission ran and the block is mapped again. Every item is
    /// checked before anything is recorded, so an invalid item leaves the stream untouched.
    pub fn upload_many_on(&self, stream: &mut Stream, items: &[UploadItem<'_>]) -> Result<()> {
        let pieces = self.pieces(items, "uploadBatch")?;
        for run in runs(&pieces, self.pipeline_bytes()) {
            self.stage_run(stream, run)?.free()?;
        }
        Ok(())
    }

    /// Validates the items and slices each into pieces of at most `pipeline_bytes`.
    /// Every slice but an item's last is a whole number of words, so every piece keeps
    /// the alignment its item had.
    fn pieces<'a>(&self, items: &[UploadItem<'a>], what: &str) -> Result<Vec<Piece<'a>>> {
        if items.is_empty() {
            return Err(Error::invalid("items", "at least one item", "none").in_call(what));
        }
        let limit = self.pipeline_bytes();
        let mut pieces = Vec::with_capacity(items.len());
        for (i, it) in items.iter().enumerate() {
            // A single upload has no item index to name.
            let item = |e: Error| if what == "upload" { e } else { e.within(&format!("items[{i}]")) };
            if !Arc::ptr_eq(&self.gpu.shared, &it.dst.heap().gpu().shared) {
                return Err(item(
                    Error::invalid("dst", "a block of this device", "a block of another device").in_call(what),
                ));
            }
            it.dst.binding()?;
            let padded = aligned_range(it.offset, it.data.len() as u64, it.dst.requested_size(), what).map_err(item)?;
            if padded <= limit {
                pieces.push(Piece { item: *it, padded });
                continue;
            }
            for (k, data) in it.data.chunks(limit as usize).enumerate() {
                let offset = it.offset + k as u64 * limit;
                pieces.push(Piece {
                    item: UploadItem { dst: it.dst, offset, data },
                    padded: align_up(data.len() as u64, WORD)?,
                });
            }
        }
        Ok(pieces)
    }

    /// Writes one run of pieces into one block and records their copies; returns the
    /// block (dropping it frees it).
    fn stage_run(&self, stream: &mut Stream, run: &[Piece<'_>]) -> Result<HostBlock> {
        let bytes = run.iter().map(|p| p.padded).sum();
        let block = self.alloc(bytes, Direction::Upload)?;
        let mut at = 0;
        for p in run {
            let len = p.item.data.len() as u64;
            block.write(p.item.data, at)?;
            // The padding is copied too (into the destination's own padding): keep it zero.
            if p.padded > len {
                block.write(&[0; WORD as usize][..(p.padded - len) as usize], at + len)?;
            }
            at += p.padded;
        }
        let mut at = 0;
        for p in run {
            block.copy_to_device_on(stream, p.item.dst, at, p.item.offset, p.item.data.len() as u64)?;
            at += p.padded;
        }
        Ok(block)
    }

    /// Reads `len` bytes of `src` at `offset` through cached download blocks, in pieces of
    /// `pipeline_bytes` with up to [`DOWNLOAD_DEPTH`] in flight: the device copies the next
    /// pieces while the host reads the oldest, and staging stays bounded however long the range.
    pub async fn download(&self, src: &DeviceBlock, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.start_download(src, offset, len)?.finish().await
    }

    /// Checks a download and holds its source: once this returned, a `free()` of `src`
    /// defers until the download ended, so it reads the block's bytes, never a next owner's.
    pub fn start_download(&self, src: &DeviceBlock, offset: u64, len: u64) -> Result<Download> {
        // The whole range is checked before any piece is copied.
        if !Arc::ptr_eq(&self.gpu.shared, &src.heap().gpu().shared) {
            return Err(
                Error::invalid("src", "a block of this device", "a block of another device").in_call("download")
            );
        }
        if len == 0 {
            return Err(Error::invalid("length", "at least 1 byte", "0").in_call("download"));
        }
        // Held first (a freed block is USE_AFTER_FREE whatever else is wrong with the call): a
        // held block neither moves nor is reused, so its place stays valid for every piece.
        let hold = src.heap().hold(src.id())?;
        check_copy_source(offset, len, align_up(len, WORD)?, src.requested_size(), src.size(), "download")?;
        usize::try_from(len).map_err(|_| {
            Error::invalid("length", "a length that fits in memory", len.to_string()).in_call("download")
        })?;
        let at = src.binding()?;
        Ok(Download {
            host: self.clone(),
            buffer: at.buffer.clone(),
            start: at.offset + offset,
            len,
            src_block: src.id(),
            _hold: hold,
        })
    }
}

/// A checked download whose source block is held (see [`Host::start_download`]); `finish`
/// copies it in pieces of `pipeline_bytes`, up to [`DOWNLOAD_DEPTH`] in flight.
pub struct Download {
    host: Host,
    buffer: Arc<wgpu::Buffer>,
    /// Byte offset of the range in `buffer`.
    start: u64,
    len: u64,
    src_block: u64,
    _hold: crate::heap::BlockHold,
}

impl Download {
    pub async fn finish(self) -> Result<Vec<u8>> {
        let (host, len) = (&self.host, self.len);
        let piece = host.pipeline_bytes();
        let mut out = Vec::with_capacity(len as usize);
        let mut stream = host.gpu.create_stream()?;
        let mut in_flight = VecDeque::with_capacity(DOWNLOAD_DEPTH);
        let mut next = 0;
        loop {
            while in_flight.len() < DOWNLOAD_DEPTH && next < len {
                let n = piece.min(len - next);
                let block = host.alloc(n, Direction::Download)?;
                let padded = aligned_range(0, n, block.requested_size(), "download")?;
                block.copy_from_range(&mut stream, &self.buffer, self.start + next, 0, padded, true, self.src_block)?;
                stream.submit()?;
                in_flight.push_back((block, n));
                next += n;
            }
            let Some((block, n)) = in_flight.pop_front() else { break };
            block.map().await?;
            block.read_with(0, n, |bytes| out.extend_from_slice(bytes))?;
            block.free()?;
        }
        Ok(out)
    }
}

/// Splits pieces into consecutive runs of at most `limit` padded bytes (every piece fits
/// alone): each run is one staging block.
fn runs<'p, 'a>(pieces: &'p [Piece<'a>], limit: u64) -> impl Iterator<Item = &'p [Piece<'a>]> {
    let mut rest = pieces;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0;
        let n = rest.iter().take_while(|p| {
            bytes += p.padded;
            bytes <= limit
        });
        let n = n.count().max(1);
        let (run, tail) = rest.split_at(n);
        rest = tail;
        Some(run)
    })
}
