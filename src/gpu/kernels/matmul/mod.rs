//! `out = epilogue(prologue(x) · Wᵀ)` for a weight in any stored format (shaders/matmul/).
//!
//! `x` is `[m, k]` f32 and `W` is `[n, k]` (a linear layer's `[out, in]`). The kernel is
//! composed of three independent choices:
//! - a [`Prologue`]: how x is read (as it is, or RMS-normalised per row, optionally from a
//!   gathered subset of rows, or as attention's output whose split rows it folds from their
//!   page states);
//! - an [`Epilogue`]: what happens to each output (stored, added to the residual stream,
//!   SiLU- or GELU-gated in pairs, or the q|k|v projection's bias, RoPE and KV-cache write);
//! - a [`MatmulShape`]: which invocations compute what. `Tile` is shaped for CPU adapters
//!   (each invocation walks all of k for a small tile); `MatVec` and `Gemm` for GPUs (k
//!   split across a workgroup for few rows; a tiled GEMM through workgroup memory for many).
//!
//! A base projection may also carry a LoRA term ([`LoraArgs`]): `y = W x + B' t`, with
//! `t = A x` computed beforehand by an ordinary matmul (the A matrices of every projection
//! that shares x concatenated, R their ranks summed) and `B' = (alpha / r) B` scaled on the
//! CPU, in the weight's own row layout. Each output of a row whose [`RowInfo`] adapter
//! word is set gets `dot(B'[col], t[i])`, one fma chain over j = 0..R from 0, added before
//! the epilogue's own work (shaders/matmul/lora.wgsl); a row whose word is 0 skips the add,
//! so it is bitwise what the kernel without the term gives it. The term binds two or three
//! more storage buffers (the q|k|v kernel [`lora_storage_bindings_needed`], where the
//! adapter allows: [`lora_fits`]).
//!
//! [`MatmulFixture`] sets one product up for checking and timing (the kernel suite, `sprout
//! check`, `sprout tune`, the benchmarks).
//!
//! Invariant: every shape, tile, x reader and x load runs the same arithmetic for an output
//! (the canonical order in shaders/matmul/common.wgsl), so an output is bitwise the same
//! whichever shape computed it and however many rows shared the dispatch. That is what
//! lets the engine pick shapes per adapter and per batch size (`gpu::tuning`) without
//! giving up batch invariance; the kernel suite checks it for every pair of shapes. The
//! LoRA term keeps it: it reads only the output's row of t and weight row of B', in one
//! order, whatever the shape or the batch.
//!
//! [`RowInfo`]: crate::gpu::kernels::RowInfo

mod fixture;
mod gemm;
mod shape;
pub mod tile;

pub use fixture::{LoraInputs, MatmulFixture, MatmulInputs};
pub use shape::MatmulShape;
pub use tile::{MIN_SHUFFLE_SUBGROUP, XLoads};

use crate::formats::WeightFormat;
use crate::gpu::context::Capabilities;
use crate::gpu::kernels::rope::RopeTable;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::shaders::{ATTENTION_FOLD, NAN, with_weights};
use crate::gpu::{Gpu, GpuWeight, Recorder, Tensor};

const COMMON: &str = include_str!("../../../../shaders/matmul/common.wgsl");
const PROLOGUE_PLAIN: &str = include_str!("../../../../shaders/matmul/prologue_plain.wgsl");
const PROLOGUE_RMSNORM: &str = include_str!("../../../../shaders/matmul/prologue_rmsnorm.wgsl");
const PROLOGUE_ATTENTION_FOLD: &str =
    include_str!("../../../../shaders/matmul/prologue_attention_fold.wgsl");
