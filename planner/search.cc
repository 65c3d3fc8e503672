#include "planner/search.h"

#include "planner/bound.h"
#include "planner/simulation.h"
#include "program/framework.h"
#include "program/runtime_support.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <atomic>
#include <thread>
#include <tuple>

namespace parallax {

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> small, large;
  for (int64_t i = 1; i * i <= n; ++i) {
    if (n % i != 0) continue;
    small.push_back(i);
    if (i != n / i) large.push_back(n / i);
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

constexpr Recompute kRecomputes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};

// The parallel shapes whose layer timings differ: TP, CP and EP degrees.
struct Shape {
  int64_t tp = 1, cp = 1, ep = 1;
};

// Timings that depend only on (shape, b, SP, recompute) for a fixed model, cluster, s and precision.
class TimingTable {
 public:
  TimingTable(const ModelSpec& m, const ClusterSpec& c, const SearchOptions& o, const std::vector<Shape>& shapes,
              const std::vector<int64_t>& batches)
      : batches_(batches) {
    for (const Shape& shape : shapes) {
      for (int64_t b : batches) {
        for (int sp = 0; sp < 2; ++sp) {
          for (Recompute rc : kRecomputes) {
            Plan p;
            p.tp = shape.tp, p.cp = shape.cp, p.ep = shape.ep;
            p.micro_batch = b;
            p.seq_len = o.seq_len;
            p.sequence_parallel = sp != 0;
            p.recompute = rc;
            p.precision = o.precision;
            p.execution = o.execution;
            p.tp_across_nodes = true;  // placement only; legality is checked per plan
            const bool ok = valid(m, shape);
            layers_.push_back(ok ? layer_timing(m, c, p) : LayerTiming{});
            edges_.push_back(ok ? edge_timing(m, c, p, layers_.back()) : EdgeTiming{});
          }
        }
      }
    }
  }
  size_t index(size_t shape, size_t bi, bool sp, Recompute rc) const {
    return ((shape * batches_.size() + bi) * 2 + (sp ? 1 : 0)) * 3 + static_cast<size_t>(rc);
  }
  const LayerTiming& layer(size_t i) const { return layers_[i]; }
  const EdgeTiming& edge(size_t i) const { return edges_[i]; }

