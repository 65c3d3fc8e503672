// The single-rank model against independent checks: loss ln(V) at initialization and gradients
// against central finite differences of the loss.
#include <algorithm>
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>

#include "models/layer_cost.h"
#include "runtime/trainer.h"
#include "runtime/transformer.h"
#include "runtime/transformer_cache.h"

namespace parallax {
namespace {

ModelSpec tiny(const std::string& name) {
  return load_model(std::string(PARALLAX_SOURCE_DIR) + "/tests/data/" + name + ".json").value();
}

struct Batch {
  std::vector<int> inputs, targets;
};
Batch batch(const ModelSpec& m, int b, int s, int64_t step = 0) {
  Batch out;
  for (int i = 0; i < b; ++i)
    for (int p = 0; p < s; ++p) {
      out.inputs.push_back(synthetic_token(7, step, i, p, m.vocab));
      out.targets.push_back(synthetic_token(7, step, i, p + 1, m.vocab));
    }
  return out;
}

// Small initial weights make every logit about 0: the mean loss starts at ln(padded vocab 128).
TEST(Transformer, InitialLossIsLogVocab) {
  for (const char* name : {"tiny-gpt", "tiny-llama"}) {
    const ModelSpec m = tiny(name);
    Transformer t = Transformer::create(m, 1, 0, 1234).value();
    auto self = make_self_communicator();
    const Batch x = batch(m, 2, 8);
    const double loss = t.forward_backward(x.inputs.data(), x.targets.data(), 2, 8, 1.0f / 16, *self) / 16;
    EXPECT_NEAR(loss, std::log(128.0), 0.05) << name;
  }
}

// d(mean loss)/d(theta) for a spread of parameter entries of every tensor: central differences
// at h and h/2 (h = 0.02) combined by Richardson extrapolation, (4 D(h/2) - D(h)) / 3, which
// cancels the h^2 error that directions such as residual biases are curved enough to show.
TEST(Transformer, GradientsMatchFiniteDifferences) {
  for (const char* name : {"tiny-gpt", "tiny-llama", "tiny-llama-bias"}) {
    const ModelSpec m = tiny(name);
    Transformer t = Transformer::create(m, 1, 0, 99).value();
    auto self = make_self_communicator();
    const int b = 2, s = 6, n = b * s;
    const Batch x = batch(m, b, s);
    auto loss = [&] {
      return t.forward_backward(x.inputs.data(), x.targets.data(), b, s, 1.0f / n, *self) / n;
    };
    for (Param* p : t.params()) std::fill(p->grad.begin(), p->grad.end(), 0.0f);
    (void)loss();
    std::vector<std::vector<float>> grads;
    for (Param* p : t.params()) grads.emplace_back(p->grad.begin(), p->grad.end());
    const float h = 2e-2f;
    size_t checked = 0;
    std::vector<Param*> params = t.params();
    for (size_t k = 0; k < params.size(); ++k) {
      Param* p = params[k];
      const size_t stride = std::max<size_t>(1, p->value.size() / 5);
      for (size_t i = 0; i < p->value.size(); i += stride) {
        const float saved = p->value[i];
        auto central = [&](float step) {
          p->value[i] = saved + step;
          const double up = loss();
          p->value[i] = saved - step;
          const double down = loss();
          p->value[i] = saved;
          return (up - down) / (2 * step);
        };
        const double numeric = (4 * central(h / 2) - central(h)) / 3;
        EXPECT_NEAR(grads[k][i], numeric, 2e-3 * std::abs(numeric) + 2e-4) << name << " " << p->name << "[" << i << "]";
        ++checked;
      }
    }
    EXPECT_GT(checked, 50u);
  }
}

// The runtime holds every parameter the model has: its tensors add up to the model's count
// (models/layer_cost.h), so a bias the config asks for (Llama's attention_bias on Q, K, V and O,
// its mlp_bias on gate, up and down) is trained, not dropped.
TEST(Transformer, HoldsEveryParameterOfTheModel) {
  for (const char* name : {"tiny-gpt", "tiny-llama", "tiny-llama-bias", "tiny-nemotron"}) {
    const ModelSpec m = tiny(name);
    Transformer t = Transformer::create(m, 1, 0, 1).value();
    int64_t held = 0;
    for (Param* p : t.params()) held += static_cast<int64_t>(p->value.size());
    EXPECT_EQ(held, total_params(m)) << name;
  }
  // tiny-llama-bias over tiny-llama, per layer: Q, K, V and O biases (32 + 2 x 16 + 32) and the
  // gate, up and down biases (2 x 64 + 32): 256, times 4 layers.
  EXPECT_EQ(total_params(tiny("tiny-llama-bias")) - total_params(tiny("tiny-llama")), 4 * 256);
}

TEST(Transformer, TpMustDivideTheModel) {
  Result<Transformer> t = Transformer::create(tiny("tiny-llama"), 4, 0, 1);  // 2 KV heads
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().find("tp 4 must divide"), std::string::npos);
}

TEST(Trainer, ReadsTokenFiles) {
  const std::string ids = testing::TempDir() + "/ids.txt", bytes = testing::TempDir() + "/bytes.txt";
  std::ofstream(ids) << "5 17\n3 9";
  std::ofstream(bytes) << "hi!";
  EXPECT_EQ(read_token_file(ids, 128).value(), (std::vector<int>{5, 17, 3, 9}));
  EXPECT_EQ(read_token_file(bytes, 256).value(), (std::vector<int>{'h', 'i', '!'}));
  EXPECT_EQ(read_token_file(bytes, 100).error(), bytes + ": token 104 is outside the vocabulary of 100");
  EXPECT_EQ(read_token_file(testing::TempDir() + "/none", 128).error(), testing::TempDir() + "/none: cannot open file");
  EXPECT_EQ(read_token_file(testing::TempDir(), 128).error(), testing::TempDir() + ": is a directory, not a training file");
}

TEST(Trainer, RankCoordinatesFollowTheRankOrder) {
  Plan p;
  p.tp = 2;
  p.dp = 3;
  p.pp = 2;
  // rank = pp * (dp * tp) + dp * tp + tp
  const RankCoords c = RankGrid(p).coords(9);  // 9 = 1 * 6 + 1 * 2 + 1
  EXPECT_EQ(RankGrid(p).rank(c), 9);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 1);
}