const ROWS_IDENTITY: &str = include_str!("../../../../shaders/matmul/rows_identity.wgsl");
const ROWS_GATHER: &str = include_str!("../../../../shaders/matmul/rows_gather.wgsl");
const EPILOGUE_STORE: &str = include_str!("../../../../shaders/matmul/epilogue_store.wgsl");
const EPILOGUE_RESIDUAL: &str = include_str!("../../../../shaders/matmul/epilogue_residual.wgsl");
const EPILOGUE_SILU: &str = include_str!("../../../../shaders/matmul/epilogue_silu_gate.wgsl");
const EPILOGUE_GELU: &str = include_str!("../../../../shaders/matmul/epilogue_gelu_gate.wgsl");
const EPILOGUE_QKV: &str = include_str!("../../../../shaders/matmul/epilogue_qkv_rope.wgsl");
const QKV_BIAS: &str = include_str!("../../../../shaders/matmul/qkv_bias.wgsl");
const QKV_BIAS_BINDING: &str = include_str!("../../../../shaders/matmul/qkv_bias_binding.wgsl");
const QKV_NO_BIAS: &str = include_str!("../../../../shaders/matmul/qkv_no_bias.wgsl");
const LORA: &str = include_str!("../../../../shaders/matmul/lora.wgsl");
const LORA_EMIT: &str = include_str!("../../../../shaders/matmul/lora_emit.wgsl");
const LORA_ROWINFO: &str = include_str!("../../../../shaders/matmul/lora_rowinfo.wgsl");
pub(crate) const MATVEC: &str = include_str!("../../../../shaders/matmul/matvec.wgsl");
const X_VEC4: &str = include_str!("../../../../shaders/activations/vec4.wgsl");
const X_SCALAR: &str = include_str!("../../../../shaders/activations/scalar.wgsl");

/// How the kernel reads x.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prologue {
    /// `x[i, k]` as it is.
    Plain,
    /// RMSNorm of each row, times the norm's weights: `(x * inv_rms) * g`.
    RmsNorm,
    /// RMSNorm of the rows `rows_index[i]` of x (the rows whose logits are wanted).
    RmsNormGathered,
    /// x is attention's output, whose split rows the prologue folds from their page
    /// states as it reads them ([`AttentionFold`]): the o-projection without the
    /// attention's combine dispatch.
    AttentionFold,
}

/// The attention states a matmul folds as it reads x ([`Prologue::AttentionFold`]).
#[derive(Clone, Copy)]
pub struct AttentionFold<'a> {
    /// `[slots, n_heads, 4 + head_dim]` f32: the split rows' page states.
    pub states: &'a Tensor,
    /// `[m, 2]` u32 (`AttentionPlan::row_slots`).
    pub row_slots: &'a Tensor,
    pub head_dim: usize,
}

/// What the kernel does with each output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// `y[i, n] = out`.
    Store,
    /// `y[i, n] += out` (the residual stream).
    Residual,
    /// Weight rows alternate gate and up: `y[i, j] = silu(out[2j]) * out[2j + 1]`.
    SiluGate,
    /// The same pairs, tanh-approximated GELU (Gemma): `y[i, j] = gelu_tanh(out[2j]) *
    /// out[2j + 1]`.
    GeluGate,
    /// The fused q|k|v projection: bias (when `bias`), RoPE on adjacent pairs of q and k,
    /// q to its buffer, k and v to their pool slots.
    QkvRope { bias: bool },
}

/// How the kernel reads x: four values per load when every row starts 16-byte aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XReader {
    Vec4,
    Scalar,
}

impl XReader {
    pub const ALL: [XReader; 2] = [XReader::Vec4, XReader::Scalar];

    pub fn for_cols(k: usize) -> Self {
        if k.is_multiple_of(4) {
            XReader::Vec4
        } else {
            XReader::Scalar
        }
    }

    fn source(self) -> &'static str {
        match self {
            XReader::Vec4 => X_VEC4,
            XReader::Scalar => X_SCALAR,
        }
    }
}

impl XLoads {
    pub const ALL: [XLoads; 2] = [XLoads::Direct, XLoads::Shuffled];

    /// Whether the adapter can run these loads.
    pub fn runs_on(self, caps: &Capabilities) -> bool {
        match self {
            XLoads::Direct => true,
            XLoads::Shuffled => caps.subgroups && caps.subgroup_min_size >= MIN_SHUFFLE_SUBGROUP,
        }
    }

    /// The loads sprout uses on an adapter: shuffled where it can.
    pub fn best(caps: &Capabilities) -> XLoads {
        if XLoads::Shuffled.runs_on(caps) {
            XLoads::Shuffled
        } else {
            XLoads::Direct
        }
    }
}

/// The RMSNorm prologue's inputs.
#[derive(Clone, Copy)]
pub struct NormArgs<'a> {
    /// Holds the norm's weights (`k` values from `offset`), and the QKV epilogue's biases.
    pub vectors: &'a Tensor,
    pub offset: usize,
    pub eps: f32,
}

/// The q|k|v biases: `q_dim + 2 kv_dim` values of `vectors` from `offset`. With the RMSNorm
/// prologue `vectors` is the norm's own buffer, which the kernel binds once.
#[derive(Clone, Copy)]
pub struct QkvBias<'a> {
    pub vectors: &'a Tensor,
    pub offset: usize,
}

