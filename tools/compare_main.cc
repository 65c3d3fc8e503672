// compare: the simulated and the measured step side by side.
//   compare --predicted SIM.json --measured RUN.json [--format md|html|json] [--out FILE]
#include <iostream>

#include "models/json_fields.h"
#include "simulator/trace.h"
#include "simulator/trace_compare.h"
#include "tools/cli.h"

namespace parallax {
namespace {

int run(int argc, char** argv) {
  cli::set_tool_name("compare");
  CLI::App app{"Compare a predicted trace (simulate --trace) with a measured one (train --trace)."};
  std::string predicted_file, measured_file, format = "md", out;
  app.add_option("--predicted", predicted_file, "trace written by simulate --trace")->required();
  app.add_option("--measured", measured_file, "trace written by train --trace")->required();
  app.add_option("--format", format, "md|html|json")->capture_default_str();
  app.add_option("--out", out, "write to this file instead of standard output");
  cli::parse(app, argc, argv);
  cli::require_format(format, {"md", "html", "json"});
  const nlohmann::json predicted = cli::value_or_fail(read_json_file(predicted_file));
  const nlohmann::json measured = cli::value_or_fail(read_json_file(measured_file));
  const Comparison c = cli::value_or_fail(compare_traces(predicted, measured));
  const std::string text = format == "json"   ? comparison_json(c).dump(2) + "\n"
                           : format == "html" ? comparison_html(c, predicted, measured)
                                              : comparison_markdown(c);
  if (out.empty()) {
    std::cout << text;
  } else if (Status s = write_text_file(out, text); !s.ok()) {
    cli::fail(s.error());
  }
  return 0;
}

}  // namespace
}  // namespace parallax

int main(int argc, char** argv) { return parallax::run(argc, argv); }
