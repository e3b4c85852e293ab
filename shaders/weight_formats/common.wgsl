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

// Four 5-bit values (Q5_0, Q5_1, Q5_K): their low four bits the low nibble of each byte of
// `q` (after shifting), their fifth bits bit 0 of each of `high`.
fn unpack_u5x4(q: u32, high: vec4<u32>) -> vec4<f32> {
    let nibbles = vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) & vec4<u32>(0xfu);
    return vec4<f32>(nibbles | ((high & vec4<u32>(1u)) << vec4<u32>(4u)));
}

// Q5_0 (as uploaded) and Q5_1 blocks both hold, from their word i + 1, a u32 qh whose bit j
// is value j's fifth bit, then 16 bytes of nibbles ordered as Q4_0 (words i + 2 .. i + 5).

// The integers (0..31) of four values: their nibbles in the low nibble of each byte of `q`,
// their fifth bits the low four bits of `h`.
fn q5_ints4(q: u32, h: u32) -> vec4<f32> {
    return unpack_u5x4(q, vec4<u32>(h, h >> 1u, h >> 2u, h >> 3u));
}

// The integers of values j..j+3 (j % 4 == 0) of the Q5_0 or Q5_1 block at word i.
fn q5_ints4_at(i: u32, j: u32) -> vec4<f32> {
    return q5_ints4(w[i + 2u + ((j & 15u) >> 2u)] >> ((j >> 4u) * 4u), w[i + 1u] >> j);
}

// The integer of value j of the Q5_0 or Q5_1 block at word i.
fn q5_int1(i: u32, j: u32) -> f32 {
    let b = j & 15u;
    let nibble = (w[i + 2u + (b >> 2u)] >> ((b & 3u) * 8u + (j >> 4u) * 4u)) & 0xfu;
    return f32(nibble | (((w[i + 1u] >> j) & 1u) << 4u));
}

// The integers of values 4s..4s+3 (s < 8) of a whole Q5_0 or Q5_1 block, from its qh and
// its nibbles' four words.
fn q5_block_ints4(qh: u32, q: vec4<u32>, s: u32) -> vec4<f32> {
    return q5_ints4(q[s & 3u] >> ((s >> 2u) * 4u), qh >> (4u * s));
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

// Byte i of the packed 6-bit scales and minimums of the Q4_K or Q5_K super-block at word s
// (words s + 1 .. s + 3).
fn k_scale_byte(s: u32, i: u32) -> u32 {
    return (w[s + 1u + (i >> 2u)] >> ((i & 3u) * 8u)) & 0xffu;
}

// (d * sc, dmin * m) of sub-block j of the Q4_K or Q5_K super-block at word s: f16 d and
// dmin in word s, then the scales packed as src/formats/k_quants.rs reads them. Both
// products are exact.
fn k_scale_min(s: u32, j: u32) -> vec2<f32> {
    var sc: u32;
    var m: u32;
    if (j < 4u) {
        sc = k_scale_byte(s, j) & 63u;
        m = k_scale_byte(s, j + 4u) & 63u;
    } else {
        let low = k_scale_byte(s, j + 4u);
        sc = (low & 15u) | ((k_scale_byte(s, j - 4u) >> 6u) << 4u);
        m = (low >> 4u) | ((k_scale_byte(s, j) >> 6u) << 4u);
    }
    let dm = w[s];
    return vec2<f32>(f16_exact(dm) * f32(sc), f16_exact(dm >> 16u) * f32(m));
}