/// What the QKV epilogue reads and writes.
pub struct QkvArgs<'a> {
    /// The biases, if the model has them.
    pub bias: Option<QkvBias<'a>>,
    pub q_dim: usize,
    pub kv_dim: usize,
    pub head_dim: usize,
    pub rope: &'a RopeTable,
    /// `[m]` [`RowInfo`](crate::gpu::kernels::RowInfo): each row's position and pool slot.
    pub rowinfo: &'a Tensor,
    /// `[m, q_dim]`: the rotated queries.
    pub q: &'a Tensor,
    /// `[pool rows, kv_dim]` each: where the rotated keys and the values go.
    pub k_pool: &'a Tensor,
    pub v_pool: &'a Tensor,
}

/// The LoRA term of a base projection (`y = W x + Bp t`).
pub struct LoraArgs<'a> {
    /// `[m, rank]` f32: each row's A x (the A matmul's output).
    pub t: &'a Tensor,
    /// `[n, rank]` f32: (alpha / r)·B in the weight's row layout, zero where no adapter.
    pub b: &'a Tensor,
    pub rank: usize,
    /// `[m]` RowInfo: a row whose `adapter` word is 0 gets no LoRA term. With the q|k|v
    /// epilogue, the buffer its [`QkvArgs::rowinfo`] binds (the kernel binds it once).
    pub rowinfo: &'a Tensor,
}

