#!/usr/bin/env python3
"""The report of scripts/gpu_check.sh: one Markdown table from the files it wrote.

    python3 scripts/gpu_table.py LOGS_DIR [--details] [--markdown FILE]

Reads LOGS_DIR/{settings.txt, status.tsv, nvidia-smi.csv, devices*.json, kernels-test.log,
kernels-bench.log, tune.json, w-g*.json, profile-g*.txt, hf.jsonl}; any of them may be
missing or broken (that part is then shown as "-"). Prints, with --details, the kernel
suite's last 40 lines and the profile run first, and the table last; --markdown also writes
everything printed to FILE. Standard library only.
"""

import json
import re
import statistics
import sys
from pathlib import Path

BENCH_SHAPES = ("576x1536", "1536x576", "576x49152")
SUITE_TAIL = 40
PROFILE_LINES = 22


def read(path):
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def last_json(path):
    """The last line of the file that parses as a JSON object, or None."""
    text = read(path)
    if not text:
        return None
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    try:
        value = json.loads(text)
        return value if isinstance(value, dict) else None
    except ValueError:
        return None


def json_lines(path):
    text = read(path) or ""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def settings(logs):
    out = {}
    for line in (read(logs / "settings.txt") or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def statuses(logs):
    """name -> (result, rc, seconds, note), in the order the parts ran."""
    out = {}
    for line in (read(logs / "status.tsv") or "").splitlines():
        cols = line.split("\t")
        if len(cols) >= 4:
            out[cols[0]] = (cols[1], cols[2], cols[3], cols[4] if len(cols) > 4 else "")
    return out


def fmt(x, digits=1):
    if x is None:
        return "-"
    if isinstance(x, (int, float)):
        return f"{x:,.{digits}f}"
    return str(x)


def adapter_line(logs, runs):
    """The adapter the workload ran on (as `sprout devices` describes it) and nvidia-smi's line."""
    used = None
    for run in runs.values():
        a = run.get("adapter") if run else None
        if isinstance(a, dict) and a.get("name"):
            used = a
            break
    devices = []
    for name in ("devices-vulkan.json", "devices.json"):
        try:
            devices = json.loads(read(logs / name) or "[]") or []
        except ValueError:
            devices = []
        if devices:
            break
    best = None
    if used:
        best = next((d for d in devices if d.get("name") == used.get("name")), None)
    elif devices:
        best = next((d for d in devices if d.get("device_type") != "cpu"), devices[0])
    if best:
        line = (
            f"{best.get('name')} ({best.get('backend')}, {best.get('device_type')}; driver "
            f"{best.get('driver')} {best.get('driver_info', '')}; shader-f16 "
            f"{best.get('shader_f16')}, subgroups {best.get('subgroups')})"
        )
    elif used:
        line = f"{used.get('name')} ({used.get('backend')}; driver {used.get('driver')})"
    else:
        line = "none found (see setup.log)"
    smi = read(logs / "nvidia-smi.csv")
    if smi:
        rows = [r.strip() for r in smi.splitlines()[1:] if r.strip()]
        if rows:
            line += f"; nvidia-smi: {rows[0]}"
    return line


def suite_counts(text):
    """(summary, per-adapter lines) from the kernel suite's output."""
    if not text:
        return None, []
    m = None
    for m in re.finditer(
        r"test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored", text
    ):
        pass
    summary = None
    if m:
        summary = f"{m.group(2)} passed, {m.group(3)} failed, {m.group(4)} ignored ({m.group(1)})"
    per_adapter = [
        line.strip()
        for line in text.splitlines()
        if re.match(r"^\S+: \d+ passed, \d+ failed$", line.strip())
    ]
    return summary, per_adapter


def bench_table(text):
    """The lines of the benches' own summary table (from its last `kernels on` line)."""
    if not text:
        return []
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("kernels on")]
    if not starts:
        return []
    return [line for line in lines[starts[-1] :] if line.strip()]


def bench_selected(table):
    """The header, the copy/kernel_vec4 row and the matmul rows at BENCH_SHAPES, m <= 8."""
    out = []
    for line in table:
        if line.startswith("kernels on") or line.startswith("benchmark"):
            out.append(line)
            continue
        m = re.match(r"^matmul/[^/\s]+/([0-9x]+)/m(\d+)\b", line)
        if line.startswith("copy/kernel_vec4") or (
            m and m.group(1) in BENCH_SHAPES and int(m.group(2)) <= 8
        ):
            out.append(line)
    return out


