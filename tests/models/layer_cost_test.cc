#include "models/layer_cost.h"

#include <gtest/gtest.h>

namespace parallax {
namespace {

ModelSpec load(const std::string& name) { return load_model(name).value(); }

ActivationOptions opts(int64_t s, int64_t b, int64_t t, bool sp, Recompute rc) {
  return {s, b, t, sp, rc, AttentionKernel::kMaterialized};
}

// Korthikanti et al. 2022, Table 2, on the 22B GPT of their Table 3 (a 64, h 6144, s 2048, b 4,
// t 8): every row of the table, exactly.
TEST(Activations, KorthikantiTable2RowsForGpt) {
  const ModelSpec m = load("gpt-22b");
  const double s = 2048, b = 4, h = 6144, a = 64, t = 8;
  const double sbh = s * b * h, as_h = a * s / h;
  auto bytes = [&](int64_t tp, bool sp, Recompute rc) {
    return layer_activation_bytes(m, opts(2048, 4, tp, sp, rc)).total();
  };
  EXPECT_DOUBLE_EQ(bytes(1, false, Recompute::kNone), sbh * (34 + 5 * as_h));
  EXPECT_DOUBLE_EQ(bytes(8, false, Recompute::kNone), sbh * (10 + 24 / t + 5 * as_h / t));
  EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::kNone), sbh * (34 / t + 5 * as_h / t));
  EXPECT_DOUBLE_EQ(bytes(8, false, Recompute::kSelective), sbh * (10 + 24 / t));
  EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::kSelective), sbh * 34 / t);
  EXPECT_DOUBLE_EQ(bytes(1, false, Recompute::kFull), sbh * 2);
  // With SP the stored layer input is sharded too.
  EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::kFull), sbh * 2 / t);
  // Full recompute on a quarter of the layers (Megatron's block method, 1 of 4 per chunk): per
  // layer on average 1/4 x 2 + 3/4 x (34 + 5 as/h), in sbh, at t 1.
  ActivationOptions quarter = opts(2048, 4, 1, false, Recompute::kFull);
  quarter.recompute_fraction = 0.25;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, quarter).total(), sbh * (0.25 * 2 + 0.75 * (34 + 5 * as_h)));
}

// Breakdown, no parallelism: attention 11sbh + 5as^2b, MLP 19sbh, two LayerNorms 4sbh.
TEST(Activations, KorthikantiBreakdown) {
  const ModelSpec m = load("gpt-22b");
  const LayerActivations a = layer_activation_bytes(m, opts(2048, 4, 1, false, Recompute::kNone));
  const double s = 2048, b = 4, h = 6144, heads = 64;
  EXPECT_DOUBLE_EQ(a.attention, 11 * s * b * h + 5 * heads * s * s * b);
  EXPECT_DOUBLE_EQ(a.mlp, 19 * s * b * h);
  EXPECT_DOUBLE_EQ(a.norms, 4 * s * b * h);
}