TEST(Trainer, RefusesWhatItCannotRunYet) {
  ModelSpec m = tiny("tiny-llama");
  Plan p;
  p.offload = true;
  EXPECT_EQ(check_runtime_support(m, p).error(), "the CPU runtime does not execute offload yet");
  p.offload = false;
  EXPECT_TRUE(check_runtime_support(m, p).ok());
  m.experts = 8, m.shared_ffn_hidden = 64;  // shared experts: refused, not trained without them
  EXPECT_EQ(check_runtime_support(m, p).error(),
            "the CPU runtime does not execute shared experts, leading dense layers or latent attention (tiny-llama; "
            "Mixtral-style MoE runs) yet");
  m.shared_ffn_hidden = 0;
  // Settings only the cost model knows are refused, never silently run another way.
  m.experts = 1;
  p.recompute = Recompute::kSelective, p.execution.selective = SelectiveRecompute::kOps;
  EXPECT_EQ(check_runtime_support(m, p).error(),
            "the CPU runtime does not execute selective recompute 'ops' (it re-runs the attention core) yet");
  p.recompute = Recompute::kNone, p.dp = 4, p.dp_shard = 2, p.zero = 3;
  EXPECT_EQ(check_runtime_support(m, p).error(), "the CPU runtime does not execute hybrid sharding (dp_shard 2 < dp) yet");
  // Architecture details its transformer does not have are refused by name.
  p.dp = 1, p.dp_shard = 0, p.zero = 0;
  ModelSpec qwen3 = m;
  qwen3.model_type = "qwen3", qwen3.qk_norm_params = 2 * m.head_dim;
  EXPECT_EQ(check_runtime_support(qwen3, p).error(), "the CPU runtime does not execute q/k norms (qwen3) yet");
  ModelSpec gemma = m;
  gemma.model_type = "gemma", gemma.hidden_act = "gelu_pytorch_tanh";
  EXPECT_EQ(check_runtime_support(gemma, p).error(), "the CPU runtime does not execute a gated MLP with gelu_pytorch_tanh (gemma) yet");
  ModelSpec mtp = m;  // priced, so never trained without it
  mtp.mtp_layers = 1;
  EXPECT_EQ(check_runtime_support(mtp, p).error(),
            "the CPU runtime does not execute multi-token prediction (num_nextn_predict_layers 1) (llama) yet");
}

}  // namespace
}  // namespace parallax

