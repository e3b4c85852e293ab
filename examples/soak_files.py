"""The second checkpoint and the second LoRA adapter of the soak test (serve_soak.py),
derived from the first ones with the Python standard library alone.

A safetensors file is an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the bytes. Scaling one F32 tensor changes
only its bytes, so a copy of the file is patched in place: the header and every other
tensor stay byte for byte the same.

The derived checkpoint scales the final norm (`model.norm.weight`). That tensor only
shapes the logits, never a key or a value: the KV cache is the same under both
checkpoints, so a sample that spans a weight update (its earlier tokens' KV computed
under the old weights, its later tokens drawn under the new) re-scores bitwise, segment
by segment, under the checkpoint each segment names, while the two checkpoints still
give every token different log-probs (which is what lets the soak tell them apart).
"""

import array
import json
import os
import shutil
import struct
import sys

FINAL_NORM = "model.norm.weight"


def read_header(path):
    """The header of the safetensors file at `path` and where its data starts."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError("%s: not a safetensors file (shorter than 8 bytes)" % path)
        (length,) = struct.unpack("<Q", raw)
        header = json.loads(f.read(length))
    if not isinstance(header, dict):
        raise ValueError("%s: the safetensors header is not a JSON object" % path)
    return header, 8 + length


def scale_tensors(path, names, factor):
    """Multiplies the F32 (or BF16) tensors `names` of the safetensors file at `path` by
    `factor`, in place. A BF16 product must be exact (a power-of-two factor is), or the
    file is left as it was for that tensor and the call fails."""
    header, data_start = read_header(path)
    with open(path, "r+b") as f:
        for name in names:
            entry = header.get(name)
            if not isinstance(entry, dict):
                raise ValueError("%s: no tensor %s" % (path, name))
            dtype = entry.get("dtype")
            if dtype not in ("F32", "BF16"):
                raise ValueError("%s: tensor %s is %s, not F32 or BF16 (export the model "
                                 "with `sprout export --dtype f32`)" % (path, name, dtype))
            begin, end = entry["data_offsets"]
            f.seek(data_start + begin)
            raw = f.read(end - begin)
            scaled = scale_f32(raw, factor) if dtype == "F32" else scale_bf16(raw, factor, name)
            f.seek(data_start + begin)
            f.write(scaled)


def scale_f32(raw, factor):
    """Little-endian f32 values `raw`, each times `factor`."""
    values = array.array("f")
    values.frombytes(raw)
    if sys.byteorder != "little":
        values.byteswap()
    scaled = array.array("f", (v * factor for v in values))
    if sys.byteorder != "little":
        scaled.byteswap()
    return scaled.tobytes()


def scale_bf16(raw, factor, name):
    """Little-endian bf16 values `raw` (an f32's top 16 bits), each times `factor`."""
    count = len(raw) // 2
    halves = struct.unpack("<%dH" % count, raw)
    as_f32 = struct.unpack("<%df" % count, struct.pack("<%dI" % count, *(h << 16 for h in halves)))
    products = struct.unpack("<%dI" % count, struct.pack("<%df" % count,
                                                          *(v * factor for v in as_f32)))
    if any(bits & 0xFFFF for bits in products):
        raise ValueError("tensor %s: x%s is not exact in bf16" % (name, factor))
    return struct.pack("<%dH" % count, *(bits >> 16 for bits in products))


def copy_dir(source, out):
    """Copies the files of the directory `source` into `out` (made; it must not hold
    files of another run)."""
    os.makedirs(out, exist_ok=True)
    for name in sorted(os.listdir(source)):
        path = os.path.join(source, name)
        if os.path.isfile(path):
            shutil.copyfile(path, os.path.join(out, name))


def derive_checkpoint(model_dir, out, factor=1.25):
    """`out`: the Hugging Face directory `model_dir` with its final norm scaled by
    `factor` (see the module docs). The shard holding the norm is found by its header."""
    shards = [n for n in sorted(os.listdir(model_dir)) if n.endswith(".safetensors")]
    holding = [n for n in shards if FINAL_NORM in read_header(os.path.join(model_dir, n))[0]]
    if not holding:
        raise ValueError("%s: no safetensors file holds %s (a Hugging Face f32 directory is "
                         "needed: `sprout export --out DIR` makes one)" % (model_dir, FINAL_NORM))
    copy_dir(model_dir, out)
    scale_tensors(os.path.join(out, holding[0]), [FINAL_NORM], factor)
    return out


def derive_adapter(adapter_dir, out, factor=2.0):
    """`out`: the PEFT adapter `adapter_dir` with every `lora_B` matrix scaled by
    `factor` (the adapter's effect scaled; its config and shapes unchanged)."""
    path = os.path.join(adapter_dir, "adapter_model.safetensors")
    if not os.path.isfile(path):
        raise ValueError("%s: no adapter_model.safetensors" % adapter_dir)
    names = [n for n in read_header(path)[0] if ".lora_B." in n]
    if not names:
        raise ValueError("%s: the adapter has no lora_B tensor" % path)
    copy_dir(adapter_dir, out)
    scale_tensors(os.path.join(out, "adapter_model.safetensors"), names, factor)
    return out
