# Predicts every row of one or more run files (published, measured training runs:
# published-runs.json, a copy of the shared validation set plus rows from the same kind of sources,
# and more-published-runs.json, the 72 further runs mapped by map_more_runs.py) with a `simulate`
# binary and prints the signed error per row and the mean, MAPE and worst error per source set and
# overall. No constant is fitted here: each row's plan is read as published, priced as its framework
# runs it (a framework profile: named settings with their sources, program/framework.cc, plus the
# row's own recipe settings below), on the bundled cluster of its hardware. A row needing a
# mechanism Parallax lacks is kept and reported "not expressible: <reason>" (simulate's refusal).
# A run listed in two files (same id) is priced once.
#   python3 bench/validation/published_runs.py SIMULATE RUNS.json [RUNS2.json ...] OUT.json
#       [--table T.md] [--pin EXPECTED.json | --check EXPECTED.json]
# --check fails (exit 1) when a pinned row's error moves by more than 0.5 points from EXPECTED, it
# stops being expressible, or (a run that ran) it is predicted not to fit; --pin rewrites EXPECTED
# with every expressible row predicted to fit (the others are printed, not pinned).
import argparse, collections, json, os, re, subprocess, sys, tempfile

def framework(r):
    f = r['framework']
    if 'Megatron-LM (2022)' in f: return 'megatron-2022', False
    # Megatron-LM v1 (2020): the same materialized attention, fused kernels and local DDP as the 2022
    # profile (Korthikanti et al. ran the same code base two years on); fp16 gradients: see plan().
    if 'Megatron-LM v1' in f: return 'megatron-2022', False
    # NeMo 24.07 / 25.11 (Megatron-Bridge) and the Nemotron-4 reports ("Megatron-LM/NeMo"): NeMo's
    # distributed optimizer with overlapped grad and param sync and overlapped pipeline sends.
    if 'NeMo' in f: return 'nemo', False
    if 'torchtitan' in f: return 'torchtitan', 'torch.compile' in f
    if 'fms-fsdp' in f: return 'fsdp', True  # fms_fsdp/config/training.py: use_torch_compile=True
    # IBM/Meta's FSDP blog (March 2024): FSDP1 with SDPA, torch.compile "not yet" used.
    if 'PyTorch FSDP' in f: return 'fsdp', False
    return 'megatron', False  # Megatron-Core (r0.8.0, the 2024 README scaling runs; the MoE model zoo)

def bundled_cluster(r):
    g = r['gpu']
    # Megatron-LM's 2020 README runs: the DGX A100 of September 2020 had 40 GB A100s.
    if 'A100' in g and '40GB' in g.replace(' ', ''): return 'dgx-a100-40gb'
    if 'A100' in g: return 'dgx-a100'
    if 'H200' in g: return 'hgx-h200'
    # torchtitan's 96 GB HBM2e, 500 W H100s (the paper's "95 GiB" H100s are the same Meta cluster)
    if 'HBM2e' in g: return 'grand-teton-h100'
    return 'dgx-h100'

# Where cluster() writes the clusters it derives: main() sets it beside its output.
DERIVED_DIR = None