// The analogue for Llama (RMSNorm, SwiGLU, no dropout), derived in layer_cost.cc:
//   attention: norm output 2h + Q 2q + K 2kv + V 2kv + projection input 2q (+ 2as softmax output,
//   materialized, no dropout); MLP: norm output 2h + gate and up 4f + SwiGLU output 2f;
//   norms: 2 x 2h.
// Llama-3-8B (h 4096, q 4096, kv 1024, f 14336, a 32), s 8192, b 1, t 1:
//   attention = 2*4096 + 4*4096 + 4*1024 = 28,672 B/token (+ 2*32*8192 = 524,288 materialized)
//   MLP = 2*4096 + 6*14336 = 94,208 B/token; norms = 16,384 B/token.
TEST(Activations, LlamaSwigluGqaAnalogue) {
  const ModelSpec m = load("llama3-8b");
  const double tokens = 8192;
  LayerActivations a = layer_activation_bytes(m, opts(8192, 1, 1, false, Recompute::kNone));
  EXPECT_DOUBLE_EQ(a.attention, tokens * (28672 + 524288));
  EXPECT_DOUBLE_EQ(a.mlp, tokens * 94208);
  EXPECT_DOUBLE_EQ(a.norms, tokens * 16384);
  // Flash attention keeps an fp32 log-sum-exp per head (4a = 128 B/token) instead of the scores.
  ActivationOptions flash = opts(8192, 1, 1, false, Recompute::kNone);
  flash.attention = AttentionKernel::kFlash;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, flash).attention, tokens * (28672 + 128));
  // TP 8 with SP divides everything by 8: (28,672 + 94,208 + 16,384) / 8 = 17,408 B/token.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, opts(8192, 1, 8, true, Recompute::kSelective)).total(),
                   tokens * 17408);
  // TP 8 without SP: replicated 2h (attention input) + 2h (MLP input) + 4h (norms) = 32,768;
  // sharded (4q + 4kv + 6f) / 8 = (16,384 + 4,096 + 86,016) / 8 = 13,312.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, opts(8192, 1, 8, false, Recompute::kSelective)).total(),
                   tokens * (32768 + 13312));
}

// Per-token forward FLOPs: 2 x matmul weights + 4 s q_dim. GPT (12h^2 matmul weights):
// 24h^2 + 4sh. Backward = 2 x forward: B = 24h^2 + 8sh, W = 24h^2.
TEST(Flops, GptLayerPasses) {
  const ModelSpec m = load("gpt3-175b");
  const double h = 12288, s = 2048;
  const PassFlops f = layer_flops_per_token(m, 2048);
  EXPECT_DOUBLE_EQ(f.forward, 24 * h * h + 4 * s * h);
  EXPECT_DOUBLE_EQ(f.backward_input, 24 * h * h + 8 * s * h);
  EXPECT_DOUBLE_EQ(f.backward_weight, 24 * h * h);
  EXPECT_DOUBLE_EQ(f.backward(), 2 * f.forward);
  EXPECT_DOUBLE_EQ(logits_flops_per_token(m).forward, 2 * h * 51200);
}

// Korthikanti et al.: model FLOPs 72 B L s h^2 (1 + s/(6h) + V/(12hL)); Megatron-LM 2021 with full
// recompute 96 B s L h^2 (1 + s/(6h) + V/(16Lh)).
TEST(Flops, MatchMegatronStepFormulas) {
  for (const char* name : {"gpt-22b", "gpt3-175b", "gpt-530b", "gpt-1t"}) {
    const ModelSpec m = load(name);
    const double B = 512, s = 2048, L = m.layers, h = m.hidden, V = m.vocab;
    const double model = 72 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L));
    const double full = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
    EXPECT_NEAR(model_flops_per_step(m, 2048, 512), model, 1e-12 * model) << name;
    EXPECT_NEAR(hardware_flops_per_step(m, 2048, 512, Recompute::kFull), full, 1e-12 * full) << name;
    // Full recompute on half the layers re-runs half of the layers' forward: halfway between.
    EXPECT_NEAR(hardware_flops_per_step(m, 2048, 512, Recompute::kFull, SelectiveRecompute::kAttentionCore,
                                        AttentionKernel::kMaterialized, 0.5),
                (model + full) / 2, 1e-12 * full) << name;
    // Selective recompute re-runs the attention core forward: + 4 s h per token per layer.
    EXPECT_NEAR(hardware_flops_per_step(m, 2048, 512, Recompute::kSelective) - model, 4 * s * h * B * s * L,
                1e-9 * model);
  }
}

