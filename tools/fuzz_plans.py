#!/usr/bin/env python3
"""Randomized differential test of the CPU runtime over the plan space.

Draws plans (TP, CP, PP, DP with and without dp_shard, EP, ZeRO 0-3, schedules and virtual stages,
uneven stages and explicit layouts, recompute (also of a share of the layers), SP, micro-batch,
precision, overlap and bucket settings) for the tiny GPT, Llama, Mixtral and Nemotron configs on at
most 4 ranks, trains each for a few steps under mpirun, and requires one of two outcomes:

  * the per-step losses equal one rank's (the same model and precision) to a relative 1e-5, and
    so do the final weights and AdamW moments (read back from the checkpoints); or
  * a refusal: exit code 2 and one line on stderr saying why.

A crash (any other exit), a hang (the time limit), a refusal of more than one line, or a loss
that differs fails the run. For a share of the plans that train, resume is checked as a property:
stop after a random step, resume from the checkpoint, and require bit-identical losses and final
weights (the checkpoint files of the stopped-and-resumed run equal the unbroken run's byte for
byte); then resume the same checkpoint onto another rank count of the plan (DP or TP changed)
and require the unbroken run's losses to 1e-5.

    tools/fuzz_plans.py BIN_DIR [--seed N] [--plans K] [--resume-share F]

The last line is 'fuzz-plans: N passed, N failed'. `make fuzz-plans SEED=N` runs it.
"""
import argparse
import collections
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint_reader  # noqa: E402

MODELS = ["tiny-gpt", "tiny-llama", "tiny-llama-bias", "tiny-mixtral", "tiny-nemotron"]
GLOBAL_BATCH, SEQ_LEN, STEPS = 8, 16, 3
TOLERANCE = 1e-5
# fp8 rounds each GEMM operand to 3 mantissa bits: an fp32 summation-order difference that moves a
# value across a rounding boundary shows in the loss at ~1e-5 after a step (tests/runtime/
# equivalence_test.cc holds FP8 plans to 1e-5 at step 1 and 1e-4 after); fp32 stays at 1e-5.
FP8_TOLERANCE = 1e-4
# The final AdamW first moments (linear in the gradients) against one rank's, relative in
# Frobenius norm: fp32 summation order moves them by ~1e-6, a wrong gradient by its own size; fp8
# by up to a few percent, where a sum lands on the other side of an E5M2 rounding boundary (2
# mantissa bits: 12-25% for that element). The weights are held to 10x that: a K bias has an
# exactly zero gradient (softmax ignores it), and Adam turns its rounding noise into steps of the
# learning rate.
STATE_TOLERANCE = {"fp32": 1e-4, "fp8": 1e-1}