 private:
  static bool valid(const ModelSpec& m, const Shape& s) {
    return m.heads % s.tp == 0 && m.kv_heads % s.tp == 0 && m.ffn_hidden % s.tp == 0 && m.experts % s.ep == 0;
  }
  std::vector<int64_t> batches_;
  std::vector<LayerTiming> layers_;
  std::vector<EdgeTiming> edges_;
};

// CP degrees worth searching: powers of two that split the sequence into 2 cp chunks and leave
// every rank at least 4,096 tokens of it — below that the attention it divides is small beside the
// GEMMs, and the exchange only adds traffic.
std::vector<int64_t> cp_degrees(const SearchOptions& o) {
  if (o.fixed_cp > 0) return {o.fixed_cp};
  std::vector<int64_t> cps = {1};
  for (int64_t c = 2; c <= o.gpus && o.seq_len % (2 * c) == 0 && o.seq_len / c >= 4096; c *= 2)
    if (o.gpus % c == 0) cps.push_back(c);
  return cps;
}

// EP degrees: the divisors of the expert count that divide the GPU count (1 for a dense model).
std::vector<int64_t> ep_degrees(const ModelSpec& m, const SearchOptions& o) {
  if (o.fixed_ep > 0) return {o.fixed_ep};
  std::vector<int64_t> eps;
  for (int64_t e : divisors(m.experts))
    if (o.gpus % e == 0) eps.push_back(e);
  return eps;
}

struct SchedulePick {
  Schedule schedule;
  int64_t chunks;
  std::vector<int64_t> layout;  // interleaving over layers that do not divide: each chunk's layers
};

std::vector<SchedulePick> schedules_for(const ModelSpec& m, int64_t pp) {
  std::vector<SchedulePick> s = {{Schedule::kGpipe, 1, {}}, {Schedule::k1F1B, 1, {}}, {Schedule::kZbH1, 1, {}}};
  if (pp >= 2 && m.layers % pp == 0)
    for (int64_t v : divisors(m.layers / pp))
      if (v >= 2) s.push_back({Schedule::kInterleaved, v, {}});
  // Otherwise interleave as Megatron's account_for_embedding/loss_in_pipeline_split does: the
  // embedding and the loss take one layer's slot each, and the layers + 2 split equally over the
  // chunks (Llama 3.1 405B: 128 = 8 x 8 x 2, chunks of 1 + 62 x 2 + 1).
  if (pp >= 2 && m.layers % pp != 0)
    for (int64_t v : divisors((m.layers + 2) / pp)) {
      const int64_t chunks = pp * v;
      if (v < 2 || (m.layers + 2) % chunks != 0 || (m.layers + 2) / chunks < 2) continue;
      const int64_t per = (m.layers + 2) / chunks;
      std::vector<int64_t> layout(static_cast<size_t>(chunks), per);
      layout.front() = layout.back() = per - 1;
      s.push_back({Schedule::kInterleaved, v, std::move(layout)});
    }
  return s;
}

// Layers that do not divide over pp stages are split as Megatron users do (Llama 3 405B: 126
// layers on 16 stages as 7 + 14 x 8 + 7): ceil(L / pp) on the middle stages, the rest shared by the
// first and the last. False when no such split exists.
bool uneven_split(int64_t layers, int64_t pp, Plan& p) {
  p.first_stage_layers = p.last_stage_layers = 0;
  if (layers % pp == 0) return true;
  if (pp < 2 || layers < pp) return false;
  const int64_t middle = (layers + pp - 1) / pp, rest = layers - (pp - 2) * middle;
  if (rest < 2) return false;
  p.first_stage_layers = rest / 2;
  p.last_stage_layers = rest - rest / 2;
  return true;
}

bool redundant(const Plan& p) {
  // With one DP rank ZeRO shards nothing; only offload (ZeRO-1: optimizer, ZeRO-3: weights too)
  // changes anything.
  if (p.zero > 0 && p.data_ranks() == 1 && (!p.offload || p.zero == 2)) return true;
  if (p.pp == 1 && p.schedule != Schedule::k1F1B) return true;     // one stage: no schedule
  return false;
}

class Worker {
 public:
  Worker(const ModelSpec& m, const ClusterSpec& c, const SearchOptions& o, const TimingTable& table)
      : m_(m), c_(c), o_(o), table_(table), hbm_(c.gpu.hbm_bytes() * o.max_memory_fraction),
        host_(c.host.memory_gib * 1073741824.0 / static_cast<double>(c.node.gpus)),
        reserved_(c.gpu.reserved_gib * 1073741824.0) {}

  void run(size_t si, const Shape& shape, int64_t pp, const std::vector<int64_t>& batches) {
    Plan p;
    p.tp = shape.tp, p.cp = shape.cp, p.ep = shape.ep;
    p.pp = pp;
    p.dp = o_.gpus / (shape.tp * shape.cp * pp);
    p.global_batch = o_.global_batch;
    p.seq_len = o_.seq_len;
    p.precision = o_.precision;
    p.execution = o_.execution;
    const bool stages_split = uneven_split(m_.layers, pp, p);
    const int64_t first = p.first_stage_layers, last = p.last_stage_layers;
    const std::vector<SchedulePick> schedules = schedules_for(m_, pp);
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      p.micro_batch = batches[bi];
      for (const SchedulePick& s : schedules) {
        if (!o_.schedules.empty() && std::find(o_.schedules.begin(), o_.schedules.end(), s.schedule) == o_.schedules.end())
          continue;
        if (s.layout.empty() && !stages_split) continue;
        p.schedule = s.schedule;
        p.virtual_stages = s.chunks;
        p.pipeline_layout = s.layout;
        p.first_stage_layers = s.layout.empty() ? first : 0;
        p.last_stage_layers = s.layout.empty() ? last : 0;
        for (int zero = 0; zero <= 3; ++zero) {
          if (o_.fixed_zero >= 0 && zero != o_.fixed_zero) continue;
          p.zero = zero;
          for (Recompute rc : kRecomputes) {
            p.recompute = rc;
            for (int sp = 0; sp < 2; ++sp) {
              p.sequence_parallel = sp != 0;
              const size_t timing = table_.index(si, bi, p.sequence_parallel, rc);
              for (int off = 0; off < (o_.allow_offload ? 2 : 1); ++off) {
                p.offload = off != 0;
                consider(p, timing);
              }
            }
          }
        }
      }
    }
  }

