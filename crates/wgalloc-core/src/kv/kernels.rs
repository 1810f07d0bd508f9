//! The WGSL kernels that write into and read from a paged KV cache.
//!
//! Pool layout: `[block][token in block][kv head][head dim]`, f32, or f16 packed two to a
//! `u32` (`pack2x16float`, so no `shader-f16` feature is needed). Binding order follows a
//! graph op's (inputs, then outputs, then the uniform), so a graph can use the same source.

/// Element type of the K/V pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvDtype {
    F32,
    F16,
}

impl KvDtype {
    pub const ALL: [KvDtype; 2] = [KvDtype::F32, KvDtype::F16];

    pub fn parse(name: &str) -> Option<KvDtype> {
        match name {
            "f32" => Some(KvDtype::F32),
            "f16" => Some(KvDtype::F16),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            KvDtype::F32 => "f32",
            KvDtype::F16 => "f16",
        }
    }

    pub fn bytes(self) -> u64 {
        match self {
            KvDtype::F32 => 4,
            KvDtype::F16 => 2,
        }
    }
}

/// How attention finds token `t` of query row `r`'s sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvLayout {
    /// Through the block table: `tables[row * width + t / blockTokens]`.
    Paged,
    /// Contiguous per sequence: `row * width + t` (the reference, and the baseline of its benchmark).
    Contiguous,
}

/// Most head dimensions a thread of the attention kernel accumulates (64 threads).
pub const MAX_HEAD_DIM: u32 = 256;
/// Threads per workgroup of both kernels.
const WORKGROUP: u32 = 64;
/// The largest workgroup count per dimension the kernels assume (WebGPU's guaranteed limit).
pub(crate) const GRID: u32 = 65535;

fn pool_decl(dtype: KvDtype, binding: u32, name: &str, access: &str) -> String {
    let elem = match dtype {
        KvDtype::F32 => "f32",
        KvDtype::F16 => "u32",
    };
    format!("@group(0) @binding({binding}) var<storage, {access}> {name}: array<{elem}>;\n")
}

fn load_fn(dtype: KvDtype, name: &str) -> String {
    match dtype {
        KvDtype::F32 => format!("fn load_{name}(i: u32) -> f32 {{ return {name}_pool[i]; }}\n"),
        KvDtype::F16 => {
            format!("fn load_{name}(i: u32) -> f32 {{ return unpack2x16float({name}_pool[i >> 1u])[i & 1u]; }}\n")
        }
    }
}

/// Writes the K and V of `n` tokens (`[n][kvHeads][headDim]` f32 each) at their slots.
/// Bindings: `k_new`, `v_new`, `slots` (u32 per token), then `k_pool`, `v_pool`, then
/// the uniform `{ n, width = kvHeads * headDim }`. One thread per element (f32) or pair (f16).
pub fn append_source(dtype: KvDtype) -> String {
    let mut s = String::from(
        "struct Params { n: u32, width: u32, _p0: u32, _p1: u32 }\n\
         @group(0) @binding(0) var<storage, read> k_new: array<f32>;\n\
         @group(0) @binding(1) var<storage, read> v_new: array<f32>;\n\
         @group(0) @binding(2) var<storage, read> slots: array<u32>;\n",
    );
    s += &pool_decl(dtype, 3, "k_pool", "read_write");
    s += &pool_decl(dtype, 4, "v_pool", "read_write");
    s += "@group(0) @binding(5) var<uniform> p: Params;\n";
    s += &format!("@compute @workgroup_size({WORKGROUP})\nfn main(@builtin(global_invocation_id) g: vec3<u32>) {{\n");
    s += &format!("  let i = g.x + g.y * {}u;\n", GRID * WORKGROUP);
    match dtype {
        KvDtype::F32 => {
            s += "  if (i >= p.n * p.width) { return; }\n\
                  let t = i / p.width;\n\
                  let dst = slots[t] * p.width + i % p.width;\n\
                  k_pool[dst] = k_new[i];\n\
                  v_pool[dst] = v_new[i];\n"
        }
        KvDtype::F16 => {
            s += "  let half = p.width / 2u;\n\
                  if (i >= p.n * half) { return; }\n\
                  let t = i / half;\n\
                  let dst = slots[t] * half + i % half;\n\
                  k_pool[dst] = pack2x16float(vec2<f32>(k_new[2u * i], k_new[2u * i + 1u]));\n\
                  v_pool[dst] = pack2x16float(vec2<f32>(v_new[2u * i], v_new[2u * i + 1u]));\n"
        }
    }
    s += "}\n";
    s
}

