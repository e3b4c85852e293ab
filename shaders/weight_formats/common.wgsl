// Byte access into a weight buffer `w: array<u32>` declared by the kernel.
// Rows of Q4_0, f16 and bf16 may start on any 2-byte boundary, so 32-bit reads are
// assembled from two words when the byte offset is 2 mod 4.

// The 32 bits starting at byte offset `byte` (byte % 2 == 0).
fn w_u32_at(byte: u32) -> u32 {
    let i = byte >> 2u;
    if ((byte & 3u) == 0u) {
        return w[i];
    }
    return (w[i] >> 16u) | (w[i + 1u] << 16u);
}

// The 16 bits starting at byte offset `byte` (byte % 2 == 0), in the low half.
fn w_u16_at(byte: u32) -> u32 {
    return (w[byte >> 2u] >> ((byte & 2u) * 8u)) & 0xffffu;
}

// The f16 stored at byte offset `byte`, as f32.
fn w_f16_at(byte: u32) -> f32 {
    return unpack2x16float(w_u16_at(byte)).x;
}

// Four signed bytes packed in `q`, lowest byte first.
fn unpack_i8x4(q: u32) -> vec4<f32> {
    let s = bitcast<i32>(q);
    return vec4<f32>(vec4<i32>(
        (s << 24u) >> 24u,
        (s << 16u) >> 24u,
        (s << 8u) >> 24u,
        s >> 24u,
    ));
}

// Four 4-bit values, one from the low nibble of each byte of `q` (after shifting).
fn unpack_u4x4(q: u32) -> vec4<f32> {
    return vec4<f32>(vec4<u32>(q & 0xfu, (q >> 8u) & 0xfu, (q >> 16u) & 0xfu, (q >> 24u) & 0xfu));
}

// The f16 in the low 16 bits of `h` as f32, exactly, subnormals included: some drivers'
// unpack2x16float flushes f16 subnormals to zero, and K-quant scales are often
// subnormal (a Q6_K super-block's d is commonly below 6.1e-5).
fn f16_exact(h: u32) -> f32 {
    let mag = h & 0x7fffu;
    var v: f32;
    if (mag < 0x400u) {
        // Zero or subnormal: mag * 2^-24, a normal f32.
        v = f32(mag) * 5.9604644775390625e-8;
    } else if (mag >= 0x7c00u) {
        // Infinity or NaN.
        v = bitcast<f32>((mag << 13u) | 0x7f800000u);
    } else {
        // Normal: the exponent rebiased from 15 to 127.
        v = bitcast<f32>((mag << 13u) + 0x38000000u);
    }
    return select(v, -v, (h & 0x8000u) != 0u);
}
