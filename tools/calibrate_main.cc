// calibrate: measures this machine and writes a cluster description the simulator reads, or fits
// the cost model's calibration parameters to measured runs.
//   mpirun -np 2 calibrate [--quick] [--out cluster.json] [--name NAME]
//   calibrate --device cuda [--base hgx-h200] [--quick] [--out cluster.json] [--name NAME]
//   calibrate --runs RUNS.json|RUNS.csv [--runs MORE] [--cross-validate] [--out cal.json] [--table T.md]
#include <fstream>
#include <iostream>

#include "runtime/calibration.h"
#include "tools/calibrate_runs.h"
#include "runtime/mpi_communicator.h"
#include "simulator/cluster_spec.h"
#include "simulator/trace.h"
#include "tools/cli.h"
#ifdef PARALLAX_HAVE_CUDA
#include "runtime/cuda/gpu_calibration.h"
#endif

namespace parallax {
namespace {

// One GPU: its gpu section measured, the rest kept from the base cluster file.
Result<nlohmann::json> calibrate_gpu(const std::string& base_name, const CalibrationOptions& o) {
#ifdef PARALLAX_HAVE_CUDA
  const std::string path = resolve_data_file(base_name, "clusters");
  std::ifstream in(path);
  if (!in) return Error{path + ": cannot open file"};
  nlohmann::json base = nlohmann::json::parse(in, nullptr, false);
  if (base.is_discarded()) return Error{path + ": not valid JSON"};
  if (Result<ClusterSpec> check = cluster_from_json(base, path); !check.ok()) return Error{check.error()};
  return calibrate_gpu_cluster(base, o);
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
  std::string out, device = "cpu", base = "hgx-h200";
  app.add_option("--device", device, "cpu (MPI ranks) | cuda (one GPU)")->capture_default_str();
  app.add_option("--base", base, "cuda: cluster file whose datasheet numbers the GPU is measured against")
      ->capture_default_str();
  app.add_flag("--quick", o.quick, "fewer shapes and repetitions (under a minute)");
  app.add_option("--out", out, "cluster JSON to write (default: standard output)");
  app.add_option("--name", o.name, "cluster name")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = world->rank() == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    finalize_mpi();
    return code == 0 ? 0 : 2;
  }
  if (device != "cpu" && device != "cuda") {
    if (world->rank() == 0) std::cerr << "calibrate: error: --device: unknown '" << device << "' (expected cpu|cuda)\n";
    finalize_mpi();
    return 2;
  }
  Result<nlohmann::json> cluster = device == "cuda" ? calibrate_gpu(base, o) : calibrate_cluster(*world, o);
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
