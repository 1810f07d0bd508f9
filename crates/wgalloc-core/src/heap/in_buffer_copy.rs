//! Copies within one buffer, for compaction's moves inside a segment: WebGPU refuses a buffer
//! as both source and destination of `copyBufferToBuffer`, so a kernel copies. A move that
//! overlaps its old place goes in pieces no longer than its shift, one compute pass each, in
//! the order where no piece writes bytes a later piece still reads (wgpu puts a barrier
//! between passes that write the same buffer).

use wgpu::util::DeviceExt;

use wgalloc_heap::compaction::slide_piece;

const SHADER: &str = r"
struct Piece { src: u32, dst: u32, words: u32, pad: u32 }
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@group(0) @binding(1) var<uniform> piece: Piece;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * 256u;
    for (var i = id.x; i < piece.words; i += stride) {
        data[piece.dst + i] = data[piece.src + i];
    }
}
";

const WORKGROUP: u64 = 256;
/// Uniform offsets must be multiples of the device's alignment, at most 256 everywhere.
const PIECE_STRIDE: u64 = 256;

/// The copy kernel of one device (made on the first move within a segment).
pub struct InBufferCopy {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

/// One piece: `len` bytes from `src` to `dst` of the same buffer, not overlapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    src: u64,
    dst: u64,
    len: u64,
}

impl Piece {
    /// The bound range (offset, size): from the lower place to the end of the higher one.
    fn window(&self) -> (u64, u64) {
        let base = self.src.min(self.dst);
        (base, self.src.max(self.dst) + self.len - base)
    }
}

impl InBufferCopy {
    pub fn new(device: &wgpu::Device) -> Self {
        let storage = |binding, ty| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("wgalloc in-buffer copy"),
            entries: &[
                storage(0, wgpu::BufferBindingType::Storage { read_only: false }),
                storage(1, wgpu::BufferBindingType::Uniform),
            ],
        });
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("wgalloc in-buffer copy"),
            source: wgpu::ShaderSource::Wgsl(SHADER.into()),
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("wgalloc in-buffer copy"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("wgalloc in-buffer copy"),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        InBufferCopy { pipeline, layout }
    }

    /// Records copies of `size` bytes from `from` to `to` inside `buffer`, one per move, in
    /// order. Offsets and sizes are multiples of the storage offset alignment; each piece's old
    /// and new place fit one storage binding (compaction only plans moves where they can).
    pub fn record(
        &self,
        device: &wgpu::Device,
        encoder: &mut wgpu::CommandEncoder,
        moves: &[(&wgpu::Buffer, u64, u64, u64)],
    ) {
        let max_span = device.limits().max_storage_buffer_binding_size;
        let pieces: Vec<(&wgpu::Buffer, Piece)> = moves
            .iter()
            .flat_map(|&(buffer, from, to, size)| pieces(from, to, size, max_span).map(move |p| (buffer, p)))
            .collect();
        if pieces.is_empty() {
            return;
        }
        let mut params = vec![0u8; pieces.len() * PIECE_STRIDE as usize];
        for (i, (_, p)) in pieces.iter().enumerate() {
            // Word offsets relative to the bound range, which starts at the lower place.
            let (base, _) = p.window();
            let words = [(p.src - base) / 4, (p.dst - base) / 4, p.len / 4, 0].map(|w| w as u32);
            let at = i * PIECE_STRIDE as usize;
            for (k, w) in words.iter().enumerate() {
                params[at + 4 * k..at + 4 * k + 4].copy_from_slice(&w.to_le_bytes());
            }
        }
        let uniforms = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("wgalloc in-buffer copy pieces"),
            contents: &params,
            usage: wgpu::BufferUsages::UNIFORM,
        });
        for (i, (buffer, p)) in pieces.iter().enumerate() {
            let (base, span) = p.window();
            let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("wgalloc in-buffer copy"),
                layout: &self.layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer,
                            offset: base,
                            size: wgpu::BufferSize::new(span),
                        }),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &uniforms,
                            offset: i as u64 * PIECE_STRIDE,
                            size: wgpu::BufferSize::new(16),
                        }),
                    },
                ],
            });
            let groups = (p.len / 4).div_ceil(WORKGROUP).clamp(1, u16::MAX as u64) as u32;
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("wgalloc in-buffer copy"),
                timestamp_writes: None,
            });
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups(groups, 1, 1);
        }
    }
}

