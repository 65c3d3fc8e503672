# Predicts every row of published-runs.json (published, measured training runs; a copy of the
# shared validation set) with a `simulate` binary and prints the signed error per row and the
# mean, MAPE and worst error per source set and overall. No constant is fitted here: each row's
# plan is read as published, priced as its framework runs it (a framework profile: named settings
# with their sources, program/framework.cc, plus the row's own recipe settings below), on the
# bundled cluster of its hardware.
#   python3 bench/validation/published_runs.py SIMULATE RUNS.json OUT.json [--table T.md]
#       [--pin EXPECTED.json | --check EXPECTED.json]
# --check fails (exit 1) when a row's error moves by more than 0.5 points from EXPECTED, a row
# stops being expressible, or a run that ran is predicted not to fit; --pin rewrites EXPECTED.
import argparse, collections, json, os, re, subprocess, sys, tempfile

def framework(r):
    f = r['framework']
    if 'Megatron-LM (2022)' in f: return 'megatron-2022', False
    if 'NeMo' in f: return 'nemo', False
    if 'torchtitan' in f: return 'torchtitan', 'torch.compile' in f
    if 'fms-fsdp' in f: return 'fsdp', True  # fms_fsdp/config/training.py: use_torch_compile=True
    return 'megatron', False

def cluster(r):
    g = r['gpu']
    if 'A100' in g: return 'dgx-a100'
    if 'HBM2e' in g: return 'grand-teton-h100'  # torchtitan's 96 GB HBM2e, 500 W H100s
    return 'dgx-h100'

def plan(r):
    z = str(r['zero_or_fsdp'])
    # Megatron-Core's distributed optimizer is zero 1; Megatron-FSDP (and FSDP) shard everything.
    zero = int(z[0]) if z[0].isdigit() else 1 if 'distributed optimizer' in z else 3
    shard = 8 if z.startswith('hybrid') else 0  # HSDP: "ZeRO-3 within a node (8 GPUs), replicated across nodes"
    rc = str(r['recompute']).split()[0]
    if rc not in ('none', 'selective', 'full'): rc = 'none'
    v = r.get('virtual_stages') or 1
    name, compiled = framework(r)
    execution = {'framework': name}
    if compiled: execution['kernels'] = 'fused'
    model = r['model_name']
    if name == 'nemo':  # dgxc v24.11.1 recipe yamls: optim.bucket_cap_mb (the others leave the default)
        bucket = 100 if '15B' in model else 50 if '340B' in model else 220 if '175B' in model else None
        if bucket: execution['dp_bucket_mib'] = bucket
    if name == 'nemo' and ('175B' in model or '340B' in model):
        execution['attention_impl'] = 'fa2'  # dgxc launch.sh / configure.sh: NVTE_FUSED_ATTN=0 (flash)
    if 'nemotron4-340b' in r['model_name'] or '340B' in r['model_name']:
        execution['bf16_optimizer_states'] = True  # dgxc nemotron4-340b-synth.yaml: optim.dtype bf16
    # FP8 (Transformer Engine) with FP8 weights (NeMo fp8_params: gathered in FP8), delayed scaling.
    precision = 'fp8' if str(r['precision']).startswith('fp8') else 'bf16'
    if precision == 'fp8' and 'fp8_params' in r['precision']: execution['fp8_param_gather'] = True
    notes = r.get('notes', '')
    # Token dropping at capacity 1.0, padded to capacity: every expert computes exactly the mean load.
    if 'moe_expert_capacity_factor=1.0' in notes: execution['moe_capacity_factor'] = 1.0
    p = {'tp': r['tp'], 'pp': r['pp'], 'dp': r['dp'], 'cp': r.get('cp') or 1, 'ep': r.get('ep') or 1,
         'etp': r.get('etp') or 0, 'zero': zero,
         'micro_batch': r['micro_batch'], 'global_batch': r['global_batch'], 'seq_len': r['seq_len'],
         'schedule': 'interleaved' if v > 1 else '1f1b', 'virtual_stages': v, 'recompute': rc,
         'sequence_parallel': bool(r['sequence_parallel']), 'precision': precision, 'dp_shard': shard,
         'execution': execution}
    uneven = re.search(r'first stage [^=]*=(\d+) layers, last stage [^=]*=(\d+) layers', notes)
    if uneven: p['first_stage_layers'], p['last_stage_layers'] = int(uneven[1]), int(uneven[2])
    return p

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('simulate'); ap.add_argument('runs'); ap.add_argument('out')
    ap.add_argument('--table'); ap.add_argument('--pin'); ap.add_argument('--check')
    a = ap.parse_args()
    binary, runs, result, table = os.path.abspath(a.simulate), a.runs, a.out, a.table
    rows = json.load(open(runs))['rows']
    tmp = tempfile.mkdtemp()
    out = {}
    for r in rows:
        p = plan(r)
        json.dump(r['config'], open(tmp + '/m.json', 'w')); json.dump(p, open(tmp + '/p.json', 'w'))
        run = subprocess.run([binary, '--model', tmp + '/m.json', '--plan', tmp + '/p.json', '--cluster', cluster(r),
                              '--format', 'json'], capture_output=True, text=True)
        entry = {'source': r['source_set'], 'measured_s': r['step_time_s'], 'framework': p['execution'],
                 'cluster': cluster(r)}
        if run.returncode != 0:
            entry['error'] = run.stderr.strip()[:200]
        else:
            j = json.loads(run.stdout)
            entry.update(predicted_s=j['step_time_s'], error_pct=100 * (j['step_time_s'] / r['step_time_s'] - 1),
                         fits=j['fits_in_memory'], peak_gib=j['peak_memory_bytes'] / 2**30)
        out[r['id']] = entry
    json.dump(out, open(result, 'w'), indent=1)
    report(out, table)
    if a.pin:
        json.dump({k: round(e['error_pct'], 2) for k, e in out.items() if 'error_pct' in e}, open(a.pin, 'w'), indent=1)
    if a.check:
        sys.exit(check(out, json.load(open(a.check))))