def cluster(r):
    """The bundled cluster of the row's GPU, or, where the source states an inter-node bandwidth per
    node ("400 Gbps inter-node": IBM's FSDP blog and fms-fsdp, on IBM Cloud, not DGX SuperPODs), a
    copy of it whose GPUs share that bandwidth (the path of a file in DERIVED_DIR)."""
    base = bundled_cluster(r)
    m = re.search(r'(\d+) Gbps', r.get('hardware_notes') or '')
    if not m: return base
    global DERIVED_DIR
    if DERIVED_DIR is None: DERIVED_DIR = tempfile.mkdtemp()
    gbps = int(m.group(1))
    path = os.path.join(DERIVED_DIR, f'{base}-{gbps}gbps.json')
    if not os.path.exists(path):
        data = os.environ.get('PARALLAX_DATA_DIR', os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        c = json.load(open(os.path.join(data, 'clusters', base + '.json')))
        c['name'] = f'{base}-{gbps}gbps'
        per_gpu = gbps / 8 / c['node']['gpus']
        c['network']['bw_per_gpu_gbps'] = per_gpu
        c['network']['source'] = (f"the run's source: {gbps} Gb/s inter-node per node, shared by its {c['node']['gpus']} GPUs = "
                                  f"{per_gpu} GB/s per GPU per direction; latency and topology as {base}")
        os.makedirs(DERIVED_DIR, exist_ok=True)
        json.dump(c, open(path, 'w'), indent=1)
    return path

def plan(r):
    z = str(r['zero_or_fsdp'])
    # Megatron-Core's distributed optimizer is zero 1; Megatron-FSDP (and FSDP) shard everything.
    zero = int(z[0]) if z[0].isdigit() else 1 if 'distributed optimizer' in z else 3
    # FSDP2 under torch.distributed.pipelining: the stage turns gradient sync and resharding off for
    # every backward but the last (PipelineStage backward_maybe_with_nosync), and torchtitan keeps
    # the parameters gathered after forward: one gather and one reduce-scatter per step, with the
    # gradients held whole. That is ZeRO-1's traffic and memory, not ZeRO-2's reduction per pass.
    if r['source_set'].startswith('torchtitan') and r['pp'] > 1 and zero == 2: zero = 1
    shard = 8 if z.startswith('hybrid') else 0  # HSDP: "ZeRO-3 within a node (8 GPUs), replicated across nodes"
    rc = str(r['recompute']).split()[0].rstrip(';:,')
    if rc not in ('none', 'selective', 'full'): rc = 'none'
    # fms-fsdp's selective_checkpointing p: full recompute on a share p of the blocks, evenly
    # spaced. The IBM blog does not state p; assumed 1/2, the first example of fms-fsdp's
    # apply_fsdp_checkpointing docstring (foundation-model-stack/fms-fsdp fms_fsdp/policies/ac_handler.py).
    every_nth = 'every n-th' in str(r['recompute'])
    if every_nth: rc = 'full'
    v = r.get('virtual_stages') or 1
    name, compiled = framework(r)
    execution = {'framework': name}
    if every_nth: execution['recompute_fraction'] = 0.5
    # Megatron-Core's --recompute-modules as the sources name them: the model zoo's "selective: norm,
    # act" (layernorm, moe_act), DeepSeek-V3's launch.sh "--recompute_modules mla_up_proj"; without
    # a list, its default core_attn.
    text = str(r['recompute'])
    named = {'norm': 'layernorm', 'act': 'moe_act'}
    modules = [named[x.strip()] for x in text.split(':', 1)[1].split(',')] if text.startswith('selective: ') else []
    if '--recompute_modules mla_up_proj' in text: modules.append('mla_up_proj')
    if modules: execution['recompute_modules'] = modules
    if compiled: execution['kernels'] = 'fused'
    model, source = r['model_name'], r['source_set']
    if source == 'dgxc':  # dgxc v24.11.1 recipe yamls: optim.bucket_cap_mb (the others leave the default)
        bucket = 100 if '15B' in model else 50 if '340B' in model else 220 if '175B' in model else None
        if bucket: execution['dp_bucket_mib'] = bucket
    if source == 'dgxc' and ('175B' in model or '340B' in model):
        execution['attention_impl'] = 'fa2'  # dgxc launch.sh / configure.sh: NVTE_FUSED_ATTN=0 (flash)
    if source == 'dgxc' and ('nemotron4-340b' in model or '340B' in model):
        execution['bf16_optimizer_states'] = True  # dgxc nemotron4-340b-synth.yaml: optim.dtype bf16
    if source == 'nemo-24.07':
        # NVIDIA/NeMo-Framework-Launcher@26e42fa launcher_scripts/conf/training/{gpt3,llama,nemotron}/*.yaml:
        # optim.bucket_cap_mb per model; nemotron_340b also optim.dtype bf16.
        buckets = {'gpt3-5b': 400, 'gpt3-20b': 220, 'gpt3-175b': 220, 'llama2-': 125, 'llama3-': 125,
                   'nemotron-8b': 100, 'nemotron-22b': 100, 'nemotron-340b': 50}
        execution['dp_bucket_mib'] = next(v for k, v in buckets.items() if k in r['id'])
        if 'nemotron-340b' in r['id']: execution['bf16_optimizer_states'] = True
    if source == 'megatron2020':
        # Megatron-LM v1 local DDP all-reduces the fp16 .grad (fp32 only with --fp32-allreduce, which the
        # README's example scripts do not pass); fp32 master copies live in the optimizer.
        execution['fp32_gradients'] = False
    if source == 'megatron-moe-modelzoo':
        # Megatron-MoE-ModelZoo model_configs/benchmarking/Qwen3-235B-A22B.yaml MODEL_ARGS:
        # --overlap-grad-reduce true, --overlap-param-gather true (every row's common arguments).
        execution['overlap_grad_reduce'] = execution['overlap_param_gather'] = True
        # Its benchmark scripts route with --moe-router-force-load-balancing (best_practice/qwen3/
        # run_235b.sh, run_h100_235b.sh); the readme marks the runs that did not (its long-context
        # table's "dropless" column).
        execution['moe_imbalance'] = 1.0
        # The same MODEL_ARGS: --cross-entropy-loss-fusion true --cross-entropy-fusion-impl te
        # (Transformer Engine's parallel cross-entropy: one pass over the logits each way).
        execution['loss'] = 'fused'
    # NeMo 2.0 (DGX Cloud's 25.05 DeepSeek-V3 recipe) and Megatron-Bridge default
    # cross_entropy_loss_fusion to True (NVIDIA/NeMo nemo/collections/llm/gpt/model/base.py
    # GPTConfig; NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/models/gpt_provider.py
    # GPTModelProvider); NeMo 1.0's YAML recipes leave Megatron-Core's False.
    if r['id'].startswith('dgxc-v25.05') or source == 'megatron-bridge':
        execution['loss'] = 'megatron-fused'
    if source == 'megatron2024':
        # Megatron-LM README at f2e5db40: runs use --overlap-grad-reduce --overlap-param-gather
        # --tp-comm-overlap.
        execution['overlap_grad_reduce'] = execution['overlap_param_gather'] = True
        execution['tp_comm_overlap'] = True
    if 'AsyncTP' in r['framework'] or 'asyncTP' in r['id']:
        execution['tp_comm_overlap'] = True  # torchtitan experimental.enable_async_tensor_parallel
    if 'tp_comm_overlap=False' in r.get('notes', ''):
        execution['tp_comm_overlap'] = False  # the recipe turns userbuffers off (DGX Cloud's DeepSeek-V3)
    # FP8 (Transformer Engine) with FP8 weights (NeMo fp8_params: gathered in FP8), delayed scaling;
    # current (per-tensor) scaling where the row says so: Megatron-Bridge FP8-CS, torchao Float8
    # tensorwise; FP8 weights gathered in FP8 by torchtitan's FSDP float8 all-gather.
    pr = str(r['precision'])
    precision = 'fp8' if pr.startswith('fp8') else 'fp16' if pr.startswith('fp16') else 'bf16'
    if precision == 'fp8' and ('fp8_params' in pr or 'float8 all-gather' in pr): execution['fp8_param_gather'] = True
    if precision == 'fp8' and ('current' in pr or 'tensorwise' in pr or 'Float8' in pr): execution['fp8_recipe'] = 'current'
    if precision == 'fp8' and 'rowwise' in pr: execution['fp8_recipe'] = 'rowwise'  # torchao Float8 rowwise
    if r['id'].startswith('dgxc-v25.05') and precision == 'bf16':
        # NeMo@7a8f1cc7 nemo/collections/llm/recipes/precision/mixed_precision.py bf16_mixed():
        # grad_reduce_in_fp32=True; scripts/performance/utils.py turns it off for FP8 only.
        execution['fp32_gradients'] = True
    notes = r.get('notes', '')
    # Token dropping at capacity 1.0, padded to capacity: every expert computes exactly the mean load.
    if 'moe_expert_capacity_factor=1.0' in notes: execution['moe_capacity_factor'] = 1.0
    if 'Dispatcher DeepEP' in notes: execution['moe_dispatcher'] = 'deepep'  # the model zoo's "Dispatcher" column
    if '1f1b overlap' in notes: execution['moe_a2a_overlap'] = True  # --overlap-moe-expert-parallel-comm (A2A_OVERLAP=1)
    p = {'tp': r['tp'], 'pp': r['pp'], 'dp': r['dp'], 'cp': r.get('cp') or 1, 'ep': r.get('ep') or 1,
         'etp': r.get('etp') or 0, 'zero': zero,
         'micro_batch': r['micro_batch'], 'global_batch': r['global_batch'], 'seq_len': r['seq_len'],
         'schedule': 'interleaved' if v > 1 else '1f1b', 'virtual_stages': v, 'recompute': rc,
         'sequence_parallel': bool(r['sequence_parallel']), 'precision': precision, 'dp_shard': shard,
         'execution': execution}
    uneven = re.search(r'first stage [^=]*=(\d+) layers, last stage [^=]*=(\d+) layers', notes)
    if uneven: p['first_stage_layers'], p['last_stage_layers'] = int(uneven[1]), int(uneven[2])
    layout = pipeline_layout(r)
    if layout: p['pipeline_layout'] = layout
    return p

def pipeline_layout(r):
    """Layers per model chunk where the layers do not split evenly over pp x virtual stages, as each
    framework splits them; None where they do."""
    c = r['config']
    layers, pp, v = c.get('num_hidden_layers') or c.get('n_layer'), r['pp'], r.get('virtual_stages') or 1
    chunks = pp * v
    if v == 1 or layers % chunks == 0: return None
    # Megatron's account_for_embedding/loss_in_pipeline_split: the embedding and the loss take one
    # layer's slot each in the first and last chunk. Megatron-Bridge's recipes set both (the row's
    # notes), as does Megatron-MoE-ModelZoo's Qwen3-235B config
    # (yanring/Megatron-MoE-ModelZoo@e8650517 model_configs/benchmarking/Qwen3-235B-A22B.yaml).
    if 'account_for_embedding' in r.get('notes', '') or r['source_set'] == 'megatron-moe-modelzoo':
        per, rest = divmod(layers + 2, chunks)
        return [per - 1] + [per] * (chunks - 2) + [per - 1] if rest == 0 else None
    # torchtitan's generated split points without pipeline_parallel_split_points (Oct 2024,
    # torchtitan/parallelisms/pipelining_utils.py generate_split_points): the first stage gets
    # layers // stages, the next (layers % stages) one more, the last what is left.
    if r['source_set'].startswith('torchtitan'):
        base, extra = divmod(layers, chunks)
        out = [base] + [base + 1 if i <= extra else base for i in range(1, chunks - 1)]
        return out + [layers - sum(out)]
    return None

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('simulate'); ap.add_argument('files', nargs='+', metavar='RUNS.json [RUNS2.json ...] OUT.json')
    ap.add_argument('--table'); ap.add_argument('--pin'); ap.add_argument('--check')
    ap.add_argument('--runs-out', help="write the priced runs as calibrate --runs reads them")
    a = ap.parse_args()
    if len(a.files) < 2: ap.error('give at least one runs file and the output file')
    binary, result, table = os.path.abspath(a.simulate), a.files[-1], a.table
    global DERIVED_DIR
    DERIVED_DIR = os.path.join(os.path.dirname(os.path.abspath(result)), 'derived-clusters')
    tmp = tempfile.mkdtemp()
    out, seen, runs_out = {}, {}, []
    for runs, r in [(runs, r) for runs in a.files[:-1] for r in json.load(open(runs))['rows']]:
        p = plan(r)
        if r['id'] in seen:  # the same run in two files: priced once, and it must be mapped the same
            first, where = seen[r['id']]
            if (first['step_time_s'], plan(first), cluster(first), first['config']) != (r['step_time_s'], p, cluster(r), r['config']):
                sys.exit(f"{r['id']}: in {where} and {runs} with different mappings")
            print(f"{r['id']}: also in {runs}, the same run as in {where}; priced once")
            continue
        seen[r['id']] = (r, runs)
        runs_out.append({'id': r['id'], 'source': r['source_set'], 'model': r['config'], 'cluster': cluster(r), 'plan': p,
                         'measured_step_s': r['step_time_s']})
        json.dump(r['config'], open(tmp + '/m.json', 'w')); json.dump(p, open(tmp + '/p.json', 'w'))
        run = subprocess.run([binary, '--model', tmp + '/m.json', '--plan', tmp + '/p.json', '--cluster', cluster(r),
                              '--format', 'json'], capture_output=True, text=True)
        entry = {'source': r['source_set'], 'measured_s': r['step_time_s'], 'framework': p['execution'],
                 'cluster': os.path.basename(cluster(r)).removesuffix('.json')}
        if run.returncode != 0:
            entry['error'] = run.stderr.strip()[:200]
        else:
            j = json.loads(run.stdout)
            entry.update(predicted_s=j['step_time_s'], error_pct=100 * (j['step_time_s'] / r['step_time_s'] - 1),
                         fits=j['fits_in_memory'], peak_gib=j['peak_memory_bytes'] / 2**30)
        out[r['id']] = entry
    json.dump(out, open(result, 'w'), indent=1)
    if a.runs_out: json.dump({'runs': runs_out}, open(a.runs_out, 'w'), indent=1)
    report(out, table)
    if a.pin:
        # A run predicted not to fit is reported but not pinned: the check holds pinned runs to fitting.
        for k, e in out.items():
            if 'error_pct' in e and not e['fits']: print(f"{k}: not pinned (a run that ran, predicted not to fit)")
        json.dump({k: round(e['error_pct'], 2) for k, e in out.items() if 'error_pct' in e and e['fits']},
                  open(a.pin, 'w'), indent=1)
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
