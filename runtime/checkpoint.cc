#include "runtime/checkpoint.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/json_fields.h"

namespace parallax {

namespace {

namespace fs = std::filesystem;

std::string step_name(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step-%08lld", static_cast<long long>(step));
  return b;
}

std::string shard_name(int rank) { return "rank-" + std::to_string(rank) + ".safetensors"; }

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

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {
int64_t columns(const std::vector<int64_t>& shape) { return shape.size() == 2 ? shape[1] : elements(shape); }

template <class F>
void each_row(const std::vector<int64_t>& shape, const std::vector<ParamPiece>& pieces, F&& f) {
  const int64_t cols = columns(shape);
  int64_t at = 0;
  for (const ParamPiece& p : pieces)
    for (int64_t r = 0; r < p.rows; ++r, at += p.cols) f((p.row + r) * cols + p.col, at, p.cols);
}
}  // namespace

void take_pieces(const float* full, const std::vector<int64_t>& shape, const std::vector<ParamPiece>& pieces, float* out) {
  each_row(shape, pieces, [&](int64_t from, int64_t to, int64_t n) { std::copy_n(full + from, n, out + to); });
}

void put_pieces(float* full, const std::vector<int64_t>& shape, const std::vector<ParamPiece>& pieces, const float* in) {
  each_row(shape, pieces, [&](int64_t to, int64_t from, int64_t n) { std::copy_n(in + from, n, full + to); });
}

namespace {
constexpr const char* kFormat = "parallax-checkpoint/2";
const char* const kMoments[] = {"", ".exp_avg", ".exp_avg_sq"};

Buffer& part(TensorShard& s, int k) { return k == 0 ? s.value : k == 1 ? s.exp_avg : s.exp_avg_sq; }
const Buffer& part(const TensorShard& s, int k) { return part(const_cast<TensorShard&>(s), k); }

// Pieces inside the shape whose elements add up to the shard's.
bool pieces_fit(const TensorShard& s) {
  if (s.shape.empty() || s.shape.size() > 2) return false;
  const int64_t rows = s.shape.size() == 2 ? s.shape[0] : 1, cols = columns(s.shape);
  int64_t n = 0;
  for (const ParamPiece& p : s.pieces) {
    if (p.row < 0 || p.rows < 0 || p.col < 0 || p.cols < 0 || p.row + p.rows > rows || p.col + p.cols > cols) return false;
    n += p.rows * p.cols;
  }
  return n == static_cast<int64_t>(s.value.size());
}
}  // namespace

// safetensors: an 8-byte little-endian header length, the JSON header (padded with spaces to 8
// bytes), then the tensors' bytes at the header's offsets.
std::string encode_shards(const std::vector<TensorShard>& shards, int rank) {
  nlohmann::json header = nlohmann::json::object(), layout = nlohmann::json::object();
  size_t at = 0;
  for (const TensorShard& s : shards) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const ParamPiece& p : s.pieces) pieces.push_back({p.row, p.rows, p.col, p.cols});
    layout[s.name] = {{"shape", s.shape}, {"pieces", pieces}};
    for (int k = 0; k < 3; ++k) {
      const size_t bytes = part(s, k).size() * sizeof(float);
      header[s.name + kMoments[k]] = {{"dtype", "F32"}, {"shape", {part(s, k).size()}}, {"data_offsets", {at, at + bytes}}};
      at += bytes;
    }
  }
  header["__metadata__"] = {{"format", kFormat},
                            {"parallax", nlohmann::json{{"rank", rank}, {"tensors", layout}}.dump()}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += text;
  out.reserve(out.size() + at);
  for (const TensorShard& s : shards)
    for (int k = 0; k < 3; ++k)
      out.append(reinterpret_cast<const char*>(part(s, k).data()), part(s, k).size() * sizeof(float));
  return out;
}

Result<std::vector<TensorShard>> decode_shards(const std::string& bytes, const std::string& where) {
  uint64_t n = 0;
  for (int i = 0; i < 8 && i < static_cast<int>(bytes.size()); ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (bytes.size() < 8 || n > bytes.size() - 8) return Error{where + ": not a safetensors file"};
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n), nullptr, false);
  const nlohmann::json meta = header.is_object() ? header.value("__metadata__", nlohmann::json()) : nlohmann::json();
  if (string_or_empty(meta, "format") != kFormat || string_or_empty(meta, "parallax").empty())
    return Error{where + ": not a " + std::string(kFormat) + " shard (an older Parallax wrote it, or another tool)"};
  const nlohmann::json layout = nlohmann::json::parse(meta["parallax"].get<std::string>(), nullptr, false);
  if (!layout.is_object() || !layout.contains("tensors") || !layout["tensors"].is_object())
    return Error{where + ": malformed parallax metadata"};
  const size_t data = 8 + n;
  std::vector<TensorShard> out;
  try {
    for (const auto& [name, info] : layout["tensors"].items()) {
      TensorShard s;
      s.name = name;
      s.shape = info.at("shape").get<std::vector<int64_t>>();
      for (const auto& p : info.at("pieces")) s.pieces.push_back({p.at(0).get<int64_t>(), p.at(1).get<int64_t>(), p.at(2).get<int64_t>(), p.at(3).get<int64_t>()});
      for (int k = 0; k < 3; ++k) {
        const auto off = header.at(name + kMoments[k]).at("data_offsets").get<std::vector<uint64_t>>();
        if (off.size() != 2 || off[0] > off[1] || off[1] > bytes.size() - data || (off[1] - off[0]) % sizeof(float))
          return Error{where + ": tensor " + name + kMoments[k] + " lies outside the file"};
        part(s, k).resize((off[1] - off[0]) / sizeof(float));
        std::memcpy(part(s, k).data(), bytes.data() + data + off[0], off[1] - off[0]);
      }
      if (!pieces_fit(s) || s.exp_avg.size() != s.value.size() || s.exp_avg_sq.size() != s.value.size())
        return Error{where + ": tensor " + name + "'s pieces do not match its shape and size"};
      out.push_back(std::move(s));
    }
  } catch (const nlohmann::json::exception&) {
    return Error{where + ": malformed tensor entry in the header"};
  }
  return out;
}