def model_config(source, name):
    with open(os.path.join(source, "tests", "data", name + ".json")) as f:
        return json.load(f)


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def draw_plan(rng, cfg):
    """One plan of at most 4 ranks; often legal, sometimes not (refusals are part of the test)."""
    layers = cfg.get("num_hidden_layers", cfg.get("n_layer"))
    experts = cfg.get("num_local_experts", 0)
    while True:
        tp, cp, pp, dp = (rng.choice([1, 1, 2, 4]) for _ in range(4))
        if tp * cp * pp * dp <= 4:
            break
    precision = "fp8" if rng.random() < 0.1 else "fp32"
    if precision == "fp8":  # current scaling takes each tensor's amax: DP would scale other tensors
        dp = 1
    data = cp * dp
    plan = {"tp": tp, "cp": cp, "pp": pp, "dp": dp, "global_batch": GLOBAL_BATCH, "seq_len": SEQ_LEN,
            "zero": rng.choice([0, 0, 1, 2, 3]), "micro_batch": rng.choice([1, 1, 2, 4]),
            "recompute": rng.choice(["none", "none", "selective", "full"]),
            "sequence_parallel": tp > 1 and rng.random() < 0.5, "precision": precision}
    plan["schedule"] = rng.choice(["1f1b", "1f1b", "gpipe", "zb-h1", "interleaved"]) if pp > 1 else "1f1b"
    plan["virtual_stages"] = rng.choice([2, 2, layers // pp]) if plan["schedule"] == "interleaved" else 1
    if pp > 1 and plan["schedule"] != "interleaved" and rng.random() < 0.2 and layers > pp:
        plan["first_stage_layers"] = rng.randint(1, layers - pp + 1)
    elif pp > 1 and rng.random() < 0.2:  # an explicit layout: any split, empty chunks included
        cuts = sorted(rng.randint(0, layers) for _ in range(pp * plan["virtual_stages"] - 1))
        plan["pipeline_layout"] = [b - a for a, b in zip([0] + cuts, cuts + [layers])]
    if experts and data > 1 and rng.random() < 0.6:
        plan["ep"] = rng.choice([e for e in divisors(data) if experts % e == 0])
    if data > 1 and plan["zero"] > 0 and rng.random() < 0.2:
        plan["dp_shard"] = rng.choice(divisors(data))
    execution = {"fp8_recipe": "current", "overlap_grad_reduce": rng.random() < 0.5,
                 "overlap_p2p": rng.random() < 0.3, "cp_comm": rng.choice(["p2p", "all-gather"])}
    if rng.random() < 0.3:
        execution["dp_bucket_mib"] = 0.002  # several gradient buckets per chunk
    if plan["recompute"] == "full" and rng.random() < 0.4:
        execution["recompute_fraction"] = rng.choice([0.25, 0.5, 2 / 3])
    plan["execution"] = execution
    return plan


class Runner:
    def __init__(self, bin_dir, source, work, timeout_s):
        self.train, self.source, self.work, self.timeout_s = os.path.join(bin_dir, "train"), source, work, timeout_s
        self.count = 0

    def run(self, model, plan, args):
        """(outcome, detail): ('ok', losses) | ('refused', line) | ('crash', text) | ('hang', text)."""
        self.count += 1
        path = os.path.join(self.work, "plan-%d.json" % self.count)
        with open(path, "w") as f:
            json.dump(plan, f)
        ranks = plan["tp"] * plan["cp"] * plan["pp"] * plan["dp"]
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), self.train, "--plan", path,
               "--model", os.path.join(self.source, "tests", "data", model + ".json"), "--format", "json",
               "--watchdog-seconds", str(self.timeout_s)] + args
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s + 30)
        except subprocess.TimeoutExpired:
            subprocess.run(["pkill", "-f", path], check=False)
            return "hang", " ".join(cmd)
        if p.returncode == 2:
            lines = train_lines(p.stderr)
            if len(lines) == 1 and lines[0].startswith("train: error: "):
                return "refused", lines[0][len("train: error: "):]
            return "crash", "exit 2 without one error line: " + p.stderr[-2000:]
        if p.returncode != 0:
            return "crash", "exit %d: %s" % (p.returncode, (p.stdout + p.stderr)[-2000:])
        if "--steps" in args and args[args.index("--steps") + 1] == "0":
            return "ok", []
        try:
            return "ok", json.loads(p.stdout[p.stdout.index("{"):])["losses"]
        except (ValueError, KeyError):
            return "crash", "no losses in: " + p.stdout[-2000:]


def train_lines(stderr):
    """stderr's non-blank lines less mpirun's own notices (blocks between lines of dashes)."""
    out, inside = [], False
    for line in stderr.splitlines():
        if line.strip() and set(line.strip()) == {"-"}:
            inside = not inside
        elif line.strip() and not inside:
            out.append(line)
    return out


def features(plan):
    """The runtime mechanisms a plan exercises, for the coverage lines of the summary."""
    data, ep = plan["cp"] * plan["dp"], plan.get("ep", 1)
    tags = {"zero %d at one data rank" % plan["zero"]: plan["zero"] > 0 and data == 1,
            "zero %d with pp" % plan["zero"]: plan["zero"] >= 2 and plan["pp"] > 1,
            "ep with zero %d" % plan["zero"]: ep > 1 and plan["zero"] > 0,
            "zb-h1 (split W)": plan["schedule"] == "zb-h1",
            "interleaved": plan["schedule"] == "interleaved",
            "cp": plan["cp"] > 1, "fp8": plan["precision"] == "fp8",
            "pipeline layout": bool(plan.get("pipeline_layout")),
            "full recompute on a share of the layers": "recompute_fraction" in plan["execution"],
            "pipeline layout with an empty chunk": 0 in plan.get("pipeline_layout", [1]),
            "pipeline layout with zero %d" % plan["zero"]: bool(plan.get("pipeline_layout")) and plan["zero"] >= 2,
            "recompute share with zero %d" % plan["zero"]: "recompute_fraction" in plan["execution"] and plan["zero"] >= 2}
    return [t for t, on in tags.items() if on]


