"""Simple encoders of GGUF's Q4_K, Q5_K and Q6_K blocks, for test fixtures.

The `gguf` package decodes every GGUF type but encodes only some (not the K-quants), and
llama.cpp's quantizers search scales iteratively. These encoders choose each scale from its
sub-block's range in one pass: they make valid blocks close to the values, not the blocks
llama.cpp would make. What matters for a fixture is that the file is a real K-quant file
and that every reader decodes it the same way; `encode` checks its blocks against the `gguf`
package's decoder before returning them.

Layouts (256 values a super-block, little-endian):
  Q4_K, 144 bytes: f16 d, f16 dmin, u8 scales[12] (eight 6-bit scales and mins), u8 qs[128];
      sub-block j (32 values): value = d * sc_j * q - dmin * m_j, q in 0..15.
  Q5_K, 176 bytes: Q4_K's d, dmin and scales[12], u8 qh[32], u8 qs[128] (as Q4_K's);
      q in 0..31, its fifth bit bit j of qh[l] for value l of sub-block j.
  Q6_K, 210 bytes: u8 ql[128], u8 qh[64], i8 scales[16], f16 d;
      sub-block i (16 values): value = d * scales[i] * (q - 32), q in 0..63.
"""

import numpy as np
from gguf import GGMLQuantizationType, quants

QK_K = 256


def _f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16)


def _scale_min_block(x, levels):
    """The first 16 bytes of a Q4_K or Q5_K super-block of 256 float32 values (d, dmin, the
    packed 6-bit scales and mins; each sub-block's range `levels` steps) and each value's q
    in 0..levels."""
    sub = x.reshape(8, 32)
    lo = np.minimum(sub.min(axis=1), 0.0)        # the offset is subtracted: mins are >= 0
    scale = (sub.max(axis=1) - lo) / levels
    d = _f16(scale.max() / 63.0)
    dmin = _f16((-lo).max() / 63.0)
    fd, fdmin = np.float32(d), np.float32(dmin)
    sc = np.clip(np.rint(scale / fd), 0, 63).astype(np.uint8) if fd > 0 else np.zeros(8, np.uint8)
    m = np.clip(np.rint(-lo / fdmin), 0, 63).astype(np.uint8) if fdmin > 0 else np.zeros(8, np.uint8)
    step = fd * sc.astype(np.float32)
    offset = fdmin * m.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step[:, None] > 0, np.rint((sub + offset[:, None]) / step[:, None]), 0)
    q = np.clip(q, 0, levels).astype(np.uint8).reshape(-1)
    scales = np.zeros(12, np.uint8)
    scales[0:4] = (sc[0:4] & 63) | ((sc[4:8] >> 4) << 6)
    scales[4:8] = (m[0:4] & 63) | ((m[4:8] >> 4) << 6)
    scales[8:12] = (sc[4:8] & 15) | ((m[4:8] & 15) << 4)
    head = np.concatenate([d.reshape(1).view(np.uint8), dmin.reshape(1).view(np.uint8), scales])
    return head, q


def _nibbles(q):
    """The 128 bytes of Q4_K's and Q5_K's low four bits of each q: sub-block 2c in the low
    nibbles of bytes 32c..32c+31, sub-block 2c+1 in their high nibbles."""
    q = q & 15
    qs = np.zeros(128, np.uint8)
    for c in range(4):
        qs[32 * c:32 * c + 32] = q[64 * c:64 * c + 32] | (q[64 * c + 32:64 * c + 64] << 4)
    return qs


def _q4_k_block(x):
    """One super-block of 256 float32 values as 144 bytes."""
    head, q = _scale_min_block(x, 15)
    return np.concatenate([head, _nibbles(q)])


def _q5_k_block(x):
    """One super-block of 256 float32 values as 176 bytes."""
    head, q = _scale_min_block(x, 31)
    fifth = (q >> 4).reshape(8, 32)              # [sub-block j, value l]
    qh = np.zeros(32, np.uint8)
    for j in range(8):
        qh |= fifth[j] << j
    return np.concatenate([head, qh, _nibbles(q)])


def _q6_k_block(x):
    """One super-block of 256 float32 values as 210 bytes."""
    sub = x.reshape(16, 16)
    amax_idx = np.abs(sub).argmax(axis=1)
    signed_max = sub[np.arange(16), amax_idx]
    scale = signed_max / -32.0                     # the largest magnitude maps to -32
    d = _f16(np.abs(scale).max() / 127.0)
    fd = np.float32(d)
    sc = np.clip(np.rint(scale / fd), -128, 127).astype(np.int8) if fd > 0 else np.zeros(16, np.int8)
    step = fd * sc.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step[:, None] != 0, np.rint(sub / step[:, None]), 0)
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(-1)
    ql = np.zeros(128, np.uint8)
    qh = np.zeros(64, np.uint8)
    for h in range(2):
        v = q[128 * h:128 * h + 128]
        q1, q2, q3, q4 = v[0:32], v[32:64], v[64:96], v[96:128]
        ql[64 * h:64 * h + 32] = (q1 & 15) | ((q3 & 15) << 4)
        ql[64 * h + 32:64 * h + 64] = (q2 & 15) | ((q4 & 15) << 4)
        qh[32 * h:32 * h + 32] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
    return np.concatenate([ql, qh, sc.view(np.uint8), d.reshape(1).view(np.uint8)])


ENCODERS = {GGMLQuantizationType.Q4_K: (_q4_k_block, 144), GGMLQuantizationType.Q5_K: (_q5_k_block, 176),
            GGMLQuantizationType.Q6_K: (_q6_k_block, 210)}


def encode(values, qtype):
    """`values` [rows, cols] (cols a multiple of 256) as uint8 [rows, cols / 256 * bytes].

    The K-quants use the encoders above; other types the `gguf` package's quantizer. The
    result is decoded with the `gguf` package and checked against the values: each decoded
    value within one quantization step of its sub-block's range."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    rows, cols = values.shape
    if qtype in ENCODERS:
        block, nbytes = ENCODERS[qtype]
        assert cols % QK_K == 0, f"{qtype.name} rows must be whole super-blocks, not {cols} values"
        blocks = values.reshape(-1, QK_K)
        out = np.stack([block(b) for b in blocks]).reshape(rows, cols // QK_K * nbytes)
    else:
        out = quants.quantize(values, qtype)
    back = quants.dequantize(out, qtype).reshape(rows, cols)
    group = 16 if qtype == GGMLQuantizationType.Q6_K else 32
    span = np.abs(values.reshape(-1, group)).max(axis=1, keepdims=True)
    err = np.abs(back.reshape(-1, group) - values.reshape(-1, group))
    levels = {GGMLQuantizationType.Q4_K: 15, GGMLQuantizationType.Q5_K: 31, GGMLQuantizationType.Q6_K: 31,
              GGMLQuantizationType.Q5_1: 31}.get(qtype, 15)
    # One step of the sub-block's grid, plus the rounding of its 6-bit and f16 scales.
    assert np.all(err <= 2.5 * span / levels + 1e-6), f"{qtype.name}: a block decodes too far off"
    return out
