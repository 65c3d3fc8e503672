# Maps the raw transcription of more published runs (../shared/validation/more-published-runs.json:
# model shape, plan as stated, measured or derived step time, what the source leaves unstated) into
# the mapped format of published-runs.json: a Hugging Face config `simulate` reads and the plan
# fields published_runs.py prices. Every field a source leaves open is filled here, and each row's
# `assumed` says what and why (the raw row's own assumptions are kept). No run is added or dropped.
#   python3 bench/validation/map_more_runs.py RAW.json bench/validation/more-published-runs.json
import json, sys

# ---- models -------------------------------------------------------------------------------------

def config(m, seq_len, family):
    """The raw row's model shape as a Hugging Face config."""
    act = m['ffn_act'].split()[0]
    if act == 'gelu':  # GPT-2/3 style: LayerNorm, learned positions, GeLU MLP of 4h, tied embeddings
        return {'model_type': 'gpt2', 'n_layer': m['n_layer'], 'n_embd': m['hidden'], 'n_head': m['n_head'],
                'n_inner': m['ffn_hidden'], 'vocab_size': m['vocab'], 'n_positions': seq_len,
                'activation_function': 'gelu_new', 'tie_word_embeddings': True}
    if act == 'squared-relu':  # Nemotron: squared-ReLU MLP without a gate, LayerNorm1p, rotary on half of each head
        return {'model_type': 'nemotron', 'hidden_size': m['hidden'], 'intermediate_size': m['ffn_hidden'],
                'num_hidden_layers': m['n_layer'], 'num_attention_heads': m['n_head'],
                'num_key_value_heads': m['n_kv_head'], 'vocab_size': m['vocab'], 'max_position_embeddings': 4096,
                'hidden_act': 'relu2', 'norm_eps': 1e-05, 'tie_word_embeddings': False, 'partial_rotary_factor': 0.5}
    assert act == 'swiglu', m
    c = {'model_type': 'llama', 'hidden_size': m['hidden'], 'intermediate_size': m['ffn_hidden'],
         'num_hidden_layers': m['n_layer'], 'num_attention_heads': m['n_head'], 'num_key_value_heads': m['n_kv_head'],
         'vocab_size': m['vocab'], 'max_position_embeddings': max(seq_len, 4096 if m['vocab'] == 32000 else 8192),
         'rms_norm_eps': 1e-05, 'tie_word_embeddings': False, 'hidden_act': 'silu'}
    if m['vocab'] == 128256: c['rope_theta'] = 500000.0
    return c

CONFIG_NOTE = {
    'gpt2': 'GPT (Megatron / NeMo gpt3): LayerNorm, learned absolute positions, GeLU MLP, embeddings tied to the output layer (Megatron default; NeMo gpt3 confs leave share_embeddings_and_output_weights at its default true)',
    'nemotron': 'Nemotron (NeMo-Framework-Launcher@26e42fa conf/training/nemotron/*.yaml): LayerNorm1p, squared-ReLU, rotary_percentage 0.5, untied embeddings',
    'llama': 'Llama: RMSNorm, SwiGLU, RoPE, untied embeddings (the published Hugging Face config of the named model)',
}

# ---- per-set mapping ------------------------------------------------------------------------------

def gpu_of(r):
    g = r['gpu']
    if r['set'] == 'torchtitan-paper-v1':
        return ("H100-SXM HBM2e 95 GiB, lower TDP (paper: 'H100 ... 95 GiB'; the Meta cluster of torchtitan's "
                "docs/performance.md footnote 'HBM2e based lower TDP SXM H100(95GB)')")
    return g