  SearchResult& result() { return result_; }

  void trim() {
    std::sort(result_.plans.begin(), result_.plans.end(), ranks_before);
    if (!o_.simulate && result_.plans.size() > o_.top_k) result_.plans.resize(o_.top_k);
  }

 private:
  void reject(size_t why) { ++result_.rejected[why]; }

  void consider(const Plan& p, size_t timing) {
    ++result_.considered;
    Violation v = first_violation(p, m_, c_.node.gpus);
    if (v != Violation::kNone) return reject(static_cast<size_t>(v));
    if (redundant(p)) return reject(static_cast<size_t>(Rejection::kRedundant));
    if (std::string why = framework_refusal(p.execution.framework, p, m_); !why.empty()) {
      if (result_.framework_refusal.empty()) result_.framework_refusal = why;
      return reject(static_cast<size_t>(Rejection::kFramework));
    }
    if (!runtime_runs(p)) return reject(static_cast<size_t>(Rejection::kRuntime));
    ++result_.evaluated;
    MemoryBreakdown mem = peak_memory(m_, p, reserved_);
    if (mem.total() > hbm_) return reject(static_cast<size_t>(Rejection::kOutOfMemory));
    if (mem.host > host_) return reject(static_cast<size_t>(Rejection::kOutOfHostMemory));
    ++result_.feasible;
    result_.plans.push_back({p, estimate_step(m_, c_, p, table_.layer(timing), table_.edge(timing))});
    // Ranking by simulation needs every candidate in estimate order; the estimate alone, the best K.
    if (!o_.simulate && result_.plans.size() >= 4 * o_.top_k + 64) trim();
  }

  // The GPU check skips the deadlock test of blocking pipeline exchanges (it builds the whole
  // program); train runs it at start, and every GPU schedule passes it up to 8 stages.
  bool runtime_runs(const Plan& p) const {
    if (o_.runtime == "cpu") return check_runtime_support(m_, p).ok();
    if (o_.runtime == "cuda") return check_gpu_support(m_, p, /*emulated=*/true).ok();
    return true;
  }

  const ModelSpec& m_;
  const ClusterSpec& c_;
  const SearchOptions& o_;
  const TimingTable& table_;
  const double hbm_, host_, reserved_;
  SearchResult result_;
};

// The estimate is not a bound on the simulation, so pruning keeps a margin below the smallest
// simulated / estimated ratio seen so far, and always simulates a few more than K.
constexpr double kPruneMargin = 0.10;
constexpr size_t kMinSimulatedExtra = 16;

// Simulates `candidates` (sorted by estimate) until none left could enter the top K.
std::vector<RankedPlan> rank_by_simulation(const ModelSpec& m, const ClusterSpec& c,
                                           const std::vector<RankedPlan>& candidates, const SearchOptions& o,
                                           SearchResult& counts) {
  const size_t k = o.top_k;
  std::vector<RankedPlan> best;
  double floor_ratio = 1.0;
  const bool by_bound = o.pruning == SearchOptions::Pruning::kBound;
  for (const RankedPlan& cand : candidates) {
    if (by_bound) {
      // Its simulated step is at least its bound: slower than the K-th to the nanosecond, it
      // cannot enter the top K (ranks_before).
      const double kth_s = best.size() >= k ? best.back().report.step_time_s : 0.0;
      if (best.size() >= k && std::llround(step_lower_bound_s(m, c, cand.plan, kth_s) * 1e9) > std::llround(kth_s * 1e9)) {
        ++counts.bounded;
        continue;
      }
    } else if (o.pruning == SearchOptions::Pruning::kEstimate && best.size() >= k &&
               static_cast<size_t>(counts.simulated) >= 2 * k + kMinSimulatedExtra &&
               cand.report.step_time_s * floor_ratio * (1 - kPruneMargin) > best.back().report.step_time_s) {
      break;
    }
    if (o.progress)
      o.progress({counts.feasible, static_cast<int64_t>(candidates.size()), counts.simulated,
                  best.empty() ? 0.0 : best.front().report.step_time_s});
    Result<Simulation> sim = o.every_event ? simulate_step(m, c, cand.plan) : simulate_report(m, c, cand.plan);
    ++counts.simulated;
    if (!sim.ok()) continue;  // a schedule the engine cannot run is not ranked
    const StepReport& e = sim->report;
    floor_ratio = std::min(floor_ratio, e.step_time_s / cand.report.step_time_s);
    if (!e.fits_in_memory) {
      ++counts.rejected[static_cast<size_t>(Rejection::kOutOfMemory)];
      --counts.feasible;
      continue;
    }
    RankedPlan ranked{cand.plan, e};
    best.insert(std::upper_bound(best.begin(), best.end(), ranked, ranks_before), ranked);
    if (best.size() > k) best.pop_back();
  }
  return best;
}

}  // namespace

