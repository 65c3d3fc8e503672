// What the tests that run Parallax's binaries share: where the binaries are and a shell runner.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <string>

namespace parallax::testing_support {

// $PARALLAX_BIN_DIR/tool (CTest sets it), else build/bin/tool.
inline std::string bin(const std::string& tool) {
  const char* dir = std::getenv("PARALLAX_BIN_DIR");
  return std::string(dir ? dir : "build/bin") + "/" + tool;
}

// Runs `cmd` in a shell: its exit code, or -1 if it did not exit normally.
inline int sh(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace parallax::testing_support
