//! Drawing tokens from chosen rows of logits on the GPU (shaders/sample.wgsl), with
//! temperature, top-k, top-p and min-p, so that only the chosen ids and their
//! log-probabilities come back, never the logits.
//!
//! Three kernels, recorded in this order after `softmax::encode` has written the
//! [`RowStats`] of the same logits:
//! 1. [`encode_truncate`]: per logits row `r`, with its [`RowParams`], the cut
//!    `cut [rows, 2] = (tau, log_z)`.
//! 2. [`encode`]: per draw `d`, with its [`SampleKey`], `tokens[d]`.
//! 3. [`encode_draw_logprobs`]: per draw, the token's raw log-prob and its sampling log-prob
//!    (with logits adjusted before the draws, the raw ones read again once they are put
//!    back: [`Restore`]).
//!
//! Semantics, for one row of logits `l` (vocabulary `V`) and its [`RowParams`]:
//! - Scaled logits `s_c = l_c * inv_temperature` (one f32 multiply, `inv_temperature = 1/T`;
//!   `T = 0`, stored as `inv_temperature = 0`, is greedy: the plain argmax of the logits,
//!   lowest index on ties, with sampling log-prob 0, and cut `(max logit, 0)`).
//! - The kept set is `S = { c : l_c >= tau }`, `tau` the m-th largest logit counted with
//!   multiplicity: the first `m` tokens by descending logit and every token tied with the
//!   m-th. `m = min(m_k, m_p, m_min)`, i.e. `tau = max(tau_k, tau_p, tau_min)`:
//!   - top-k: `m_k = top_k`; `top_k = 0` or `>= V` is off (`tau_k` = the smallest logit).
//!   - top-p: over the top-k set `K = { l_c >= tau_k }` renormalised. With
//!     `M(x) = sum_{l_c >= x} exp(s_c - s_max)` and `Z_k = M(tau_k)`, `tau_p` is the largest
//!     logit `x` with `M(x) >= top_p * Z_k` (`m_p` is the smallest `m` whose first `m`
//!     tokens hold at least `top_p` of K's mass). `top_p = 1` is off.
//!   - min-p: keep `c` with `s_c - s_max >= ln(min_p)` (softmax prob `>= min_p` times the
//!     largest); `tau_min` is the smallest logit kept. `ln(min_p)` is computed on the host
//!     (f64, rounded to f32) and stored as `log_min_p`; `min_p = 0` is off (`-f32::MAX`).
//! - `log_z = s_max + ln(M(tau))`: the log normaliser of `softmax(s)` over `S`.
//! - The draw is Gumbel-max restricted to `S`: `argmax_{c in S} (s_c + g_c)`, with
//!   `g_c = -ln(-ln(u_c))` and `u_c` from a counter-based hash of
//!   (seed, request, stream, position, c): an exact sample from `softmax(s)` renormalised
//!   over `S`.
//! - Raw log-prob: `l_token - lse` from [`RowStats`], bitwise the value softmax's
//!   `target_logprobs` gives for that row and token.
//! - Sampling log-prob: `s_token - log_z` (f32, with `log_z` as the cut holds it): the
//!   log-probability of the token under the distribution actually sampled from.
//!
//! The masses `M` are f32 sums in a fixed order (invocation `t` of the row's workgroup sums
//! `c = t, t + 256, ...`, then a fixed binary tree), and `tau` is found exactly for those
//! masses by bisection over the order-preserving u32 image of the logits (at most 32 count
//! passes for top-k and 32 mass passes for top-p). So `tau` is exact for top-k and min-p,
//! and for top-p up to f32 rounding of the masses at a near-tie of `M(x)` with
//! `top_p * Z_k`.
//!
//! The logits come in chunks of rows ([`Logits`]): each kernel dispatches once per chunk,
//! truncation over the chunk's rows, sampling and draw log-probs over every draw but
//! serving only those whose row the chunk holds (the first chunk also those from rows past
//! the logits). A row is computed by the same code whichever chunk holds it.
//!
//! Invariant: a draw depends only on its key and its row's logits, params and cut, never
//! on the other rows or draws of the dispatch nor on where its row sits in the logits
//! buffer (ARCHITECTURE.md, principle 1); the cut of a row depends only on that row and its
//! params. Several draws may read one row (the G samples of a group drawing their first
//! token from the shared prompt's logits), and share its params.

mod fixture;

pub use fixture::{Drawn, SamplingFixture};

use crate::gpu::grid::grid;
use crate::gpu::kernels::logit_adjust;
use crate::gpu::kernels::logits::{Logits, LogitsChunk};
use crate::gpu::kernels::reduction::Reduction;
use crate::gpu::kernels::softmax::RowStats;
use crate::gpu::pipelines::{Access, KernelSpec};
use crate::gpu::{Gpu, Recorder, Tensor};