int64_t default_seq_len(const ModelSpec& m) { return std::min<int64_t>(m.max_positions, 4096); }

int64_t default_global_batch(int64_t seq_len, int64_t gpus) {
  // About 4M tokens per step (Llama 2 and 3 pre-training), rounded to a power of two so that it
  // divides by the usual DP degrees, then up to a multiple of the GPU count's odd part (6 GPUs:
  // of 3) so that every DP degree the GPUs allow can divide it.
  const double sequences = 4194304.0 / static_cast<double>(seq_len);
  const int64_t pow2 = std::max<int64_t>(1, static_cast<int64_t>(std::exp2(std::round(std::log2(sequences)))));
  const int64_t odd = gpus / std::gcd(gpus, pow2);
  return (pow2 + odd - 1) / odd * odd;
}

const char* rejection_key(size_t index) {
  if (index < static_cast<size_t>(Violation::kCount)) return violation_key(static_cast<Violation>(index));
  switch (static_cast<Rejection>(index)) {
    case Rejection::kRedundant: return "redundant";
    case Rejection::kFramework: return "framework_cannot_run";
    case Rejection::kRuntime: return "runtime_cannot_run";
    case Rejection::kOutOfMemory: return "out_of_memory";
    case Rejection::kOutOfHostMemory: return "out_of_host_memory";
    case Rejection::kCount: break;
  }
  return "?";
}

bool ranks_before(const RankedPlan& a, const RankedPlan& b) {
  // Step times equal to the nanosecond tie (the line through short steps and every event agree
  // to rounding, not to the last bit), and ties go to less memory, then to the plan's key.
  const int64_t a_ns = std::llround(a.report.step_time_s * 1e9), b_ns = std::llround(b.report.step_time_s * 1e9);
  if (a_ns != b_ns) return a_ns < b_ns;
  if (a.report.peak_memory_bytes != b.report.peak_memory_bytes)
    return a.report.peak_memory_bytes < b.report.peak_memory_bytes;
  auto key = [](const Plan& p) {
    return std::make_tuple(p.tp, p.cp, p.ep, p.pp, p.dp, p.zero, p.micro_batch, static_cast<int>(p.schedule),
                           p.virtual_stages, static_cast<int>(p.recompute), p.sequence_parallel, p.offload);
  };
  return key(a.plan) < key(b.plan);
}

