// calibrate --runs: the calibration of the cost model from measured runs (tools/calibrate_runs.cc).
#pragma once

namespace parallax {
// Parses calibrate's --runs mode from the command line and runs it; returns the exit code.
int calibrate_runs(int argc, char** argv);
}  // namespace parallax
