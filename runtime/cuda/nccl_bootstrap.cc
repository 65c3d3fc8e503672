#include "runtime/cuda/nccl_bootstrap.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

namespace parallax {

namespace {

// The file's first line, so that a reader rejects anything else at that name.
constexpr const char* kMagic = "parallax-rendezvous v1";

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// Keeps a launcher's value usable as part of a file name.
std::string file_name_safe(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return s;
}

// What distinguishes this launch from an earlier one that used the same directory; empty where
// the launcher says nothing that does.
std::string launch_token() {
  std::vector<std::string> parts;
  if (const std::string job = env("SLURM_JOB_ID"); !job.empty())
    parts.push_back(env("SLURM_STEP_ID").empty() ? job : job + "." + env("SLURM_STEP_ID"));
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"}) {  // Open MPI 5, then 4
    if (const std::string ns = env(name); !ns.empty()) {
      parts.push_back(ns);
      break;
    }
  }
  // torchrun restarts the workers of a failed run with the same run id and a higher count.
  if (const std::string restart = env("TORCHELASTIC_RESTART_COUNT"); !restart.empty()) parts.push_back("restart" + restart);
  std::string token;
  for (const std::string& p : parts) token += (token.empty() ? "" : "-") + p;
  return file_name_safe(token);
}

std::string rendezvous_dir() {
  if (const std::string dir = env("PARALLAX_NCCL_ID_DIR"); !dir.empty()) return dir;
  std::string user = env("USER");
  if (user.empty()) user = std::to_string(getuid());
  std::string key = env("TORCHELASTIC_RUN_ID");
  if (key.empty()) key = env("MASTER_PORT");
  if (key.empty()) key = "default";
  return "/tmp/parallax-nccl-" + file_name_safe(user) + "-" + file_name_safe(key);
}

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : bytes) hex += {digits[b >> 4], digits[b & 15]};
  return hex;
}

// Decodes `hex` into `bytes`; false on an odd length or a character that is not a hex digit.
bool from_hex(const std::string& hex, std::string* bytes) {
  if (hex.size() % 2) return false;
  bytes->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int value = 0;
    for (char c : {hex[i], hex[i + 1]}) {
      if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
      value = value * 16 + (std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10);
    }
    bytes->push_back(static_cast<char>(value));
  }
  return true;
}

Error file_error(const std::string& what, const std::string& path, int error_number) {
  return Error{"NCCL id rendezvous: " + what + " " + path + ": " + std::strerror(error_number)};
}

// The whole file at `fd`; false on a read error.
bool read_all(int fd, std::string* text) {
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    text->append(buffer, static_cast<size_t>(n));
  }
}

// The bytes a rendezvous file of `size` bytes holds, or an error naming it.
Result<std::string> parse_rendezvous(const std::string& path, const std::string& text, size_t size) {
  const std::string header = std::string(kMagic) + " " + std::to_string(size) + "\n";
  std::string bytes;
  const bool ok = text.size() == header.size() + 2 * size + 1 && text.compare(0, header.size(), header) == 0 &&
                  text.back() == '\n' && from_hex(text.substr(header.size(), 2 * size), &bytes);
  if (!ok) return Error{"NCCL id rendezvous: " + path + " is not a rendezvous file of " + std::to_string(size) + " bytes"};
  return bytes;
}

// Writes all of `text` to `fd`; false (errno set) on an error.
bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A directory this process creates is private to its user: the id lets a process join the job.
Status ensure_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec))
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  if (ec || !std::filesystem::is_directory(dir))
    return Error{"NCCL id rendezvous: cannot create directory " + dir.string() + (ec ? ": " + ec.message() : "")};
  return Status::Ok();
}

Result<ncclUniqueId> local_id() {
  ncclUniqueId id;
  if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
    return Error{std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r)};
  return id;
}

