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


def last_json_line(path, key):
    """The JSON object holding `key` that a tool printed among other lines, or None."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = decoder.raw_decode(text, start)
            if isinstance(obj, dict) and key in obj:
                return obj
        except ValueError:
            pass
        start = text.find("{", start + 1)
    return None


def num(x, fmt):
    """x formatted, or n/a when the run wrote no finite number (nlohmann writes NaN as null)."""
    return fmt % x if isinstance(x, (int, float)) and x == x and abs(x) != float("inf") else "n/a"


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


def times(x, k):
    return x * k if isinstance(x, (int, float)) else None


def rel(predicted, measured):
    ok = all(isinstance(x, (int, float)) and x == x and x != 0 for x in (predicted, measured))
    return predicted / measured - 1.0 if ok else None


def err(predicted, measured):
    return num(None if rel(predicted, measured) is None else 100.0 * rel(predicted, measured), "%+.1f%%")


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


def allocated_bytes(mem):
    return sum(mem.get(k, 0) for k in ("weights", "gradients", "optimizer", "activations", "buffers"))


def verdict(error, bound):
    if error is None:
        return "n/a"
    return "%+.1f%% (%s, bound %.0f%%)" % (100 * error, "PASS" if abs(error) <= bound else "FAIL", 100 * bound)


def training_section(out):
    t = last_json_line(os.path.join(out, "train_1.3b.txt"), "step_time_s")
    sim = last_json_line(os.path.join(out, "simulate_1.3b.txt"), "step_time_s")
    lines = ["## GPT 1.3B on one GPU (bf16, s 2048, 4 x 8 sequences per step)", ""]
    if t is None:
        return lines + ["train: no result (see train_1.3b.txt)"]
    tflops = t.get("model_tflops_per_gpu")
    lines += ["losses %s" % ", ".join(num(x, "%.4f") for x in t.get("losses", [])),
              "", "tokens/s %s, model TFLOP/s %s, MFU %s of 989.4 TFLOP/s (%s of the 790 measured ceiling)%s"
              % (num(t.get("tokens_per_s"), "%.0f"), num(tflops, "%.1f"), num(times(t.get("mfu"), 100), "%.1f%%"),
                 num(times(tflops, 100 / 790.0), "%.1f%%"),
                 " [emulated: NCCL did not start]" if "emulated_rank" in t else ""),
              "", "MFU counts model FLOPs: 6 x parameters-in-matmuls per token + attention's QK^T and AV over the",
              "full s x s square (not halved for causality), the logits, no recompute (DESIGN.md).", ""]
    if sim is None:
        return lines + ["simulate: no result (see simulate_1.3b.txt)"]
    allocated = allocated_bytes(sim.get("memory_bytes", {}))
    measured_mem = t.get("peak_memory_bytes")
    lines += ["cluster: %s" % sim.get("cluster", "?"), "",
              "| | predicted | measured | error |", "|---|---:|---:|---:|",
              "| step time s | %s | %s | %s |" % (num(sim.get("step_time_s"), "%.4f"), num(t.get("step_time_s"), "%.4f"),
                                               err(sim.get("step_time_s"), t.get("step_time_s"))),
              "| allocated GiB (states + activations + buffers) | %s | %s | %s |"
              % (num(allocated / GIB, "%.2f"), num(times(measured_mem, 1 / GIB), "%.2f"), err(allocated, measured_mem)),
              "| peak GiB incl. margin and reserve | %s | | |" % num(times(sim.get("peak_memory_bytes"), 1 / GIB), "%.2f")]
    VERDICT["1.3B MFU"] = num(times(t.get("mfu"), 100), "%.1f%%") + " (target >= 50%)"
    VERDICT["1.3B step time error"] = verdict(rel(sim.get("step_time_s"), t.get("step_time_s")), 0.05)
    VERDICT["1.3B memory error"] = verdict(rel(allocated, measured_mem), 0.03)
    return lines


def emulation_section(out):
    sim = last_json_line(os.path.join(out, "simulate_13b.txt"), "stages")
    predicted = load_json(os.path.join(out, "predicted-13b.json"))
    lines = ["## Rank emulation: Llama-2-13B, TP 8 x PP 4 x DP 2, ZeRO-1, 16 micro-batches of 1 x 4096", "",
             "| rank (stage) | op | predicted ms | measured ms | error |", "|---|---|---:|---:|---:|"]
    for rank, stage in ((0, 0), (48, 3)):
        t = last_json_line(os.path.join(out, "emulate_13b_r%d.txt" % rank), "step_time_s")
        measured = load_json(os.path.join(out, "emulated-13b-r%d.json" % rank))
        if t is None or measured is None:
            lines.append("| %d (%d) | no result | | | |" % (rank, stage))
            continue
        p, m = op_medians(predicted, stage), op_medians(measured, stage)
        for kind in ("F", "B"):
            lines.append("| %d (%d) | %s median | %s | %s | %s |" % (
                rank, stage, kind, num(times(p[kind], 1e3), "%.2f"), num(times(m[kind], 1e3), "%.2f"),
                err(p[kind], m[kind])))
            VERDICT["13B stage %d %s error" % (stage, kind)] = err(p[kind], m[kind])
        if sim is not None:
            allocated = allocated_bytes(sim["stages"][stage]["memory_bytes"])
            measured_mem = t.get("peak_memory_bytes")
            lines.append("| %d (%d) | allocated GiB | %s | %s | %s |" % (
                rank, stage, num(allocated / GIB, "%.2f"), num(times(measured_mem, 1 / GIB), "%.2f"),
                err(allocated, measured_mem)))
    return lines


def tests_verdict(out):
    failed = skipped = total = 0
    for name in ("kernels_test", "runtime_test"):
        j = load_json(os.path.join(out, name + ".json")) or {}
        cases = [t for s in j.get("testsuites", []) for t in s.get("testsuite", [])]
        total += len(cases)
        failed += sum(1 for t in cases if t.get("failures"))
        skipped += sum(1 for t in cases if t.get("result") == "SKIPPED")
    if not total:
        return "n/a"
    return "%d passed, %d failed, %d skipped of %d" % (total - failed - skipped, failed, skipped, total)


def bench_verdict(out):
    best = {"gemm": None, "copy": None}
    for b in (load_json(os.path.join(out, "bench.json")) or {}).get("benchmarks", []):
        for kind, key, scale in (("gemm", "FLOP/s", 1e12), ("copy", "bytes/s", 1e9)):
            if kind in b.get("name", "").lower() and key in b and not b.get("error_occurred"):
                best[kind] = max(best[kind] or 0, b[key] / scale)
    VERDICT["bf16 GEMM best"] = num(best["gemm"], "%.0f TFLOP/s") + " (ceiling ~790)"
    VERDICT["device copy best"] = num(best["copy"], "%.0f GB/s") + " (ceiling ~4300)"


VERDICT = {}


def report(out):
    device = open(os.path.join(out, "device.txt")).read().strip() if os.path.exists(os.path.join(out, "device.txt")) else "?"
    lines = ["# Parallax GPU check", "", "device: " + device, ""]
    VERDICT["GPU tests"] = tests_verdict(out)
    for key in ("1.3B MFU", "1.3B step time error", "1.3B memory error"):
        VERDICT[key] = "n/a (no result)"
    for section in (tests_section, bench_section, bench_verdict, training_section, emulation_section):
        try:
            lines += (section(out) or []) + [""]
        except Exception as e:  # one broken result must not hide the others
            lines += ["%s: could not be read: %r" % (section.__name__, e), ""]
    lines += ["## Verdict", "", "| check | result |", "|---|---|"]
    lines += ["| %s | %s |" % kv for kv in VERDICT.items()]
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "free-comm-cluster":
        free_comm_cluster(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        report(sys.argv[2])
    else:
        sys.exit(__doc__)
