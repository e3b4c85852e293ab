"""Re-scoring the soak's samples (serve_soak.py) with `sprout score`: every token must
have been drawn by the weights it names.

Each sample is cut into segments of one weights version. A segment is scored with the
prompt and the sample's earlier tokens as its context, under the checkpoint (and LoRA
adapter) that its version names, and the server's `sprout.logprobs` (the model's
log-probs at temperature 1) must equal `sprout score`'s `scored_logprobs` bit for bit.
Base-model segments are scored under the other checkpoint too: there they must differ,
or the check could not tell the two apart.

Standard library only.
"""

import json
import os
import struct
import subprocess


def f32_bits(x):
    return struct.pack("<f", x)


def bitwise_equal(a, b):
    return len(a) == len(b) and all(f32_bits(x) == f32_bits(y) for x, y in zip(a, b))


def segments(sample):
    """(version, start, end) of each run of one version in the sample's tokens."""
    versions = sample["versions"]
    out, start = [], 0
    for i in range(1, len(versions) + 1):
        if i == len(versions) or versions[i] != versions[start]:
            out.append((versions[start], start, i))
            start = i
    return out


def score(sprout, flags, model, lora, records, workdir, tag):
    """`sprout score` of `records` ({prompt_token_ids, token_ids}) under `model` (and
    `lora`); their scored_logprobs, in order."""
    path_in = os.path.join(workdir, "score_%s_in.jsonl" % tag)
    path_out = os.path.join(workdir, "score_%s_out.jsonl" % tag)
    with open(path_in, "w") as f:
        for r in records:
            f.write(json.dumps({"prompt_token_ids": r["prompt_token_ids"],
                                "token_ids": r["token_ids"]}) + "\n")
    command = [sprout, "score", "--model", model, "--in", path_in, "--out", path_out]
    command += ["--lora", lora] if lora else []
    command += list(flags)
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if done.returncode != 0:
        raise RuntimeError("%s failed (exit %d): %s" % (
            " ".join(command), done.returncode, done.stderr.decode("utf-8", "replace")[-2000:]))
    with open(path_out) as f:
        scored = [json.loads(line) for line in f if line.strip()]
    if len(scored) != len(records):
        raise RuntimeError("sprout score wrote %d records for %d" % (len(scored), len(records)))
    for r, s in zip(records, scored):
        if s.get("token_ids") != r["token_ids"]:
            raise RuntimeError("sprout score's records are not in the order given")
    return [s.get("scored_logprobs") for s in scored]


def rescore(sprout, flags, samples, checkpoints, workdir):
    """Checks `samples`; a summary with the failures listed.

    Each sample: {number, prompt_token_ids, token_ids, logprobs, versions, lora} where
    `lora` is False (base model: `versions` are weights versions, `checkpoints["weights"]`
    maps them to directories, and each segment is scored under every other directory of
    `checkpoints["all"]` too) or True (`versions` are the adapter's, and
    `checkpoints["lora"]` maps each to the {"model", "adapter"} directories it names: a
    load and a weights update both put the adapter's version one up; a sample that ran
    across an in-place load of other contents, or was sent before one, by
    `checkpoints["lora_loads"]` ({version, at}) and the sample's `sent`, is counted, not
    scored)."""
    weights = checkpoints["weights"]
    groups = {}
    failures = []
    adapter_spanning = 0
    for sample in samples:
        if sample["lora"]:
            pairs = [checkpoints["lora"].get(v) for v in set(sample["versions"])]
            missing = [v for v in set(sample["versions"]) if checkpoints["lora"].get(v) is None]
            if missing:
                failures.append("sample %d: adapter versions %s were never put in force"
                                % (sample["number"], sorted(missing)))
                continue
            # The adapter changes keys and values: a sample that ran across an in-place
            # load attends, after it, to a cache no single checkpoint gives. (The base
            # checkpoints differ only in the final norm, which no key or value sees.)
            # So does one sent before a load whose contents drew its tokens: its prompt's
            # keys and values may have been computed under the contents before (the load
            # puts the new ones in force for the requests in flight, and only tokens
            # carry a version).
            loaded_after_sent = bool(sample["versions"]) and any(
                load["at"] > sample["sent"]
                and load["version"] <= max(sample["versions"])
                for load in checkpoints.get("lora_loads", []))
            if len({p["adapter"] for p in pairs}) > 1 or loaded_after_sent:
                adapter_spanning += 1
                continue
        for version, start, end in segments(sample):
            record = {
                "number": sample["number"],
                "prompt_token_ids": sample["prompt_token_ids"] + sample["token_ids"][:start],
                "token_ids": sample["token_ids"][start:end],
                "logprobs": sample["logprobs"][start:end],
                "version": version,
            }
            if not sample["lora"]:
                if version not in weights:
                    failures.append("sample %d: weights version %s was never put in force"
                                    % (sample["number"], version))
                    continue
                named = weights[version]
                others = [d for d in checkpoints["all"] if d != named]
                groups.setdefault((named, None, "named"), []).append(record)
                for other in others:
                    groups.setdefault((other, None, "other"), []).append(record)
            else:
                pair = checkpoints["lora"][version]
                key = (pair["model"], pair["adapter"], "named")
                groups.setdefault(key, []).append(record)
    checked = {"samples": len(samples),
               "spanning_samples": sum(1 for s in samples if len(set(s["versions"])) > 1),
               "adapter_samples": sum(1 for s in samples if s["lora"]),
               "adapter_samples_across_a_load": adapter_spanning,
               "segments": 0, "tokens": 0, "mismatched_segments": 0,
               "other_checkpoint_segments": 0, "other_checkpoint_matches": 0}
    for i, ((model, lora, role), records) in enumerate(sorted(groups.items(), key=str)):
        scored = score(sprout, flags, model, lora, records, workdir, "%d_%s" % (i, role))
        for record, got in zip(records, scored):
            same = bitwise_equal(record["logprobs"], got or [])
            if role == "named":
                checked["segments"] += 1
                checked["tokens"] += len(record["token_ids"])
                if not same:
                    checked["mismatched_segments"] += 1
                    failures.append(
                        "sample %d, version %s (%d tokens) under %s%s: server %s, score %s"
                        % (record["number"], record["version"], len(record["token_ids"]),
                           model, " + " + lora if lora else "", record["logprobs"][:4],
                           (got or [])[:4]))
            else:
                checked["other_checkpoint_segments"] += 1
                if same and record["token_ids"]:
                    checked["other_checkpoint_matches"] += 1
                    failures.append("sample %d, version %s: the other checkpoint %s gives the "
                                    "same log-probs (the checkpoints do not tell apart)"
                                    % (record["number"], record["version"], model))
    checked["failures"] = failures
    return checked