def tuning_line(runs, tune, status):
    for run in runs.values():
        if run and "tuning" in run:
            t = run["tuning"]
            if t is None:
                break
            if isinstance(t, dict):
                return str(t.get("path") or json.dumps(t, separators=(",", ":")))
            return str(t)
    note = ""
    if status:
        note = f" (tune: {status[0]}" + (f", exit {status[1]}" if status[0] == "failed" else "") + ")"
    if tune and tune.get("path"):
        # Tuned, but the workload's JSON did not say it used the file (or has no `tuning`).
        return f"{tune['path']} written by sprout tune{note}"
    return "untuned" + note


def sweep_line(tune):
    """What `sprout tune --budget-s` explored, dropped and left untuned, and which winners
    decode a weight block once for several rows of x (`xr`)."""
    sweep = (tune or {}).get("sweep")
    if not isinstance(sweep, dict):
        return "-"
    dropped = sweep.get("rejected") or []
    untuned = sweep.get("untuned") or []
    winners = [c.get("shape") or {} for c in tune.get("matmul") or []]
    multi = sum(1 for s in winners if isinstance(s, dict) and (s.get("xr") or 1) > 1)
    text = (
        f"{sweep.get('variants_timed', '-')} variants timed in {fmt(sweep.get('seconds'))} s "
        f"(budget {fmt(sweep.get('budget_s'))} s); {len(dropped)} dropped for other bits"
        f"{': ' + ', '.join(dropped[:8]) if dropped else ''}; {len(untuned)} untuned; "
        f"{multi} of {len(winners)} matmul winners decode a block for several rows of x"
    )
    return text


# The files where each part's errors land (the first that exists is read).
PART_LOGS = {
    "setup": ["setup.log"],
    "devices": ["devices.txt"],
    "devices-json": ["devices-json.log"],
    "kernels-test": ["kernels-test.log"],
    "kernels-bench": ["kernels-bench.log"],
    "tune": ["tune.log", "tune.json"],
    "transformers": ["hf.log"],
}