// What a causal flash kernel executes, against the model-FLOPs convention, for Llama-3.1-8B at
// 131,072 tokens (L 32, h 4096, q 4096, kv 1024, f 14336, V 128256), 32 sequences:
//   matmul weights per layer 4096 x (4096 + 2 x 1024 + 4096) + 3 x 4096 x 14336 = 218,103,808;
//   attention core forward per token 2 s (q + o) = 2 x 131072 x 8192 = 2,147,483,648.
//   Model (palm convention): 32 x 3 x (2 x 218,103,808 + 2,147,483,648) + 3 x 2 x 4096 x 128256
//     = 248,034,361,344 + 3,152,019,456 = 251,186,380,800 per token.
//   Executed: 1024 tiles of 128 a side, 1024 x 1025 / 2 computed: share 1025/2048; the core runs
//     forward + 2.5 x backward = 3.5 x 2,147,483,648 x 1025/2048 = 3,761,766,400 per layer:
//     32 x (1,308,622,848 + 3,761,766,400) + 3,152,019,456 = 165,404,475,392 per token (65.8%).
//   Full recompute re-runs each forward as executed: + 32 x (436,207,616 + 1,074,790,400) =
//     213,756,411,904; selective (the core): + 32 x 1,074,790,400 = 199,797,768,192.
TEST(Flops, HardwareFlopsAreWhatTheCausalKernelExecutes) {
  const ModelSpec m = load("llama3.1-8b");
  const double s = 131072, B = 32;
  EXPECT_DOUBLE_EQ(attention_executed_fraction(131072, AttentionKernel::kFlash), 1025.0 / 2048);
  EXPECT_DOUBLE_EQ(attention_executed_fraction(131072, AttentionKernel::kMaterialized), 1.0);
  EXPECT_DOUBLE_EQ(attention_executed_fraction(4096, AttentionKernel::kFlash), 33.0 / 64);
  EXPECT_DOUBLE_EQ(model_flops_per_step(m, 131072, 32), 251'186'380'800.0 * s * B);
  const auto hw = [&](Recompute r) { return hardware_flops_per_step(m, 131072, 32, r, SelectiveRecompute::kAttentionCore, AttentionKernel::kFlash); };
  EXPECT_DOUBLE_EQ(hw(Recompute::kNone), 165'404'475'392.0 * s * B);
  EXPECT_DOUBLE_EQ(hw(Recompute::kFull), 213'756'411'904.0 * s * B);
  EXPECT_DOUBLE_EQ(hw(Recompute::kSelective), 199'797'768'192.0 * s * B);
  // Materialized attention computes the whole square: without recompute, hardware = model.
  EXPECT_DOUBLE_EQ(hardware_flops_per_step(m, 131072, 32, Recompute::kNone), model_flops_per_step(m, 131072, 32));
  EXPECT_NE(std::string(kModelFlopsConvention).find("full s x s attention"), std::string::npos);
}

// The published MFU of Korthikanti et al. Table 5 follows from model FLOPs, the measured iteration
// time and 312 TFLOP/s per A100: 22B, B 4, 8 GPUs, 1.10 s -> 41.6% (published 41.5%); 175B, B 64,
// 64 GPUs, 13.75 s -> 51.4%; 530B, B 280, 280 GPUs, 37.83 s -> 56.0%; 1T, B 512, 512 GPUs,
// 71.49 s -> 56.3%.
TEST(Flops, ReproducePublishedMfu) {
  struct Row { const char* model; double batch, gpus, seconds, mfu; };
  for (const Row& r : {Row{"gpt-22b", 4, 8, 1.10, 0.415}, Row{"gpt3-175b", 64, 64, 13.75, 0.514},
                       Row{"gpt-530b", 280, 280, 37.83, 0.560}, Row{"gpt-1t", 512, 512, 71.49, 0.563}}) {
    const double flops = model_flops_per_step(load(r.model), 2048, static_cast<int64_t>(r.batch));
    EXPECT_NEAR(flops / (r.seconds * r.gpus * 312e12), r.mfu, 0.002) << r.model;
  }
}

TEST(Gemms, SumToLayerForwardFlopsPerTpRank) {
  for (const char* name : {"gpt3-175b", "llama3-70b", "mixtral-8x7b"}) {
    const ModelSpec m = load(name);
    double sum = 0;
    for (const Gemm& g : layer_gemms(m, 4096, 2, 8)) sum += g.flops();
    // The MoE router (h x E) is replicated on every TP rank, not split.
    const double router = m.is_moe() ? 2.0 * m.hidden * m.experts * 4096 * 2 : 0;
    const double expected = (layer_flops_per_token(m, 4096).forward * 4096 * 2 - router) / 8 + router;
    EXPECT_NEAR(sum, expected, 1e-9 * expected) << name;
  }
}

// GPT-2 124M, s 1024, t 1, materialized, dropout on, bytes per token forward:
//   norms 8h + residuals 12h + dropouts 10h = 30h = 23,040; GELU 4f = 12,288;
//   softmax 4as + attention dropout 5as = 9 * 12 * 1024 = 110,592. Total 145,920.
TEST(Elementwise, Gpt2BytesPerToken) {
  const ModelSpec m = load("gpt2");
  EXPECT_DOUBLE_EQ(layer_elementwise_bytes_per_token(m, 1024, 1, false, AttentionKernel::kMaterialized), 145920);
  // Flash fuses the softmax: 30h + 4f = 35,328.
  EXPECT_DOUBLE_EQ(layer_elementwise_bytes_per_token(m, 1024, 1, false, AttentionKernel::kFlash), 35328);
}

// Llama-3-8B (h 4096, q 4096, kv 1024, f 14336, GQA), s 8192, t 1, flash, bytes per token forward:
//   fused: norms 2 * 4h + residuals 12h = 20h = 81,920; SwiGLU 6f = 86,016; rotary 4(q + kv) =
//   20,480: 188,416.
//   eager: RMSNorms 2 * 36h = 294,912; residuals 49,152; SwiGLU 10f = 143,360; rotary 20(q + kv) =
//   102,400; repeat_kv 2(2kv + 2q) = 20,480; output transpose 4q = 16,384: 626,688.
TEST(Elementwise, EagerLlamaBytesPerToken) {
  const ModelSpec m = load("llama3-8b");
  EXPECT_DOUBLE_EQ(layer_elementwise_bytes_per_token(m, 8192, 1, false, AttentionKernel::kFlash, KernelFusion::kFused), 188416);
  EXPECT_DOUBLE_EQ(layer_elementwise_bytes_per_token(m, 8192, 1, false, AttentionKernel::kFlash, KernelFusion::kEager), 626688);
}

// torchtitan's op-level selective checkpointing on Llama-3-8B (32 heads), t 1, per token and layer:
//   saved: layer input 2h = 8,192; Q 2q = 8,192, V 2kv = 2,048, attention output 2q = 8,192 and
//   its fp32 log-sum-exp 4 * 32 = 128; gate 2f = 28,672 and down projection 2h = 8,192: 63,616.
//   Recomputed matmuls: K (h kv), O (q h) and up (h f): 4096 * (1024 + 4096 + 14336) = 79,691,776
//   weights, so 2x that FLOPs per token and layer.
TEST(Activations, OpLevelSelectiveRecompute) {
  const ModelSpec m = load("llama3-8b");
  ActivationOptions o{8192, 1, 1, false, Recompute::kSelective, AttentionKernel::kFlash, SelectiveRecompute::kOps};
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, o).total(), 63616.0 * 8192);
  EXPECT_EQ(ops_recomputed_matmul_weights(m), 79'691'776);
  const double tokens = 8192.0 * 16;
  EXPECT_NEAR(hardware_flops_per_step(m, 8192, 16, Recompute::kSelective, SelectiveRecompute::kOps) -
                  model_flops_per_step(m, 8192, 16),
              32 * 2 * 79'691'776.0 * tokens, 1e-3);
}

}  // namespace
}  // namespace parallax