def refusal_kind(line):
    """A refusal's reason without its numbers, for the histogram."""
    return "".join("#" if c.isdigit() else c for c in line)[:110]


def differs(got, ref, tolerance):
    return len(got) != len(ref) or any(abs(g / r - 1) > tolerance for g, r in zip(got, ref))


def state_differs(dir, ref_dir, tolerance):
    """The first tensor whose final weights or first AdamW moment (linear in the gradients, so a
    wrong gradient shows even where the loss hardly moves) differs from one rank's by more than
    `tolerance` relative (Frobenius norms), as a string; "" when none does."""
    _, got = checkpoint_reader.read_checkpoint(dir)
    _, ref = checkpoint_reader.read_checkpoint(ref_dir)
    for name, r in ref.items():
        if name not in got:
            return "tensor %s is missing" % name
        for kind, limit in (("value", 10 * tolerance), ("exp_avg", tolerance)):
            scale = np.linalg.norm(r[kind])
            if scale > 0 and np.linalg.norm(got[name][kind] - r[kind]) > limit * scale:
                return "%s of %s differs by %.2g relative" % (kind, name,
                                                              np.linalg.norm(got[name][kind] - r[kind]) / scale)
    return ""


def files_of(step_dir):
    with open(os.path.join(step_dir, "manifest.json")) as f:
        return json.load(f)["checksums"]