Status save_checkpoint(const std::string& dir, int64_t step, const std::vector<TensorShard>& shards, Communicator& world,
                       const nlohmann::json& identity, const nlohmann::json& info) {
  const fs::path step_dir = fs::path(dir) / step_name(step);
  std::error_code ec;
  fs::create_directories(step_dir, ec);
  const std::string bytes = encode_shards(shards, world.rank());
  const Status shard = ec ? Status(Error{step_dir.string() + ": " + ec.message()})
                          : write_atomically(step_dir / shard_name(world.rank()), bytes);
  if (agree(shard.ok() ? 0 : 1, world) != 0) return Error{shard.ok() ? "another rank failed to write its shard" : shard.error()};
  const std::vector<uint64_t> sums = gather_checksums(fnv1a64(bytes), world);
  Status done = Status::Ok();
  if (world.rank() == 0) {
    nlohmann::json manifest = identity;
    for (const auto& [key, value] : info.items()) manifest[key] = value;
    manifest["format"] = kFormat;
    manifest["step"] = step;
    manifest["data_position"] = step;  // data is a function of the step index
    manifest["files"] = nlohmann::json::array();
    manifest["checksums"] = nlohmann::json::array();
    for (int r = 0; r < world.size(); ++r) manifest["files"].push_back(shard_name(r));
    for (uint64_t s : sums) manifest["checksums"].push_back(hex(s));
    done = write_atomically(step_dir / "manifest.json", manifest.dump(2));
    if (done.ok()) done = write_atomically(fs::path(dir) / "latest", step_name(step));
  }
  if (agree(done.ok() ? 0 : 1, world) != 0) return Error{done.ok() ? "rank 0 failed to write the manifest" : done.error()};
  return Status::Ok();
}