const KERNEL: &str = include_str!("../../../../shaders/sample.wgsl");
/// Draws per workgroup of `draw_logprobs` (`LOGPROB_WG` in the shader).
const LOGPROB_WORKGROUP: usize = 64;
/// 32-bit words per [`SampleKey`].
const KEY_WORDS: usize = size_of::<SampleKey>() / 4;
/// 32-bit words per [`RowParams`].
const PARAM_WORDS: usize = size_of::<RowParams>() / 4;
/// `log_min_p` for min-p off (`MIN_P_OFF` in the shader).
const MIN_P_OFF: f32 = -f32::MAX;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    vocab: u32,
    rows: u32,
    first_row: u32,
    chunk_rows: u32,
    _pad: [u32; 3],
}

/// How one logits row is sampled (`RowParams` in the shader): 16 bytes. Build it with
/// [`RowParams::new`]; every draw from the row uses it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RowParams {
    /// `1 / T`; 0 is greedy.
    pub inv_temperature: f32,
    /// Keep the `top_k` largest logits (and ties); 0 or `>= vocab` is off.
    pub top_k: u32,
    /// Keep the smallest prefix holding this share of the top-k mass; 1 is off.
    pub top_p: f32,
    /// `ln(min_p)` as f32; `-f32::MAX` (min_p = 0) is off.
    pub log_min_p: f32,
}

impl RowParams {
    /// Sampling at `temperature` (0 is greedy, and then the other settings do nothing),
    /// keeping the `top_k` most likely tokens (0: all), then the smallest prefix of those
    /// holding `top_p` of their probability (1: all), and only tokens at least `min_p`
    /// times as likely as the most likely one (0: all).
    pub fn new(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> RowParams {
        assert!(
            temperature.is_finite() && temperature >= 0.0,
            "sampling: temperature {temperature} is not a finite value >= 0"
        );
        assert!(
            top_p > 0.0 && top_p <= 1.0,
            "sampling: top_p {top_p} is not in (0, 1]"
        );
        assert!(
            (0.0..1.0).contains(&min_p),
            "sampling: min_p {min_p} is not in [0, 1)"
        );
        let inv_temperature = if temperature == 0.0 {
            0.0
        } else {
            1.0 / temperature
        };
        assert!(
            inv_temperature.is_finite(),
            "sampling: temperature {temperature} is too small to invert in f32"
        );
        RowParams {
            inv_temperature,
            top_k: u32::try_from(top_k).unwrap_or(u32::MAX),
            top_p,
            log_min_p: if min_p == 0.0 {
                MIN_P_OFF
            } else {
                (min_p as f64).ln() as f32
            },
        }
    }

    /// Plain sampling at `temperature` (0 is greedy): no truncation.
    pub fn temperature(temperature: f32) -> RowParams {
        RowParams::new(temperature, 0, 1.0, 0.0)
    }

    pub fn is_greedy(&self) -> bool {
        self.inv_temperature == 0.0
    }

    /// Whether min-p is on.
    pub fn has_min_p(&self) -> bool {
        self.log_min_p > MIN_P_OFF
    }
}

/// How one token is drawn (`DrawKey` in the shader): 32 bytes. The temperature and the
/// truncation are the row's ([`RowParams`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SampleKey {
    pub seed_lo: u32,
    pub seed_hi: u32,
    /// Which sample of a group.
    pub stream: u32,
    /// The position of the token being drawn.
    pub position: u32,
    /// Which prompt (request) the draw belongs to; mixed into the noise.
    pub request: u32,
    /// The logits row this draw reads (and whose params and cut it uses).
    pub row: u32,
    /// Zero; keeps the key at 32 bytes, room for later fields.
    pub reserved: [u32; 2],
}

impl SampleKey {
    /// Draws sample `stream` of request `request` at `position`, from logits row `row`.
    pub fn new(seed: u64, request: u32, stream: u32, position: u32, row: u32) -> SampleKey {
        SampleKey {
            seed_lo: seed as u32,
            seed_hi: (seed >> 32) as u32,
            stream,
            position,
            request,
            row,
            reserved: [0; 2],
        }
    }
}

/// The entry points of this module's shader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SampleEntry {
    /// Per row: the kept set's cut `(tau, log_z)`.
    Truncate,
    /// One token per draw.
    Sample,
    /// The raw and sampling log-probabilities of each drawn token.
    DrawLogprobs,
}

/// An entry point, with its workgroup reductions' tail (`draw_logprobs` has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SampleKernel {
    pub entry: SampleEntry,
    pub reduction: Reduction,
}

impl KernelSpec for SampleKernel {
    fn name(&self) -> String {
        format!("sample/{}/{}", self.entry(), self.reduction.key())
    }

    fn source(&self) -> String {
        self.reduction.compose(KERNEL)
    }

