// Which launcher started the process, read from the environment each one sets.
#include "runtime/launch.h"

#include <cstdlib>
#include <map>
#include <string>

#include <gtest/gtest.h>

namespace parallax {
namespace {

// Clears every launcher variable, sets the given ones, restores the old environment after.
class LaunchEnv : public ::testing::Test {
 protected:
  void set(const std::map<std::string, std::string>& vars) {
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  }
  void clear() {
    for (const char* k : kVars) unsetenv(k);
  }
  void SetUp() override {
    for (const char* k : kVars)
      if (const char* v = std::getenv(k)) saved_[k] = v;
    clear();
  }
  void TearDown() override {
    clear();
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  static constexpr const char* kVars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS",
                                          "SLURM_LOCALID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"};
  std::map<std::string, std::string> saved_;
};

TEST_F(LaunchEnv, NoLauncherIsOneRank) {
  const Result<LaunchInfo> l = launch_info_from_env();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->launcher, "none");
  EXPECT_EQ(l->world_size, 1);
}

TEST_F(LaunchEnv, OpenMpiAndHydra) {
  set({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "16"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  Result<LaunchInfo> l = launch_info_from_env();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->launcher, "mpirun");
  EXPECT_EQ(l->rank, 5);
  EXPECT_EQ(l->world_size, 16);
  EXPECT_EQ(l->local_rank, 1);
  clear();
  set({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "3"}});
  l = launch_info_from_env();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->launcher, "hydra");
  EXPECT_EQ(l->rank, 3);
  EXPECT_EQ(l->local_rank, 3);
}

// `srun torchrun`: Slurm sees one task per node, torchrun's agent started 8 workers.
TEST_F(LaunchEnv, TorchrunInsideSlurmIsTorchrun) {
  set({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"RANK", "11"}, {"WORLD_SIZE", "16"},
       {"LOCAL_RANK", "3"}, {"TORCHELASTIC_RUN_ID", "job"}});
  Result<LaunchInfo> l = launch_info_from_env();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->launcher, "torchrun");
  EXPECT_EQ(l->rank, 11);
  EXPECT_EQ(l->world_size, 16);
  EXPECT_EQ(l->local_rank, 3);
  unsetenv("TORCHELASTIC_RUN_ID");  // plain srun, RANK set by the user's script: Slurm's word counts
  l = launch_info_from_env();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->launcher, "srun");
}

TEST_F(LaunchEnv, ErrorsNameTheVariable) {
  set({{"WORLD_SIZE", "two"}});
  Result<LaunchInfo> l = launch_info_from_env();
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.error().find("WORLD_SIZE='two'"), std::string::npos) << l.error();
  set({{"WORLD_SIZE", "2"}, {"RANK", "1"}});
  l = launch_info_from_env();
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.error().find("LOCAL_RANK"), std::string::npos) << l.error();
}

}  // namespace
}  // namespace parallax
