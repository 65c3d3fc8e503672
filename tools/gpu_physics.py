#!/usr/bin/env python3
"""Kernel physics of one GPU, measured through the kernels the training frameworks run (PyTorch's
cuBLAS/cuBLASLt GEMMs, FP8 _scaled_mm, grouped GEMMs, FlashAttention-2 and cuDNN attention, fused
AdamW), for tools/gpu_check.sh. The C++ `calibrate --device cuda` measures Parallax's own kernels;
this measures what Megatron, NeMo and torchtitan call, which is what the public runs ran.

  gpu_physics.py OUT.json [--seconds S] [--sustained-seconds T]

Sections, each bounded by what is left of S (a section that errs records its error and the next
runs): gemm_bf16 and gemm_fp8 (M, N, K in 64..16384), grouped_gemm (tokens per expert 8..512),
attention (causal, 1k..128k tokens, head dims 64 and 128, forward and backward, flash and cuDNN),
memory-bound kernels, launch gap (eager against CUDA-graph replay), sustained (T seconds of
8192^3 bf16 GEMMs: rate, SM clock, power and temperature per second).

Timing protocol: one warm-up call, then batches of back-to-back calls long enough (>= 2 ms) that
launch overhead hides behind the GPU, timed with CUDA events; the median batch over calls is the
figure. Inputs are random (never zeros: tensor cores draw less power on zeros). Attention FLOPs use
the FlashAttention benchmarks' causal convention: forward 2 b s^2 h d (half of the dense 4 b s^2 h d),
backward 2.5 x forward.
"""
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

DIMS = [64, 256, 1024, 4096, 16384]
T0 = time.time()
DEADLINE = [0.0]


def left():
    return DEADLINE[0] - time.time()


def sync():
    torch.cuda.synchronize()


def bench(fn, min_batch_s=0.002, batches=5):
    """Median seconds per call of fn (see the protocol above)."""
    fn()
    sync()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    one = max(a.elapsed_time(b) * 1e-3, 1e-7)
    reps = max(1, min(1000, math.ceil(min_batch_s / one)))
    if one > 0.05:
        batches = 3
    times = []
    for _ in range(batches):
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3 / reps)
    return statistics.median(times)


def grid_shapes(out):
    """Every (M, N, K) of DIMS while time is left (marking the output truncated when it runs out)."""
    for m in DIMS:
        for n in DIMS:
            for k in DIMS:
                if left() < 5:
                    out["truncated"] = True
                    return
                yield m, n, k


def gemm_bf16(out):
    rows = []
    for m, n, k in grid_shapes(out):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        s = bench(lambda: torch.matmul(x, w.t()))
        rows.append({"m": m, "n": n, "k": k, "s": s, "tflops": 2.0 * m * n * k / s / 1e12})
    return rows


