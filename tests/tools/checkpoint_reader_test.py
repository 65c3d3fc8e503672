#!/usr/bin/env python3
"""tools/checkpoint_reader.py reassembles any plan's checkpoint into the single-rank state dict.

A ZeRO-3 (dp 2) checkpoint of tiny-llama and a TP 2 x PP 2 checkpoint of tiny-gpt (tied embeddings:
the last stage's copy is written too) are read back. At step 0 the weights are the same for every
plan (counter-based initialization), so the reassembled state dicts must equal one rank's exactly.
After two steps the AdamW first moments (linear in the gradients) must equal one rank's to fp32
rounding (relative 1e-5, Frobenius norm) and the weights to 1e-3: a K bias has an exactly zero
gradient (softmax ignores it), and Adam turns its rounding noise into steps of the learning rate.

    checkpoint_reader_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

BIN, SOURCE = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SOURCE, "tools"))
import checkpoint_reader  # noqa: E402

WORK = tempfile.mkdtemp(prefix="ckpt-reader-")
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def train(model, plan, steps, name):
    """Trains `plan` for `steps` (0: the initial state) and returns its checkpoint directory."""
    plan = dict({"tp": 1, "pp": 1, "dp": 1, "zero": 0, "micro_batch": 1, "global_batch": 8, "seq_len": 16,
                 "schedule": "1f1b", "recompute": "none", "sequence_parallel": False, "precision": "fp32"}, **plan)
    path, out = os.path.join(WORK, name + ".json"), os.path.join(WORK, name)
    with open(path, "w") as f:
        json.dump(plan, f)
    ranks = plan["tp"] * plan["pp"] * plan["dp"]
    subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), os.path.join(BIN, "train"),
                    "--plan", path, "--model", config_path(model), "--steps", str(steps), "--checkpoint", out],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def config_path(model):
    return os.path.join(SOURCE, "tests", "data", model + ".json")


def state_dict(directory, model):
    _, tensors = checkpoint_reader.read_checkpoint(directory)
    with open(config_path(model)) as f:
        return checkpoint_reader.hf_state_dict(tensors, json.load(f))


def relative(got, ref):
    return np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)


def compare(model, plan, name, expected_keys):
    for steps in (0, 2):
        one = state_dict(train(model, {}, steps, "%s-one-%d" % (name, steps)), model)
        got = state_dict(train(model, plan, steps, "%s-%d" % (name, steps)), model)
        check(sorted(one) == sorted(got), "%s step %d: the same %d tensor names" % (name, steps, len(one)))
        for key, shape in expected_keys.items():
            check(key in got and list(got[key].shape) == shape, "%s: %s has shape %s" % (name, key, shape))
        if steps == 0:
            same = all(np.array_equal(one[k], got[k]) for k in one if k in got)
            check(same, "%s step 0: every tensor equals one rank's exactly" % name)
        else:
            worst = max(relative(got[k], one[k]) for k in one if k in got)
            check(worst <= 1e-3, "%s step 2: every tensor within 1e-3 of one rank's (worst %.1e)" % (name, worst))
            _, mine = checkpoint_reader.read_checkpoint(os.path.join(WORK, "%s-%d" % (name, steps)))
            _, ref = checkpoint_reader.read_checkpoint(os.path.join(WORK, "%s-one-%d" % (name, steps)))
            worst = max(relative(mine[k]["exp_avg"], ref[k]["exp_avg"]) for k in ref)
            check(worst <= 1e-5, "%s step 2: every AdamW first moment within 1e-5 of one rank's (worst %.1e)" % (name, worst))


compare("tiny-llama", {"dp": 2, "zero": 3}, "llama-zero3",
        {"model.embed_tokens.weight": [128, 32], "model.layers.3.self_attn.k_proj.weight": [16, 32],
         "model.layers.0.mlp.gate_proj.weight": [64, 32], "lm_head.weight": [128, 32]})
compare("tiny-gpt", {"tp": 2, "pp": 2}, "gpt-tp2-pp2",
        {"transformer.wte.weight": [128, 32], "transformer.h.0.attn.c_attn.weight": [32, 96],
         "transformer.h.3.mlp.c_proj.weight": [128, 32]})
print("checkpoint-reader: %d passed, %d failed" % (0 if failures else 1, 1 if failures else 0))
sys.exit(1 if failures else 0)