/// The outputs and extra inputs of one fused matmul.
pub enum Output<'a> {
    Store(&'a Tensor),
    Residual(&'a Tensor),
    SiluGate(&'a Tensor),
    GeluGate(&'a Tensor),
    Qkv(QkvArgs<'a>),
}

/// The rows of x a gathered matmul reads: its row `i` is x's row `index[first + i]` (a
/// dispatch over part of the rows an index buffer lists, such as one chunk of logits).
#[derive(Clone, Copy)]
pub struct Gather<'a> {
    /// u32 row indices.
    pub index: &'a Tensor,
    pub first: usize,
}

/// One fused matmul: `m` rows of `x` against `weight`, read through `norm` (RMSNorm) when
/// given, optionally of the rows `gather` of x, with `output` saying the epilogue.
pub struct Matmul<'a> {
    pub x: &'a Tensor,
    pub m: usize,
    pub weight: &'a GpuWeight,
    pub norm: Option<NormArgs<'a>>,
    /// The rows of x to read (RMSNorm only).
    pub gather: Option<Gather<'a>>,
    /// x's split attention rows, folded as they are read (without `norm`).
    pub fold: Option<AttentionFold<'a>>,
    pub output: Output<'a>,
    /// The LoRA term added to each output of the rows with the adapter (`None`: no
    /// adapter, the plain kernel).
    pub lora: Option<LoraArgs<'a>>,
}

impl Matmul<'_> {
    pub fn prologue(&self) -> Prologue {
        match (&self.norm, self.gather) {
            (None, _) if self.fold.is_some() => Prologue::AttentionFold,
            (None, _) => Prologue::Plain,
            (Some(_), None) => Prologue::RmsNorm,
            (Some(_), Some(_)) => Prologue::RmsNormGathered,
        }
    }

    pub fn epilogue(&self) -> Epilogue {
        match &self.output {
            Output::Store(_) => Epilogue::Store,
            Output::Residual(_) => Epilogue::Residual,
            Output::SiluGate(_) => Epilogue::SiluGate,
            Output::GeluGate(_) => Epilogue::GeluGate,
            Output::Qkv(q) => Epilogue::QkvRope {
                bias: q.bias.is_some(),
            },
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    k: u32,
    rows: u32,
    n_offset: u32,
    n_total: u32,
    row_bytes: u32,
    eps: f32,
    vec_offset: u32,
    bias_offset: u32,
    q_dim: u32,
    kv_dim: u32,
    head_dim: u32,
    max_positions: u32,
    y_cols: u32,
    gather_first: u32,
    lora_rank: u32,
}

/// The storage bindings of a kernel: x and the weight, then the prologue's, then the
/// epilogue's, then the LoRA term's (t, B', and the rows' RowInfo unless the q|k|v
/// epilogue binds it already). The q|k|v epilogue binds its biases' buffer itself only
/// without the RMSNorm prologue, whose buffer holds them otherwise.
fn storage(prologue: Prologue, epilogue: Epilogue, lora: bool) -> &'static [Access] {
    use Access::{Read as R, ReadWrite as W};
    let qkv = matches!(epilogue, Epilogue::QkvRope { .. });
    let bias = matches!(epilogue, Epilogue::QkvRope { bias: true });
    match (prologue, qkv, lora) {
        (Prologue::Plain, true, false) if bias => &[R, R, R, R, R, W, W, W],
        (Prologue::Plain, true, true) if bias => &[R, R, R, R, R, W, W, W, R, R],
        (Prologue::Plain, true, false) => &[R, R, R, R, W, W, W],
        (Prologue::Plain, true, true) => &[R, R, R, R, W, W, W, R, R],
        (Prologue::Plain, false, false) => &[R, R, W],
        (Prologue::Plain, false, true) => &[R, R, W, R, R, R],
        (Prologue::RmsNorm, true, false) => &[R, R, R, R, R, W, W, W],
        (Prologue::RmsNorm, true, true) => &[R, R, R, R, R, W, W, W, R, R],
        (Prologue::RmsNorm, false, false) => &[R, R, R, W],
        (Prologue::RmsNorm, false, true) => &[R, R, R, W, R, R, R],
        (Prologue::RmsNormGathered, true, _) => panic!("the QKV epilogue reads every row"),
        (Prologue::AttentionFold, false, false) => &[R, R, R, R, W],
        (Prologue::AttentionFold, true, _) | (Prologue::AttentionFold, _, true) => {
            panic!("the attention fold is for the o-projection without a LoRA term")
        }
        (Prologue::RmsNormGathered, false, false) => &[R, R, R, R, W],
        // The gathered rows are logits rows, not the step's token rows that RowInfo
        // describes: the vocabulary projection has no LoRA term.
        (Prologue::RmsNormGathered, false, true) => {
            panic!("the gathered (vocabulary) projection has no LoRA term")
        }
    }
}

/// The storage buffers the largest LoRA kernel binds (the q|k|v projection's): an adapter
/// whose per-stage limit is below this cannot run every projection with an adapter.
pub fn lora_storage_bindings_needed() -> u32 {
    let qkv = Epilogue::QkvRope { bias: true };
    let bindings = |prologue| storage(prologue, qkv, true).len() as u32;
    bindings(Prologue::RmsNorm).max(bindings(Prologue::Plain))
}

/// Whether the adapter binds enough storage buffers per stage for every LoRA kernel (the
/// engine reports an adapter that does not before it dispatches anything).
pub fn lora_fits(caps: &Capabilities) -> bool {
    caps.max_storage_buffers_per_stage >= lora_storage_bindings_needed()
}

/// One matmul kernel: a weight format, a shape, the rows of x per workgroup of the
/// `MatVec` shape (`mr`, 0 for the others), the fusions, the x reader and whether it adds
/// a LoRA term.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulKernel {
    pub format: WeightFormat,
    pub shape: MatmulShape,
    pub mr: u32,
    pub prologue: Prologue,
    pub epilogue: Epilogue,
    pub x: XReader,
    pub lora: bool,
}

impl MatmulKernel {
    /// The kernel (`mr` is kept only for the `MatVec` shape).
    pub fn new(
        format: WeightFormat,
        shape: MatmulShape,
        mr: u32,
        (prologue, epilogue): (Prologue, Epilogue),
        x: XReader,
    ) -> MatmulKernel {
        let mr = if matches!(shape, MatmulShape::MatVec { .. }) {
            mr
        } else {
            0
        };
        MatmulKernel {
            format,
            shape,
            mr,
            prologue,
            epilogue,
            x,
            lora: false,
        }
    }

    /// The same kernel, adding the LoRA term (`lora`) or not.
    pub fn with_lora(self, lora: bool) -> MatmulKernel {
        MatmulKernel { lora, ..self }
    }

    /// The storage buffers the kernel binds.
    pub fn storage_bindings(&self) -> u32 {
        self.storage().len() as u32
    }
}

impl KernelSpec for MatmulKernel {
    fn name(&self) -> String {
        let k = self;
        format!(
            "matmul/{}/mr{}/{:?}/{:?}{}/{}/{:?}",
            k.shape.key(),
            k.mr,
            k.prologue,
            k.epilogue,
            if k.lora { "+lora" } else { "" },
            k.format.name(),
            k.x
        )
    }

    fn entry(&self) -> &'static str {
        "matmul"
    }

    fn storage(&self) -> &'static [Access] {
        storage(self.prologue, self.epilogue, self.lora)
    }

    /// The kernel's WGSL module.
    fn source(&self) -> String {
        let MatmulKernel {
            format,
            shape,
            mr,
            prologue,
            epilogue,
            x,
            lora,
        } = *self;
        let mut parts: Vec<String> = vec![shape.constants(mr), COMMON.to_string()];
        let mut binding = 3;
        let mut next = |name: &str, text: &str| {
            let out = text.replace(&format!("B_{name}"), &binding.to_string());
            binding += 1;
            out
        };
        match prologue {
            Prologue::Plain => parts.extend([PROLOGUE_PLAIN.into(), ROWS_IDENTITY.into()]),
            Prologue::RmsNorm => {
                parts.extend([next("VECTORS", PROLOGUE_RMSNORM), ROWS_IDENTITY.into()])
            }
            Prologue::RmsNormGathered => {
                parts.push(next("VECTORS", PROLOGUE_RMSNORM));
                parts.push(next("GATHER", ROWS_GATHER));
            }
            Prologue::AttentionFold => {
                let text = next("STATES", PROLOGUE_ATTENTION_FOLD);
                parts.extend([next("ROW_SLOTS", &text), ROWS_IDENTITY.into()]);
                parts.push(ATTENTION_FOLD.into());
            }
        }
        let epilogue_text = match epilogue {
            Epilogue::Store => next("OUT", EPILOGUE_STORE),
            Epilogue::Residual => next("OUT", EPILOGUE_RESIDUAL),
            Epilogue::SiluGate => next("OUT", EPILOGUE_SILU),
            Epilogue::GeluGate => next("OUT", EPILOGUE_GELU),
            Epilogue::QkvRope { bias } => {
                let biases = match (bias, prologue) {
                    (false, _) => QKV_NO_BIAS.to_string(),
                    (true, Prologue::Plain) => next("VECTORS", QKV_BIAS_BINDING) + QKV_BIAS,
                    (true, _) => QKV_BIAS.to_string(),
                };
                let mut text =
                    format!("const HAS_BIAS: bool = {bias};\n{biases}\n{EPILOGUE_QKV}\n{NAN}");
                for name in ["TABLE", "ROWINFO", "Q", "K", "V"] {
                    text = next(name, &text);
                }
                text
            }
        };
        if lora {
            let mut text = next("LORA_T", LORA);
            text = next("LORA_B", &text);
            if shape.inlines_lora() {
                // The tile adds the term to its sums itself, before the epilogue's
                // `emit_pair`.
                parts.push(epilogue_text);
            } else {
                // The shape calls `emit_pair`: the LoRA term's, which adds the term and
                // hands the pair on to the epilogue's.
                assert_eq!(epilogue_text.matches("fn emit_pair(").count(), 1);
                parts.push(epilogue_text.replace("fn emit_pair(", "fn emit_pair_base("));
                text.push_str(LORA_EMIT);
            }
            parts.push(text);
            if !matches!(epilogue, Epilogue::QkvRope { .. }) {
                parts.push(next("ROWINFO", LORA_ROWINFO));
            }
        } else {
            parts.push(epilogue_text);
        }
        parts.push(shape.body(lora));
        parts.push(x.source().to_string());
        with_weights(&parts.join("\n"), format)
    }
}

