#include "runtime/watchdog.h"

#include <gtest/gtest.h>

namespace parallax {
namespace {

// A rank blocked longer than the limit ends with exit code 3 and one line naming the wait.
TEST(WatchdogDeathTest, EndsAStuckRank) {
  EXPECT_EXIT(
      {
        Watchdog dog(7, 0.3);
        dog.enter("all-reduce (group of 4 ranks)");
        std::this_thread::sleep_for(std::chrono::seconds(5));
      },
      ::testing::ExitedWithCode(3), "rank 7 stuck for 0 s in all-reduce \\(group of 4 ranks\\)");
}

TEST(Watchdog, QuietWhileWaitsAreShort) {
  Watchdog dog(0, 0.3);
  for (int i = 0; i < 3; ++i) {
    dog.enter("barrier");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    dog.leave();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  SUCCEED();
}

}  // namespace
}  // namespace parallax
