#!/usr/bin/env python3
"""Parameter counts of the mlc-llm presets (mlc-llm-presets.json), derived without Parallax.

Each architecture is counted module by module as its Hugging Face modeling code builds it
(transformers' modeling_<type>.py, or the model's own remote code for qwen, baichuan, internlm,
chatglm, deepseek, minicpm, orion, phi-msft), with that config class's defaults for absent keys.
The C++ reader (models/) is a second, independent derivation: tests/models/presets_test.cc holds
the counts this script prints and checks that the reader reproduces each one. Run:

    python3 tests/data/preset_params.py            # name<TAB>count, or name<TAB>REFUSED<TAB>why
"""
import json
import os
import sys


def lin(i, o, bias=False):
    return i * o + (o if bias else 0)


def get(c, key, default):
    v = c.get(key)
    return default if v is None else v


def decoder(c, *, h, L, heads, kv, hd, f, V, tied, norm, norms=2, qkv_bias=False, o_bias=False,
            mlp_bias=False, gated=True, qk_norm=0, lm_head_bias=False, final_norm=True):
    """A decoder stack: per layer attention (q, k, v, o), an MLP, `norms` norms of `norm` params."""
    attn = lin(h, heads * hd, qkv_bias) + 2 * lin(h, kv * hd, qkv_bias) + lin(heads * hd, h, o_bias)
    mlp = (2 * lin(h, f, mlp_bias) if gated else lin(h, f, mlp_bias)) + lin(f, h, mlp_bias)
    layer = attn + mlp + norms * norm + qk_norm
    total = L * layer + V * h + (0 if tied else V * h + (V if lm_head_bias else 0))
    return total + (norm if final_norm else 0)