def plan_fields(r):
    """(tp, pp, dp, cp, vp, mbs, gbs, zero text, recompute text, SP, precision text, assumed, notes)."""
    s, a = r['set'], {}
    tp, pp, dp, cp, gbs = r['tp'], r['pp'], r['dp'], r['cp'], r['gbs']
    vp = r['vp'] if isinstance(r['vp'], int) else None
    mbs = r['mbs'] if isinstance(r['mbs'], int) else None
    zero, rc, sp, prec = r['zero_stage'], r['recompute'], r['sequence_parallel'], r['precision']
    notes = r.get('notes', '') or ''
    if s == 'megatron2020':
        zero = '0 (Megatron-LM v1 local DDP, no optimizer sharding)'
        rc = 'full (assumed: --checkpoint-activations in the README example scripts of that commit)'
        prec = 'fp16 (assumed: --fp16 in the README example scripts; dynamic loss scaling)'
        a['gpu'] = ('A100 40 GB: the DGX A100 of September 2020 shipped with 40 GB A100s (the 80 GB part was '
                    'announced in November 2020); priced on clusters/dgx-a100-40gb.json, same physics as '
                    'dgx-a100.json but HBM2 40 GB at 1,555 GB/s')
        a['fp32_gradients'] = ('off: Megatron-LM v1 local DDP all-reduces the fp16 .grad buffers (fp32 only with '
                               '--fp32-allreduce, not in the example scripts); the fp32 copies live in the optimizer')
    elif s == 'megatron2024':
        mbs = 1
        a['micro_batch'] = ('1: unstated; GBS/DP = 4 x PP for every row (4, 4, 4, 4, 8, 16, 24, 32, 64), i.e. '
                            'micro-batch 1 with 4 x PP micro-batches per pipeline')
        a['virtual_stages'] = ('none (1f1b): unstated; 119B (23 layers per stage) and 462B (7) cannot interleave '
                               'except at one layer per chunk, so the rows are priced non-interleaved but for 177B')
        if r['model']['n_layer'] == 96 and pp == 6:
            # The source's own MFUs rule out fewer chunks, whatever the cost model: one micro-batch's
            # work is the same in all three rows, and an interleaved 1F1B step takes at least
            # (m + (p - 1) / v) of it. The strong-scaling runs keep 42/47 of their MFU (>= 41.5/47.5 =
            # 0.874 after rounding) going from 576 micro-batches per pipeline to 12; the weak row
            # 43.8/47.5 = 0.92 with 24. m / (m + 5/v) over 576 / (576 + 5/v) is 0.71 and 0.83 at
            # v = 1, 0.83 and 0.91 at v = 2, 0.91 and 0.95 at v = 4.
            vp = 4
            a['virtual_stages'] = ('4 (4 layers per chunk): unstated; the least interleaving the source\'s own MFUs '
                                   'allow for TP 8 x PP 6. One micro-batch is the same work on 96, 2,304 and 4,608 '
                                   'GPUs, and a step takes at least m + 5/v of them (m micro-batches per pipeline): '
                                   'from 47% MFU at m = 576 the runs keep at least 0.874 (42%, m = 12) and 0.92 '
                                   '(43.8%, m = 24), where v = 1 allows 0.71 and 0.83, v = 2 0.83 and 0.91, '
                                   'v = 4 0.91 and 0.95')
        zero = '1 (distributed optimizer: --overlap-param-gather requires --use-distributed-optimizer)'
        rc = 'none (assumed: no recompute flag among the README flags; Transformer Engine flash attention keeps no s x s scores)'
        sp = tp > 1
        a['sequence_parallel'] = 'on wherever TP > 1: --tp-comm-overlap (stated) requires --sequence-parallel'
        prec = 'bf16 (inferred: MFU = TFLOP/s / 989)'
        a['config'] = ('GPT with GeLU MLP of 4h, MHA, learned absolute positions and tied embeddings: the Megatron-LM '
                       'defaults for plain "GPT models" (position_embedding_type learned_absolute, embeddings tied '
                       'unless --untie-embeddings-and-output-weights)')
        a['overlap'] = ('overlap_grad_reduce and overlap_param_gather on: the README names --overlap-grad-reduce '
                        '--overlap-param-gather --tp-comm-overlap (published_runs.py turns on tp_comm_overlap)')
    elif s == 'nemo-24.07':
        conf = {'gpt3-5b': ('gpt3/5b', 400), 'gpt3-20b': ('gpt3/20b', 220), 'gpt3-175b': ('gpt3/175b', 220),
                'llama2-': ('llama/llama2_*', 125), 'llama3-': ('llama/llama3_*', 125),
                'nemotron-8b': ('nemotron/nemotron_8b', 100), 'nemotron-22b': ('nemotron/nemotron_22b', 100),
                'nemotron-340b': ('nemotron/nemotron_340b', 50)}
        key = next(k for k in conf if k in r['id'])
        path = 'NVIDIA/NeMo-Framework-Launcher@26e42fa launcher_scripts/conf/training/%s.yaml' % conf[key][0]
        zero = '1 (optim mcore_distributed_optim, overlap_grad_sync/overlap_param_sync true: %s)' % path
        selective = key == 'nemotron-340b'
        rc = ('selective (activations_checkpoint_granularity: selective, %s)' % path if selective else
              'none (activations_checkpoint_granularity: null, %s)' % path)
        sp = tp > 1
        a['zero_or_fsdp'] = '1: the launcher conf of the model (%s) uses the distributed optimizer' % path
        a['recompute'] = rc.split(' (')[0] + ': as the launcher conf of the model'
        a['sequence_parallel'] = ('%s: the launcher confs set sequence_parallel true wherever TP > 1 and false '
                                  'at TP 1' % ('on' if sp else 'off'))
        a['dp_bucket_mib'] = '%d: optim.bucket_cap_mb of %s' % (conf[key][1], path)
        if key == 'nemotron-340b':
            a['bf16_optimizer_states'] = 'on: optim.dtype bf16 (and grad_sync_dtype bf16) in %s' % path
        prec = 'fp8 (Transformer Engine, delayed scaling: the NeMo default FP8 recipe; FP8 weights unstated, assumed off)'
        a['fp8'] = ('Transformer Engine delayed scaling (NeMo 24.07 fp8: true with its default recipe); FP8 weights '
                    '(fp8_params) unstated, assumed off: BF16 weights gathered')
        a['launcher_conf_vs_row'] = ('plan (TP, PP, VP, CP, MBS, GBS) is the table row; only unstated settings '
                                     'come from the launcher conf, which is a 2025 HEAD, not necessarily the 24.07 run')
    elif s == 'megatron-bridge':
        if r['zero_stage'].startswith('3'):
            zero = '3 (Megatron-FSDP, sharding group = all 8 GPUs: FSDP=8 in the table)'
            a['zero_or_fsdp'] = ('3: Megatron-FSDP shards parameters, gradients and optimizer states over the 8 '
                                 'GPUs (ZeRO-3), priced with the NeMo profile\'s overlap settings')
        else:
            zero = '1 (FSDP=0: Megatron DDP with the distributed optimizer, as Megatron-Bridge perf recipes set use_distributed_optimizer)'
            a['zero_or_fsdp'] = '1: table FSDP=0; Megatron-Bridge pretraining recipes run the distributed optimizer'
        rc = 'none (assumed: the table lists no recompute)'
        sp = tp > 1
        a['recompute'] = 'none: unstated; assumed off (the table has no recompute column and the configs fit without it)'
        a['sequence_parallel'] = 'on wherever TP > 1 (Megatron-Bridge recipes set sequence_parallel with TP; TP comm overlap needs it)'
        prec = 'fp8 current scaling (FP8-CS, Transformer Engine Float8CurrentScaling); bf16 weights'
        a['fp8'] = 'current (per-tensor) scaling as the precision column says (FP8-CS); FP8 weights unstated, assumed off'
        if r['n_gpus'] == 1024:
            notes += (' Llama 3.1 405B (126 layers) on PP 8 x VP 8 = 64 chunks: Megatron-Bridge accounts the embedding '
                      'and the loss as layers (account_for_embedding/loss_in_pipeline_split), i.e. uneven first and '
                      'last chunks, which Parallax expresses only without interleaving.')
    elif s == 'nemotron-papers':
        big = r['model']['hidden'] == 18432
        sp = True
        a['sequence_parallel'] = 'on: TP 8 in Megatron-LM/NeMo recipes for Nemotron-4 (sequence_parallel true in the NeMo nemotron confs)'
        if big:
            mbs, vp = 1, 8
            a['micro_batch'] = '1: unstated; NeMo nemotron_340b conf (NeMo-Framework-Launcher@26e42fa) uses micro_batch_size 1'
            a['virtual_stages'] = ('8 (one layer per chunk): the paper says only "12-way pipeline parallelism with '
                                   'interleaving"; NVIDIA\'s 340B recipes interleave to one layer per chunk (PP 8 x VP 12 '
                                   'in the NeMo conf and DGX Cloud recipe), and 96 layers / 12 stages = 8')
            rc = 'selective (assumed: NeMo nemotron_340b conf activations_checkpoint_granularity: selective)'
            a['recompute'] = 'selective: unstated; NeMo nemotron_340b conf (NeMo-Framework-Launcher@26e42fa)'
        else:
            mbs = 2
            a['micro_batch'] = '2: unstated; NeMo nemotron_15b conf (NeMo-Framework-Launcher@26e42fa) uses micro_batch_size 2 (2 micro-batches per replica here)'
            rc = 'none (assumed: NeMo nemotron_15b conf activations_checkpoint_granularity: null)'
            a['recompute'] = 'none: unstated; NeMo nemotron_15b conf (NeMo-Framework-Launcher@26e42fa)'
        a['framework'] = ('NeMo profile (distributed optimizer with overlapped grad and param sync, overlapped p2p): '
                          'the papers name Megatron-LM/NeMo without flags; profile defaults otherwise')
        prec = 'bf16 (implied: MFU quoted against the bf16 peak)'
    elif s.startswith('torchtitan'):
        if s == 'torchtitan-paper-v1' and pp > 1:
            mbs = 2
            a['micro_batch'] = ('2: local batch 32 over torchtitan\'s default number of micro-batches (pipeline_parallel_'
                                'microbatches unset -> one per pipeline stage, 16)')
            zero = '2 (FSDP2 with reshard_after_forward=False under PP: parameters stay gathered between forward and backward; ZeRO-2-like)'
            a['zero_or_fsdp'] = ('2: torchtitan runs FSDP2 without resharding after forward under PP, so gathered '
                                 'parameters stay across the micro-batches (ZeRO-2-like: one gather and one '
                                 'reduce-scatter per step); priced as ZeRO 2, which the torchtitan profile otherwise '
                                 'does not propose')
            if vp is None:
                vp = 2
                a['virtual_stages'] = '2: unstated; torchtitan\'s interleaved 1F1B default of 2 stages per rank'
            else:
                vp = None
                notes += ' first stage (assumed)=7 layers, last stage (assumed)=7 layers.'
                a['stage_split'] = ('126 layers on 16 stages: 7 + 14 x 8 + 7 (the split points are not published; '
                                    'torchtitan places them by the config, uneven first and last stages assumed)')
        if 'float8' in prec.lower() or prec.startswith('fp8'):
            if 'rowwise' in prec:
                a['fp8'] = 'rowwise scaling (torchao Float8 rowwise) as published: fp8_recipe rowwise'
            else:
                a['fp8'] = 'torchao Float8 tensorwise dynamic scaling = current scaling (fp8_recipe current)'
                if 'fsdp float8 all-gather' in prec:
                    a['fp8_param_gather'] = 'on: the command line enables FSDP float8 all-gather'
                else:
                    a['fp8_param_gather'] = 'off: enable_fsdp_float8_all_gather unstated (off by default in torchtitan)'
        if s == 'torchtitan-paper-v1':
            a['gpu'] = ('grand-teton-h100 (96 GB HBM2e, 500 W H100): the paper\'s "H100 with 95 GiB" is the HBM2e part '
                        'of torchtitan\'s Meta cluster')
        if 'AsyncTP' in r['framework']:
            a['async_tp'] = 'priced as vanilla TP: Parallax prices TP collectives exposed (torchtitan profile: async_tp not modelled)'
    elif s == 'ibm-fsdp':
        hybrid = r['model']['hidden'] <= 5120
        zero = ('hybrid: ZeRO-3 within a node (8 GPUs), replicated across nodes (HSDP)' if hybrid else
                '3 (FSDP FULL_SHARD)')
        a['zero_or_fsdp'] = ('%s: unstated per row; fms-fsdp README (commit 0d319983) lists HSDP for 7B/13B and FSDP '
                             'for 34B/70B' % ('HSDP, shard group one node' if hybrid else 'FULL_SHARD'))
        a['compile'] = 'off: the blog says torch.compile was not yet used (fsdp profile, eager kernels)'
        if 'H100' in r['gpu']:
            a['gpu'] = ('dgx-h100 (H100 SXM 80 GB, 8 x 400 Gb/s per node); the blog states 800 Gbps inter-node, '
                        'likely per node: the network here is faster than the blog\'s')
        else:
            a['gpu'] = ('dgx-a100 (A100 SXM 80 GB, 8 x 200 Gb/s per node); the blog states 400 Gbps inter-node, '
                        'likely per node: the network here is faster than the blog\'s')
    return tp, pp, dp, cp, vp, mbs, gbs, zero, rc, sp, prec, a, notes.strip()

