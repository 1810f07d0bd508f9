//! One-call transfers through the cache: what most users want instead of
//! managing blocks and streams themselves.

use std::sync::Arc;

use super::{Direction, Host, HostBlock};
use crate::error::{checked_add, Error, Result};
use crate::heap::DeviceBlock;
use crate::stream::{Event, Stream};
use crate::transfer::{aligned_range, WORD};

/// Most bytes `upload_many` packs into one staging block; a larger item gets a block of its own.
pub const BATCH_BLOCK_BYTES: u64 = 16 << 20;

/// One copy of an `upload_many` batch: `data` goes to `dst` at byte `offset`.
#[derive(Clone, Copy)]
pub struct UploadItem<'a> {
    pub dst: &'a DeviceBlock,
    pub offset: u64,
    pub data: &'a [u8],
}

impl Host {
    /// Copies `data` into `dst` at `offset` through a cached upload block and submits.
    /// Returns the submission's event; the staging block is back in the cache once it ran.
    pub fn upload(&self, dst: &DeviceBlock, offset: u64, data: &[u8]) -> Result<Event> {
        if data.is_empty() {
            return Err(Error::invalid("upload: data must hold at least 1 byte"));
        }
        let len = data.len() as u64;
        let block = self.alloc(len, Direction::Upload)?;
        block.write(data, 0)?;
        let mut stream = self.gpu.create_stream()?;
        block.copy_to_device_on(&mut stream, dst, 0, offset, len)?;
        let event = stream.submit()?;
        block.free()?;
        Ok(event)
    }

    /// Uploads every item with one submission: the items are packed back to back into
    /// as few cached staging blocks as fit (up to [`BATCH_BLOCK_BYTES`] each, one block
    /// per larger item), then one copy per item is recorded and submitted together.
    /// Returns the submission's event; the blocks are back in the cache once it ran.
    pub fn upload_many(&self, items: &[UploadItem<'_>]) -> Result<Event> {
        let mut stream = self.gpu.create_stream()?;
        let blocks = self.stage_many(&mut stream, items)?;
        let event = stream.submit();
        // Freed after the submit, so each block's remap is requested at once.
        free_all(blocks)?;
        event
    }

    /// As [`Host::upload_many`], recording the copies on `stream` without submitting.
    /// The staging blocks are freed with the stream recorded: each is reused only once
    /// the stream's next submission ran and the block is mapped again. Every item is
    /// checked before anything is recorded, so an invalid item leaves the stream untouched.
    pub fn upload_many_on(&self, stream: &mut Stream, items: &[UploadItem<'_>]) -> Result<()> {
        free_all(self.stage_many(stream, items)?)
    }

    /// Validates the items, writes them into staging blocks, records their copies on
    /// `stream`; returns the blocks (dropping them frees them).
    fn stage_many(&self, stream: &mut Stream, items: &[UploadItem<'_>]) -> Result<Vec<HostBlock>> {
        if items.is_empty() {
            return Err(Error::invalid("upload_many: pass at least one item"));
        }
        // Validate everything first; the padded lengths lay the items out in the blocks.
        let mut padded = Vec::with_capacity(items.len());
        for (i, it) in items.iter().enumerate() {
            if !Arc::ptr_eq(&self.gpu.shared, &it.dst.heap().gpu().shared) {
                return Err(Error::invalid(format!("upload_many: item {i}: the device block belongs to another device")));
            }
            it.dst.binding()?;
            let what = format!("upload_many: item {i}");
            padded.push(aligned_range(it.offset, it.data.len() as u64, it.dst.requested_size(), &what)?);
        }
        let mut blocks = Vec::new();
        let mut start = 0;
        while start < items.len() {
            // The run [start, end) shares one staging block.
            let mut end = start + 1;
            let mut bytes = padded[start];
            while end < items.len() {
                let next = checked_add(bytes, padded[end], "upload_many")?;
                if next > BATCH_BLOCK_BYTES {
                    break;
                }
                bytes = next;
                end += 1;
            }
            blocks.push(self.stage_run(stream, &items[start..end], &padded[start..end], bytes)?);
            start = end;
        }
        Ok(blocks)
    }

    /// Writes one run of items into one block and records their copies.
    fn stage_run(&self, stream: &mut Stream, items: &[UploadItem<'_>], padded: &[u64], bytes: u64) -> Result<HostBlock> {
        let block = self.alloc(bytes, Direction::Upload)?;
        let mut at = 0;
        for (it, &p) in items.iter().zip(padded) {
            let len = it.data.len() as u64;
            block.write(it.data, at)?;
            // The padding is copied too (into the destination's own padding): keep it zero.
            if p > len {
                block.write(&[0; WORD as usize][..(p - len) as usize], at + len)?;
            }
            at += p;
        }
        let mut at = 0;
        for (it, &p) in items.iter().zip(padded) {
            block.copy_to_device_on(stream, it.dst, at, it.offset, it.data.len() as u64)?;
            at += p;
        }
        Ok(block)
    }

    /// Reads `len` bytes of `src` at `offset` through a cached download block.
    pub async fn download(&self, src: &DeviceBlock, offset: u64, len: u64) -> Result<Vec<u8>> {
        let block = self.alloc(len, Direction::Download)?;
        let mut stream = self.gpu.create_stream()?;
        block.copy_from_device(&mut stream, src, offset, 0, len, true)?;
        stream.submit()?;
        block.map().await?;
        let bytes = block.read(0, len)?;
        block.free()?;
        Ok(bytes)
    }
}

fn free_all(blocks: Vec<HostBlock>) -> Result<()> {
    blocks.iter().try_for_each(HostBlock::free)
}
