//! One-call transfers through the cache: what most users want instead of
//! managing blocks and streams themselves.

use super::{Direction, Host};
use crate::error::{Error, Result};
use crate::heap::DeviceBlock;
use crate::stream::Event;

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
