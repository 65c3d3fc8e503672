// An SVG pipeline chart of a simulated step a person can read (ranks as rows, F / B / W and
// communication coloured, idle time left blank, a time axis), and a file writer. The Chrome trace
// of a simulation is written from its step program (planner/simulation.h).
#pragma once

#include <functional>
#include <string>

#include "models/status.h"
#include "simulator/engine.h"
#include "simulator/task_graph.h"

namespace parallax {

// How the chart shows one task: its name (a tooltip) and its colour class.
enum class SvgClass { kForward, kBackward, kWeight, kPipeline, kData, kOther };
struct SvgTask {
  std::string name;
  SvgClass kind;
};

std::string pipeline_svg(const TaskGraph& g, const Timeline& tl, const std::string& title,
                        const std::function<SvgTask(TaskId)>& describe);

// Writes `text` to `path`; errors name the file.
Status write_text_file(const std::string& path, const std::string& text);

}  // namespace parallax