def framework_of(r):
    f = r['framework']
    return f

def source_of(r):
    src = r['source'].rstrip('; .').rstrip(';').strip()
    if r['set'] == 'nemotron-papers' and '340B' in src:
        src = ('Nemotron-4 340B Technical Report (NVIDIA, arXiv 2406.11704), Sec. 2.3 and Table 2; read from secondary '
               'transcriptions of Table 2 that agree (the primary PDF was not at hand: verify before gating)')
    if r['set'] == 'torchtitan-paper-v1':
        src = src.replace('together with the translated text', 'together with the paper text')
    if r['set'] == 'ibm-fsdp':
        src = "PyTorch blog 'Maximizing training throughput using PyTorch FSDP' (IBM and Meta, 2024-03-13, https://pytorch.org/blog/maximizing-training)"
    return src + ' \u2014 ' + r['table']

def row(r):
    tp, pp, dp, cp, vp, mbs, gbs, zero, rc, sp, prec, a, notes = plan_fields(r)
    assert tp * pp * dp * cp == r['n_gpus'], r['id']
    c = config(r['model'], r['seq_len'], r['set'])
    assumed = dict(r.get('assumed') or {})
    assumed.update(a)
    assumed.setdefault('config', CONFIG_NOTE[c['model_type']])
    unstated = list(r.get('unstated') or [])
    measured = r['step_time_derivation']
    if r.get('metric'):
        measured += " (printed: %s %s)" % (r['metric']['as_printed'], r['metric']['unit'])
    out = {'id': r['id'], 'source_set': r['set'], 'model_name': r['model']['name'], 'config': c,
           'gpu': gpu_of(r), 'standard_gpu': r['gpu_is_standard_sku'], 'hardware_notes': r['hardware_notes'],
           'framework': framework_of(r), 'gpus': r['n_gpus'], 'tp': tp, 'pp': pp, 'dp': dp, 'cp': cp}
    if r.get('ep', 1) != 1: out['ep'], out['etp'] = r['ep'], None
    out.update({'virtual_stages': vp if vp and vp > 1 else None, 'micro_batch': mbs, 'global_batch': gbs,
                'seq_len': r['seq_len'], 'zero_or_fsdp': zero, 'recompute': rc, 'sequence_parallel': bool(sp),
                'precision': prec, 'step_time_s': r['step_time_s'], 'measured_as': measured,
                'source': source_of(r), 'unstated': unstated, 'assumed': assumed,
                'notes': (notes + (' Transcriber confidence: %s.' % r['confidence'] if r.get('confidence') else '')).strip()})
    assert gbs % (mbs * dp) == 0, r['id']
    return out

