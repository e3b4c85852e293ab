// Changes chosen logits of chosen rows (logit bias, repetition, presence and frequency
// penalties), one entry per (row, token):
//     l = logits[row * vocab + token] + bias
//     m = l * (l > 0 ? pos_scale : neg_scale)        (rounded to f32)
//     logits[row * vocab + token] = clamp(m - subtract, MASKED_LOGIT, -MASKED_LOGIT)
// An entry whose row >= rows or token >= vocab changes nothing. Each entry's logit before
// is saved (saved[i]), and `logit_restore` puts it back: the raw log-probs of the drawn
// tokens are read after the draws from the restored logits.
//
// Two roundings, on every driver: the product's bits pass through an OR with a uniform
// that is always 0, which no compiler can see through, so none can contract the multiply
// and the subtraction into one fma. (WGSL has no `precise`, naga marks no operation
// NoContraction, and an explicit fma() does not pin it either: WGSL lets fma be computed
// with one rounding or two, and llvmpipe computes it as a multiply and an add.) The CPU
// reference computes the same two operations. The clamp keeps the result finite whatever
// the parameters (softmax.wgsl and sample.wgsl need finite logits) and never below a
// masked logit; real logits and parameters never reach it.
//
// The caller gives each (row, token) at most one entry: an entry reads and writes its own
// logit only, so the order in which entries run does not matter. Every logit no entry
// names is untouched bit for bit.
//
// Logits come in chunks of rows (src/gpu/kernels/logits.rs), one dispatch per chunk: a
// dispatch changes the entries whose row is in its chunk. Composed with
// shaders/common/logit_entries.wgsl (the parameters, entry_index, chunk_logit).

// `LogitAdjust` on the host: 24 bytes.
struct Adjust {
    row: u32,
    token: u32,
    bias: f32,
    pos_scale: f32, // 1 / repetition, for a logit > 0 after the bias
    neg_scale: f32, // repetition, for a logit <= 0 after the bias
    subtract: f32,  // presence + frequency * count
}

@group(0) @binding(1) var<storage, read> adjusts: array<Adjust>;   // [n]
@group(0) @binding(2) var<storage, read_write> logits: array<f32>; // [rows, vocab]: the chunk
@group(0) @binding(3) var<storage, read_write> saved: array<f32>;  // [n]: each entry's logit before

// Where entry i's logit lies in the chunk: NO_LOGIT for a spare invocation (i >= n) and
// for an entry another chunk holds or past the vocabulary.
fn entry_logit(i: u32) -> u32 {
    if (i >= p.n) {
        return NO_LOGIT;
    }
    return chunk_logit(adjusts[i].row, adjusts[i].token);
}

@compute @workgroup_size(64)
fn logit_adjust(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = entry_index(wid, nwg, lid);
    let at = entry_logit(i);
    if (at == NO_LOGIT) {
        return;
    }
    let a = adjusts[i];
    saved[i] = logits[at];
    let l = logits[at] + a.bias;
    let product = l * select(a.neg_scale, a.pos_scale, l > 0.0);
    let rounded = bitcast<f32>(bitcast<u32>(product) | p.zero);
    logits[at] = clamp(rounded - a.subtract, MASKED_LOGIT, -MASKED_LOGIT);
}

// Puts back the logit each entry had before `logit_adjust` (saved there), bit for bit.
@compute @workgroup_size(64)
fn logit_restore(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = entry_index(wid, nwg, lid);
    let at = entry_logit(i);
    if (at != NO_LOGIT) {
        logits[at] = saved[i];
    }
}