namespace parallax {
namespace {

// Roles are set where parameters are created: GPT-2's LayerNorm weights and biases are norms, its
// linear biases biases, the rest matrices and embeddings; only the last two take weight decay.
TEST(Transformer, ParameterRolesAndWeightDecay) {
  Transformer t = Transformer::create(tiny("tiny-gpt"), 1, 0, 1).value();
  int norms = 0, biases = 0;
  for (const Param* p : t.params()) {
    norms += is_norm(p->role), biases += p->role == ParamRole::kBias;
    EXPECT_EQ(p->sp_partial, is_norm(p->role)) << p->name;
    EXPECT_EQ(decays(p->role, false), p->role == ParamRole::kMatrix || p->role == ParamRole::kEmbedding) << p->name;
    EXPECT_TRUE(decays(p->role, true)) << p->name;
  }
  EXPECT_EQ(norms, 4 * 4 + 2);  // per layer ln1.w, ln1.b, ln2.w, ln2.b; lnf.w, lnf.b
  EXPECT_EQ(biases, 4 * 4);     // per layer qkv.b, proj.b, fc1.b, fc2.b
}

// One rank, one step, AdamW with lr 0.01 and weight decay 0.5: decoupled decay subtracts
// lr wd p = 0.005 p, so a norm weight (p = 1 at the start) ends 0.005 lower when norms decay,
// and every matrix ends the same either way.
TEST(Trainer, NormsAndBiasesTakeNoWeightDecayByDefault) {
  Plan p;
  p.global_batch = 2;
  p.seq_len = 16;
  p.precision = Precision::kFp32;
  auto final_values = [&](bool decay_norms) {
    auto world = make_self_communicator();
    TrainOptions o;
    o.adam.lr = 0.01f, o.adam.weight_decay = 0.5f, o.decay_norms_and_biases = decay_norms;
    std::unique_ptr<Trainer> t = Trainer::create(tiny("tiny-gpt"), p, *world, o).value();
    t->step(0);
    return t->export_state();
  };
  const std::vector<TensorShard> off = final_values(false), on = final_values(true);
  ASSERT_EQ(off.size(), on.size());
  Transformer layout = Transformer::create(tiny("tiny-gpt"), 1, 0, 1234).value();
  for (size_t i = 0; i < off.size(); ++i) {
    const Param* param = layout.params()[i];
    ASSERT_EQ(off[i].name, param->name);
    if (param->role == ParamRole::kNormWeight) {
      EXPECT_NEAR(off[i].value[0] - on[i].value[0], 0.005f, 1e-6f) << param->name;
    }
    if (param->role == ParamRole::kMatrix) {
      EXPECT_EQ(off[i].value[0], on[i].value[0]) << param->name;
    }
  }
}

// ZB-H1 splits a chunk's backward into B (input gradients) and W (parameter gradients). B leaves
// the gradients of the layers and the embedding untouched (the head's come from the forward, as
// unsplit), and B then W accumulates what the combined backward does over two micro-batches: W
// runs the combined pass's arithmetic on copies of its operands (FP8: the same rounded ones).
// Full recompute on a share p of the blocks, placed as fms-fsdp's apply_fsdp_checkpointing
// docstring lists them: 1/2 -> [ac, -, ac, -], 1/3 -> [-, ac, -, -, ac, -], 2/3 -> [ac, -, ac, ac, -, ac].
TEST(Transformer, RecomputesAnEvenlySpacedShareOfTheLayers) {
  auto pattern = [](double p) {
    std::string out;
    for (int64_t i = 0; i < 6; ++i) out += Transformer::recomputes_layer(i, p) ? 'x' : '.';
    return out;
  };
  EXPECT_EQ(pattern(0.5), "x.x.x.");
  EXPECT_EQ(pattern(1.0 / 3), ".x..x.");
  EXPECT_EQ(pattern(2.0 / 3), "x.xx.x");
  EXPECT_EQ(pattern(1.0), "xxxxxx");
}

TEST(Transformer, SplitWeightGradientsEqualTheCombinedBackward) {
  struct Case {
    const char* model;
    Recompute recompute;
    bool fp8;
  };
  for (const Case& c : {Case{"tiny-gpt", Recompute::kNone, false}, Case{"tiny-llama", Recompute::kNone, false},
                        Case{"tiny-mixtral", Recompute::kNone, false}, Case{"tiny-gpt", Recompute::kFull, false},
                        Case{"tiny-llama", Recompute::kSelective, true}}) {
    const ModelSpec m = tiny(c.model);
    auto self = make_self_communicator();
    auto make = [&](bool split) {
      Transformer t = Transformer::create(m, 1, 0, 5).value();
      t.set_recompute(c.recompute), t.set_fp8(c.fp8), t.set_split_weight_gradients(split);
      return t;
    };
    Transformer combined = make(false), split = make(true);
    const int b = 2, s = 8;
    for (int64_t mb = 0; mb < 2; ++mb) {
      const Batch x = batch(m, b, s, mb);
      combined.forward_backward(x.inputs.data(), x.targets.data(), b, s, 1.0f / 32, *self);
      Transformer::MicroBatch state;
      split.forward(0, x.inputs.data(), x.targets.data(), nullptr, nullptr, b, s, 1.0f / 32, *self, state);
      split.backward(0, nullptr, nullptr, b, s, *self, state);
      for (const Param* p : split.params()) {
        const bool head = p->name.rfind("lnf.", 0) == 0 || p->name == "head" || (p->name == "wte" && m.tied_embeddings);
        if (mb == 0 && !head) {
          EXPECT_TRUE(std::all_of(p->grad.begin(), p->grad.end(), [](float g) { return g == 0; })) << c.model << " " << p->name;
        }
      }
      split.weight_backward(0, b, s, state);
    }
    const std::vector<Param*> want = combined.params(), got = split.params();
    ASSERT_EQ(want.size(), got.size());
    for (size_t k = 0; k < want.size(); ++k) {
      float scale = 0;
      for (float g : want[k]->grad) scale = std::max(scale, std::abs(g));
      EXPECT_GT(scale, 0) << c.model << " " << want[k]->name;
      for (size_t i = 0; i < want[k]->grad.size(); ++i)
        ASSERT_NEAR(got[k]->grad[i], want[k]->grad[i], 1e-6 * scale) << c.model << " " << want[k]->name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace parallax
