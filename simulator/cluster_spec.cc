#include "simulator/cluster_spec.h"

#include <cstdio>
#include <filesystem>

#include "models/json_fields.h"
#include "models/model_spec.h"

namespace parallax {

double GpuSpec::peak_flops(Precision p) const {
  const double tflops = p == Precision::kFp32   ? peak_fp32_tflops
                        : p == Precision::kBf16 ? peak_bf16_tflops
                        : p == Precision::kFp8  ? peak_fp8_tflops
                                                : peak_fp16_tflops;
  return tflops * 1e12;
}

std::string gpu_refusal(const ClusterSpec& c, Precision p, Fp8Recipe recipe) {
  if (p == Precision::kFp8 && c.gpu.peak_fp8_tflops <= 0)
    return "precision fp8 needs FP8 tensor cores: " + c.gpu.name + " has none (cluster " + c.name +
           " sets no gpu.peak_tflops.fp8)";
  if (p == Precision::kFp8 && recipe == Fp8Recipe::kMxfp8 && !c.gpu.mxfp8)
    return "fp8_recipe mxfp8 needs tensor cores that scale blocks themselves (Blackwell): " + c.gpu.name +
           " has none (cluster " + c.name + " sets no gpu.mxfp8)";
  return "";
}

namespace {

// A number for an error message; a cast of an absurd value to an integer would be undefined.
std::string shown(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", v);
  return text;
}

void require_source(JsonFields& f) { (void)f.required_string("source"); }

void read_fraction(JsonFields& f, const char* key, double& out) {
  out = f.required_number(key);
  if (f.ok() && out > 1.0) f.fail(key, "is a fraction and must be <= 1");
}

// "attention": {"source": ..., "curves": [{"kernel", "head_dim", "seq_len": [...], and
// "fwd_tflops" + "bwd_tflops", or "fwd_bwd_tflops" where only the pair was measured}]}.
std::string read_attention(const nlohmann::json& j, const std::string& where, std::vector<AttentionCurve>& out) {
  JsonFields f(j, where + ": gpu.attention");
  require_source(f);
  if (!f.has("curves") || !j.at("curves").is_array()) f.fail("curves", "must be an array");
  f.reject_unknown_keys({"source", "curves"});
  if (!f.ok()) return f.error();
  for (size_t i = 0; i < j.at("curves").size(); ++i) {
    const nlohmann::json& cj = j.at("curves")[i];
    JsonFields c(cj, where + ": gpu.attention.curves[" + std::to_string(i) + "]");
    AttentionCurve curve;
    curve.kernel = c.required_string("kernel");
    curve.head_dim = c.required_int("head_dim");
    auto numbers = [&](const char* key) {
      std::vector<double> v;
      if (!c.has(key)) return v;
      const nlohmann::json& a = cj.at(key);
      if (!a.is_array()) c.fail(key, "must be an array of numbers");
      for (const auto& x : a.is_array() ? a : nlohmann::json::array()) {
        if (!x.is_number() || x.get<double>() <= 0) {
          c.fail(key, "must hold positive numbers");
          break;
        }
        v.push_back(x.get<double>());
      }
      return v;
    };
    curve.seq_len = numbers("seq_len");
    if (c.has("fwd_bwd_tflops")) {
      // Only fwd+bwd measured: both passes at that throughput (3.5 x forward FLOPs in all).
      curve.fwd_tflops = curve.bwd_tflops = numbers("fwd_bwd_tflops");
    } else {
      curve.fwd_tflops = numbers("fwd_tflops");
      curve.bwd_tflops = numbers("bwd_tflops");
    }
    if (c.ok() && (curve.seq_len.empty() || curve.fwd_tflops.size() != curve.seq_len.size() ||
                   curve.bwd_tflops.size() != curve.seq_len.size()))
      c.fail("seq_len", "needs one throughput per sequence length (fwd_tflops and bwd_tflops, or fwd_bwd_tflops)");
    for (size_t k = 1; c.ok() && k < curve.seq_len.size(); ++k)
      if (curve.seq_len[k] <= curve.seq_len[k - 1]) c.fail("seq_len", "must increase");
    c.reject_unknown_keys({"source", "fwd_alone_tflops", "bwd_alone_tflops"});  // the last two: calibrate's record
    if (!c.ok()) return c.error();
    out.push_back(std::move(curve));
  }
  return "";
}

// "gemm_grid": {"source": ..., "dims": [increasing], "bf16_tflops": [dims^3 positive numbers]}.
std::string read_gemm_grid(const nlohmann::json& j, const std::string& where, GemmGrid& out) {
  JsonFields f(j, where + ": gpu.gemm_grid");
  require_source(f);
  for (const char* key : {"dims", "bf16_tflops"}) {
    if (!f.ok()) break;
    if (!f.has(key) || !j.at(key).is_array()) f.fail(key, "must be an array of positive numbers");
    std::vector<double>& v = std::string(key) == "dims" ? out.dims : out.tflops;
    for (const auto& x : f.ok() ? j.at(key) : nlohmann::json::array()) {
      if (!x.is_number() || x.get<double>() <= 0) {
        f.fail(key, "must hold positive numbers");
        break;
      }
      v.push_back(x.get<double>());
    }
  }
  const size_t n = out.dims.size();
  if (f.ok() && (n < 2 || out.tflops.size() != n * n * n))
    f.fail("bf16_tflops", "needs one rate per (M, N, K) of at least 2 dims: dims^3 numbers, M-major");
  for (size_t i = 1; f.ok() && i < n; ++i)
    if (out.dims[i] <= out.dims[i - 1]) f.fail("dims", "must increase");
  f.reject_unknown_keys({"source"});
  return f.ok() ? "" : f.error();
}

// "fp8_gemm": {"source": ..., "max_efficiency": fraction of the FP8 peak, "half_dim": elements}.
std::string read_fp8_curve(const nlohmann::json& j, const std::string& where, GpuSpec& g) {
  JsonFields f(j, where + ": gpu.fp8_gemm");
  require_source(f);
  read_fraction(f, "max_efficiency", g.fp8_gemm_max_efficiency);
  g.fp8_gemm_half_dim = f.required_number("half_dim", /*allow_zero=*/true);
  f.reject_unknown_keys({"source"});
  return f.ok() ? "" : f.error();
}

Status read_gpu(const nlohmann::json& j, const std::string& where, GpuSpec& g) {
  JsonFields f(j, where + ": gpu");
  g.name = f.required_string("name");
  const nlohmann::json& peak = f.required_object("peak_tflops");
  if (!f.ok()) return Error{f.error()};
  JsonFields p(peak, where + ": gpu.peak_tflops");
  g.peak_bf16_tflops = p.required_number("bf16");
  g.peak_fp16_tflops = p.required_number("fp16");
  g.peak_fp32_tflops = p.required_number("fp32");
  g.peak_fp8_tflops = p.optional_number("fp8").value_or(0.0);  // absent: no FP8 tensor cores
  // The fastest tensor cores today run below 20,000 TFLOP/s (FP4, sparse): a peak above 100,000
  // is FLOP/s typed as TFLOP/s.
  for (const auto& [key, value] : {std::pair{"bf16", g.peak_bf16_tflops}, {"fp16", g.peak_fp16_tflops},
                                   {"fp32", g.peak_fp32_tflops}, {"fp8", g.peak_fp8_tflops}})
    if (p.ok() && value > 1e5)
      p.fail(key, "is in TFLOP/s and " + shown(value) +
                      " is beyond any GPU (FLOP/s typed as TFLOP/s? an H100's bf16 peak is 989)");
  if (!p.ok()) return Error{p.error()};
  g.hbm_gib = f.required_number("hbm_gib");
  // The largest GPU memories today are a few hundred GiB: thousands are bytes or MiB typed as GiB.
  if (f.ok() && g.hbm_gib > 4096)
    f.fail("hbm_gib", "is in GiB and " + shown(g.hbm_gib) +
                          " is beyond any GPU (bytes or MiB typed as GiB? an 80 GB H100 is 80)");
  g.hbm_gbps = f.required_bandwidth_gbps("hbm_gbps");
  read_fraction(f, "gemm_max_efficiency", g.gemm_max_efficiency);
  g.gemm_half_dim = f.required_number("gemm_half_dim", /*allow_zero=*/true);
  g.sm_count = f.required_int("sm_count");
  g.gemm_tile_m = f.required_int("gemm_tile_m");
  g.gemm_tile_n = f.required_int("gemm_tile_n");
  if (f.ok() && f.has("gemm_grid"))
    if (std::string e = read_gemm_grid(j.at("gemm_grid"), where, g.gemm_grid); !e.empty()) return Error{e};
  if (f.ok() && f.has("fp8_gemm"))
    if (std::string e = read_fp8_curve(j.at("fp8_gemm"), where, g); !e.empty()) return Error{e};
  read_fraction(f, "flash_attention_efficiency", g.flash_attention_efficiency);
  if (f.ok() && f.has("attention"))
    if (std::string e = read_attention(j.at("attention"), where, g.attention); !e.empty()) return Error{e};
  read_fraction(f, "memory_efficiency", g.memory_efficiency);
  g.optimizer_efficiency = f.optional_number("optimizer_efficiency").value_or(g.memory_efficiency);
  if (f.ok() && g.optimizer_efficiency > 1.0) f.fail("optimizer_efficiency", "is a fraction and must be <= 1");
  g.grouped_gemm_hbm_efficiency = f.optional_number("grouped_gemm_hbm_efficiency").value_or(g.memory_efficiency);
  if (f.ok() && g.grouped_gemm_hbm_efficiency > 1.0)
    f.fail("grouped_gemm_hbm_efficiency", "is a fraction and must be <= 1");
  if (f.ok() && f.has("fp8_rowwise_gemm_fraction")) read_fraction(f, "fp8_rowwise_gemm_fraction", g.fp8_rowwise_gemm_fraction);
  g.mxfp8 = f.optional_bool("mxfp8", false);
  g.reserved_gib = f.required_number("reserved_gib", /*allow_zero=*/true);
  g.power_class = f.optional_string("power_class").value_or(g.name);
  require_source(f);
  if (f.ok() && g.reserved_gib >= g.hbm_gib) f.fail("reserved_gib", "must be less than hbm_gib");
  // "measured": what `calibrate --device cuda` measured, kept for the reader (the model reads the
  // fitted keys above, not it).
  f.reject_unknown_keys({"source", "measured"});
  if (!f.ok()) return Error{f.error()};
  return Status::Ok();
}

Status read_node(const nlohmann::json& j, const std::string& where, NodeSpec& n) {
  JsonFields f(j, where + ": node");
  n.gpus = f.required_int("gpus");
  n.busbw_gbps = f.required_bandwidth_gbps("busbw_gbps");
  n.latency_us = f.required_number("latency_us", /*allow_zero=*/true);
  n.nccl_sms = f.optional_int("nccl_sms", 0).value_or(0);
  n.nccl_protocols = f.optional_bool("nccl_protocols", false);
  n.nvls_busbw_gbps = f.optional_number("nvls_busbw_gbps").value_or(0);
  n.nvls_latency_us = f.optional_number("nvls_latency_us", /*allow_zero=*/true).value_or(0);
  n.nvls_min_ranks = f.optional_int("nvls_min_ranks", 2).value_or(0);
  if (f.ok() && (n.nvls_busbw_gbps > 0) != (n.nvls_min_ranks > 0))
    f.fail(n.nvls_busbw_gbps > 0 ? "nvls_min_ranks" : "nvls_busbw_gbps", "NVLS needs both nvls_busbw_gbps and nvls_min_ranks");
  if (f.ok() && n.nvls_min_ranks > n.gpus) f.fail("nvls_min_ranks", "must be <= gpus");
  require_source(f);
  f.reject_unknown_keys({"source"});
  if (!f.ok()) return Error{f.error()};
  return Status::Ok();
}

Status read_network(const nlohmann::json& j, const std::string& where, NetworkSpec& n) {
  JsonFields f(j, where + ": network");
  n.bw_per_gpu_gbps = f.required_bandwidth_gbps("bw_per_gpu_gbps");
  // The fastest NICs today run 800 Gb/s = 100 GB/s; more per GPU is a bits-for-bytes slip.
  if (f.ok() && n.bw_per_gpu_gbps > 100)
    f.fail("bw_per_gpu_gbps", shown(n.bw_per_gpu_gbps) +
                                  " GB/s per GPU is faster than any NIC (800 Gb/s = 100 GB/s): _gbps is gigaBYTES "
                                  "per second; write a 400 Gb/s NIC as 50 or \"400 Gb/s\"");
  n.latency_us = f.required_number("latency_us", /*allow_zero=*/true);
  n.topology = f.required_string("topology");
  if (f.ok() && n.topology != "fat-tree") f.fail("topology", "unknown '" + n.topology + "' (supported: fat-tree)");
  n.oversubscription = f.optional_number("oversubscription").value_or(1.0);
  if (f.ok() && n.oversubscription < 1.0) f.fail("oversubscription", "must be >= 1 (1 = non-blocking)");
  n.nodes_per_leaf = f.required_int("nodes_per_leaf");
  n.nccl_sms = f.optional_int("nccl_sms", 0).value_or(0);
  require_source(f);
  f.reject_unknown_keys({"source"});
  if (!f.ok()) return Error{f.error()};
  return Status::Ok();
}

Status read_host(const nlohmann::json& j, const std::string& where, HostSpec& h) {
  JsonFields f(j, where + ": host");
  h.memory_gib = f.required_number("memory_gib");
  h.memory_gbps = f.required_bandwidth_gbps("memory_gbps");
  h.pcie_gbps = f.required_bandwidth_gbps("pcie_gbps");
  require_source(f);
  f.reject_unknown_keys({"source"});
  if (!f.ok()) return Error{f.error()};
  return Status::Ok();
}

}  // namespace

Result<ClusterSpec> cluster_from_json(const nlohmann::json& j, const std::string& where) {
  JsonFields f(j, where);
  ClusterSpec c;
  c.name = f.required_string("name");
  c.max_nodes = f.optional_int("max_nodes").value_or(0);
  const nlohmann::json& gpu = f.required_object("gpu");
  const nlohmann::json& node = f.required_object("node");
  const nlohmann::json& network = f.required_object("network");
  const nlohmann::json& host = f.required_object("host");
  const std::optional<std::string> calibration = f.optional_string("calibration");
  f.reject_unknown_keys({"source"});
  if (!f.ok()) return Error{f.error()};
  for (Status s : {read_gpu(gpu, where, c.gpu), read_node(node, where, c.node),
                   read_network(network, where, c.network), read_host(host, where, c.host)}) {
    if (!s.ok()) return Error{s.error()};
  }
  c.calibration_ref = calibration.value_or("");
  return c;
}

Result<ClusterSpec> load_cluster(const std::string& name_or_path) {
  if (std::string unknown = unknown_data_file(name_or_path, "clusters", "cluster"); !unknown.empty()) return Error{unknown};
  const std::string path = resolve_data_file(name_or_path, "clusters");
  Result<nlohmann::json> j = read_json_file(path);
  if (!j.ok()) return Error{j.error()};
  return cluster_from_json(*j, path);
}

}  // namespace parallax