/// Attention of query rows over their sequences' K/V, one workgroup per (query head, row).
/// Bindings: `q` (`[rows][qHeads][headDim]` f32), `k_pool`, `v_pool`, `tables` (u32),
/// `rows` (`[rows][2]` u32: table row, tokens visible), then `out` (like `q`), then the
/// uniform `{ rows, qHeads, kvHeads, headDim, blockTokens, tableWidth, scale: f32 }`.
/// Grouped-query attention: query head `h` reads kv head `h / (qHeads / kvHeads)`.
///
/// Note [One pass over the keys]
/// Each workgroup walks its row's tokens in chunks of 64: each thread scores one token,
/// the chunk's maximum and sum are reduced in workgroup memory, and the running output
/// (each thread owns head dims `lid`, `lid + 64`, ...) is rescaled by the change of maximum,
/// as in FlashAttention's online softmax. So a row of any length needs no scratch memory
/// and the keys are read once. Each thread also leaves its token's place in workgroup memory
/// (`bases`): the values are read at the same place, so the block table is read once per
/// token, not once per token and dimension. The token count is loaded through `workgroupUniformLoad`:
/// the loop holds barriers, and WGSL requires its bound to be uniform.
pub fn attention_source(dtype: KvDtype, layout: KvLayout) -> String {
    let mut s = String::from(
        "struct Params { rows: u32, q_heads: u32, kv_heads: u32, head_dim: u32, block_tokens: u32, table_width: u32, scale: f32, _p0: u32 }\n\
         @group(0) @binding(0) var<storage, read> q: array<f32>;\n",
    );
    s += &pool_decl(dtype, 1, "k_pool", "read");
    s += &pool_decl(dtype, 2, "v_pool", "read");
    s += "@group(0) @binding(3) var<storage, read> tables: array<u32>;\n\
          @group(0) @binding(4) var<storage, read> rows: array<u32>;\n\
          @group(0) @binding(5) var<storage, read_write> out: array<f32>;\n\
          @group(0) @binding(6) var<uniform> p: Params;\n\
          var<workgroup> red: array<f32, 64>;\n\
          var<workgroup> probs: array<f32, 64>;\n\
          var<workgroup> bases: array<u32, 64>;\n\
          var<workgroup> visible: u32;\n";
    s += &load_fn(dtype, "k");
    s += &load_fn(dtype, "v");
    s += match layout {
        KvLayout::Paged => {
            "fn token_base(row: u32, t: u32, kvh: u32) -> u32 {\n\
             \x20 let b = tables[row * p.table_width + t / p.block_tokens];\n\
             \x20 return ((b * p.block_tokens + t % p.block_tokens) * p.kv_heads + kvh) * p.head_dim;\n}\n"
        }
        KvLayout::Contiguous => {
            "fn token_base(row: u32, t: u32, kvh: u32) -> u32 {\n\
             \x20 return ((row * p.table_width + t) * p.kv_heads + kvh) * p.head_dim;\n}\n"
        }
    };
    s += &format!(
        "@compute @workgroup_size({WORKGROUP})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
  let h = wg.x;
  let r = wg.y + wg.z * {GRID}u;
  if (r >= p.rows) {{ return; }}
  if (lid == 0u) {{ visible = rows[2u * r + 1u]; }}
  let len = workgroupUniformLoad(&visible);
  let row = rows[2u * r];
  let kvh = h / (p.q_heads / p.kv_heads);
  let d_n = p.head_dim;
  let qb = (r * p.q_heads + h) * d_n;
  var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
  // Note [Attention scores stay finite]: scores are dot products signed by the scale, and the
  // scale's magnitude multiplies only differences to their maximum (never positive), so no
  // finite scale overflows: exp(|scale| (s - m)) = exp(scale dot - max(scale dot)). The
  // exponent is floored where f32's exp is 0 anyway, before exp (which a driver may turn
  // into exp2 of a product with log2(e)) can meet an infinity times zero.
  let sign = select(1.0, -1.0, p.scale < 0.0);
  let mag = abs(p.scale);
  var m = -3.0e38;
  var l = 0.0;
  for (var c = 0u; c < len; c += 64u) {{
    let t = c + lid;
    var s = -3.0e38;
    var kb = 0u;
    if (t < len) {{
      kb = token_base(row, t, kvh);
      var dot = 0.0;
      for (var d = 0u; d < d_n; d++) {{ dot += q[qb + d] * load_k(kb + d); }}
      s = dot * sign;
    }}
    bases[lid] = kb;
    red[lid] = s;
    workgroupBarrier();
    for (var o = 32u; o > 0u; o >>= 1u) {{
      if (lid < o) {{ red[lid] = max(red[lid], red[lid + o]); }}
      workgroupBarrier();
    }}
    let m_new = max(m, red[0]);
    workgroupBarrier();
    var pr = 0.0;
    if (t < len) {{ pr = exp(max(mag * (s - m_new), -104.0)); }}
    probs[lid] = pr;
    red[lid] = pr;
    workgroupBarrier();
    for (var o = 32u; o > 0u; o >>= 1u) {{
      if (lid < o) {{ red[lid] = red[lid] + red[lid + o]; }}
      workgroupBarrier();
    }}
    // The first chunk has nothing to correct (and m - m_new may be -inf there, times a zero scale).
    let corr = select(exp(max(mag * (m - m_new), -104.0)), 1.0, c == 0u);
    l = l * corr + red[0];
    m = m_new;
    let chunk = min(64u, len - c);
    for (var k = 0u; k < 4u; k++) {{
      let d = lid + 64u * k;
      if (d < d_n) {{
        var a = acc[k] * corr;
        for (var j = 0u; j < chunk; j++) {{ a += probs[j] * load_v(bases[j] + d); }}
        acc[k] = a;
      }}
    }}
    workgroupBarrier();
  }}
  for (var k = 0u; k < 4u; k++) {{
    let d = lid + 64u * k;
    if (d < d_n) {{ out[qb + d] = acc[k] / l; }}
  }}
}}
"
    );
    s
}