def check(out, expected):
    bad = []
    for key, want in expected.items():
        e = out.get(key, {})
        if 'error_pct' not in e:
            bad.append(f"{key}: no longer expressible ({e.get('error', 'missing')})")
        elif abs(e['error_pct'] - want) > 0.5:
            bad.append(f"{key}: error {e['error_pct']:+.1f}% moved from the pinned {want:+.1f}%")
        elif not e['fits']:
            bad.append(f"{key}: a run that ran is predicted not to fit ({e['peak_gib']:.1f} GiB)")
    for line in bad: print('check: ' + line, file=sys.stderr)
    if bad: print('check: if the change is intended, re-pin with --pin and report the new errors', file=sys.stderr)
    return 1 if bad else 0

def report(out, table):
    lines = ['| run | framework | cluster | measured s | predicted s | error | fits |', '|---|---|---|---:|---:|---:|---|']
    by = collections.defaultdict(list)
    for key, e in out.items():
        fw = e['framework']['framework'] + (' +compile' if e['framework'].get('kernels') == 'fused' else '')
        if 'error' in e:
            print(f"{key}: not expressible: {e['error']}")
            by[e['source']].append(None)
            lines.append(f"| {key} | {fw} | {e['cluster']} | {e['measured_s']:.2f} | — | not expressible | |")
            continue
        by[e['source']].append(e['error_pct'])
        print(f"{key}: {e['error_pct']:+.1f}%{'' if e['fits'] else ' (predicted not to fit: %.1f GiB)' % e['peak_gib']}")
        lines.append(f"| {key} | {fw} | {e['cluster']} | {e['measured_s']:.2f} | {e['predicted_s']:.2f} | "
                     f"{e['error_pct']:+.1f}% | {'yes' if e['fits'] else 'no (%.0f GiB)' % e['peak_gib']} |")
    lines += ['', '| source | rows | mean error | MAPE | worst |', '|---|---:|---:|---:|---:|']
    every = []
    for source, errs in list(by.items()) + [('all', None)]:
        ok = [e for e in (errs if errs is not None else every) if e is not None]
        n = len(errs) if errs is not None else sum(len(v) for v in by.values())
        if errs is not None: every += ok
        if not ok:
            print(f"{source}: 0/{n} rows expressible")
            lines.append(f"| {source} | 0/{n} | — | — | — |"); continue
        mean, mape, worst = sum(ok) / len(ok), sum(map(abs, ok)) / len(ok), max(ok, key=abs)
        print(f"{source}: {len(ok)}/{n} rows, mean {mean:+.1f}%, MAPE {mape:.1f}%, worst {worst:+.1f}%")
        lines.append(f"| {source} | {len(ok)}/{n} | {mean:+.1f}% | {mape:.1f}% | {worst:+.1f}% |")
    if table: open(table, 'w').write('\n'.join(lines) + '\n')

main()
