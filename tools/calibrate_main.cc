// calibrate: measures this machine and writes a cluster description the simulator reads, or fits
// the cost model's calibration parameters to measured runs.
//   mpirun -np 2 calibrate [--quick] [--out cluster.json] [--name NAME]
//   calibrate --device cuda [--base hgx-h200] [--quick] [--sustained-seconds S] [--out cluster.json] [--name NAME]
//   calibrate --refit CLUSTER.json [--out cluster.json]   (the GEMM curve again, from what a GPU measured)
//   calibrate --runs RUNS.json|RUNS.csv [--runs MORE] [--cross-validate] [--out cal.json] [--table T.md]
#include <fstream>
#include <iostream>
#include <set>

#include "runtime/calibration.h"
#include "tools/calibrate_runs.h"
#include "runtime/mpi_communicator.h"
#include "simulator/cluster_spec.h"
#include "simulator/gemm_fit.h"
#include "simulator/trace.h"
#include "tools/cli.h"
#ifdef PARALLAX_HAVE_CUDA
#include "runtime/cuda/gpu_calibration.h"
#endif

namespace parallax {
namespace {

Result<nlohmann::json> read_cluster_json(const std::string& name) {
  const std::string path = resolve_data_file(name, "clusters");
  std::ifstream in(path);
  if (!in) return Error{path + ": cannot open file"};
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) return Error{path + ": not valid JSON"};
  if (Result<ClusterSpec> check = cluster_from_json(j, path); !check.ok()) return Error{check.error()};
  return j;
}

// The GEMM curve (gemm_max_efficiency, gemm_half_dim) fitted to the GEMM rates a GPU calibration
// measured (gpu.measured), the efficiency scaled by its sustained over burst rate.
Result<nlohmann::json> fit_gemm_keys(nlohmann::json c, const std::string& where) {
  Result<ClusterSpec> spec = cluster_from_json(c, where);
  if (!spec.ok()) return Error{spec.error()};
  const nlohmann::json& gpu = c["gpu"];
  const nlohmann::json measured = gpu.contains("measured") && gpu["measured"].is_object() ? gpu["measured"] : nlohmann::json::object();
  const nlohmann::json rows = measured.contains("gemm_bf16_m_n_k_tflops") ? measured["gemm_bf16_m_n_k_tflops"] : nlohmann::json::array();
  const std::string bad = where + ": gpu.measured: key 'gemm_bf16_m_n_k_tflops': rows must be [m, n, k, TFLOP/s], all positive";
  if (!rows.is_array()) return Error{bad};
  std::vector<GemmRate> rates;
  for (const auto& r : rows) {
    if (!r.is_array() || r.size() != 4 || !r[0].is_number_integer() || !r[1].is_number_integer() ||
        !r[2].is_number_integer() || !r[3].is_number() || r[0].get<int64_t>() <= 0 || r[1].get<int64_t>() <= 0 ||
        r[2].get<int64_t>() <= 0 || r[3].get<double>() <= 0)
      return Error{bad};
    rates.push_back({r[0].get<int64_t>(), r[1].get<int64_t>(), r[2].get<int64_t>(), r[3].get<double>()});
  }
  if (rates.empty())
    return Error{where + ": gpu.measured: key 'gemm_bf16_m_n_k_tflops' is missing or empty (written by calibrate --device cuda)"};
  const nlohmann::json& burst = measured.contains("sustained_over_burst") ? measured["sustained_over_burst"] : nlohmann::json(1.0);
  const double hold = burst.is_number() && burst.get<double>() > 0 && burst.get<double>() <= 1 ? burst.get<double>() : 1.0;
  const GemmFit fit = fit_gemm_curve(spec->gpu, rates);
  c["gpu"]["gemm_max_efficiency"] = fit.max_efficiency * hold;
  c["gpu"]["gemm_half_dim"] = fit.half_dim;
  c["gpu"]["measured"]["gemm_fit_rms_log_error"] = fit.rms_log_error;
  // A sweep over a full grid, in M-major order: the cost model then reads the rates themselves, which
  // the two-number curve fits only to within its rms error.
  std::set<int64_t> m_dims;
  for (const GemmRate& r : rates) m_dims.insert(r.m);
  const std::vector<int64_t> dims(m_dims.begin(), m_dims.end());
  const size_t n = dims.size();
  bool grid = rates.size() == n * n * n;
  for (size_t i = 0; grid && i < rates.size(); ++i)
    grid = rates[i].m == dims[i / (n * n)] && rates[i].n == dims[i / n % n] && rates[i].k == dims[i % n];
  if (grid) {
    nlohmann::json tflops = nlohmann::json::array();
    for (const GemmRate& r : rates) tflops.push_back(r.tflops * hold);
    c["gpu"]["gemm_grid"] = {{"dims", dims}, {"bf16_tflops", tflops},
                             {"source", "the bf16 sweep of gpu.measured, times its sustained over burst rate"}};
  }
  return c;
}

// One GPU: its gpu section measured, the rest kept from the base cluster file.
Result<nlohmann::json> calibrate_gpu(const std::string& base_name, const CalibrationOptions& o) {
#ifdef PARALLAX_HAVE_CUDA
  Result<nlohmann::json> base = read_cluster_json(base_name);
  if (!base.ok()) return base;
  Result<nlohmann::json> measured = calibrate_gpu_cluster(*base, o);
  if (!measured.ok()) return measured;
  return fit_gemm_keys(*measured, "calibrate --device cuda");
#else
  (void)base_name, (void)o;
  return Error{"--device cuda: this calibrate was built without CUDA (no nvcc at configure time)"};
#endif
}

int run(int argc, char** argv) {
  cli::set_tool_name("calibrate");
  std::unique_ptr<Communicator> world = make_mpi_world(&argc, &argv);
  CLI::App app{"Measure this machine (run under mpirun -np 2 or more) and write a cluster JSON."};
  CalibrationOptions o;
  std::string out, device = "cpu", base = "hgx-h200", refit;
  app.add_option("--device", device, "cpu (MPI ranks) | cuda (one GPU)")->capture_default_str();
  app.add_option("--base", base, "cuda: cluster file whose datasheet numbers the GPU is measured against")
      ->capture_default_str();
  app.add_flag("--quick", o.quick, "fewer shapes and repetitions (under a minute)");
  CLI::Option* sustained = app.add_option("--sustained-seconds", o.sustained_s,
                                          "cuda: seconds of sustained GEMM load whose end rate scales the GEMM "
                                          "efficiency (0: skip; default 0 with --quick)")
                               ->capture_default_str()
                               ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--refit", refit, "a cluster calibrate --device cuda wrote: fit its GEMM curve again (no GPU needed)");
  app.add_option("--out", out, "cluster JSON to write (default: standard output)");
  app.add_option("--name", o.name, "cluster name")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = world->rank() == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    finalize_mpi();
    return code == 0 ? 0 : 2;
  }
  if (o.quick && sustained->count() == 0) o.sustained_s = 0;
  if (device != "cpu" && device != "cuda") {
    if (world->rank() == 0) std::cerr << "calibrate: error: --device: unknown '" << device << "' (expected cpu|cuda)\n";
    finalize_mpi();
    return 2;
  }
  Result<nlohmann::json> cluster = Error{""};
  if (!refit.empty()) {
    Result<nlohmann::json> c = read_cluster_json(refit);
    cluster = c.ok() ? fit_gemm_keys(*c, refit) : c;
  } else {
    cluster = device == "cuda" ? calibrate_gpu(base, o) : calibrate_cluster(*world, o);
  }
  const bool root = world->rank() == 0;
  world.reset();
  finalize_mpi();
  if (!cluster.ok()) {
    if (root) cli::fail(cluster.error());
    return 2;
  }
  if (!root) return 0;
  if (Result<ClusterSpec> check = cluster_from_json(*cluster, "calibrated cluster"); !check.ok()) cli::fail(check.error());
  const std::string text = cluster->dump(2) + "\n";
  if (out.empty()) std::cout << text;
  else if (Status s = write_text_file(out, text); !s.ok()) cli::fail(s.error());
  return 0;
}

}  // namespace
}  // namespace parallax

int main(int argc, char** argv) {
  // Fitting to measured runs needs no MPI world.
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--runs" || std::string(argv[i]).rfind("--runs=", 0) == 0) {
      parallax::cli::set_tool_name("calibrate");
      return parallax::calibrate_runs(argc, argv);
    }
  return parallax::run(argc, argv);
}