def main():
    raw = json.load(open(sys.argv[1]))
    rows = [row(r) for r in raw['rows']]
    # A run already in published-runs.json (the same table row) keeps that row's config, so that
    # published_runs.py, which prices each run once, finds the two mappings identical.
    here = __import__('os').path.dirname(__import__('os').path.abspath(__file__))
    known = {r['id']: r for r in json.load(open(here + '/published-runs.json'))['rows']}
    for r in rows:
        if r['id'] in known:
            r['config'] = known[r['id']]['config']
            r['notes'] = (r['notes'] + ' The same run as row %s of published-runs.json (source_set %s); priced once.'
                          % (r['id'], known[r['id']]['source_set'])).strip()
    about = ("More published, measured training runs for checking Parallax's step-time predictions, mapped from "
             "the raw transcription in ../shared/validation/more-published-runs.json (72 runs: Megatron-LM README "
             "scaling tables of 2020 and 2024, NeMo 24.07 and Megatron-Bridge 25.11 performance summaries, the "
             "Nemotron-4 15B and 340B reports, the torchtitan paper v1 and its async-TP and H200 benchmarks, "
             "IBM/Meta's FSDP blog) by bench/validation/map_more_runs.py. Same format and rules as "
             "published-runs.json: fit nothing to them that has no physical meaning and report per-row errors. "
             "'unstated' and 'assumed' say what each source leaves open and what was filled in. Four rows "
             "(torchtitan-asynctp2506-*-none-*) are the same runs as rows of published-runs.json; "
             "published_runs.py prices each such run once.")
    json.dump({'about': about, 'rows': rows}, open(sys.argv[2], 'w'), indent=1, ensure_ascii=False)
    open(sys.argv[2], 'a').write('\n')

main()
