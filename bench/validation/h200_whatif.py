#!/usr/bin/env python3
"""What the H200 measurements (clusters/hgx-h200-measured.json) change in the public validation.

  h200_whatif.py BUILD_DIR OUT_DIR

Prices the public runs four times, each on a copy of the bundled data whose 700 W Hopper clusters
(dgx-h100, hgx-h200: the same SMs at the same power; the 500 W grand-teton-h100 and other GPUs stay
as they are) take: nothing (baseline), the measured bf16 GEMM grid, the measured fa2 and cudnn
attention curves, or both; then fits and cross-validates the calibration on each (calibrate --runs
--cross-validate) and writes OUT_DIR/VARIANT-calibration.md, whose per-source table holds the
uncalibrated, in-sample and leave-one-source-out errors.
"""
import json, os, shutil, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOPPER_700W = ("dgx-h100", "hgx-h200")


def variant(data, measured, grid, attention):
    for name in HOPPER_700W:
        path = os.path.join(data, "clusters", name + ".json")
        c = json.load(open(path))
        g, m = c["gpu"], measured["gpu"]
        if grid:
            g["gemm_grid"] = m["gemm_grid"]
        if attention:
            kept = [cv for cv in g["attention"]["curves"] if cv["kernel"] not in ("fa2", "cudnn")]
            g["attention"]["curves"] = kept + [cv for cv in m["attention"]["curves"] if cv["kernel"] in ("fa2", "cudnn")]
        json.dump(c, open(path, "w"), indent=1)


def main():
    build, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    measured = json.load(open(os.path.join(ROOT, "clusters", "hgx-h200-measured.json")))
    runs = [os.path.join(ROOT, "bench", "validation", f) for f in ("published-runs.json", "more-published-runs.json")]
    for name, grid, attention in (("baseline", False, False), ("gemm-grid", True, False),
                                  ("attention", False, True), ("both", True, True)):
        data = tempfile.mkdtemp()
        for d in ("clusters", "calibrations", "models"):
            shutil.copytree(os.path.join(ROOT, d), os.path.join(data, d))
        variant(data, measured, grid, attention)
        env = dict(os.environ, PARALLAX_DATA_DIR=data)
        priced = os.path.join(out, name + "-runs.json")
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "validation", "published_runs.py"),
                        os.path.join(build, "bin", "simulate")] + runs + [os.path.join(out, name + "-validation.json"),
                       "--runs-out", priced], env=env, check=True, stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(build, "bin", "calibrate"), "--runs", priced, "--cross-validate", "--name", name,
                        "--out", os.path.join(out, name + "-calibration.json"),
                        "--table", os.path.join(out, name + "-calibration.md")], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        shutil.rmtree(data)
        print(name, "done", flush=True)


if __name__ == "__main__":
    main()