Result<SearchResult> search(const ModelSpec& m, const ClusterSpec& c, const SearchOptions& o) {
  if (o.gpus < 1) return Error{"--gpus must be >= 1, got " + std::to_string(o.gpus)};
  if (c.max_nodes > 0 && o.gpus > c.max_nodes * c.node.gpus)
    return Error{"--gpus " + std::to_string(o.gpus) + " exceeds cluster '" + c.name + "' (" +
                 std::to_string(c.max_nodes * c.node.gpus) + " GPUs)"};
  // Divisor enumeration is O(sqrt(n)) and plan products must stay within int64.
  if (o.gpus > 100'000'000) return Error{"--gpus " + std::to_string(o.gpus) + " is above the supported 10^8"};
  if (o.global_batch < 1) return Error{"--global-batch must be >= 1"};
  if (o.global_batch > 1'000'000'000'000)
    return Error{"--global-batch " + std::to_string(o.global_batch) + " is above the supported 10^12"};
  if (o.seq_len < 1) return Error{"--seq-len must be >= 1"};
  if (o.seq_len > m.max_positions)
    return Error{"--seq-len " + std::to_string(o.seq_len) + " exceeds max_position_embeddings " +
                 std::to_string(m.max_positions) + " of model '" + m.name + "'"};
  if (o.top_k < 1) return Error{"--top must be >= 1"};
  if (!o.runtime.empty() && o.runtime != "cpu" && o.runtime != "cuda")
    return Error{"--runtime: unknown '" + o.runtime + "' (expected cpu|cuda)"};
  if (!(o.max_memory_fraction > 0 && o.max_memory_fraction <= 1))
    return Error{"--max-memory-fraction must be in (0, 1]"};
  if (o.fixed_zero > 3) return Error{"--zero must be 0, 1, 2 or 3"};
  if (std::string why = gpu_refusal(c, o.precision, o.execution.fp8_recipe); !why.empty()) return Error{why};
  if (o.fixed_cp > 0 && (o.fixed_cp > o.gpus || o.gpus % o.fixed_cp != 0))
    return Error{"--cp " + std::to_string(o.fixed_cp) + " does not divide --gpus " + std::to_string(o.gpus)};
  if (o.fixed_ep > 0 && (!m.is_moe() || m.experts % o.fixed_ep != 0))
    return Error{"--ep " + std::to_string(o.fixed_ep) + (m.is_moe() ? " does not divide the " + std::to_string(m.experts) + " experts"
                                                                      : " needs a mixture-of-experts model")};

  const std::vector<int64_t> batches = divisors(o.global_batch);
  std::vector<Shape> shapes;
  for (int64_t t : divisors(o.gpus))
    if (o.fixed_tp == 0 || t == o.fixed_tp)
      for (int64_t cp : cp_degrees(o))
        if (o.gpus % (t * cp) == 0)
          for (int64_t ep : ep_degrees(m, o)) shapes.push_back({t, cp, ep});
  const TimingTable table(m, c, o, shapes, batches);
  std::vector<std::tuple<size_t, int64_t>> work;  // (shape index, p)
  for (size_t si = 0; si < shapes.size(); ++si) {
    const Shape& sh = shapes[si];
    for (int64_t pp : divisors(o.gpus / (sh.tp * sh.cp)))
      if ((o.fixed_pp == 0 || pp == o.fixed_pp) && (o.fixed_dp == 0 || o.gpus / (sh.tp * sh.cp * pp) == o.fixed_dp) &&
          (o.gpus / (sh.tp * pp)) % sh.ep == 0)  // EP splits the cp x dp ranks
        work.emplace_back(si, pp);
  }

  const int hardware = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int threads = std::clamp(o.threads > 0 ? o.threads : hardware, 1, std::max(1, std::min<int>(4 * hardware, static_cast<int>(work.size()))));
  std::vector<Worker> workers;
  workers.reserve(threads);
  for (int i = 0; i < threads; ++i) workers.emplace_back(m, c, o, table);
  std::atomic<size_t> next{0};
  auto loop = [&](Worker& w) {
    for (size_t i = next++; i < work.size(); i = next++) {
      const auto& [si, pp] = work[i];
      w.run(si, shapes[si], pp, batches);
    }
    w.trim();
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(loop, std::ref(workers[i]));
  loop(workers[0]);
  for (std::thread& th : pool) th.join();

  SearchResult total;
  for (Worker& w : workers) {
    SearchResult& r = w.result();
    total.considered += r.considered;
    total.evaluated += r.evaluated;
    total.feasible += r.feasible;
    for (size_t k = 0; k < kRejectionKinds; ++k) total.rejected[k] += r.rejected[k];
    if (total.framework_refusal.empty()) total.framework_refusal = r.framework_refusal;
    total.plans.insert(total.plans.end(), r.plans.begin(), r.plans.end());
  }
  std::sort(total.plans.begin(), total.plans.end(), ranks_before);
  if (o.simulate) total.plans = rank_by_simulation(m, c, total.plans, o, total);
  if (total.plans.size() > o.top_k) total.plans.resize(o.top_k);
  return total;
}

}  // namespace parallax