def llama(c, **over):
    # LlamaConfig defaults (LLaVA's text_config relies on them).
    h = get(c, "hidden_size", 4096)
    heads = get(c, "num_attention_heads", 32)
    args = dict(h=h, L=get(c, "num_hidden_layers", 32), heads=heads,
                kv=get(c, "num_key_value_heads", heads), hd=get(c, "head_dim", h // heads),
                f=get(c, "intermediate_size", 11008), V=get(c, "vocab_size", 32000),
                tied=get(c, "tie_word_embeddings", False), norm=h,
                qkv_bias=get(c, "attention_bias", False), o_bias=get(c, "attention_bias", False),
                mlp_bias=get(c, "mlp_bias", False))
    args.update(over)
    return decoder(c, **args)


def moe_layer(h, experts, f_expert, shared_f, gate_bias=False):
    """Routed SwiGLU experts, a router of h x experts, a shared SwiGLU MLP of shared_f."""
    return experts * 3 * h * f_expert + lin(h, experts, gate_bias) + 3 * h * shared_f


def attn_llama(h, heads, kv, hd, qkv_bias=False, o_bias=False):
    return lin(h, heads * hd, qkv_bias) + 2 * lin(h, kv * hd, qkv_bias) + lin(heads * hd, h, o_bias)


def mixtral(c):
    h, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    layer = attn_llama(h, heads, kv, get(c, "head_dim", h // heads)) + 2 * h
    layer += moe_layer(h, c["num_local_experts"], c["intermediate_size"], 0)
    return L * layer + 2 * V * h + h


def qwen2_moe(c):
    h, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    layer = attn_llama(h, heads, kv, h // heads, qkv_bias=True) + 2 * h
    shared = c["shared_expert_intermediate_size"]
    layer += moe_layer(h, c["num_experts"], c["moe_intermediate_size"], shared) + h  # + shared gate
    return L * layer + 2 * V * h + h


def deepseek(c, mla):
    """DeepSeek-MoE (v1, Llama attention) and V2 (multi-head latent attention)."""
    h, L, V, heads = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["num_attention_heads"]
    if mla:
        nope, rope, vd, r = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
        q_lora = c.get("q_lora_rank")
        q = h * heads * (nope + rope) if not q_lora else h * q_lora + q_lora + q_lora * heads * (nope + rope)
        attn = q + h * (r + rope) + r + r * heads * (nope + vd) + heads * vd * h
    else:
        attn = attn_llama(h, heads, get(c, "num_key_value_heads", heads), h // heads)
    dense = get(c, "first_k_dense_replace", 0)
    fe = c["moe_intermediate_size"]
    moe = moe_layer(h, c["n_routed_experts"], fe, get(c, "n_shared_experts", 0) * fe)
    layers = dense * (attn + 2 * h + 3 * h * c["intermediate_size"]) + (L - dense) * (attn + 2 * h + moe)
    return layers + (1 if get(c, "tie_word_embeddings", False) else 2) * V * h + h


def minicpm(c):
    h = c["hidden_size"]
    if "num_experts" not in c:
        return llama(c, tied=get(c, "tie_word_embeddings", True))
    # modeling_minicpm.py's MiniCPMMoE: a bias-free gate h x num_experts, num_experts MiniCPMMLPs.
    heads = c["num_attention_heads"]
    layer = attn_llama(h, heads, get(c, "num_key_value_heads", heads), h // heads) + 2 * h
    layer += moe_layer(h, c["num_experts"], c["intermediate_size"], 0)
    tied = get(c, "tie_word_embeddings", True)
    return c["num_hidden_layers"] * layer + (1 if tied else 2) * c["vocab_size"] * h + h


def gpt2_like(c, *, kv_heads=None, lm_head_bias=False, attn_bias=True, norms=2, parallel_qkv=True):
    """GPT-2, GPT-BigCode (MQA), GPT-J, phi-msft: LayerNorms with bias, learned or rotary positions."""
    h, L, heads, V = c["n_embd"], c["n_layer"], c["n_head"], c["vocab_size"]
    f = get(c, "n_inner", 4 * h)
    hd = h // heads
    kv = heads if kv_heads is None else kv_heads
    attn = lin(h, (heads + 2 * kv) * hd, attn_bias) + lin(h, h, attn_bias)
    layer = norms * 2 * h + attn + lin(h, f, True) + lin(f, h, True)
    return L * layer, h, V


def gpt2(c):
    layers, h, V = gpt2_like(c)
    return layers + V * h + c["n_positions"] * h + 2 * h  # lm_head tied to wte


def gpt_bigcode(c):
    layers, h, V = gpt2_like(c, kv_heads=1 if get(c, "multi_query", True) else None)
    return layers + V * h + c["n_positions"] * h + 2 * h  # tied


def gptj(c):
    # GPTJBlock: one ln_1 (parallel attention and MLP), q/k/v/out without bias; lm_head with bias.
    layers, h, V = gpt2_like(c, attn_bias=False, norms=1)
    return layers + V * h + lin(h, V, True) + 2 * h


def phi_msft(c):
    # ParallelBlock: one ln, Wqkv and out_proj with bias, fc1/fc2 with bias; CausalLMHead: ln + linear(bias).
    layers, h, V = gpt2_like(c, norms=1)
    return layers + V * h + 2 * h + lin(h, V, True)


def qwen(c):
    # QWenBlock: ln_1, c_attn (h -> 3h, bias), c_proj (no_bias), ln_2, QWenMLP w1, w2 (h -> f/2) and
    # c_proj (f/2 -> h); RMSNorm; ln_f; lm_head without bias.
    h, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    b = not get(c, "no_bias", True)
    f = c["intermediate_size"] // 2
    layer = lin(h, 3 * h, True) + lin(h, h, b) + 2 * lin(h, f, b) + lin(f, h, b) + 2 * h
    return L * layer + V * h * (1 if get(c, "tie_word_embeddings", False) else 2) + h


def chatglm(c):
    # GLMBlock: input_layernorm, query_key_value (h -> h + 2 groups x kv_channels, add_qkv_bias),
    # dense (add_bias_linear), post_attention_layernorm, dense_h_to_4h (h -> 2f), dense_4h_to_h.
    h, L, V = c["hidden_size"], c["num_layers"], c["padded_vocab_size"]
    kv_ch, f = c["kv_channels"], c["ffn_hidden_size"]
    groups = c["multi_query_group_num"] if c.get("multi_query_attention") else c["num_attention_heads"]
    b = c.get("add_bias_linear", True)
    norm = h if c.get("rmsnorm", True) else 2 * h
    layer = lin(h, c["num_attention_heads"] * kv_ch + 2 * groups * kv_ch, b or c.get("add_qkv_bias", False))
    layer += lin(c["num_attention_heads"] * kv_ch, h, b) + lin(h, 2 * f, b) + lin(f, h, b) + 2 * norm
    return L * layer + 2 * V * h + (norm if c.get("post_layer_norm", True) else 0)


def neox_like(c, *, norm_bias, qkv_bias, o_bias, mlp_bias, gated, tied, norms=2, qk_norm=0):
    h = c["hidden_size"]
    norm = 2 * h if norm_bias else h
    return llama(c, qkv_bias=qkv_bias, o_bias=o_bias, mlp_bias=mlp_bias, gated=gated, tied=tied, norm=norm,
                 norms=norms, qk_norm=qk_norm)


def count(c):
    t = c["model_type"]
    if t in ("llama", "mistral", "internlm", "baichuan"):
        if t == "internlm":  # InternLMAttention: q, k, v, o with bias=config.bias; the MLP without
            return llama(c, qkv_bias=get(c, "bias", True), o_bias=get(c, "bias", True))
        if t == "mistral":  # MistralAttention has no biases whatever the config says
            return llama(c, qkv_bias=False, o_bias=False, mlp_bias=False)
        return llama(c)
    if t == "llava":
        return llama(c["text_config"])
    if t == "ministral3":
        return llama(c["text_config"], tied=get(c["text_config"], "tie_word_embeddings", True))
    if t in ("phi3", "phi3_v"):
        return llama(c, qkv_bias=False, o_bias=False, mlp_bias=False)
    if t == "qwen2":
        return llama(c, qkv_bias=True, o_bias=False)
    if t == "qwen3":  # Qwen3Attention: q_norm and k_norm of head_dim each
        return llama(c, qk_norm=2 * c["head_dim"])
    if t == "olmo2":  # Olmo2Attention: q_norm over q_dim, k_norm over kv_dim; two post-norms
        h, heads = c["hidden_size"], c["num_attention_heads"]
        hd = h // heads
        return llama(c, qk_norm=heads * hd + get(c, "num_key_value_heads", heads) * hd)
    if t == "orion":  # OrionDecoderLayer: nn.LayerNorm (weight and bias) for every norm
        return llama(c, norm=2 * c["hidden_size"])
    if t == "minicpm":
        return minicpm(c)
    if t in ("gemma", "gemma2", "gemma3_text"):
        norms = 2 if t == "gemma" else 4
        qk = 2 * c["head_dim"] if t == "gemma3_text" else 0
        return llama(c, tied=get(c, "tie_word_embeddings", True), norms=norms, qk_norm=qk)
    if t == "internlm2":  # wqkv and wo with bias=config.bias; w1, w2, w3 without
        return llama(c, qkv_bias=c["bias"], o_bias=c["bias"], mlp_bias=False)
    if t == "cohere":  # one CohereLayerNorm (weight only) per layer, parallel block, tied
        return neox_like(c, norm_bias=False, qkv_bias=False, o_bias=False, mlp_bias=False, gated=True,
                         tied=get(c, "tie_word_embeddings", True), norms=1)
    if t == "stablelm":  # LayerNorm with bias, q/k/v bias by use_qkv_bias
        return neox_like(c, norm_bias=True, qkv_bias=c["use_qkv_bias"], o_bias=False, mlp_bias=False, gated=True,
                         tied=get(c, "tie_word_embeddings", False))
    if t == "gpt_neox":  # query_key_value and dense with bias, MLP with bias, GELU
        return neox_like(c, norm_bias=True, qkv_bias=True, o_bias=True, mlp_bias=True, gated=False,
                         tied=get(c, "tie_word_embeddings", False))
    if t == "starcoder2":  # LayerNorm with bias, every linear with use_bias, c_fc/c_proj MLP
        b = c["use_bias"]
        return neox_like(c, norm_bias=True, qkv_bias=b, o_bias=b, mlp_bias=b, gated=False,
                         tied=get(c, "tie_word_embeddings", True))
    if t == "mixtral":
        return mixtral(c)
    if t == "qwen2_moe":
        return qwen2_moe(c)
    if t == "deepseek":
        return deepseek(c, mla=False)
    if t == "deepseek_v2":
        return deepseek(c, mla=True)
    if t == "gpt2":
        return gpt2(c)
    if t == "gpt_bigcode":
        return gpt_bigcode(c)
    if t == "gptj":
        return gptj(c)
    if t == "phi-msft":
        return phi_msft(c)
    if t == "qwen":
        return qwen(c)
    if t == "chatglm":
        return chatglm(c)
    return None  # rwkv5 (a recurrent model), bert (an encoder)


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mlc-llm-presets.json")
    presets = json.load(open(path))["presets"]
    for name, config in presets.items():
        n = count(config)
        print(f"{name}\t{n}" if n is not None else f"{name}\tREFUSED\t{config['model_type']}")


if __name__ == "__main__":
    sys.exit(main())
