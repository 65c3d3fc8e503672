#!/usr/bin/env python3
"""Reads a Parallax checkpoint of any plan into full tensors and a Hugging Face-style state dict.

A checkpoint step directory (docs/formats.md#checkpoints) holds manifest.json and one
rank-R.safetensors per rank. Each file stores the shards its rank owns as flat fp32 vectors
(NAME, NAME.exp_avg, NAME.exp_avg_sq) and, in the safetensors metadata "parallax", each tensor's
full shape and the pieces [row, rows, col, cols] of the full tensor the shard holds, one after
another, row-major. Placing every file's pieces rebuilds the full tensors, whatever TP, PP, DP,
CP, EP or ZeRO layout wrote them.

    tools/checkpoint_reader.py CKPT_DIR --model CONFIG.json --out state.npz [--names parallax|hf]
        [--optimizer]

CKPT_DIR is the directory given to `train --checkpoint` (its 'latest' step is read) or a step
directory. The .npz holds one array per tensor: Hugging Face names and shapes (the padded
vocabulary trimmed, QKV and gated MLP weights split, GPT-2's Conv1D weights transposed) or
Parallax's own with --names parallax; --optimizer adds the AdamW moments (Parallax names only).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

FORMAT = "parallax-checkpoint/2"


def step_directory(path):
    latest = os.path.join(path, "latest")
    if os.path.exists(latest):
        with open(latest) as f:
            return os.path.join(path, f.read().strip())
    return path


def read_safetensors(path):
    """(header, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), memoryview(blob)[8 + n:]


def read_checkpoint(path):
    """(manifest, {name: {"value", "exp_avg", "exp_avg_sq": full float32 arrays}})."""
    step_dir = step_directory(path)
    with open(os.path.join(step_dir, "manifest.json")) as f:
        manifest = json.load(f)
    if manifest.get("format") != FORMAT:
        raise ValueError("%s: not a %s checkpoint" % (step_dir, FORMAT))
    tensors, placed = {}, {}
    for file in manifest["files"]:
        header, data = read_safetensors(os.path.join(step_dir, file))
        layout = json.loads(header["__metadata__"]["parallax"])["tensors"]
        for name, info in layout.items():
            shape = info["shape"]
            full = tensors.setdefault(name, {k: np.zeros(shape, np.float32) for k in ("value", "exp_avg", "exp_avg_sq")})
            for kind, suffix in (("value", ""), ("exp_avg", ".exp_avg"), ("exp_avg_sq", ".exp_avg_sq")):
                begin, end = header[name + suffix]["data_offsets"]
                shard = np.frombuffer(data[begin:end], dtype="<f4")
                place(full[kind], shard, info["pieces"])
            placed[name] = placed.get(name, 0) + sum(p[1] * p[3] for p in info["pieces"])
    for name, n in placed.items():
        if n != tensors[name]["value"].size:
            raise ValueError("%s: tensor %s holds %d of %d elements" % (step_dir, name, n, tensors[name]["value"].size))
    return manifest, tensors


def place(full, shard, pieces):
    """Writes the shard's pieces into the full tensor (a vector is one row)."""
    view = full.reshape(1, -1) if full.ndim == 1 else full
    at = 0
    for row, rows, col, cols in pieces:
        view[row:row + rows, col:col + cols] = shard[at:at + rows * cols].reshape(rows, cols)
        at += rows * cols


def hf_state_dict(tensors, config):
    """Hugging Face names and shapes for a GPT-2 or a Llama-family (Llama, Mistral, Qwen2, Mixtral,
    Nemotron) model, from Parallax's full tensors."""
    values = {name: t["value"] for name, t in tensors.items()}
    vocab = config["vocab_size"]
    if config.get("model_type") == "gpt2":
        return gpt2_state_dict(values, config, vocab)
    return llama_state_dict(values, config, vocab)