def resharded(rng, plan):
    """The same plan on another rank count: DP or TP halved or doubled, within 4 ranks."""
    other = json.loads(json.dumps(plan))
    ranks = plan["tp"] * plan["cp"] * plan["pp"] * plan["dp"]
    options = []
    if plan["dp"] > 1:
        options.append(("dp", plan["dp"] // 2))
    if ranks * 2 <= 4:
        options.append(("dp", plan["dp"] * 2))
    if plan["tp"] > 1:
        options.append(("tp", plan["tp"] // 2))
    key, value = rng.choice(options) if options else ("dp", plan["dp"])
    other[key] = value
    if other["tp"] == 1:
        other["sequence_parallel"] = False
    other.pop("dp_shard", None)
    return other


def check_resume(rng, runner, model, plan, straight, tolerance):
    """Failures of the resume property for one plan (empty: it holds)."""
    work = tempfile.mkdtemp(dir=runner.work)
    full_dir, dir = os.path.join(work, "full"), os.path.join(work, "part")
    outcome, full = runner.run(model, plan, ["--steps", str(STEPS), "--checkpoint", full_dir])
    stop = rng.randint(1, STEPS - 1)
    first = runner.run(model, plan, ["--steps", str(stop), "--checkpoint", dir])
    if outcome != "ok" or first[0] != "ok":
        return ["checkpointing runs failed: %s" % [outcome, full, first]]
    shutil.copytree(dir, dir + "-copy")
    second = runner.run(model, plan, ["--steps", str(STEPS), "--checkpoint", dir, "--resume"])
    problems = []
    if second[0] != "ok":
        return ["the resumed run failed: %s" % [second]]
    if full != straight or first[1] + second[1] != full:
        problems.append("resume after step %d is not bit-exact: %s vs %s" % (stop, first[1] + second[1], full))
    last = "step-%08d" % STEPS
    if files_of(os.path.join(full_dir, last)) != files_of(os.path.join(dir, last)):
        problems.append("weights after resuming at step %d differ from the unbroken run's" % stop)
    other = resharded(rng, plan)
    moved = runner.run(model, other, ["--steps", str(STEPS), "--checkpoint", dir + "-copy", "--resume"])
    if moved[0] == "ok" and differs(moved[1], full[stop:], tolerance):
        problems.append("resumed onto %s: %s vs %s" % (json.dumps(other), moved[1], full[stop:]))
    elif moved[0] in ("crash", "hang"):
        problems.append("resume onto %s: %s %s" % (json.dumps(other), moved[0], moved[1]))
    shutil.rmtree(work, ignore_errors=True)
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin_dir")
    ap.add_argument("--source", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--plans", type=int, default=200)
    ap.add_argument("--resume-share", type=float, default=0.1)
    ap.add_argument("--timeout", type=int, default=60, help="seconds per run before it counts as a hang")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="fuzz-plans-")
    runner = Runner(args.bin_dir, args.source, work, args.timeout)
    configs = {m: model_config(args.source, m) for m in MODELS}
    references, refusals, reached, failures = {}, collections.Counter(), collections.Counter(), []
    trained = resumed = failed_plans = 0
    for i in range(args.plans):
        model = rng.choice(MODELS)
        plan = draw_plan(rng, configs[model])
        # fp8 rounds each GEMM operand with its own amax: one rank must see the same micro-batches.
        key = (model, plan["precision"], plan["micro_batch"] if plan["precision"] == "fp8" else GLOBAL_BATCH)
        if key not in references:
            one = dict(plan, tp=1, cp=1, pp=1, dp=1, ep=1, zero=0, micro_batch=key[2], schedule="1f1b",
                       virtual_stages=1, recompute="none", sequence_parallel=False, first_stage_layers=0, pipeline_layout=[],
                       dp_shard=0, execution={"fp8_recipe": "current"})
            ref_dir = os.path.join(work, "reference-%s-%s-%d" % key)
            references[key] = runner.run(model, one, ["--steps", str(STEPS), "--checkpoint", ref_dir]) + (ref_dir,)
            if references[key][0] not in ("ok", "refused"):
                sys.exit("fuzz-plans: the one-rank reference of %s %s (micro-batch %d) failed: %s" % (key + (references[key][1],)))
        plan_dir = os.path.join(work, "plan")
        shutil.rmtree(plan_dir, ignore_errors=True)
        outcome, detail = runner.run(model, plan, ["--steps", str(STEPS), "--checkpoint", plan_dir])
        reference_outcome, reference, ref_dir = references[key]
        what = "plan %d (%s): %s" % (i, model, json.dumps(plan, sort_keys=True))
        before = len(failures)
        tolerance = FP8_TOLERANCE if plan["precision"] == "fp8" else TOLERANCE
        if outcome == "refused":
            refusals[refusal_kind(detail)] += 1
        elif outcome != "ok":
            failures.append("%s: %s %s" % (what, outcome, detail))
        elif reference_outcome != "ok":
            failures.append("%s: trains where one rank is refused (%s)" % (what, reference))
        elif differs(detail, reference, tolerance):
            failures.append("%s: losses %s, one rank %s" % (what, detail, reference))
        elif state_differs(plan_dir, ref_dir, STATE_TOLERANCE[plan["precision"]]):
            failures.append("%s: %s" % (what, state_differs(plan_dir, ref_dir, STATE_TOLERANCE[plan["precision"]])))
        else:
            trained += 1
            reached.update(features(plan))
            if rng.random() < args.resume_share:
                resumed += 1
                reached.update("resumed: " + f for f in features(plan))
                failures += ["%s: %s" % (what, p) for p in check_resume(rng, runner, model, plan, detail, tolerance)]
        failed_plans += len(failures) > before
    shutil.rmtree(work, ignore_errors=True)
    print("seed %d: %d plans, %d trained to one rank's losses, %d refused, %d resumed" %
          (args.seed, args.plans, trained, sum(refusals.values()), resumed))
    for feature, n in sorted(reached.items()):
        print("  trained %3d x %s" % (n, feature))
    for reason, n in refusals.most_common():
        print("  refused %3d x %s" % (n, reason))
    for f in failures:
        print("FAIL " + f)
    print("fuzz-plans: %d passed, %d failed" % (args.plans - failed_plans, failed_plans))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