/// The pieces of a move of `size` bytes from `from` to `to` (see `compaction::slide_piece`):
/// none longer than the shift, so none overlaps itself, and each within `max_span` bytes from
/// its old place's start to its new place's end; moving down they go front first, moving up
/// back first, so no piece writes over bytes a later one reads.
fn pieces(from: u64, to: u64, size: u64, max_span: u64) -> impl Iterator<Item = Piece> {
    let shift = from.abs_diff(to);
    // Compaction plans only moves that have a piece length; a move without one would fail
    // validation as a whole rather than corrupt anything.
    let step = slide_piece(shift, size, max_span).unwrap_or(shift.min(size)).max(1);
    let count = if from == to { 0 } else { size.div_ceil(step) };
    (0..count).map(move |k| {
        // Moving down: k-th piece from the front; moving up: k-th from the back.
        let start = if to < from { k * step } else { size.saturating_sub((k + 1) * step) };
        let end = if to < from { (start + step).min(size) } else { size - k * step };
        Piece { src: from + start, dst: to + start, len: end - start }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the pieces on a host copy and checks the result equals a memmove and that every
    /// piece's binding window fits `max_span`.
    fn check(from: u64, to: u64, size: u64) {
        check_within(from, to, size, u64::MAX);
    }

    fn check_within(from: u64, to: u64, size: u64, max_span: u64) {
        let total = (from.max(to) + size) as usize;
        let original: Vec<u8> = (0..total).map(|i| (i * 7 + 3) as u8).collect();
        let mut want = original.clone();
        want.copy_within(from as usize..(from + size) as usize, to as usize);
        let mut got = original;
        let mut covered = 0;
        for p in pieces(from, to, size, max_span) {
            assert!(p.src.abs_diff(p.dst) >= p.len, "a piece overlaps itself");
            assert!(p.window().1 <= max_span, "a piece spans {} bytes", p.window().1);
            assert_eq!(p.window().0 % 16, 0, "a binding offset off the alignment");
            let (s, d, l) = (p.src as usize, p.dst as usize, p.len as usize);
            let bytes = got[s..s + l].to_vec();
            got[d..d + l].copy_from_slice(&bytes);
            covered += p.len;
        }
        assert_eq!(covered, if from == to { 0 } else { size });
        assert_eq!(got, want, "from {from} to {to} size {size}");
    }

    #[test]
    fn pieces_copy_like_memmove() {
        for (from, to, size) in
            [(32, 0, 96), (0, 32, 96), (16, 0, 64), (0, 48, 32), (100, 0, 40), (0, 0, 16), (64, 48, 64)]
        {
            check(from, to, size);
        }
        assert_eq!(pieces(32, 0, 96, u64::MAX).count(), 3, "shift 32, 96 bytes");
    }

    #[test]
    fn pieces_fit_the_binding_limit() {
        // A 122 KiB block moved down by 81 KiB with a 128 KiB binding: pieces of the shift would
        // span 162 KiB; 47 KiB pieces (whole 256-byte units) span at most 128 KiB.
        let kib = 1024;
        check_within(81 * kib, 0, 122 * kib, 128 * kib);
        check_within(0, 81 * kib, 122 * kib, 128 * kib);
        assert_eq!(pieces(81 * kib, 0, 122 * kib, 128 * kib).count(), 3);
        // A move that fits stays in pieces of its shift.
        assert_eq!(pieces(32 * kib, 0, 96 * kib, 128 * kib).count(), 3);
    }
}
