#pragma once
// Handing a few bytes (NCCL's unique id) from rank 0 to the other ranks through a file on a
// shared file system, for a world without MPI (InitOptions::init_file). The file exists only
// while the ranks start:
//   rank 0   refuses a file that exists already (an earlier run's, which other ranks may have
//            read), removes acknowledgements an earlier run left, writes the bytes (to a
//            temporary file renamed into place: whole or not at all), waits until every other
//            rank acknowledged them (`<file>.ack<r>`, holding what rank r read), then removes
//            the file and the acknowledgements;
//   rank r   waits for the file, reads it, acknowledges, and waits until rank 0 removed it.
// So a rank goes on only with bytes rank 0 wrote for this run and confirmed: one that read
// an earlier run's file (rank 0 then refuses to start) ends with an error within the timeout
// instead of waiting forever in NCCL for a rank 0 that is gone. Plain C++ (no CUDA, no MPI).
#include "../core/config.hpp"
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>
#include <unistd.h>

#include "../core/errors.hpp"
#include "process_group.hpp"  // (REEL_DIST_ABI)

namespace reel::inline REEL_ABI::distributed::inline REEL_DIST_ABI {
namespace detail_dist {

inline std::string init_ack_path(const std::string& path, int rank) { return path + ".ack" + std::to_string(rank); }

// Writes `len` bytes at `path` whole or not at all (a temporary file renamed into place).
inline void write_file_whole(const std::string& path, const char* msg, size_t len) {
  const std::string tmp = path + ".part" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(msg, static_cast<std::streamsize>(len));
    REEL_CHECK(f.good(), error, "distributed::init_process_group: cannot write ", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  REEL_CHECK(!ec, error, "distributed::init_process_group: cannot rename ", tmp, " to ", path, ": ", ec.message());
}
// Reads exactly `len` bytes from `path`; false while it does not exist or holds another count.
inline bool read_file_whole(const std::string& path, char* msg, size_t len) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) != len || ec) return false;
  std::ifstream f(path, std::ios::binary);
  f.read(msg, static_cast<std::streamsize>(len));
  return f.good() && f.gcount() == static_cast<std::streamsize>(len);
}
// Polls `ready` every 5 ms until it holds; raises `what` when `timeout` has passed.
template <class F>
void wait_for_file(F&& ready, std::chrono::milliseconds timeout, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!ready()) {
    REEL_CHECK(std::chrono::steady_clock::now() < deadline, error, "distributed::init_process_group: ", what,
               " within ", timeout.count(), " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}
inline void remove_init_files(const std::string& path, int size) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  for (int r = 1; r < size; ++r) std::filesystem::remove(init_ack_path(path, r), ec);
}

// Rank 0's `len` bytes of msg reach every rank of the `size` (see the top of this file).
inline void exchange_by_file(char* msg, size_t len, int rank, int size, const std::string& path,
                             std::chrono::milliseconds timeout) {
  namespace fs = std::filesystem;
  if (size <= 1) return;
  if (rank == 0) {
    std::error_code ec;
    REEL_CHECK(!fs::exists(path, ec), value_error, "distributed::init_process_group: the init file ", path,
               " exists already (an earlier run's? remove it: the other ranks may have read its id)");
    for (int r = 1; r < size; ++r) fs::remove(init_ack_path(path, r), ec);  // (an earlier run's)
    write_file_whole(path, msg, len);
    try {
      std::vector<char> seen(len);
      for (int r = 1; r < size; ++r) {
        const std::string ack = init_ack_path(path, r);
        wait_for_file([&] { return read_file_whole(ack, seen.data(), len); }, timeout,
                      "rank " + std::to_string(r) + " did not acknowledge the id in " + path);
        REEL_CHECK(std::memcmp(seen.data(), msg, len) == 0, error, "distributed::init_process_group: rank ", r,
                   " read another id than rank 0 wrote into ", path, " (two jobs sharing one init file?)");
      }
    } catch (...) {
      remove_init_files(path, size);
      throw;
    }
    remove_init_files(path, size);
    return;
  }
  wait_for_file([&] { return read_file_whole(path, msg, len); }, timeout,
                "rank 0 did not write NCCL's unique id into " + path);
  write_file_whole(init_ack_path(path, rank), msg, len);
  wait_for_file([&] {
    std::error_code ec;
    return !fs::exists(path, ec) && !ec;
  }, timeout,
                "rank 0 did not confirm the id read from " + path +
                    " (a file an earlier run left? rank 0 refuses to start then: remove the file)");
}

}  // namespace detail_dist
}  // namespace reel::distributed