/// Records the fused matmul `op` with `shape`. Panics (naming the problem) when the
/// buffers are too small for the shapes or the adapter cannot run the shape or bind the
/// kernel's buffers (a LoRA term on an adapter that [`lora_fits`] refuses).
pub fn encode(gpu: &Gpu, rec: &mut Recorder, op: &Matmul, shape: MatmulShape) {
    let (m, k, weight) = (op.m, op.weight.cols, op.weight);
    let (prologue, epilogue) = (op.prologue(), op.epilogue());
    let rows_of_x = if op.gather.is_some() { 1 } else { m };
    assert!(
        op.x.len >= rows_of_x * k,
        "matmul: x holds {} values, needs {rows_of_x}x{k}",
        op.x.len
    );
    assert!(
        shape.runs_on(&gpu.caps),
        "matmul: {shape:?} cannot run on this adapter"
    );
    if let Some(g) = op.gather {
        assert!(
            g.index.len >= g.first + m,
            "matmul: {} row indices for {m} rows from {}",
            g.index.len,
            g.first
        );
    }
    let n = weight.rows;
    let pairs = matches!(
        epilogue,
        Epilogue::SiluGate | Epilogue::GeluGate | Epilogue::QkvRope { .. }
    );
    assert!(
        !pairs || n.is_multiple_of(2),
        "matmul: a pairwise epilogue needs an even number of weight rows, not {n}"
    );
    let mut p = Params {
        m: m as u32,
        k: k as u32,
        rows: 0,
        n_offset: 0,
        n_total: n as u32,
        row_bytes: weight.row_bytes as u32,
        eps: 0.0,
        vec_offset: 0,
        bias_offset: 0,
        q_dim: 0,
        kv_dim: 0,
        head_dim: 0,
        max_positions: 0,
        y_cols: (n / 2) as u32,
        gather_first: op.gather.map_or(0, |g| g.first as u32),
        lora_rank: 0,
    };
    let mut extra: Vec<&wgpu::Buffer> = Vec::with_capacity(8);
    if let Some(norm) = &op.norm {
        assert!(
            norm.vectors.len >= norm.offset + k,
            "matmul: the norm's {k} weights from {} are past its buffer of {}",
            norm.offset,
            norm.vectors.len
        );
        p.eps = norm.eps;
        p.vec_offset = norm.offset as u32;
        extra.push(&norm.vectors.buffer);
        if let Some(g) = op.gather {
            extra.push(&g.index.buffer);
        }
    }
    if let Some(fold) = &op.fold {
        let hd = fold.head_dim;
        assert!(
            op.norm.is_none(),
            "matmul: the attention fold reads x plainly, without a norm"
        );
        assert!(
            hd > 0 && hd.is_multiple_of(4) && k.is_multiple_of(hd),
            "matmul: attention heads of {hd} values do not divide x's {k} into vec4s"
        );
        assert!(
            fold.row_slots.len >= 2 * m,
            "matmul: the attention fold's row slots hold {} values, {m} rows need {}",
            fold.row_slots.len,
            2 * m
        );
        // The states' size is the attention's to keep (it wrote them); an index past
        // them reads what robust buffer access gives, as for any GPU-side table.
        p.head_dim = hd as u32;
        extra.extend([&fold.states.buffer, &fold.row_slots.buffer]);
    }
    match &op.output {
        Output::Store(y) | Output::Residual(y) => {
            assert!(
                y.len >= m * n,
                "matmul: y holds {} values, needs {m}x{n}",
                y.len
            );
            extra.push(&y.buffer);
        }
        Output::SiluGate(y) | Output::GeluGate(y) => {
            assert!(
                y.len >= m * n / 2,
                "matmul: y holds {} values, needs {m}x{}",
                y.len,
                n / 2
            );
            extra.push(&y.buffer);
        }
        Output::Qkv(q) => {
            assert_eq!(n, q.q_dim + 2 * q.kv_dim, "matmul: q|k|v rows");
            assert!(
                q.head_dim.is_multiple_of(2) && q.head_dim == q.rope.head_dim,
                "matmul: head_dim {} against a RoPE table for {}",
                q.head_dim,
                q.rope.head_dim
            );
            assert!(q.rowinfo.len >= 4 * m, "matmul: rowinfo for {m} rows");
            assert!(q.q.len >= m * q.q_dim, "matmul: q holds {} values", q.q.len);
            if let Some(bias) = q.bias {
                assert!(
                    bias.vectors.len >= bias.offset + n,
                    "matmul: the biases are past their buffer"
                );
                match &op.norm {
                    Some(norm) => assert!(
                        norm.vectors.buffer == bias.vectors.buffer,
                        "matmul: with the RMSNorm prologue the biases are in the norm's buffer"
                    ),
                    None => extra.push(&bias.vectors.buffer),
                }
                p.bias_offset = bias.offset as u32;
            }
            p.q_dim = q.q_dim as u32;
            p.kv_dim = q.kv_dim as u32;
            p.head_dim = q.head_dim as u32;
            p.max_positions = q.rope.max_positions as u32;
            extra.extend([
                &q.rope.values.buffer,
                &q.rowinfo.buffer,
                &q.q.buffer,
                &q.k_pool.buffer,
                &q.v_pool.buffer,
            ]);
        }
    }
    if let Some(lora) = &op.lora {
        let r = lora.rank;
        assert!(
            r > 0,
            "matmul: a LoRA term of rank 0 (no adapter is `lora: None`)"
        );
        assert!(
            op.gather.is_none(),
            "matmul: the gathered (vocabulary) projection has no LoRA term"
        );
        assert!(
            lora.t.len >= m * r,
            "matmul: LoRA t holds {} values, needs {m}x{r}",
            lora.t.len
        );
        assert!(
            lora.b.len >= n * r,
            "matmul: LoRA B holds {} values, needs {n}x{r}",
            lora.b.len
        );
        p.lora_rank = r as u32;
        extra.extend([&lora.t.buffer, &lora.b.buffer]);
        match &op.output {
            // The q|k|v epilogue's RowInfo binding serves the term too.
            Output::Qkv(q) => assert!(
                q.rowinfo.buffer == lora.rowinfo.buffer,
                "matmul: the LoRA term reads the q|k|v epilogue's rowinfo"
            ),
            _ => {
                assert!(
                    lora.rowinfo.len >= 4 * m,
                    "matmul: LoRA rowinfo for {m} rows"
                );
                extra.push(&lora.rowinfo.buffer);
            }
        }
    }
    if m == 0 {
        return;
    }
    let mr = shape.rows_per_workgroup(m);
    let fusion = (prologue, epilogue);
    let kernel = MatmulKernel::new(weight.format, shape, mr, fusion, XReader::for_cols(k))
        .with_lora(op.lora.is_some());
    let (needed, limit) = (
        kernel.storage_bindings(),
        gpu.caps.max_storage_buffers_per_stage,
    );
    assert!(
        needed <= limit,
        "matmul: {} binds {needed} storage buffers, more than the adapter's {limit}",
        kernel.name()
    );
    let kernel = gpu.pipeline(&kernel);
    for part in &weight.parts {
        assert!(
            !pairs || part.first_row.is_multiple_of(2),
            "matmul: weight parts must start on even rows for a pairwise epilogue"
        );
        p.rows = part.rows as u32;
        p.n_offset = part.first_row as u32;
        let mut buffers: Vec<&wgpu::Buffer> = Vec::with_capacity(10);
        buffers.extend([&op.x.buffer, &part.buffer]);
        buffers.extend(extra.iter().copied());
        rec.dispatch(
            &kernel,
            bytemuck::bytes_of(&p),
            &buffers,
            shape.workgroups(m, part.rows, mr),
        );
    }
}

