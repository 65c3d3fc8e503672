#!/usr/bin/env python3
"""Helpers of tools/gpu_check.sh (Python's standard library only: the GPU machine has nothing else).

  gpu_summary.py free-comm-cluster CLUSTER OUT   a copy of CLUSTER (path or bundled name) whose links
                                                 are free: the simulator then predicts compute only
  gpu_summary.py report OUT                      the Markdown summary of a gpu_check run in OUT

Every figure is read from the files the run wrote; a missing file is reported as missing, never
filled in. Errors are relative: predicted / measured - 1.
"""
import json
import os
import statistics
import sys

GIB = 1024.0 ** 3


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_json_line(path):
    """The JSON object a tool printed (train and simulate print one), or None."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    start = text.find("{")
    while start != -1:
        try:
            return json.loads(text[start:])
        except ValueError:
            start = text.find("{", start + 1)
    return None


def free_comm_cluster(name, out):
    path = name if os.path.exists(name) else os.path.join("clusters", name + ".json")
    c = load_json(path)
    if c is None:
        sys.exit("gpu_summary: cannot read cluster " + path)
    for section, bw in (("node", "busbw_gbps"), ("network", "bw_per_gpu_gbps")):
        c[section][bw] = 1e6
        c[section]["latency_us"] = 0.0
        c[section]["source"] = "links made free (1e6 GB/s, no latency) to predict compute alone"
    c["name"] = c.get("name", "cluster") + "-free-comm"
    with open(out, "w") as f:
        json.dump(c, f, indent=2)


def err(predicted, measured):
    return "%+.1f%%" % (100.0 * (predicted / measured - 1.0)) if predicted and measured else "n/a"


def op_medians(trace, pid):
    """Median duration (s) of the F and B events of one trace process."""
    out = {}
    for kind in ("F", "B"):
        d = [e["dur"] * 1e-6 for e in (trace or {}).get("traceEvents", [])
             if e.get("ph") == "X" and e.get("pid") == pid and e.get("name", "").startswith(kind + " ")]
        out[kind] = statistics.median(d) if d else None
    return out


def tests_section(out):
    lines = ["## Tests", "", "| binary | tests | failures | skipped |", "|---|---:|---:|---:|"]
    for name in ("kernels_test", "runtime_test"):
        j = load_json(os.path.join(out, name + ".json"))
        if j is None:
            lines.append("| %s | missing | | |" % name)
            continue
        cases = [t for s in j.get("testsuites", []) for t in s.get("testsuite", [])]
        failed = sum(1 for t in cases if t.get("failures"))
        skipped = sum(1 for t in cases if t.get("result") == "SKIPPED")
        lines.append("| %s | %d | %d | %d |" % (name, len(cases), failed, skipped))
    return lines


def bench_section(out):
    lines = ["## Kernels (Google Benchmark, CUDA events)", "", "| benchmark | time | rate |", "|---|---:|---:|"]
    j = load_json(os.path.join(out, "bench.json"))
    for b in (j or {}).get("benchmarks", []):
        if b.get("error_occurred"):
            lines.append("| %s | skipped: %s | |" % (b["name"], b.get("error_message", "")))
            continue
        rate = ("%.1f TFLOP/s" % (b["FLOP/s"] / 1e12)) if "FLOP/s" in b else \
               ("%.0f GB/s" % (b["bytes/s"] / 1e9)) if "bytes/s" in b else ""
        lines.append("| %s | %.1f %s | %s |" % (b["name"], b["real_time"], b.get("time_unit", ""), rate))
    if j is None:
        lines.append("| bench.json | missing | |")
    return lines


def training_section(out):
    t = last_json_line(os.path.join(out, "train_1.3b.txt"))
    sim = last_json_line(os.path.join(out, "simulate_1.3b.txt"))
    lines = ["## GPT 1.3B on one GPU (bf16, s 2048, 4 x 8 sequences per step)", ""]
    if t is None:
        return lines + ["train: no result (see train_1.3b.txt)"]
    lines += ["losses %s" % ", ".join("%.4f" % x for x in t["losses"]),
              "", "tokens/s %.0f, model TFLOP/s %.1f, MFU %.1f%% of 989.4 TFLOP/s (%.1f%% of the 790 measured ceiling)"
              % (t["tokens_per_s"], t["model_tflops_per_gpu"], 100 * t.get("mfu", 0),
                 100 * t["model_tflops_per_gpu"] / 790.0),
              "", "MFU counts model FLOPs: 6 x parameters-in-matmuls per token + attention's QK^T and AV over the",
              "full s x s square (not halved for causality), the logits, no recompute (DESIGN.md).", ""]
    if sim is None:
        return lines + ["simulate: no result (see simulate_1.3b.txt)"]
    mem = sim.get("memory_bytes", {})
    allocated = sum(mem.get(k, 0) for k in ("weights", "gradients", "optimizer", "activations", "buffers"))
    lines += ["| | predicted | measured | error |", "|---|---:|---:|---:|",
              "| step time s | %.4f | %.4f | %s |" % (sim["step_time_s"], t["step_time_s"], err(sim["step_time_s"], t["step_time_s"])),
              "| allocated GiB (states + activations + buffers) | %.2f | %.2f | %s |"
              % (allocated / GIB, t["peak_memory_bytes"] / GIB, err(allocated, t["peak_memory_bytes"])),
              "| peak GiB incl. margin and reserve | %.2f | | |" % (sim["peak_memory_bytes"] / GIB)]
    return lines


def emulation_section(out):
    sim = last_json_line(os.path.join(out, "simulate_13b.txt"))
    predicted = load_json(os.path.join(out, "predicted-13b.json"))
    lines = ["## Rank emulation: Llama-2-13B, TP 8 x PP 4 x DP 2, ZeRO-1, 16 micro-batches of 1 x 4096", "",
             "| rank (stage) | op | predicted ms | measured ms | error |", "|---|---|---:|---:|---:|"]
    for rank, stage in ((0, 0), (48, 3)):
        t = last_json_line(os.path.join(out, "emulate_13b_r%d.txt" % rank))
        measured = load_json(os.path.join(out, "emulated-13b-r%d.json" % rank))
        if t is None or measured is None:
            lines.append("| %d (%d) | no result | | | |" % (rank, stage))
            continue
        p, m = op_medians(predicted, stage), op_medians(measured, stage)
        for kind in ("F", "B"):
            lines.append("| %d (%d) | %s median | %s | %s | %s |" % (
                rank, stage, kind, "%.2f" % (1e3 * p[kind]) if p[kind] else "n/a",
                "%.2f" % (1e3 * m[kind]) if m[kind] else "n/a", err(p[kind], m[kind])))
        if sim is not None:
            mem = sim["stages"][stage]["memory_bytes"]
            allocated = sum(mem[k] for k in ("weights", "gradients", "optimizer", "activations", "buffers"))
            lines.append("| %d (%d) | allocated GiB | %.2f | %.2f | %s |" % (
                rank, stage, allocated / GIB, t["peak_memory_bytes"] / GIB, err(allocated, t["peak_memory_bytes"])))
    return lines


def report(out):
    device = open(os.path.join(out, "device.txt")).read().strip() if os.path.exists(os.path.join(out, "device.txt")) else "?"
    lines = ["# Parallax GPU check", "", "device: " + device, ""]
    for section in (tests_section, bench_section, training_section, emulation_section):
        lines += section(out) + [""]
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "free-comm-cluster":
        free_comm_cluster(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        report(sys.argv[2])
    else:
        sys.exit(__doc__)
