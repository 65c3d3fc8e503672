# Predicts every row of the shared published-runs.json with a `simulate` binary and prints the
# signed and absolute error per row and per source set. No constant is fitted here: each row's plan
# is read as published (cluster by GPU: A100 -> dgx-a100, H100 -> dgx-h100; Megatron-LM 2022 with
# materialized attention), and rows Parallax cannot express are listed with the reason.
#   python3 bench/validation/published_runs.py build/bin/simulate ../shared/validation/published-runs.json out.json
import collections, json, os, subprocess, sys, tempfile
binary, runs, result = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
rows = json.load(open(runs))['rows']
tmp = tempfile.mkdtemp()
out = {}
for r in rows:
    g = r['gpu']
    cluster = 'dgx-a100' if 'A100' in g else 'dgx-h100'  # the bundled clusters closest to each row
    z = r['zero_or_fsdp']; zero = int(str(z)[0]) if str(z)[0].isdigit() else 3
    rc = str(r['recompute']).split()[0]
    if rc not in ('none', 'selective', 'full'): rc = 'none'
    v = r.get('virtual_stages') or 1
    plan = {'tp': r['tp'], 'pp': r['pp'], 'dp': r['dp'], 'zero': zero, 'micro_batch': r['micro_batch'],
            'global_batch': r['global_batch'], 'seq_len': r['seq_len'],
            'schedule': 'interleaved' if v > 1 else '1f1b', 'virtual_stages': v, 'recompute': rc,
            'sequence_parallel': bool(r['sequence_parallel']), 'precision': 'bf16'}
    if 'Megatron-LM (2022)' in r['framework']: plan['execution'] = {'attention': 'materialized'}
    json.dump(r['config'], open(tmp + '/m.json', 'w')); json.dump(plan, open(tmp + '/p.json', 'w'))
    p = subprocess.run([binary, '--model', tmp + '/m.json', '--plan', tmp + '/p.json', '--cluster', cluster,
                        '--format', 'json'], capture_output=True, text=True, cwd=os.path.dirname(binary))
    if p.returncode != 0:
        out[r['id']] = (r['source_set'], None, p.stderr.strip()[:100]); continue
    t = json.loads(p.stdout)['step_time_s']
    out[r['id']] = (r['source_set'], t / r['step_time_s'] - 1, '')
json.dump(out, open(result, 'w'), indent=1)
by = collections.defaultdict(list)
for key, (source, err, why) in out.items():
    by[source].append(err)
    print(f"{key}: {'not expressible: ' + why if err is None else f'{err:+.1%}'}")
for source, errs in by.items():
    ok = [e for e in errs if e is not None]
    if ok:
        print(f"{source}: {len(ok)}/{len(errs)} rows, mean {sum(ok) / len(ok):+.1%}, mean |error| {sum(map(abs, ok)) / len(ok):.1%}")
    else:
        print(f"{source}: 0/{len(errs)} rows expressible")