    fn entry(&self) -> &'static str {
        match self.entry {
            SampleEntry::Truncate => "truncate",
            SampleEntry::Sample => "sample",
            SampleEntry::DrawLogprobs => "draw_logprobs",
        }
    }

    fn storage(&self) -> &'static [Access] {
        use Access::{Read, ReadWrite};
        // The bindings of the shader, in order; each entry point binds a prefix.
        const ALL: [Access; 8] = [
            Read,      // logits
            Read,      // params
            ReadWrite, // cut
            Read,      // keys
            ReadWrite, // tokens
            Read,      // stats
            ReadWrite, // logprobs
            ReadWrite, // sampling_logprobs
        ];
        match self.entry {
            SampleEntry::Truncate => &ALL[..3],
            SampleEntry::Sample => &ALL[..5],
            SampleEntry::DrawLogprobs => &ALL,
        }
    }
}

/// Rows that the logits, the params and the cut all hold (a draw from another row draws
/// `u32::MAX`).
fn readable_rows(what: &str, logits: &Logits, params: &Tensor, cut: &Tensor) -> usize {
    assert!(logits.vocab > 0, "{what}: the vocabulary is empty");
    logits.rows.min(params.len / PARAM_WORDS).min(cut.len / 2)
}

/// The kernel's parameters for one chunk.
fn params_for(m: usize, vocab: usize, rows: usize, chunk: &LogitsChunk) -> Params {
    Params {
        m: m as u32,
        vocab: vocab as u32,
        rows: u32::try_from(rows).unwrap_or(u32::MAX),
        first_row: chunk.first_row as u32,
        chunk_rows: chunk.rows as u32,
        _pad: [0; 3],
    }
}

fn check_draws(what: &str, keys: &Tensor, tokens: &Tensor, m: usize) {
    assert!(
        keys.len >= m * KEY_WORDS,
        "{what}: keys hold {} words, need {m} keys of {KEY_WORDS}",
        keys.len
    );
    assert!(
        tokens.len >= m,
        "{what}: tokens hold {} ids, need {m}",
        tokens.len
    );
}

/// Records `cut[r] = (tau, log_z)` for rows `r in 0..rows` of `logits` under `params[r]`
/// (`params` holds `rows` [`RowParams`]; upload them with `gpu.upload`). `cut` holds
/// `2 * rows` f32. See the module doc for what tau and log_z are. One dispatch per chunk,
/// with the adapter's best reductions.
pub fn encode_truncate(
    gpu: &Gpu,
    rec: &mut Recorder,
    logits: &Logits,
    rows: usize,
    params: &Tensor,
    cut: &Tensor,
) {
    let reduction = Reduction::best(&gpu.caps);
    truncate_with(gpu, rec, (logits, rows), params, cut, reduction);
}

/// [`encode_truncate`] with the given reductions (which the adapter must be able to run).
pub(super) fn truncate_with(
    gpu: &Gpu,
    rec: &mut Recorder,
    (logits, rows): (&Logits, usize),
    params: &Tensor,
    cut: &Tensor,
    reduction: Reduction,
) {
    let vocab = logits.vocab;
    assert!(vocab > 0, "truncate: the vocabulary is empty");
    assert!(
        logits.rows >= rows,
        "truncate: logits hold {} rows of {vocab}, need {rows}",
        logits.rows
    );
    assert!(
        params.len >= rows * PARAM_WORDS,
        "truncate: params hold {} words, need {rows} RowParams of {PARAM_WORDS}",
        params.len
    );
    assert!(
        cut.len >= 2 * rows,
        "truncate: cut holds {} values, need (tau, log_z) for {rows} rows",
        cut.len
    );
    let kernel = gpu.pipeline(&SampleKernel {
        entry: SampleEntry::Truncate,
        reduction,
    });
    for chunk in logits.chunks(rows) {
        rec.dispatch(
            &kernel,
            bytemuck::bytes_of(&params_for(0, vocab, rows, &chunk)),
            &[&chunk.tensor.buffer, &params.buffer, &cut.buffer],
            grid(gpu, chunk.rows),
        );
    }
}

/// Records `tokens[d] = draw(logits[keys[d].row, ..], keys[d])` for `d in 0..m` draws,
/// each under its row's `params` and `cut` (written by [`encode_truncate`]); `keys` holds
/// `m` [`SampleKey`]s (upload them with `gpu.upload`). A key whose row is past the logits,
/// the params or the cut draws `u32::MAX`. One dispatch per chunk, each drawing the draws
/// from its rows, with the adapter's best reductions.
#[allow(clippy::too_many_arguments)]
pub fn encode(
    gpu: &Gpu,
    rec: &mut Recorder,
    logits: &Logits,
    params: &Tensor,
    cut: &Tensor,
    keys: &Tensor,
    m: usize,
    tokens: &Tensor,
) {
    let reduction = Reduction::best(&gpu.caps);
    draw_with(
        gpu,
        rec,
        logits,
        (params, cut),
        (keys, m, tokens),
        reduction,
    );
}

