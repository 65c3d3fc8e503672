#!/usr/bin/env python3
"""Helpers of tools/gpu_check.sh (Python's standard library only: the GPU machine has nothing else).

  gpu_summary.py free-comm-cluster CLUSTER OUT   a copy of CLUSTER (path or bundled name) whose links
                                                 are free: the simulator then predicts compute only
  gpu_summary.py merge-physics CLUSTER PHYS OUT  CLUSTER with the fa2 / cudnn attention curves that
                                                 gpu_physics.py measured (PHYS) in place of its own
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
        c[section][bw] = 1e6 if section == "node" else 100.0
        c[section]["latency_us"] = 0.0
        c[section]["source"] = ("links made free (1e6 GB/s inside a node, the fastest NIC of 100 GB/s across, no latency): "
                                "the emulated ranks' F and B ops then hold compute alone (TP runs inside a node)")
    c["name"] = c.get("name", "cluster") + "-free-comm"
    with open(out, "w") as f:
        json.dump(c, f, indent=2)


def merge_physics(cluster_path, physics_path, out):
    """The cluster with its fa2 and cudnn attention curves replaced by those gpu_physics.py measured
    (PyTorch's FlashAttention-2 and cuDNN backends on this GPU): the kernels the frameworks run."""
    c, p = load_json(cluster_path), load_json(physics_path)
    if c is None or p is None:
        sys.exit("gpu_summary: cannot read %s or %s" % (cluster_path, physics_path))
    measured = {}
    for r in p.get("attention") or []:
        if "fwd_tflops" in r:
            m = measured.setdefault((r["kernel"], r["head_dim"]), {"seq_len": [], "fwd_tflops": [], "bwd_tflops": []})
            for key in ("seq_len", "fwd_tflops", "bwd_tflops"):
                m[key].append(round(r[key], 1))
    a = c["gpu"].setdefault("attention", {"source": "", "curves": []})
    kernels = {k for k, _ in measured}
    a["curves"] = [cv for cv in a["curves"] if cv["kernel"] not in kernels] + [
        dict(kernel=k, head_dim=d, **v) for (k, d), v in sorted(measured.items())]
    a["source"] += (" %s: measured on one %s by tools/gpu_physics.py on %s (PyTorch %s, cuDNN %s; causal, bf16, "
                    "max(1, 16,384 / s) sequences of s per call, h x d = 2,048; the masked half not counted)."
                    % (" and ".join(sorted(kernels)), p.get("device"), p.get("date"), p.get("torch"), p.get("cudnn")))
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
    rc = last_json_line(os.path.join(out, "train_1.3b_rc.txt"), "step_time_s")
    rc_sim = last_json_line(os.path.join(out, "simulate_1.3b_rc.txt"), "step_time_s")
    if rc is not None and rc_sim is not None:
        lines.append("| step time s, micro-batch 4, full recompute | %s | %s | %s |" % (
            num(rc_sim.get("step_time_s"), "%.4f"), num(rc.get("step_time_s"), "%.4f"),
            err(rc_sim.get("step_time_s"), rc.get("step_time_s"))))
        VERDICT["1.3B (mb 4, full recompute) step time error"] = verdict(
            rel(rc_sim.get("step_time_s"), rc.get("step_time_s")), 0.05)
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


def calibrate_section(out):
    """What `calibrate --device cuda` measured of Parallax's own kernels (h200-calibrated.json)."""
    c = load_json(os.path.join(out, "h200-calibrated.json"))
    lines = ["## calibrate --device cuda (Parallax's kernels)", ""]
    if c is None:
        return lines + ["h200-calibrated.json: missing (see calibrate.txt)"]
    g, m = c["gpu"], c["gpu"].get("measured", {})
    su, lg = m.get("sustained") or {}, m.get("launch_gap") or {}
    lines += ["gemm_max_efficiency %s (best %s TFLOP/s x sustained/burst %s), gemm_half_dim %s, memory_efficiency %s, "
              "optimizer_efficiency %s" % (num(g.get("gemm_max_efficiency"), "%.3f"), num(m.get("best_bf16_gemm_tflops"), "%.0f"),
                                           num(m.get("sustained_over_burst"), "%.3f"), num(g.get("gemm_half_dim"), "%.0f"),
                                           num(g.get("memory_efficiency"), "%.3f"), num(g.get("optimizer_efficiency"), "%.3f")),
              "", "sustained 8192^3 GEMM: first 5 s %s, last 5 s %s TFLOP/s over %s s; per 10 s: %s" % (
                  num(su.get("first_5s_tflops"), "%.0f"), num(su.get("last_5s_tflops"), "%.0f"), num(su.get("seconds"), "%.0f"),
                  ", ".join(num(x, "%.0f") for x in su.get("per_10s_tflops", []))),
              "", "launch gap per kernel: eager %s us, CUDA graph %s us" % (
                  num(lg.get("eager_us_per_kernel"), "%.2f"), num(lg.get("graph_us_per_kernel"), "%.2f")), "",
              "| attention (parallax) | head dim | seq | fwd TFLOP/s | bwd TFLOP/s |", "|---|---:|---:|---:|---:|"]
    for cv in g.get("attention", {}).get("curves", []):
        if cv.get("kernel") == "parallax":
            for i, t in enumerate(cv["seq_len"]):
                lines.append("| parallax | %d | %d | %s | %s |" % (cv["head_dim"], t, num(cv["fwd_tflops"][i], "%.0f"),
                                                                   num(cv["bwd_tflops"][i], "%.0f")))
    VERDICT["sustained bf16 GEMM (parallax)"] = "%s -> %s TFLOP/s over %s s" % (
        num(su.get("first_5s_tflops"), "%.0f"), num(su.get("last_5s_tflops"), "%.0f"), num(su.get("seconds"), "%.0f"))
    return lines


def physics_section(out):
    """The framework kernels' physics (tools/gpu_physics.py), in brief; physics.json has every row."""
    j = load_json(os.path.join(out, "physics.json"))
    if j is None:
        return ["## Framework kernels (PyTorch)", "", "physics.json: missing"]
    lines = ["## Framework kernels (PyTorch %s, CUDA %s, cuDNN %s)" % (j.get("torch"), j.get("cuda"), j.get("cudnn")), ""]
    lg = j.get("launch_gap") or {}
    lines.append("launch gap per kernel: eager %s us, CUDA graph %s us" % (
        num(lg.get("eager_us_per_kernel"), "%.2f"), num(lg.get("graph_us_per_kernel"), "%.2f")))
    for key in ("gemm_bf16", "gemm_fp8"):
        rows = [r for r in j.get(key) or [] if "tflops" in r]
        if rows:
            best = max(rows, key=lambda r: r["tflops"])
            VERDICT[key + " best"] = "%.0f TFLOP/s at %dx%dx%d" % (best["tflops"], best["m"], best["n"], best["k"])
    lines += ["", "| kernel | GB/s |", "|---|---:|"]
    lines += ["| %s | %s |" % (r["kernel"], num(r.get("gbps"), "%.0f")) for r in j.get("memory_kernels") or []]
    lines += ["", "| attention kernel | head dim | seq | fwd TFLOP/s | bwd TFLOP/s |", "|---|---:|---:|---:|---:|"]
    lines += ["| %s | %d | %d | %s | %s |" % (r["kernel"], r["head_dim"], r["seq_len"], num(r.get("fwd_tflops"), "%.0f"),
                                              num(r.get("bwd_tflops"), "%.0f") if "error" not in r else r["error"][:60])
              for r in j.get("attention") or []]
    lines += ["", "| grouped GEMM | tokens/expert | loop | bmm | _grouped_mm | dense large-M |", "|---|---:|---:|---:|---:|---:|"]
    lines += ["| %s | %d | %s | %s | %s | %s |" % (r["shape"], r["tokens_per_expert"], num(r.get("loop_tflops"), "%.0f"),
                                                   num(r.get("bmm_tflops"), "%.0f"), num(r.get("grouped_mm_tflops"), "%.0f"),
                                                   num(r.get("dense_large_m_tflops"), "%.0f"))
              for r in j.get("grouped_gemm") or []]
    su = j.get("sustained")
    if su:
        VERDICT["sustained bf16 GEMM (PyTorch)"] = "%s -> %s TFLOP/s over %s s" % (
            num(su.get("first_5s_tflops"), "%.0f"), num(su.get("last_5s_tflops"), "%.0f"), su.get("seconds", "?"))
    lines += ["", "errors: %s" % "; ".join(j.get("errors", [])) if j.get("errors") else ""]
    return lines


VERDICT = {}


def report(out):
    device = open(os.path.join(out, "device.txt")).read().strip() if os.path.exists(os.path.join(out, "device.txt")) else "?"
    lines = ["# Parallax GPU check", "", "device: " + device, ""]
    VERDICT["GPU tests"] = tests_verdict(out)
    for key in ("1.3B MFU", "1.3B step time error", "1.3B memory error"):
        VERDICT[key] = "n/a (no result)"
    for section in (tests_section, bench_section, bench_verdict, training_section, calibrate_section, physics_section,
                    emulation_section):
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
    elif len(sys.argv) == 5 and sys.argv[1] == "merge-physics":
        merge_physics(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        report(sys.argv[2])
    else:
        sys.exit(__doc__)