def gemm_fp8(out):
    rows = []
    fp8 = torch.float8_e4m3fn
    one = torch.tensor(1.0, device="cuda")
    for m, n, k in grid_shapes(out):
        x = torch.randn(m, k, device="cuda").to(fp8)
        w = torch.randn(n, k, device="cuda").to(fp8)
        s = bench(lambda: torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        row = {"m": m, "n": n, "k": k, "s": s, "tflops": 2.0 * m * n * k / s / 1e12, "scaling": "tensorwise"}
        rows.append(row)
        if m == n == k and m >= 1024:  # rowwise scales (one per row of x, one per column of w^T)
            sa = torch.rand(m, 1, device="cuda") + 0.5
            sb = torch.rand(1, n, device="cuda") + 0.5
            try:
                s = bench(lambda: torch._scaled_mm(x, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
                rows.append({"m": m, "n": n, "k": k, "s": s, "tflops": 2.0 * m * n * k / s / 1e12,
                             "scaling": "rowwise"})
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                out.setdefault("errors", []).append("rowwise %d: %s" % (m, str(e)[:200]))
        # The cast a current-scaling recipe adds before each GEMM: amax, then scale and cast.
        if m == n == k and m >= 1024:
            xb = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            s = bench(lambda: (xb * (448.0 / xb.abs().amax())).to(fp8))
            rows.append({"m": m, "n": 0, "k": k, "s": s, "what": "amax+scale+cast of x (eager)",
                         "gbps": (2.0 * m * k + m * k) / s / 1e9})
    return rows


def grouped_gemm(out):
    """E local experts of one MoE layer, each a GEMM (t, h) x (h, f) at t tokens per expert."""
    rows = []
    shapes = [("deepseek-v3 up/gate", 8, 7168, 4096), ("deepseek-v3 down", 8, 2048, 7168),
              ("mixtral up/gate", 2, 4096, 28672), ("qwen3-30b-a3b up/gate", 16, 2048, 1536)]
    has_grouped = hasattr(torch, "_grouped_mm")
    for name, e, h, f in shapes:
        w = torch.randn(e, f, h, device="cuda", dtype=torch.bfloat16)
        big = torch.randn(e * 4096, h, device="cuda", dtype=torch.bfloat16)
        dense = bench(lambda: torch.matmul(big, w[0].t()))
        dense_tflops = 2.0 * e * 4096 * h * f / dense / 1e12
        for t in [8, 16, 32, 64, 128, 256, 512, 1024, 4096]:
            if left() < 5:
                out["truncated"] = True
                return rows
            x = torch.randn(e * t, h, device="cuda", dtype=torch.bfloat16)
            flops = 2.0 * e * t * h * f
            row = {"shape": name, "experts": e, "h": h, "f": f, "tokens_per_expert": t,
                   "dense_large_m_tflops": dense_tflops}
            xs = x.view(e, t, h)
            row["loop_tflops"] = flops / bench(lambda: [torch.matmul(xs[i], w[i].t()) for i in range(e)]) / 1e12
            row["bmm_tflops"] = flops / bench(lambda: torch.bmm(xs, w.transpose(1, 2))) / 1e12
            if has_grouped:
                offs = torch.arange(1, e + 1, device="cuda", dtype=torch.int32) * t
                try:
                    row["grouped_mm_tflops"] = flops / bench(lambda: torch._grouped_mm(x, w.transpose(1, 2), offs=offs)) / 1e12
                except Exception as ex:  # noqa: BLE001
                    row["grouped_mm_error"] = str(ex)[:160]
            rows.append(row)
    return rows


def attention(out):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    backends = [("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    for d in (128, 64):
        h = 2048 // d
        for s in [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]:
            b = max(1, 16384 // s)
            for name, backend in backends:
                if left() < 8:
                    out["truncated"] = True
                    return rows
                q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
                fwd_flops = 2.0 * b * s * s * h * d
                row = {"kernel": name, "head_dim": d, "seq_len": s, "batch": b, "heads": h}
                try:
                    with sdpa_kernel(backend):
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        g = torch.randn_like(o)
                        tf = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), batches=3)

                        def fwd_bwd():
                            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                            torch.autograd.grad(y, (q, k, v), g)
                        tfb = bench(fwd_bwd, batches=3)
                    row.update({"fwd_s": tf, "bwd_s": max(tfb - tf, 1e-9), "fwd_tflops": fwd_flops / tf / 1e12,
                                "bwd_tflops": 2.5 * fwd_flops / max(tfb - tf, 1e-9) / 1e12,
                                "fwd_bwd_tflops": 3.5 * fwd_flops / tfb / 1e12})
                except Exception as ex:  # noqa: BLE001
                    row["error"] = str(ex)[:200]
                rows.append(row)
                del q, k, v
    return rows


def memory_kernels(out):
    """Bytes read plus written per second by the step's memory-bound kernels (bf16 activations)."""
    rows = []
    n, c = 16384, 4096
    x = torch.randn(n, c, device="cuda", dtype=torch.bfloat16)
    wt = torch.randn(c, device="cuda", dtype=torch.bfloat16)
    gate = torch.randn(n, c, device="cuda", dtype=torch.bfloat16)
    elems = n * c

    def add(name, fn, bytes_moved):
        if left() < 3:
            out["truncated"] = True
            return
        s = bench(fn)
        rows.append({"kernel": name, "s": s, "bytes": bytes_moved, "gbps": bytes_moved / s / 1e9})

    add("copy", lambda: x.clone(), 4 * elems)
    add("rms_norm", lambda: F.rms_norm(x, (c,), wt), 4 * elems)
    add("layer_norm", lambda: F.layer_norm(x, (c,), wt), 4 * elems)
    add("gelu", lambda: F.gelu(x, approximate="tanh"), 4 * elems)
    add("swiglu (silu(a)*b, eager)", lambda: F.silu(x) * gate, 6 * elems + 4 * elems)
    cos = torch.randn(n, c // 2, device="cuda", dtype=torch.bfloat16)
    sin = torch.randn(n, c // 2, device="cuda", dtype=torch.bfloat16)

    def rope():
        x1, x2 = x[:, : c // 2], x[:, c // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    add("rotary (eager, 6 kernels)", rope, 4 * elems + 2 * elems)
    vocab, tok = 128256, 8192
    logits = torch.randn(tok, vocab, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, vocab, (tok,), device="cuda")
    add("cross_entropy fwd (bf16 logits, vocab 128256)", lambda: F.cross_entropy(logits.float(), target),
        2 * tok * vocab + 8 * tok * vocab)

    def ce_fwd_bwd():
        loss = F.cross_entropy(logits.float(), target)
        torch.autograd.grad(loss, logits)
    add("cross_entropy fwd+bwd", ce_fwd_bwd, 4 * tok * vocab + 16 * tok * vocab)
    p = torch.nn.Parameter(torch.randn(256 << 20, device="cuda"))
    p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=True)
    opt.step()
    add("adamw fused (fp32 p, g, m, v)", lambda: opt.step(), 28 * p.numel())
    return rows


def launch_gap(out):
    """Per-kernel time of 2,000 one-element adds: eager (host launch bound) and replayed as a CUDA graph."""
    x = torch.zeros(1, device="cuda")
    count = 2000

    def many():
        for _ in range(count):
            x.add_(1.0)
    eager = bench(many, batches=5) / count
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        many()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        many()
    replay = bench(graph.replay, batches=5) / count
    return {"kernels": count, "eager_us_per_kernel": eager * 1e6, "graph_us_per_kernel": replay * 1e6,
            "what": "torch eager x.add_(1) on one element: host launch and dispatch bound; graph replay: the GPU's own gap"}


def nvml_sample():
    r = {}
    for key, fn in (("sm_clock_mhz", torch.cuda.clock_rate), ("power_w", torch.cuda.power_draw),
                    ("temperature_c", torch.cuda.temperature)):
        try:
            v = fn()
            r[key] = v / 1000.0 if key == "power_w" else v
        except Exception:  # noqa: BLE001 - NVML may be missing
            pass
    return r


def sustained(seconds):
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * n ** 3
    windows = []
    start = time.time()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while time.time() - start < seconds:
        e0.record()
        for _ in range(50):
            torch.matmul(a, b, out=c)
        e1.record()
        e1.synchronize()
        s = e0.elapsed_time(e1) * 1e-3
        w = {"t_s": round(time.time() - start, 2), "tflops": 50 * flops / s / 1e12}
        w.update(nvml_sample())
        windows.append(w)
    first = [w["tflops"] for w in windows if w["t_s"] <= 5]
    last = [w["tflops"] for w in windows if w["t_s"] >= windows[-1]["t_s"] - 5]
    return {"seconds": seconds, "shape": [n, n, n], "windows": windows,
            "first_5s_tflops": statistics.median(first) if first else None,
            "last_5s_tflops": statistics.median(last) if last else None}


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    path = args[0]
    seconds = float(args[args.index("--seconds") + 1]) if "--seconds" in args else 150.0
    sust = float(args[args.index("--sustained-seconds") + 1]) if "--sustained-seconds" in args else 30.0
    DEADLINE[0] = T0 + seconds - sust
    if not torch.cuda.is_available():
        sys.exit("gpu_physics: no CUDA device")
    p = torch.cuda.get_device_properties(0)
    out = {"device": p.name, "sm_count": p.multi_processor_count, "memory_bytes": p.total_memory,
           "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "date": time.strftime("%Y-%m-%d"), "protocol": __doc__.split("Timing protocol: ")[1].strip()}
    torch.backends.cuda.matmul.allow_tf32 = False
    # The cheap, decisive sections first: a run cut short still has them.
    plan = [("launch_gap", launch_gap), ("memory_kernels", memory_kernels), ("attention", attention),
            ("grouped_gemm", grouped_gemm), ("gemm_bf16", gemm_bf16), ("gemm_fp8", gemm_fp8)]
    for name, fn in plan:
        t = time.time()
        try:
            out[name] = fn(out)
        except Exception as ex:  # noqa: BLE001 - one section's failure must not lose the others
            out.setdefault("errors", []).append("%s: %s" % (name, str(ex)[:300]))
        out.setdefault("section_seconds", {})[name] = round(time.time() - t, 1)
        torch.cuda.empty_cache()
        print("gpu_physics: %s done in %.1f s" % (name, time.time() - t), flush=True)
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
    if sust > 0:
        try:
            out["sustained"] = sustained(sust)
        except Exception as ex:  # noqa: BLE001
            out.setdefault("errors", []).append("sustained: %s" % str(ex)[:300])
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("gpu_physics: wrote", path, "in %.0f s" % (time.time() - T0))


if __name__ == "__main__":
    main()