/// [`encode`] with the given reductions (which the adapter must be able to run).
pub(super) fn draw_with(
    gpu: &Gpu,
    rec: &mut Recorder,
    logits: &Logits,
    (params, cut): (&Tensor, &Tensor),
    (keys, m, tokens): (&Tensor, usize, &Tensor),
    reduction: Reduction,
) {
    let rows = readable_rows("sample", logits, params, cut);
    check_draws("sample", keys, tokens, m);
    let kernel = gpu.pipeline(&SampleKernel {
        entry: SampleEntry::Sample,
        reduction,
    });
    for chunk in logits.entry_chunks(rows) {
        rec.dispatch(
            &kernel,
            bytemuck::bytes_of(&params_for(m, logits.vocab, rows, &chunk)),
            &[
                &chunk.tensor.buffer,
                &params.buffer,
                &cut.buffer,
                &keys.buffer,
                &tokens.buffer,
            ],
            grid(gpu, m),
        );
    }
}

/// The logits `logit_adjust::encode` changed before the draws, to put back before the raw
/// log-probs are read: its entries (`n` of them, over logits rows `0..rows`), the logits
/// it saved, and `m` f32 of scratch.
pub struct Restore<'a> {
    pub rows: usize,
    pub adjusts: &'a Tensor,
    pub n: usize,
    pub saved: &'a Tensor,
    pub scratch: &'a Tensor,
}

/// Records, for `d in 0..m` with `r = keys[d].row` and `c = tokens[d]`:
/// `logprobs[d] = logits[r, c] - lse[r]` with `lse` from `stats` (softmax's row statistics
/// of the same logits): bitwise the value softmax's `target_logprobs` gives; and
/// `sampling_logprobs[d] = logits[r, c] * inv_temperature[r] - log_z[r]` with `log_z` from
/// `cut` (0 for a greedy row): the log-prob under the distribution [`encode`] sampled from.
/// Both are NaN for a token `>= vocab` or a row past the logits, params, cut or stats.
/// With `restore`, the logits it names are put back after that and the raw log-probs
/// read again from them, so that a drawn token whose logit was adjusted gets the model's
/// (the second pass's sampling log-probs go to its scratch).
#[allow(clippy::too_many_arguments)]
pub fn encode_draw_logprobs(
    gpu: &Gpu,
    rec: &mut Recorder,
    logits: &Logits,
    stats: &RowStats,
    params: &Tensor,
    cut: &Tensor,
    keys: &Tensor,
    tokens: &Tensor,
    m: usize,
    logprobs: &Tensor,
    sampling_logprobs: &Tensor,
    restore: Option<Restore>,
) {
    assert!(
        stats.stats.len >= 2 * stats.rows,
        "draw_logprobs: row stats hold {} values, not the (max, lse) of {} rows",
        stats.stats.len,
        stats.rows
    );
    // A row is readable when the logits, params, cut and stats all hold it.
    let rows = readable_rows("draw_logprobs", logits, params, cut).min(stats.rows);
    check_draws("draw_logprobs", keys, tokens, m);
    assert!(
        logprobs.len >= m,
        "draw_logprobs: logprobs hold {} values, need {m}",
        logprobs.len
    );
    assert!(
        sampling_logprobs.len >= m,
        "draw_logprobs: sampling log-probs hold {} values, need {m}",
        sampling_logprobs.len
    );
    // No reductions: the tree's module, on every adapter.
    let kernel = gpu.pipeline(&SampleKernel {
        entry: SampleEntry::DrawLogprobs,
        reduction: Reduction::Tree,
    });
    let mut passes = vec![sampling_logprobs];
    if let Some(r) = &restore {
        assert!(r.scratch.len >= m, "draw_logprobs: scratch for {m} values");
        passes.push(r.scratch);
    }
    for (pass, sampling_logprobs) in passes.into_iter().enumerate() {
        if let (1, Some(r)) = (pass, &restore) {
            logit_adjust::encode_restore(gpu, rec, logits, r.rows, r.adjusts, r.n, r.saved);
        }
        for chunk in logits.entry_chunks(rows) {
            rec.dispatch(
                &kernel,
                bytemuck::bytes_of(&params_for(m, logits.vocab, rows, &chunk)),
                &[
                    &chunk.tensor.buffer,
                    &params.buffer,
                    &cut.buffer,
                    &keys.buffer,
                    &tokens.buffer,
                    &stats.stats.buffer,
                    &logprobs.buffer,
                    &sampling_logprobs.buffer,
                ],
                grid(gpu, m.div_ceil(LOGPROB_WORKGROUP)),
            );
        }
    }
}