def llama_state_dict(v, config, vocab):
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    q, kv = heads * head_dim, kv_heads * head_dim
    out = {"model.embed_tokens.weight": v["wte"][:vocab], "model.norm.weight": v["lnf.w"]}
    if "lnf.b" in v:
        out["model.norm.bias"] = v["lnf.b"]
    if "head" in v:
        out["lm_head.weight"] = v["head"][:vocab]
    for i in range(config["num_hidden_layers"]):
        n, h = "layer%d." % i, "model.layers.%d." % i
        for ours, theirs in (("ln1", "input_layernorm"), ("ln2", "post_attention_layernorm")):
            out[h + theirs + ".weight"] = v[n + ours + ".w"]
            if n + ours + ".b" in v:
                out[h + theirs + ".bias"] = v[n + ours + ".b"]
        for suffix, kind in ((".w", "weight"), (".b", "bias")):
            if n + "qkv" + suffix in v:
                qkv = v[n + "qkv" + suffix]
                for part, rows in (("q_proj", qkv[:q]), ("k_proj", qkv[q:q + kv]), ("v_proj", qkv[q + kv:])):
                    out[h + "self_attn." + part + "." + kind] = rows
            if n + "proj" + suffix in v:
                out[h + "self_attn.o_proj." + kind] = v[n + "proj" + suffix]
        if n + "router.w" in v:
            out[h + "block_sparse_moe.gate.weight"] = v[n + "router.w"]
            for e in range(config["num_local_experts"]):
                fc1, f = v[n + "expert%d.fc1.w" % e], config["intermediate_size"]
                moe = h + "block_sparse_moe.experts.%d." % e
                out[moe + "w1.weight"], out[moe + "w3.weight"] = fc1[:f], fc1[f:]
                out[moe + "w2.weight"] = v[n + "expert%d.fc2.w" % e]
            continue
        gated = v[n + "fc1.w"].shape[0] == 2 * config["intermediate_size"]
        f = config["intermediate_size"]
        for suffix, kind in ((".w", "weight"), (".b", "bias")):
            if n + "fc1" + suffix in v:
                fc1 = v[n + "fc1" + suffix]
                if gated:
                    out[h + "mlp.gate_proj." + kind], out[h + "mlp.up_proj." + kind] = fc1[:f], fc1[f:]
                else:
                    out[h + "mlp.up_proj." + kind] = fc1
            if n + "fc2" + suffix in v:
                out[h + "mlp.down_proj." + kind] = v[n + "fc2" + suffix]
    return out


def gpt2_state_dict(v, config, vocab):
    """GPT-2's Conv1D layers store [in, out]: Parallax's [out, in] weights transposed."""
    out = {"transformer.wte.weight": v["wte"][:vocab], "transformer.wpe.weight": v["wpe"],
           "transformer.ln_f.weight": v["lnf.w"], "transformer.ln_f.bias": v["lnf.b"]}
    for i in range(config["n_layer"]):
        n, h = "layer%d." % i, "transformer.h.%d." % i
        pairs = (("ln1.w", "ln_1.weight"), ("ln1.b", "ln_1.bias"), ("ln2.w", "ln_2.weight"), ("ln2.b", "ln_2.bias"),
                 ("qkv.b", "attn.c_attn.bias"), ("proj.b", "attn.c_proj.bias"), ("fc1.b", "mlp.c_fc.bias"),
                 ("fc2.b", "mlp.c_proj.bias"))
        for ours, theirs in pairs:
            out[h + theirs] = v[n + ours]
        for ours, theirs in (("qkv.w", "attn.c_attn.weight"), ("proj.w", "attn.c_proj.weight"),
                             ("fc1.w", "mlp.c_fc.weight"), ("fc2.w", "mlp.c_proj.weight")):
            out[h + theirs] = np.ascontiguousarray(v[n + ours].T)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--model", help="the model's config.json (needed for Hugging Face names)")
    ap.add_argument("--out", required=True, help="the .npz to write")
    ap.add_argument("--names", choices=["hf", "parallax"], default="hf")
    ap.add_argument("--optimizer", action="store_true", help="with --names parallax: add NAME.exp_avg, NAME.exp_avg_sq")
    args = ap.parse_args()
    try:
        manifest, tensors = read_checkpoint(args.checkpoint)
    except (OSError, ValueError, KeyError) as e:
        print("checkpoint_reader: error: %s" % e, file=sys.stderr)
        return 2
    if args.names == "parallax":
        out = {name: t["value"] for name, t in tensors.items()}
        if args.optimizer:
            for name, t in tensors.items():
                out[name + ".exp_avg"], out[name + ".exp_avg_sq"] = t["exp_avg"], t["exp_avg_sq"]
    else:
        if not args.model:
            print("checkpoint_reader: error: --model CONFIG.json is needed for Hugging Face names", file=sys.stderr)
            return 2
        with open(args.model) as f:
            out = hf_state_dict(tensors, json.load(f))
    np.savez(args.out, **out)
    print("%s: step %d of %s (%d ranks) -> %d tensors in %s" %
          (step_directory(args.checkpoint), manifest["step"], manifest["model"], len(manifest["files"]), len(out), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
