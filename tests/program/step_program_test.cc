#include "program/step_program.h"

#include <gtest/gtest.h>

namespace parallax {
namespace {
TEST(StepProgram, Placeholder) {}
}  // namespace
}  // namespace parallax
