// y = alpha * x + y: the test kernel of the Rust and JS kernel tests.
struct P { alpha: f32 }
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < arrayLength(&y)) { y[g.x] = p.alpha * x[g.x] + y[g.x]; }
}
