#include "runtime/checkpoint.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace parallax {

namespace {

namespace fs = std::filesystem;

std::string step_name(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step-%08lld", static_cast<long long>(step));
  return b;
}

std::string hex(uint64_t x) {
  char b[20];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(x));
  return b;
}

// Write, flush to disk, rename: readers see the old file or the whole new one.
Status write_atomically(const fs::path& path, const std::string& bytes) {
  const fs::path tmp = path.string() + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Error{tmp.string() + ": cannot open for writing"};
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0 &&
                  fsync(fileno(f)) == 0;
  if (std::fclose(f) != 0 || !ok) return Error{tmp.string() + ": write failed"};
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Error{path.string() + ": rename failed: " + ec.message()};
  return Status::Ok();
}

Result<std::string> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{path.string() + ": cannot open"};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every rank's 64-bit checksum, exchanged as four exact 16-bit pieces per rank.
std::vector<uint64_t> gather_checksums(uint64_t mine, Communicator& world) {
  float piece[4];
  for (int i = 0; i < 4; ++i) piece[i] = static_cast<float>((mine >> (16 * i)) & 0xffff);
  std::vector<float> all(4 * world.size());
  world.all_gather(all.data(), piece, 4);
  std::vector<uint64_t> out(world.size(), 0);
  for (int r = 0; r < world.size(); ++r)
    for (int i = 0; i < 4; ++i) out[r] |= static_cast<uint64_t>(all[4 * r + i]) << (16 * i);
  return out;
}

// All ranks learn whether any failed, and the first failing rank's reason as a code.
int agree(int my_code, Communicator& world) {
  float code = static_cast<float>(my_code);
  world.all_reduce(&code, 1, ReduceOp::kMax);
  return static_cast<int>(code);
}

}  // namespace

uint64_t fnv1a64(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

Status save_checkpoint(const std::string& dir, int64_t step, const std::string& state, Communicator& world,
                       const nlohmann::json& identity, const nlohmann::json& info) {
  const fs::path step_dir = fs::path(dir) / step_name(step);
  std::error_code ec;
  fs::create_directories(step_dir, ec);
  const Status shard = ec ? Status(Error{step_dir.string() + ": " + ec.message()})
                          : write_atomically(step_dir / ("rank-" + std::to_string(world.rank()) + ".bin"), state);
  if (agree(shard.ok() ? 0 : 1, world) != 0) return Error{shard.ok() ? "another rank failed to write its shard" : shard.error()};
  const std::vector<uint64_t> sums = gather_checksums(fnv1a64(state), world);
  Status done = Status::Ok();
  if (world.rank() == 0) {
    nlohmann::json manifest = identity;
    for (const auto& [key, value] : info.items()) manifest[key] = value;
    manifest["step"] = step;
    manifest["data_position"] = step;  // data is a function of the step index
    manifest["checksums"] = nlohmann::json::array();
    for (uint64_t s : sums) manifest["checksums"].push_back(hex(s));
    done = write_atomically(step_dir / "manifest.json", manifest.dump(2));
    if (done.ok()) done = write_atomically(fs::path(dir) / "latest", step_name(step));
  }
  if (agree(done.ok() ? 0 : 1, world) != 0) return Error{done.ok() ? "rank 0 failed to write the manifest" : done.error()};
  return Status::Ok();
}

Result<LoadedCheckpoint> load_checkpoint(const std::string& dir, Communicator& world, const nlohmann::json& identity) {
  Result<std::string> latest = read_all(fs::path(dir) / "latest");
  if (!latest.ok()) return Error{dir + ": no checkpoint to resume from (missing 'latest')"};
  const fs::path step_dir = fs::path(dir) / *latest;
  Result<std::string> text = read_all(step_dir / "manifest.json");
  if (!text.ok()) return Error{text.error()};
  const nlohmann::json manifest = nlohmann::json::parse(*text, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object() || !manifest.contains("step") || !manifest.contains("checksums"))
    return Error{(step_dir / "manifest.json").string() + ": malformed manifest"};
  for (const auto& [key, value] : identity.items())
    if (!manifest.contains(key) || manifest[key] != value)
      return Error{step_dir.string() + ": written for another " + key + " (refusing to resume)"};
  LoadedCheckpoint out;
  out.step = manifest["step"].get<int64_t>();
  Result<std::string> shard = read_all(step_dir / ("rank-" + std::to_string(world.rank()) + ".bin"));
  const auto& sums = manifest["checksums"];
  const bool good = shard.ok() && sums.is_array() && static_cast<int>(sums.size()) == world.size() &&
                    sums[world.rank()] == hex(fnv1a64(*shard));
  const int bad_rank = agree(good ? -1 : world.rank(), world);
  if (bad_rank >= 0)
    return Error{step_dir.string() + ": the shard of rank " + std::to_string(bad_rank) +
                 " is missing or corrupt (checksum mismatch)"};
  out.state = std::move(shard).value();
  return out;
}

}  // namespace parallax