def last_line(logs, name):
    """The last non-empty line a failed part wrote (its error, usually), shortened."""
    files = PART_LOGS.get(name)
    if files is None:
        files = [f"{name}.log", f"{name}.txt", f"{name}.json"]
    for f in files:
        lines = [line.strip() for line in (read(logs / f) or "").splitlines() if line.strip()]
        if lines:
            errors = [x for x in lines if re.search(r"^error|panicked|Error\b|Traceback", x)]
            line = errors[-1] if errors else lines[-1]
            return line if len(line) <= 200 else line[:197] + "..."
    return None


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__.strip().splitlines()[2].strip())
    logs = Path(argv[0])
    details = "--details" in argv
    markdown = None
    if "--markdown" in argv:
        i = argv.index("--markdown")
        markdown = argv[i + 1] if i + 1 < len(argv) else None

    conf = settings(logs)
    status = statuses(logs)
    gs = [int(g) for g in conf.get("g", "").split() if g.isdigit()]
    if not gs:
        gs = sorted(
            int(p.stem[3:]) for p in logs.glob("w-g*.json") if p.stem[3:].isdigit()
        )
    runs = {g: last_json(logs / f"w-g{g}.json") for g in gs}
    hf = {}
    for rec in json_lines(logs / "hf.jsonl"):
        if isinstance(rec.get("g"), int):
            hf[rec["g"]] = rec
    tune = last_json(logs / "tune.json")
    suite_text = read(logs / "kernels-test.log")
    suite, per_adapter = suite_counts(suite_text)
    table = bench_table(read(logs / "kernels-bench.log"))

    out = []
    if details:
        if suite_text:
            out.append(f"### kernel suite (last {SUITE_TAIL} lines of kernels-test.log)")
            out.append("```")
            out.extend(suite_text.rstrip().splitlines()[-SUITE_TAIL:])
            out.append("```")
        for p in sorted(logs.glob("profile-g*.txt")):
            text = (read(p) or "").rstrip()
            if text:
                out.append(f"### {p.name}")
                out.append("```")
                out.extend(text.splitlines()[:PROFILE_LINES])
                out.append("```")
        out.append("")

    rounds = conf.get("rounds", "?")
    out.append(
        f"### sprout vs transformers: 1 prompt of {conf.get('prompt_tokens', '?')} tokens "
        f"x G samples of {conf.get('max_tokens', '?')} tokens, {conf.get('model', '?')} "
        f"(random weights; sprout {conf.get('weight_format', '?')}, transformers bf16)"
    )
    out.append("")
    out.append(
        f"| G | sprout tok/s (median of {rounds}) | sprout rounds tok/s | ms/step "
        "| dispatches/step | encode µs/dispatch | transformers bf16 tok/s (median) "
        "| sprout/transformers |"
    )
    out.append("|---:|---:|---|---:|---:|---:|---:|---:|")
    for g in gs:
        run = runs.get(g) or {}
        s = (run.get("modes") or {}).get("sprout") or {}
        per_round = [x for x in s.get("rounds_tokens_per_s") or [] if isinstance(x, (int, float))]
        # The median round's (as `sprout bench` picks it, so that it goes with wall_s).
        tps = s.get("generated_tokens_per_s")
        if tps is None and per_round:
            tps = statistics.median(per_round)
        steps, wall = s.get("steps"), s.get("wall_s")
        ms_step = 1e3 * wall / steps if steps and wall else None
        dps = s.get("dispatches_per_step")
        enc = s.get("encode_us_per_dispatch")
        h = hf.get(g) or {}
        htps = h.get("tokens_per_s_median")
        ratio = f"{tps / htps:.2f}x" if tps and htps else "-"
        if not s:
            st = status.get(f"w-g{g}")
            tps_cell = f"- ({st[0]})" if st else "-"
        else:
            tps_cell = fmt(tps)
        out.append(
            f"| {g} | {tps_cell} | {' / '.join(fmt(x, 0) for x in per_round) or '-'} "
            f"| {fmt(ms_step, 2)} | {fmt(dps, 0) if dps is not None else '-'} "
            f"| {fmt(enc, 2) if enc is not None else '-'} | {fmt(htps)} | {ratio} |"
        )
    out.append("")
    out.append(f"- adapter: {adapter_line(logs, runs)}")
    out.append(f"- tune file: {tuning_line(runs, tune, status.get('tune'))}")
    out.append(f"- tune sweep: {sweep_line(tune)}")
    st = status.get("kernels-test")
    suite_line = suite or "-"
    if st:
        suite_line += f" [{st[0]}" + (f", exit {st[1]}" if st[0] == "failed" else "") + f", {st[2]} s]"
    if per_adapter:
        suite_line += "; " + "; ".join(per_adapter)
    out.append(f"- kernel suite: {suite_line}")
    h = next(iter(hf.values()), None)
    if h:
        out.append(
            f"- transformers {h.get('transformers')}, torch {h.get('torch')}, "
            f"{h.get('device')}, {h.get('dtype')}"
        )
    else:
        st = status.get("transformers")
        out.append(f"- transformers: {st[0] + ' ' + st[3] if st else 'not run'}")
    preempted = [
        f"G={g}: {((runs[g] or {}).get('modes') or {}).get('sprout', {}).get('preemptions')}"
        for g in gs
        if runs.get(g)
        and (((runs[g].get("modes") or {}).get("sprout") or {}).get("preemptions") or 0) > 0
    ]
    if preempted:
        out.append(f"- preemptions (KV pool too small): {', '.join(preempted)}")
    parts = ", ".join(
        f"{name} {r[0]}" + (f" (exit {r[1]})" if r[0] == "failed" else "") + (
            f" {r[2]}s" if r[0] in ("ok", "failed", "timeout") else ""
        )
        for name, r in status.items()
    )
    out.append(f"- parts: {parts or '-'}")
    for name, r in status.items():
        if r[0] in ("failed", "timeout"):
            why = last_line(logs, name)
            out.append(f"- {name} {r[0]}" + (f": {why}" if why else ""))
    sel = bench_selected(table)
    st = status.get("kernels-bench")
    if sel:
        out.append("- kernel benches (copy/kernel_vec4 and matmul at m <= 8):")
        out.append("")
        out.append("```")
        out.extend(sel)
        out.append("```")
    else:
        out.append(f"- kernel benches: {'no summary table (' + st[0] + ')' if st else 'not run'}")

    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if markdown:
        Path(markdown).write_text(text)


if __name__ == "__main__":
    main(sys.argv[1:])
