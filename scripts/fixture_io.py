"""What the fixture scripts share: pinned-version checks, float32 values written as JSON, and
hashes computed as sprout computes them.

Imported by make_fixtures.py, make_lora_fixtures.py and mismatch_floor.py (scripts/ is on
sys.path when a script there runs). It imports numpy and nothing else outside the standard
library, so importing it runs nothing and loads no model library.
"""

import hashlib
import importlib.metadata
import json
import sys
from pathlib import Path

import numpy as np


def installed_version(pkg):
    """The installed version of `pkg`, or None."""
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_versions(pinned):
    """Warns of each package of `pinned` ({name: version}) installed at another version (a
    local suffix such as torch's +cpu is the same release); True when none is."""
    ok = True
    for pkg, want in pinned.items():
        have = installed_version(pkg)
        if have is None or have.split("+")[0] != want:
            ok = False
            print(f"WARNING: {pkg} {have} installed, {want} pinned; fixtures may differ",
                  file=sys.stderr)
    return ok


def f32_list(values):
    """Floats as Python floats whose repr is the shortest decimal that round-trips to float32."""
    arr = np.asarray(values, dtype=np.float32).reshape(-1)
    assert np.all(np.isfinite(arr)), "non-finite value in fixture"
    return [float(str(x)) for x in arr]


def f32(x):
    return f32_list([x])[0]


def dumps(obj, indent, level=0, min_rows=9):
    """JSON with objects indented, a list of objects one per line, a list of lists one per
    line when it holds at least `min_rows` of them, and every other list on one line."""
    def flat(o):
        return json.dumps(o, ensure_ascii=False, separators=(",", ":"))
    pad, inner = " " * (indent * level), " " * (indent * (level + 1))
    if isinstance(obj, dict):
        items = [f"{inner}{json.dumps(k)}: {dumps(v, indent, level + 1, min_rows)}"
                 for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and any(isinstance(v, dict) for v in obj):
        return ("[\n" + ",\n".join(inner + dumps(v, indent, level + 1, min_rows) for v in obj)
                + "\n" + pad + "]")
    if isinstance(obj, list) and obj and all(isinstance(v, list) for v in obj) \
            and len(obj) >= min_rows:
        return "[\n" + ",\n".join(inner + flat(v) for v in obj) + "\n" + pad + "]"
    return flat(obj)


def write_json(path, obj, min_rows=9):
    """`obj` as `dumps` writes it with an indent of 1, and a final newline."""
    Path(path).write_text(dumps(obj, 1, min_rows=min_rows) + "\n", encoding="utf-8")


def sha256_of(path):
    """The hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_sha256(path):
    """sprout's `model_sha256`: a file's SHA-256, or for a directory the SHA-256 of the lines
    `<sha256>  <name>` of its regular files in name order."""
    path = Path(path)
    if not path.is_dir():
        return sha256_of(path)
    files = sorted(p for p in path.iterdir() if p.is_file())
    listing = "".join(f"{sha256_of(p)}  {p.name}\n" for p in files)
    return hashlib.sha256(listing.encode()).hexdigest()
