#include "program/pipeline_layout.h"

#include <gtest/gtest.h>

#include "models/model_spec.h"
#include "program/plan.h"

namespace parallax {
namespace {

using Layers = std::vector<int64_t>;

Layers parse(const std::string& s) {
  Result<Layers> r = parse_megatron_layout(s);
  EXPECT_TRUE(r.ok()) << s << ": " << r.error();
  return r.ok() ? r.value() : Layers{};
}

// Qwen3-235B (94 layers) in Megatron-MoE-ModelZoo's recipe, account_for_embedding/loss on PP 8 x
// VP 4: (94 + 2) / 32 = 3 slots per chunk, the first chunk's first slot the embedding and the last
// chunk's last the loss: 2 + 30 x 3 + 2 = 94.
TEST(PipelineLayout, ParsesMegatronStrings) {
  Layers qwen = parse("Ett|(ttt|)*30ttL");
  ASSERT_EQ(qwen.size(), 32u);
  EXPECT_EQ(qwen.front(), 2);
  EXPECT_EQ(qwen[1], 3);
  EXPECT_EQ(qwen.back(), 2);
  int64_t sum = 0;
  for (int64_t n : qwen) sum += n;
  EXPECT_EQ(sum, 94);
  // PP 32 x VP 3: (94 + 2) / 96 = 1 slot, so the embedding and the loss each fill a chunk.
  Layers alone = parse("E|(t|)*94L");
  ASSERT_EQ(alone.size(), 96u);
  EXPECT_EQ(alone.front(), 0);
  EXPECT_EQ(alone[1], 1);
  EXPECT_EQ(alone.back(), 0);
  // 't*N', commas and spaces: DeepSeek-V3's B200 layout without its MTP layer.
  EXPECT_EQ(parse("Et*4|(tttt|)*14, t L"), (Layers{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1}));
  EXPECT_EQ(parse("tt|tt"), (Layers{2, 2}));  // E and L may be left out
}

TEST(PipelineLayout, RefusesWhatItCannotPrice) {
  auto error = [](const std::string& s) {
    Result<Layers> r = parse_megatron_layout(s);
    return r.ok() ? std::string("ok") : r.error();
  };
  EXPECT_EQ(error("Et|(tt|)*30mL"), "has an MTP layer 'm', which Parallax does not price, at position 11 of \"Et|(tt|)*30mL\"");
  EXPECT_EQ(error("Et|x|L"), "has 'x' (not E, t, L, |, ( or )) at position 3 of \"Et|x|L\"");
  EXPECT_EQ(error("E(tt|"), "has an unclosed '(' at position 5 of \"E(tt|\"");
  EXPECT_EQ(error("Et|t*"), "has '*' without a count at position 5 of \"Et|t*\"");
  EXPECT_EQ(error("((t|)*2)*2"), "has '(' (not E, t, L, |, ( or )) at position 1 of \"((t|)*2)*2\"");
  EXPECT_EQ(error("t|Et"), "the embedding 'E' belongs once in the first chunk of \"t|Et\"");
  EXPECT_EQ(error("tL|t"), "the loss 'L' belongs in the last chunk of \"tL|t\"");
  EXPECT_EQ(error("t*9999999"), "has a repeat above 1000000 at position 9 of \"t*9999999\"");
}

// Runs of equal middle chunks fold; what Megatron reads back is the same layout.
TEST(PipelineLayout, WritesWhatItReads) {
  EXPECT_EQ(megatron_layout_string({2, 3, 3, 2}), "Ett|(ttt|)*2ttL");
  EXPECT_EQ(megatron_layout_string({0, 1, 1, 1, 0}), "E|(t|)*3L");
  EXPECT_EQ(megatron_layout_string({3, 4, 3}), "Ettt|t*4|tttL");
  EXPECT_EQ(megatron_layout_string({5}), "Et*5L");
  for (const Layers& l : {Layers{2, 3, 3, 2}, Layers{0, 1, 1, 1, 0}, Layers{3, 4, 3}, Layers{1, 2, 2, 3, 3, 3, 1}})
    EXPECT_EQ(parse(megatron_layout_string(l)), l);
}

ModelSpec layers_model(int64_t layers) {
  ModelSpec m;
  m.layers = layers, m.heads = m.kv_heads = 8, m.hidden = 512, m.head_dim = 64, m.ffn_hidden = 2048, m.vocab = 1000;
  m.max_positions = 4096;
  return m;
}

// Llama 3.1 405B in torchtitan's generated split for interleaved 1F1B on PP 16 (2 stages per
// rank): 126 layers over 32 stages, base 3, the 30 middle stages one more: 3 + 30 x 4 + 3 = 126.
// Pipeline rank 0 holds model chunks 0 and 16: layers [0, 3) and [3 + 15 x 4, +4) = [63, 67).
TEST(PipelineLayout, PlanChunksInModelOrder) {
  Plan p;
  p.pp = 16, p.virtual_stages = 2, p.schedule = Schedule::kInterleaved, p.global_batch = 16;
  p.pipeline_layout.assign(32, 4);
  p.pipeline_layout.front() = p.pipeline_layout.back() = 3;
  const ModelSpec m = layers_model(126);
  ASSERT_TRUE(check_plan(p, m, 8).ok()) << check_plan(p, m, 8).error();
  EXPECT_EQ(p.chunk_layers(126, 0, 0).first, 0);
  EXPECT_EQ(p.chunk_layers(126, 0, 0).count, 3);
  EXPECT_EQ(p.chunk_layers(126, 0, 1).first, 63);
  EXPECT_EQ(p.chunk_layers(126, 0, 1).count, 4);
  EXPECT_EQ(p.chunk_layers(126, 15, 1).first, 123);
  EXPECT_EQ(p.stage_layers(126, 0), 7);   // 3 + 4
  EXPECT_EQ(p.stage_layers(126, 15), 7);  // 4 + 3
  EXPECT_EQ(p.stage_layers(126, 7), 8);
  EXPECT_EQ(p.max_stage_layers(126), 8);
  // The JSON form round-trips, and the Megatron string reads as the same layout.
  EXPECT_EQ(plan_from_json(plan_to_json(p), "p.json")->pipeline_layout, p.pipeline_layout);
  nlohmann::json j = plan_to_json(p);
  j["pipeline_layout"] = "Ettt|(t*4|)*30tttL";
  EXPECT_EQ(plan_from_json(j, "p.json")->pipeline_layout, p.pipeline_layout);
}

TEST(PipelineLayout, PlanRefusesALayoutThatDoesNotFit) {
  Plan p;
  p.pp = 2, p.virtual_stages = 2, p.schedule = Schedule::kInterleaved, p.global_batch = 4;
  const ModelSpec m = layers_model(8);
  const std::string need = " layers; it needs pp 2 >= 2 x virtual_stages 2 chunks of num_layers 8 in all, and no "
                           "first/last_stage_layers";
  p.pipeline_layout = {2, 2, 2};
  EXPECT_EQ(check_plan(p, m, 8).error(), "invalid plan: pipeline_layout has 3 chunks of 6" + need);
  p.pipeline_layout = {2, 2, 2, 3};
  EXPECT_EQ(check_plan(p, m, 8).error(), "invalid plan: pipeline_layout has 4 chunks of 9" + need);
  p.pipeline_layout = {0, 3, 3, 2};
  EXPECT_TRUE(check_plan(p, m, 8).ok());
  p.first_stage_layers = 3;
  EXPECT_EQ(check_plan(p, m, 8).error(), "invalid plan: pipeline_layout has 4 chunks of 8" + need);
  nlohmann::json j = plan_to_json(Plan{});
  j["pipeline_layout"] = {1, -2};
  EXPECT_EQ(plan_from_json(j, "p.json").error(),
            "p.json: key 'pipeline_layout': must hold whole numbers >= 0 (layers per chunk), got -2");
  j["pipeline_layout"] = "Et|m|L";
  EXPECT_EQ(plan_from_json(j, "p.json").error(),
            "p.json: key 'pipeline_layout': has an MTP layer 'm', which Parallax does not price, at position 3 of \"Et|m|L\"");
}

}  // namespace
}  // namespace parallax