namespace {

// The keys the reader and train's resume use, each of the type they read it as; a shard file is a
// plain name inside the step's directory.
bool well_formed(const nlohmann::json& m) {
  auto is = [&](const char* key, bool (nlohmann::json::*type)() const noexcept) {
    return m.contains(key) && (m[key].*type)();
  };
  if (!is("step", &nlohmann::json::is_number_integer) || m["step"].get<int64_t>() < 0 ||
      !is("files", &nlohmann::json::is_array) || !is("checksums", &nlohmann::json::is_array) ||
      m["files"].size() != m["checksums"].size())
    return false;
  for (const nlohmann::json& f : m["files"]) {
    const std::string name = f.is_string() ? f.get<std::string>() : "";
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") return false;
  }
  return (!m.contains("loss_scale") || m["loss_scale"].is_number()) &&
         (!m.contains("clean_steps") || m["clean_steps"].is_number_integer()) &&
         (!m.contains("updates") || m["updates"].is_number_integer());
}

Result<nlohmann::json> read_manifest(const fs::path& step_dir, const nlohmann::json& identity) {
  Result<std::string> text = read_all(step_dir / "manifest.json");
  if (!text.ok()) return Error{text.error()};
  const nlohmann::json manifest = nlohmann::json::parse(*text, nullptr, false);
  const std::string where = (step_dir / "manifest.json").string();
  if (string_or_empty(manifest, "format") != kFormat) return Error{where + ": not a " + std::string(kFormat) + " manifest"};
  if (!well_formed(manifest)) return Error{where + ": malformed manifest"};
  for (const auto& [key, value] : identity.items())
    if (!manifest.contains(key) || manifest[key] != value)
      return Error{step_dir.string() + ": written for another " + key + " (refusing to resume)"};
  return manifest;
}

// Every file's shards placed into full tensors; each tensor must be covered exactly once.
Result<CheckpointTensors> assemble(const fs::path& step_dir, const nlohmann::json& manifest) {
  CheckpointTensors out;
  std::map<std::string, int64_t> placed;
  for (size_t r = 0; r < manifest["files"].size(); ++r) {
    const std::string file = manifest["files"][r].get<std::string>(), where = (step_dir / file).string();
    Result<std::string> bytes = read_all(step_dir / file);
    if (!bytes.ok() || manifest["checksums"][r] != hex(fnv1a64(*bytes)))
      return Error{step_dir.string() + ": the shard of rank " + std::to_string(r) + " is missing or corrupt (checksum mismatch)"};
    Result<std::vector<TensorShard>> shards = decode_shards(*bytes, where);
    if (!shards.ok()) return Error{shards.error()};
    for (const TensorShard& s : *shards) {
      FullTensor& t = out[s.name];
      if (t.shape.empty()) {
        t.shape = s.shape;
        for (Buffer* b : {&t.value, &t.exp_avg, &t.exp_avg_sq}) b->assign(elements(s.shape), 0.0f);
      }
      if (t.shape != s.shape) return Error{where + ": tensor " + s.name + " has another shape than in other files"};
      put_pieces(t.value.data(), t.shape, s.pieces, s.value.data());
      put_pieces(t.exp_avg.data(), t.shape, s.pieces, s.exp_avg.data());
      put_pieces(t.exp_avg_sq.data(), t.shape, s.pieces, s.exp_avg_sq.data());
      placed[s.name] += static_cast<int64_t>(s.value.size());
    }
  }
  for (const auto& [name, n] : placed)
    if (n != elements(out[name].shape))
      return Error{step_dir.string() + ": tensor " + name + " is " + (n < elements(out[name].shape) ? "incomplete" : "written twice")};
  return out;
}

}  // namespace

Result<LoadedCheckpoint> load_checkpoint(const std::string& dir, Communicator& world, const nlohmann::json& identity) {
  Result<std::string> latest = read_all(fs::path(dir) / "latest");
  if (!latest.ok()) return Error{dir + ": no checkpoint to resume from (missing 'latest')"};
  std::string name = *latest;
  name.erase(name.find_last_not_of(" \n\r\t") + 1);  // written by hand, it may end in a newline
  const fs::path step_dir = fs::path(dir) / name;
  Result<nlohmann::json> manifest = read_manifest(step_dir, identity);
  Result<CheckpointTensors> tensors = manifest.ok() ? assemble(step_dir, *manifest) : Result<CheckpointTensors>(Error{manifest.error()});
  // Every rank read the same files; agreeing keeps a failure from leaving some ranks waiting.
  if (agree(tensors.ok() ? 0 : 1, world) != 0) return Error{tensors.ok() ? "another rank failed to read the checkpoint" : tensors.error()};
  LoadedCheckpoint out;
  out.step = (*manifest)["step"].get<int64_t>();
  out.manifest = std::move(manifest).value();
  out.tensors = std::move(tensors).value();
  return out;
}

}  // namespace parallax