/// Every WGSL module this kernel family builds without optional features (validated by
/// the shader test): every shape, format, x reader and fusion the engine uses, and a
/// sample of the LoRA kernels (see `modules_where`).
pub fn modules() -> Vec<(String, String)> {
    modules_where(|s| !s.needs_subgroups())
}

/// The modules that need subgroups (validated with subgroup capabilities).
pub fn subgroup_modules() -> Vec<(String, String)> {
    modules_where(MatmulShape::needs_subgroups)
}

fn modules_where(keep: impl Fn(&MatmulShape) -> bool) -> Vec<(String, String)> {
    let fusions = [
        (Prologue::Plain, Epilogue::Store),
        (Prologue::Plain, Epilogue::Residual),
        (Prologue::RmsNorm, Epilogue::SiluGate),
        (Prologue::RmsNorm, Epilogue::GeluGate),
        // The q|k|v projection of models with q and k norms (`head_norm_rope` follows).
        (Prologue::RmsNorm, Epilogue::Store),
        (Prologue::RmsNorm, Epilogue::QkvRope { bias: false }),
        (Prologue::RmsNorm, Epilogue::QkvRope { bias: true }),
        (Prologue::RmsNormGathered, Epilogue::Store),
        // The o-projection folding split attention rows (Store: behind a post norm).
        (Prologue::AttentionFold, Epilogue::Residual),
        (Prologue::AttentionFold, Epilogue::Store),
    ];
    let mut out = Vec::new();
    for (s, shape) in MatmulShape::candidates_all().into_iter().enumerate() {
        if !keep(&shape) {
            continue;
        }
        for (f, format) in WeightFormat::ALL.into_iter().enumerate() {
            for x in XReader::ALL {
                for (prologue, epilogue) in fusions {
                    let k = MatmulKernel::new(format, shape, 2, (prologue, epilogue), x);
                    out.push((k.name(), k.source()));
                }
            }
            // The LoRA term wraps whichever epilogue and reads neither x nor the weight,
            // so a sample covers it: every fusion that takes it, on every third (shape,
            // format) pair (so every format and every shape), the x readers alternating.
            // That adds about a sixth to the modules instead of doubling them.
            if (s + f) % 3 != 0 {
                continue;
            }
            let x = XReader::ALL[(s + f) % 2];
            // With an adapter the decoder normalises a site's input apart and its gated
            // and q|k|v projections read it plainly.
            let plain_lora_sites = [
                (Prologue::Plain, Epilogue::SiluGate),
                (Prologue::Plain, Epilogue::GeluGate),
                (Prologue::Plain, Epilogue::QkvRope { bias: false }),
                (Prologue::Plain, Epilogue::QkvRope { bias: true }),
            ];
            for (prologue, epilogue) in fusions.into_iter().chain(plain_lora_sites) {
                if matches!(
                    prologue,
                    Prologue::RmsNormGathered | Prologue::AttentionFold
                ) {
                    continue;
                }
                let k = MatmulKernel::new(format, shape, 2, (prologue, epilogue), x);
                let k = k.with_lora(true);
                out.push((k.name(), k.source()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::bindings::MAX_STORAGE_BINDINGS;

    #[test]
    fn the_lora_kernels_bind_what_their_spec_lists() {
        assert_eq!(lora_storage_bindings_needed(), 10);
        assert!(lora_storage_bindings_needed() as usize <= MAX_STORAGE_BINDINGS);
        // WebGPU's default limit of 8 runs the plain kernels, not the q|k|v one with a term.
        let mut caps = crate::gpu::tuning::tests_caps();
        assert_eq!(caps.max_storage_buffers_per_stage, 8);
        assert!(!lora_fits(&caps));
        caps.max_storage_buffers_per_stage = 10;
        assert!(lora_fits(&caps));
        let shape = MatmulShape::Gemm { tm: 4 };
        for (prologue, epilogue, without) in [
            (Prologue::Plain, Epilogue::Store, 3),
            (Prologue::Plain, Epilogue::Residual, 3),
            (Prologue::RmsNorm, Epilogue::SiluGate, 4),
            (Prologue::RmsNorm, Epilogue::QkvRope { bias: true }, 8),
        ] {
            let base = MatmulKernel::new(
                WeightFormat::Q4_1,
                shape,
                0,
                (prologue, epilogue),
                XReader::Vec4,
            );
            let lora = base.with_lora(true);
            assert_ne!(base, lora);
            assert_ne!(base.name(), lora.name());
            assert_eq!(base.storage_bindings(), without);
            // The q|k|v epilogue's RowInfo binding serves the term: t and B' only.
            let added = if without == 8 { 2 } else { 3 };
            assert_eq!(lora.storage_bindings(), without + added);
            // Every binding the spec lists is declared once in the module, numbered 1..
            let src = lora.source();
            for b in 1..=lora.storage_bindings() {
                assert_eq!(src.matches(&format!("@binding({b})")).count(), 1, "{b}");
            }
            assert!(!src.contains("@binding(B_"));
            assert_eq!(src.matches("fn emit_pair(").count(), 1);
            assert_eq!(src.matches("fn emit_pair_base(").count(), 1);
            assert!(!base.source().contains("fn emit_pair_base("));
        }
    }

    #[test]
    fn the_lora_sample_is_modest_and_covers_every_format_shape_and_fusion() {
        let all = modules();
        let lora: Vec<&String> = all
            .iter()
            .map(|(n, _)| n)
            .filter(|n| n.contains("+lora"))
            .collect();
        let plain = all.len() - lora.len();
        assert!(
            lora.len() * 4 < plain,
            "{} LoRA modules of {}",
            lora.len(),
            all.len()
        );
        for format in WeightFormat::ALL {
            let tag = format!("/{}/", format.name());
            assert!(
                lora.iter().any(|n| n.contains(&tag)),
                "no LoRA module for {format}"
            );
        }
        for shape in MatmulShape::candidates_all()
            .iter()
            .filter(|s| !s.needs_subgroups())
        {
            let tag = format!("matmul/{}/", shape.key());
            assert!(
                lora.iter().any(|n| n.starts_with(&tag)),
                "no LoRA module for {shape:?}"
            );
        }
        for epilogue in [
            "Store+",
            "Residual+",
            "SiluGate+",
            "GeluGate+",
            "bias: false }+",
            "bias: true }+",
        ] {
            assert!(
                lora.iter().any(|n| n.contains(epilogue)),
                "no LoRA module for {epilogue}"
            );
        }
    }
}
