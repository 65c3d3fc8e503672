// Watchdog: turns a hang into an error. The trainer marks what it is about to wait on (a
// collective or a pipeline receive) and clears the mark when it returns; a background thread
// that sees the same mark older than the limit prints one line naming the rank and the stuck
// operation and ends the process with exit code 3, so mpirun tears down the job instead of
// waiting forever on a rank that died.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace parallax {

class Watchdog {
 public:
  Watchdog(int rank, double limit_s);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void enter(const std::string& what);
  void leave();

 private:
  void watch();

  const int rank_;
  const double limit_s_;
  std::mutex mu_;
  std::string what_;
  std::chrono::steady_clock::time_point since_;
  bool busy_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class Communicator;
// A communicator whose blocking calls (collectives, receives, waits) are watched by `dog`; groups
// split from it are watched too. `dog` must outlive it.
std::unique_ptr<Communicator> watched(std::unique_ptr<Communicator> inner, Watchdog* dog);

}  // namespace parallax
