#pragma once
// Collective signature checks (DebugLevel::DETAIL, PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL).
// Before a checked group's collective, every member sends its signature (the group's collective
// count, op, dtype, shape and root) to the group's first member on the group's own checking
// communicator; that member compares them and answers every member with one verdict, so all of
// them raise the same error, naming the ranks, or all go on. Nothing is sent on the group's
// communicator until the verdict is in, so after a mismatch the group is still usable. A member
// that has not joined within the group's timeout is named too (the others raise; a group with a
// member that missed a collective should not be used again: its counts are apart). The waits
// poll with nonblocking calls, so no thread blocks in MPI past the timeout.
#include "process_group.hpp"

#include <array>
#include <cstring>
#include <string>
#include <thread>

namespace reel::inline REEL_ABI::distributed::inline REEL_DIST_ABI::detail_dist {

// seq, op, dtype, root, numel, ndim, then the first kSigDims sizes
inline constexpr int kSigDims = 10;
using Signature = std::array<int64_t, 6 + kSigDims>;
// code (0 agree, 1 differ, 2 missing), the differing group rank, the number missing and the
// first kListed missing group ranks, then the first member's signature and the differing one.
inline constexpr int kListed = 8;
using Verdict = std::array<int64_t, 3 + kListed + 2 * std::tuple_size_v<Signature>>;
inline constexpr int kSigTag = 1, kVerdictTag = 2;

inline constexpr const char* kCollectives[] = {
    "all_reduce", "reduce",  "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "gather",     "scatter", "all_to_all", "barrier"};

inline Signature signature(const ProcessGroup& g, const char* op, int dtype, const Shape& sizes, int root) {
  Signature s{};
  s[0] = g.next_seq();
  s[1] = -1;
  for (size_t k = 0; k < std::size(kCollectives); ++k)
    if (!std::strcmp(kCollectives[k], op)) s[1] = static_cast<int64_t>(k);
  s[2] = dtype;
  s[3] = root;
  s[4] = 1;
  for (int64_t d = 0; d < sizes.size(); ++d) s[4] *= sizes[d];
  s[5] = sizes.size();
  for (int64_t d = 0; d < sizes.size() && d < kSigDims; ++d) s[static_cast<size_t>(6 + d)] = sizes[d];
  return s;
}

inline std::string describe(const Signature& s) {
  std::string r = "collective #" + std::to_string(s[0]) + ": ";
  r += s[1] >= 0 && s[1] < static_cast<int64_t>(std::size(kCollectives)) ? kCollectives[s[1]] : "an unknown collective";
  if (s[2] >= 0) {
    r += "(";
    r += dtype_name(static_cast<ScalarType>(s[2]));
    r += " [";
    for (int64_t d = 0; d < s[5]; ++d) {
      if (d) r += ", ";
      r += d < kSigDims ? std::to_string(s[static_cast<size_t>(6 + d)]) : "...";
    }
    r += "]";
    if (s[3] >= 0) r += ", root " + std::to_string(s[3]);
    r += ")";
  }
  return r;
}

#if REEL_DIST_MPI
// Polls the requests until all are complete or the deadline passes; returns which completed.
inline std::vector<int> poll_until(std::vector<MPI_Request>& reqs, std::chrono::steady_clock::time_point deadline,
                                   const char* what) {
  std::vector<int> done(reqs.size(), 0);
  for (;;) {
    bool all = true;
    for (size_t k = 0; k < reqs.size(); ++k) {
      if (!done[k]) check_mpi(MPI_Test(&reqs[k], &done[k], MPI_STATUS_IGNORE), what);
      all = all && done[k];
    }
    if (all || std::chrono::steady_clock::now() > deadline) return done;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}
// Gives up the requests that have not completed.
inline void abandon(std::vector<MPI_Request>& reqs, const std::vector<int>& done) {
  for (size_t k = 0; k < reqs.size(); ++k)
    if (!done[k] && reqs[k] != MPI_REQUEST_NULL) {
      MPI_Cancel(&reqs[k]);
      MPI_Request_free(&reqs[k]);
    }
}

[[noreturn]] inline void raise_verdict(const ProcessGroup& g, const Verdict& v, const char* what) {
  auto world_rank = [&](int64_t k) { return g.ranks()[static_cast<size_t>(k)]; };
  Signature first{}, other{};
  std::copy_n(v.begin() + 3 + kListed, first.size(), first.begin());
  std::copy_n(v.begin() + 3 + kListed + static_cast<int64_t>(first.size()), other.size(), other.begin());
  if (v[0] == 1)
    raise<error>("distributed::", what, ": the ranks' collectives do not match (DebugLevel::DETAIL): rank ",
                 world_rank(0), " calls ", describe(first), ", but rank ", world_rank(v[1]), " calls ", describe(other));
  std::string missing;
  for (int64_t k = 0; k < v[2] && k < kListed; ++k) missing += (k ? ", " : "") + std::to_string(world_rank(v[3 + k]));
  if (v[2] > kListed) missing += " and " + std::to_string(v[2] - kListed) + " more";
  raise<error>("distributed::", what, ": rank", v[2] > 1 ? "s " : " ", missing, " did not join ", describe(first),
               " within the group's timeout of ", g.timeout().count(), " ms");
}

// The check itself, on the caller's thread (inside CommThread::exclusive, after every queued call).
inline void check_signature(const ProcessGroup& g, const Signature& mine, const char* what) {
  const MPI_Comm c = g.check_comm();
  const auto deadline = std::chrono::steady_clock::now() + g.timeout();
  const int n = g.size();
  constexpr int sl = static_cast<int>(std::tuple_size_v<Signature>), vl = static_cast<int>(std::tuple_size_v<Verdict>);
  Verdict v{};
  if (g.rank() == 0) {
    std::vector<Signature> got(static_cast<size_t>(n));
    std::vector<MPI_Request> reqs(static_cast<size_t>(n - 1), MPI_REQUEST_NULL);
    for (int r = 1; r < n; ++r)
      check_mpi(MPI_Irecv(got[static_cast<size_t>(r)].data(), sl, MPI_INT64_T, r, kSigTag, c, &reqs[static_cast<size_t>(r - 1)]),
                "MPI_Irecv");
    auto done = poll_until(reqs, deadline, "MPI_Test");
    abandon(reqs, done);
    std::copy(mine.begin(), mine.end(), v.begin() + 3 + kListed);
    for (int r = 1; r < n; ++r) {
      if (!done[static_cast<size_t>(r - 1)]) {
        if (v[2] < kListed) v[static_cast<size_t>(3 + v[2])] = r;
        ++v[2];
        v[0] = 2;
      } else if (v[0] == 0 && got[static_cast<size_t>(r)] != mine) {
        v[0] = 1;
        v[1] = r;
        std::copy(got[static_cast<size_t>(r)].begin(), got[static_cast<size_t>(r)].end(), v.begin() + 3 + kListed + sl);
      }
    }
    if (v[0] == 2) v[1] = 0;
    std::vector<MPI_Request> sends;
    for (int r = 1; r < n; ++r)
      if (done[static_cast<size_t>(r - 1)]) {
        sends.push_back(MPI_REQUEST_NULL);
        check_mpi(MPI_Isend(v.data(), vl, MPI_INT64_T, r, kVerdictTag, c, &sends.back()), "MPI_Isend");
      }
    // (the verdict goes to members that are waiting for it: they take it at once)
    check_mpi(MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  } else {
    // (waiting half as long again: the first member's own wait ends first, and its verdict
    // names whoever is missing)
    const auto late = deadline + g.timeout() / 2;
    std::vector<MPI_Request> reqs(2, MPI_REQUEST_NULL);
    check_mpi(MPI_Isend(mine.data(), sl, MPI_INT64_T, 0, kSigTag, c, &reqs[0]), "MPI_Isend");
    check_mpi(MPI_Irecv(v.data(), vl, MPI_INT64_T, 0, kVerdictTag, c, &reqs[1]), "MPI_Irecv");
    auto done = poll_until(reqs, late, "MPI_Test");
    if (!done[1]) {
      abandon(reqs, done);
      raise<error>("distributed::", what, ": rank ", g.ranks()[0], " did not answer the check of ", describe(mine),
                   " within 1.5 times the group's timeout of ", g.timeout().count(), " ms (has it joined?)");
    }
  }
  if (v[0] != 0) raise_verdict(g, v, what);
}

#endif

// A call's check where its group asks for one (DebugLevel::DETAIL; only MPI builds have it).
inline void check_call(const ProcessGroup& g, const char* what, int dtype, const Shape& sizes, int root) {
  if (g.debug() != DebugLevel::DETAIL || g.size() < 2) return;
#if REEL_DIST_MPI
  const Signature mine = signature(g, what, dtype, sizes, root);
  comm_thread()->exclusive([&] { check_signature(g, mine, what); });
#else
  (void)what, (void)dtype, (void)sizes, (void)root;
#endif
}
template <class T>
void check_collective(const ProcessGroup& g, const char* what, const Shape& sizes, int root = -1) {
  check_call(g, what, static_cast<int>(scalar_type_v<T>), sizes, root);
}
inline void check_barrier(const ProcessGroup& g) { check_call(g, "barrier", -1, Shape{}, -1); }

}  // namespace reel::inline REEL_ABI::distributed::detail_dist
