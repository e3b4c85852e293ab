#!/usr/bin/env python3
"""Make tests/fixtures/quant_goldens.json: GGUF blocks and the values the `gguf` package
decodes them to, so that sprout's block decoders (src/formats) are checked against an
independent implementation of ggml's layouts.

For each of Q5_0, Q4_K, Q6_K, Q5_1 and Q5_K: random valid blocks (random bytes, with every
f16 scale replaced by a finite one: normals of either sign, subnormals and zeros, since real
K-quant scales are often subnormal) and gguf.quants.dequantize's float32 values. For Q5_0
and Q5_1 also gguf's own quantizer (ggml's reference rounding) on random values, which
sprout's quantize must reproduce byte for byte.

Versions (the script warns when the installed ones differ):
  gguf==0.19.0 numpy==2.4.6   (the venv of scripts/README.md)

Run from the repository root:
  /root/.cache/sprout/venv/bin/python scripts/quant_goldens.py [--out PATH]

The output is deterministic (a fixed seed). Blocks are hex strings of their bytes as a
GGUF file stores them; values are the float32 bit patterns as unsigned integers, so that
the comparison is exact.
"""

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

PINNED = {"gguf": "0.19.0", "numpy": "2.4.6"}
REPO = Path(__file__).resolve().parent.parent
SEED = 20240611

# (sprout's name, ggml type, bytes per block, offsets of the f16 scales in a block, blocks)
TYPES = [
    ("q5_0", GGMLQuantizationType.Q5_0, 22, [0], 24),
    ("q4_k", GGMLQuantizationType.Q4_K, 144, [0, 2], 4),
    ("q6_k", GGMLQuantizationType.Q6_K, 210, [208], 4),
    ("q5_1", GGMLQuantizationType.Q5_1, 24, [0, 2], 24),
    ("q5_k", GGMLQuantizationType.Q5_K, 176, [0, 2], 4),
]

# The formats whose gguf quantizer sprout's must reproduce.
QUANTIZED = [("q5_0", GGMLQuantizationType.Q5_0), ("q5_1", GGMLQuantizationType.Q5_1)]


def check_versions():
    for name, want in PINNED.items():
        have = importlib.metadata.version(name)
        if have != want:
            print(f"warning: {name} {have} installed, {want} pinned", file=sys.stderr)


def finite_f16(rng, n):
    """n finite f16 bit patterns: a third normals of moderate size, a third subnormals, a
    few zeros, the rest normals of any exponent; either sign."""
    out = []
    for _ in range(n):
        kind = rng.integers(0, 10)
        sign = int(rng.integers(0, 2)) << 15
        if kind < 4:
            exponent = int(rng.integers(5, 20))  # about 2^-10 .. 2^4
        elif kind < 8:
            exponent = 0  # subnormal (or zero)
        elif kind == 8:
            out.append(sign)
            continue
        else:
            exponent = int(rng.integers(1, 31))
        mantissa = int(rng.integers(0, 1024))
        out.append(sign | (exponent << 10) | mantissa)
    return out


def f32_bits(values):
    return [int(b) for b in np.asarray(values, dtype=np.float32).view(np.uint32)]


def dequantize_cases(rng):
    cases = []
    for name, qtype, size, scales, count in TYPES:
        blocks = rng.integers(0, 256, size=(count, size), dtype=np.uint8)
        for b in range(count):
            for at, bits in zip(scales, finite_f16(rng, len(scales))):
                blocks[b, at : at + 2] = np.frombuffer(np.uint16(bits).tobytes(), np.uint8)
        values = dequantize(blocks.reshape(-1), qtype)
        cases.append(
            {
                "format": name,
                "blocks": blocks.tobytes().hex(),
                "values": f32_bits(values.reshape(-1)),
            }
        )
    return cases


def quantize_cases(rng):
    cases = []
    for name, qtype in QUANTIZED:
        # Each 32-value block spans its own range; one block is all zeros.
        rows = []
        for b in range(16):
            scale = float(2.0 ** rng.integers(-12, 4))
            rows.append(rng.uniform(-scale, scale, 32).astype(np.float32))
        rows[5] = np.zeros(32, np.float32)
        values = np.concatenate(rows).reshape(1, -1)
        blocks = quantize(values, qtype)
        cases.append(
            {
                "format": name,
                "values": f32_bits(values.reshape(-1)),
                "blocks": blocks.tobytes().hex(),
            }
        )
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests/fixtures/quant_goldens.json")
    args = parser.parse_args()
    check_versions()
    rng = np.random.default_rng(SEED)
    fixture = {
        "made_by": "scripts/quant_goldens.py",
        "gguf": importlib.metadata.version("gguf"),
        "numpy": importlib.metadata.version("numpy"),
        "dequantize": dequantize_cases(rng),
        "quantize": quantize_cases(rng),
    }
    # One line per case: small, and a changed case shows as one line of a diff.
    lines = [f' "{k}": {json.dumps(fixture[k])}' for k in ("made_by", "gguf", "numpy")]
    for key in ("dequantize", "quantize"):
        cases = ",\n".join(f"  {json.dumps(c, separators=(',', ':'))}" for c in fixture[key])
        lines.append(f' "{key}": [\n{cases}\n ]')
    args.out.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