// MPI copies floats bit for bit, so the id travels as 32 floats behind a flag saying whether rank
// 0 could create one (the other ranks must not wait for an id that will never come).
Result<ncclUniqueId> id_over_world(Communicator& world) {
  constexpr int kWords = sizeof(ncclUniqueId) / sizeof(float);
  static_assert(sizeof(ncclUniqueId) % sizeof(float) == 0);
  float message[1 + kWords] = {};
  std::string failure;
  if (world.rank() == 0) {
    Result<ncclUniqueId> id = local_id();
    if (id.ok()) std::memcpy(message + 1, &id.value(), sizeof(ncclUniqueId));
    else failure = id.error();
    message[0] = id.ok() ? 1.0f : 0.0f;
  }
  world.broadcast(message, 1 + kWords, 0);
  if (message[0] != 1.0f) return Error{failure.empty() ? "rank 0 could not create the NCCL id" : failure};
  ncclUniqueId id;
  std::memcpy(&id, message + 1, sizeof(ncclUniqueId));
  return id;
}

Result<ncclUniqueId> id_over_file(const LaunchInfo& launch, double timeout_s) {
  const std::string path = nccl_id_path();
  if (launch.rank == 0) {
    // A file of this name is an earlier launch's: remove it before spending time on the new id.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return file_error("cannot remove", path, errno);
    Result<ncclUniqueId> id = local_id();
    if (!id.ok()) return id;
    const Status written = write_rendezvous_file(path, std::string(reinterpret_cast<const char*>(&id.value()), sizeof(ncclUniqueId)));
    if (!written.ok()) return Error{written.error()};
    return id;
  }
  Result<std::string> bytes = read_rendezvous_file(path, sizeof(ncclUniqueId), timeout_s);
  if (!bytes.ok()) return Error{bytes.error()};
  ncclUniqueId id;
  std::memcpy(&id, bytes->data(), sizeof(ncclUniqueId));
  return id;
}

}  // namespace

std::string nccl_id_path() {
  const std::string token = launch_token();
  return rendezvous_dir() + "/nccl-id" + (token.empty() ? "" : "." + token);
}

void remove_nccl_id_file() { ::unlink(nccl_id_path().c_str()); }

Status write_rendezvous_file(const std::string& path, const std::string& bytes) {
  const std::filesystem::path target(path);
  if (target.has_parent_path()) {
    if (Status dir = ensure_directory(target.parent_path()); !dir.ok()) return dir;
  }
  const std::string temp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return file_error("cannot create", temp, errno);
  const std::string text = std::string(kMagic) + " " + std::to_string(bytes.size()) + "\n" + to_hex(bytes) + "\n";
  const bool synced = write_all(fd, text) && ::fsync(fd) == 0;
  const int write_errno = errno;
  ::close(fd);
  if (!synced) {
    ::unlink(temp.c_str());
    return file_error("cannot write", temp, write_errno);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const Error error = file_error("cannot rename to", path, errno);
    ::unlink(temp.c_str());
    return error;
  }
  return Status::Ok();
}

Result<std::string> read_rendezvous_file(const std::string& path, size_t size, double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::string text;
      const bool read = read_all(fd, &text);
      const int read_errno = errno;
      ::close(fd);
      if (!read) return file_error("cannot read", path, read_errno);
      return parse_rendezvous(path, text, size);
    }
    if (errno != ENOENT) return file_error("cannot open", path, errno);
    const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited_s >= timeout_s) {
      std::ostringstream message;
      message << "NCCL id rendezvous: no " << path << " after " << timeout_s
              << " s (rank 0 writes it: is rank 0 running, with the same PARALLAX_NCCL_ID_DIR or launcher environment?)";
      return Error{message.str()};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Result<ncclUniqueId> bootstrap_nccl_id(Communicator& cpu_world, const LaunchInfo& launch, double timeout_s) {
  if (cpu_world.size() > 1) return id_over_world(cpu_world);
  if (launch.world_size > 1) return id_over_file(launch, timeout_s);
  return local_id();
}

}  // namespace parallax
