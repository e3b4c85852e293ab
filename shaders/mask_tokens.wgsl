// Forbids chosen tokens in chosen rows of logits (stop tokens before a sample's
// min_tokens):
//     logits[pairs[2i] * vocab + pairs[2i + 1]] = MASKED_LOGIT    for i in 0 .. n
// where pairs are (row, token). A pair whose row >= rows or token >= vocab changes
// nothing. A pair may repeat: every invocation writing an entry writes the same value.
//
// MASKED_LOGIT = -1e30 (`MASKED_LOGIT` on the host) is finite, as every logit must be
// (softmax.wgsl), and far below any real logit: exp(-1e30 * inv_temperature - s_max) is 0
// for any temperature >= 1e-8, so the token is never kept, drawn or taken as the argmax
// while another is unmasked.
//
// One invocation per pair; no arithmetic, so the other logits are untouched bit for bit.
// Logits come in chunks of rows (src/gpu/kernels/logits.rs), one dispatch per chunk: a
// dispatch masks the pairs whose row is in its chunk. Composed with
// shaders/common/logit_entries.wgsl (the parameters, entry_index, chunk_logit).

@group(0) @binding(1) var<storage, read> pairs: array<u32>;         // [n, 2]: (row, token)
@group(0) @binding(2) var<storage, read_write> logits: array<f32>;  // [rows, vocab]: the chunk

@compute @workgroup_size(64)
fn mask_tokens(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = entry_index(wid, nwg, lid);
    if (i >= p.n) {
        return;
    }
    let at = chunk_logit(pairs[2u * i], pairs[2u * i + 1u]);
    if (at != NO_LOGIT) {
        logits[at] = MASKED_LOGIT;
    }
}
