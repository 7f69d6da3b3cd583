#pragma once
// reel::distributed's process groups, and joining and leaving the world (see
// <reel/distributed.hpp>). The engines: MPI where <mpi.h> is found (a program compiled with
// mpicxx; REEL_DIST_NO_MPI leaves it out), NCCL for CUDA tensors where <reel/cuda/nccl.cuh>
// is compiled in (nvcc and -lnccl; it registers itself through DeviceHooks below).
#include "../core/config.hpp"
#if !defined(REEL_DIST_NO_MPI) && __has_include(<mpi.h>)
#define REEL_DIST_MPI 1
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // (only MPI's C interface is used: not its deprecated C++ bindings)
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#else
#define REEL_DIST_MPI 0
#if !defined(__CUDACC__)
#error "reel/distributed.hpp needs MPI: compile with mpicxx (Debian: libopenmpi-dev), or add MPI's include directory (or, for NCCL alone, compile with nvcc)"
#endif
#endif

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <optional>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "../autograd/autograd.hpp"
#include "../core/errors.hpp"
#include "../core/tensor.hpp"
#include "../ops/factories.hpp"

// The groups' and options' layout depends on whether MPI is in the build, so each setting
// names its own inline namespace: an object compiled with MPI and one compiled without (an
// nvcc file with REEL_DIST_NO_MPI) that pass these types to each other fail to link instead
// of reading each other's members at the wrong offsets. (Two such files do not share a
// world either: each setting has its own state.)
#if REEL_DIST_MPI
#define REEL_DIST_ABI with_mpi
#else
#define REEL_DIST_ABI no_mpi
#endif

namespace reel::inline REEL_ABI::distributed::inline REEL_DIST_ABI {

// MPI: CPU tensors. NCCL: CUDA tensors (and, where MPI is in the build, CPU tensors over MPI
// in the same groups, as PyTorch's "cpu:gloo,cuda:nccl").
enum class Backend { MPI, NCCL };
// AVG: the sum divided by the world size (floating point and complex tensors only).
enum class ReduceOp { SUM, AVG, PRODUCT, MIN, MAX };
// PyTorch's TORCH_DISTRIBUTED_DEBUG levels. DETAIL checks every collective's signature (its
// sequence number in the group, the op, dtype, shape and root) across the group before the call,
// and raises on every member, naming the ranks, when they differ or when a member has not
// joined within the group's timeout (distributed/check.hpp; the checks travel over MPI). OFF
// and INFO check nothing.
enum class DebugLevel { OFF, INFO, DETAIL };

namespace detail_dist {
#if REEL_DIST_MPI
inline void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  raise<error>("distributed: ", what, " failed: ", std::string(msg, static_cast<size_t>(len)));
}
#endif
template <class T>
constexpr bool is_half_v = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

struct State {
  bool initialized = false;
  bool finalize_mpi = false;  // reel started MPI, so it ends it
  Backend backend = Backend::MPI;
  int rank = 0, size = 1;
  DebugLevel debug = DebugLevel::OFF;  // the world group's (new groups' default)
  std::chrono::milliseconds timeout{};
  std::terminate_handler previous_terminate = nullptr;
  // Set when the program ends (leave_at_exit): groups destroyed after that (a new_group's held
  // by a static) let the device engine skip its teardown (the CUDA runtime may be gone).
  bool exiting = false;
};
inline State& state() {
  static State s;
  return s;
}
inline State& live(const char* what) {
  State& s = state();
  REEL_CHECK(s.initialized, error, "distributed::", what, ": no process group; call init_process_group first");
  return s;
}
}  // namespace detail_dist

namespace detail_dist {
// The thread that makes the asynchronous calls, one at a time and in order. A synchronous
// call runs on its caller's thread once this one is idle (exclusive), so MPI is never called
// by two threads at once (MPI_THREAD_SERIALIZED is enough).
class CommThread {
 public:
  CommThread() : th_([this] { loop(); }) {}
  ~CommThread() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    th_.join();
  }
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;
  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.push_back(std::move(job));
    }
    cv_.notify_all();
  }
  // Runs f on this thread after every job posted before has run, while no job runs.
  template <class F>
  void exclusive(F&& f) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return q_.empty() && !busy_; });
      busy_ = true;
    }
    struct Release {
      CommThread& t;
      ~Release() {
        {
          std::lock_guard<std::mutex> l(t.mu_);
          t.busy_ = false;
        }
        t.cv_.notify_all();
      }
    } release{*this};
    f();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return (stop_ || !q_.empty()) && !busy_; });
        if (q_.empty()) return;
        job = std::move(q_.front());
        q_.pop_front();
        busy_ = true;
      }
      job();
      {
        std::lock_guard<std::mutex> l(mu_);
        busy_ = false;
      }
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool busy_ = false, stop_ = false;
  std::thread th_;  // (last: starts once the rest is made)
};
inline std::unique_ptr<CommThread>& comm_thread() {
  static std::unique_ptr<CommThread> t;
  return t;
}
}  // namespace detail_dist

namespace detail_dist {
// REEL_DISTRIBUTED_DEBUG, else TORCH_DISTRIBUTED_DEBUG: OFF (unset), INFO or DETAIL.
inline DebugLevel debug_level_from_env() {
  for (const char* var : {"REEL_DISTRIBUTED_DEBUG", "TORCH_DISTRIBUTED_DEBUG"})
    if (const char* v = std::getenv(var)) {
      const std::string s(v);
      if (s == "OFF") return DebugLevel::OFF;
      if (s == "INFO") return DebugLevel::INFO;
      if (s == "DETAIL") return DebugLevel::DETAIL;
      raise<value_error>("distributed: ", var, "=", s, " is not one of OFF, INFO, DETAIL");
    }
  return DebugLevel::OFF;
}
}  // namespace detail_dist

struct InitOptions {
#if REEL_DIST_MPI
  // MPI's thread level when reel starts MPI (MPI_THREAD_SERIALIZED: one thread calls at a time).
  int mpi_thread_level = MPI_THREAD_SERIALIZED;
#endif
  // The world group's checks (new_group's groups take these unless told otherwise).
  DebugLevel debug = detail_dist::debug_level_from_env();
  // How long a checked collective waits for every member to join it (torch's default: 10 min);
  // for NCCL, also how long the other ranks wait for rank 0's unique id in init_file.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // NCCL: the CUDA device of this rank; -1: LOCAL_RANK (or OMPI_COMM_WORLD_LOCAL_RANK,
  // SLURM_LOCALID), else the rank, modulo the number of devices.
  int device = -1;
  // NCCL without MPI (a launcher that sets RANK and WORLD_SIZE, as torchrun does): rank 0
  // writes NCCL's unique id into this file and the others read it (a shared file system's
  // path that does not exist yet; it is removed again once every rank read it). Empty:
  // REEL_INIT_FILE. With MPI in the build, the id is broadcast through MPI instead.
  std::string init_file;
};
// A new group's checks; unset: the world's.
struct GroupOptions {
  std::optional<DebugLevel> debug;
  std::optional<std::chrono::milliseconds> timeout;
};

// A set of ranks that communicate (torch.distributed's ProcessGroup): the world, or a group
// made by new_group. On a rank outside it, is_member() is false and collectives on it raise.
class ProcessGroup {
 public:
  ProcessGroup() = default;
  // A group without an MPI communicator (NCCL alone): `rank` is this rank's place, -1 outside.
  ProcessGroup(std::vector<int> ranks, int rank, DebugLevel debug, std::chrono::milliseconds timeout)
      : ranks_(std::move(ranks)), rank_(rank), debug_(debug), timeout_(timeout) {}
#if REEL_DIST_MPI
  // (made where MPI may be called: in init_process_group, or inside CommThread::exclusive)
  // With DebugLevel::DETAIL every member also makes the group's checking communicator.
  ProcessGroup(MPI_Comm comm, std::vector<int> ranks, DebugLevel debug = DebugLevel::OFF,
               std::chrono::milliseconds timeout = std::chrono::minutes(10))
      : comm_(comm), ranks_(std::move(ranks)), debug_(debug), timeout_(timeout) {
    if (comm_ != MPI_COMM_NULL) {
      detail_dist::check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      detail_dist::check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
      if (debug_ == DebugLevel::DETAIL) detail_dist::check_mpi(MPI_Comm_dup(comm_, &check_), "MPI_Comm_dup");
    }
  }
#endif
  ~ProcessGroup() {
    device_.reset();  // (the device communicator first: NCCL's own teardown)
#if REEL_DIST_MPI
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm_ == MPI_COMM_NULL || finalized) return;
    auto free = [this] {
      MPI_Comm_free(&comm_);
      if (check_ != MPI_COMM_NULL) MPI_Comm_free(&check_);
    };
    if (auto& t = detail_dist::comm_thread())
      t->exclusive(free);
    else
      free();
#endif
  }
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  bool is_member() const { return rank_ >= 0; }
  int rank() const { return rank_; }  // within the group (-1 outside it)
  int size() const { return static_cast<int>(ranks_.size()); }
  const std::vector<int>& ranks() const { return ranks_; }  // the members' world ranks
#if REEL_DIST_MPI
  MPI_Comm comm() const { return comm_; }
  // (the checks' own communicator)
  MPI_Comm check_comm() const { return check_; }
#endif
  DebugLevel debug() const { return debug_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // (the number of the group's next checked collective)
  int64_t next_seq() const { return seq_++; }
  // The group rank of world rank r (raises when r is not a member).
  int group_rank(int r, const char* what) const {
    for (size_t k = 0; k < ranks_.size(); ++k)
      if (ranks_[k] == r) return static_cast<int>(k);
    raise<value_error>("distributed::", what, ": rank ", r, " is not in the group");
  }
  // The device engine's communicator of this group (NCCL's, owned here; its type is the
  // engine's: reel/cuda/nccl.cuh), null where the group has none.
  const std::shared_ptr<void>& device_comm() const { return device_; }
  void set_device_comm(std::shared_ptr<void> c) { device_ = std::move(c); }

 private:
#if REEL_DIST_MPI
  MPI_Comm comm_ = MPI_COMM_NULL, check_ = MPI_COMM_NULL;
#endif
  std::vector<int> ranks_;
  int rank_ = -1;
  DebugLevel debug_ = DebugLevel::OFF;
  std::chrono::milliseconds timeout_{};
  mutable int64_t seq_ = 0;
  std::shared_ptr<void> device_;
};

namespace detail_dist {
struct World {
  std::unique_ptr<ProcessGroup> group;
};
inline World& world_holder() {
  static World w;
  return w;
}
// What a device engine (NCCL: reel/cuda/nccl.cuh, which fills these in when it is compiled in)
// does for the process groups.
struct DeviceHooks {
  // The world's communicator (every rank calls it in init_process_group, with the world group).
  std::shared_ptr<void> (*world)(const InitOptions&, const ProcessGroup& world) = nullptr;
  // A new group's (every rank of the world calls it; null for a rank outside `ranks`).
  std::shared_ptr<void> (*split)(const ProcessGroup& world, const std::vector<int>& ranks) = nullptr;
  // barrier() of a group that has no MPI communicator.
  void (*barrier)(const ProcessGroup&) = nullptr;
};
inline DeviceHooks& device_hooks() {
  static DeviceHooks h;
  return h;
}
// While a process group is up, an exception that nothing catches (or any std::terminate)
// ends every rank with a message naming this one: the others would otherwise wait in their
// next collective for a rank that is gone (with MPI: MPI_Abort ends them; without it, this
// process ends and the launcher, e.g. torchrun, ends the others).
[[noreturn]] inline void abort_job_on_terminate() {
  std::string what = "std::terminate was called without an exception";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = std::string("uncaught exception: ") + x.what();
    } catch (...) {
      what = "uncaught exception of a type not derived from std::exception";
    }
  }
  std::fprintf(stderr, "reel::distributed: rank %d of %d: %s; aborting every rank (%s)\n", state().rank,
               state().size, what.c_str(), REEL_DIST_MPI ? "MPI_Abort" : "this process ends; the launcher ends the others");
  std::fflush(stderr);
#if REEL_DIST_MPI
  MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  std::abort();
}
// At exit: a group the program did not leave is left now, with a warning (see the end of this file).
inline void leave_at_exit();
// An integer from the first of the environment variables that is set; `fallback` if none.
inline int env_int(std::initializer_list<const char*> vars, int fallback) {
  for (const char* var : vars)
    if (const char* v = std::getenv(var)) {
      char* end = nullptr;
      const long x = std::strtol(v, &end, 10);
      REEL_CHECK(end != v && *end == 0 && x >= 0 && x <= INT32_MAX, value_error, "distributed: ", var, "=", v,
                 " is not a rank or size");
      return static_cast<int>(x);
    }
  return fallback;
}
}  // namespace detail_dist

// Joins the launcher's world. With MPI in the build: mpirun / srun (MPI knows the ranks; MPI is
// started unless the program did). Without it (NCCL alone): RANK and WORLD_SIZE (torchrun),
// or a world of one. A second call raises. Backend::NCCL also makes the world's NCCL
// communicator (this rank's CUDA device: InitOptions::device).
inline void init_process_group(Backend backend = Backend::MPI, InitOptions o = {}) {
  auto& s = detail_dist::state();
  REEL_CHECK(!s.initialized, error, "distributed::init_process_group: the default process group is initialized already");
  const auto& hooks = detail_dist::device_hooks();
  REEL_CHECK(backend != Backend::NCCL || hooks.world, not_implemented_error,
             "distributed: Backend::NCCL needs reel's NCCL engine: include <reel/distributed.hpp> in a translation "
             "unit compiled by nvcc where <nccl.h> is found, and link -lnccl");
  std::vector<int> all;
#if REEL_DIST_MPI
  int started = 0;
  detail_dist::check_mpi(MPI_Initialized(&started), "MPI_Initialized");
  int provided = 0;
  if (!started) {
    detail_dist::check_mpi(MPI_Init_thread(nullptr, nullptr, o.mpi_thread_level, &provided), "MPI_Init_thread");
    s.finalize_mpi = true;
  } else {
    detail_dist::check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  REEL_CHECK(provided >= MPI_THREAD_SERIALIZED, error, "distributed::init_process_group: MPI provides thread level ",
             provided, "; reel's communication thread needs MPI_THREAD_SERIALIZED (start MPI with MPI_Init_thread)");
  MPI_Comm world;
  detail_dist::check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup");
  detail_dist::check_mpi(MPI_Comm_rank(world, &s.rank), "MPI_Comm_rank");
  detail_dist::check_mpi(MPI_Comm_size(world, &s.size), "MPI_Comm_size");
  // The launcher's view must agree with MPI's (a program started outside mpirun sees a world of one).
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK"})
    if (const char* v = std::getenv(var)) {
      REEL_CHECK(std::atoi(v) == s.rank, error, "distributed::init_process_group: ", var, "=", v,
                 " but MPI says this is rank ", s.rank, " (was the program started by another launcher?)");
      break;
    }
  for (int r = 0; r < s.size; ++r) all.push_back(r);
  auto group = std::make_unique<ProcessGroup>(world, all, o.debug, o.timeout);
#else
  REEL_CHECK(backend == Backend::NCCL, not_implemented_error,
             "distributed: Backend::MPI needs MPI in the build (compile with mpicxx, or add MPI's include directory)");
  REEL_CHECK(o.debug != DebugLevel::DETAIL, not_implemented_error,
             "distributed: DebugLevel::DETAIL compares the signatures over MPI; this build has NCCL alone");
  s.size = detail_dist::env_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 1);
  s.rank = detail_dist::env_int({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, 0);
  REEL_CHECK(s.rank < s.size, value_error, "distributed::init_process_group: rank ", s.rank, " in a world of ", s.size);
  for (int r = 0; r < s.size; ++r) all.push_back(r);
  auto group = std::make_unique<ProcessGroup>(all, s.rank, o.debug, o.timeout);
#endif
  detail_dist::comm_thread() = std::make_unique<detail_dist::CommThread>();
  s.backend = backend;
  s.debug = o.debug;
  s.timeout = o.timeout;
  if (backend == Backend::NCCL) {
    try {
      group->set_device_comm(hooks.world(o, *group));
    } catch (...) {
      group.reset();
      detail_dist::comm_thread().reset();
#if REEL_DIST_MPI
      // (MPI stays up, so a later init_process_group can still use it: MPI cannot start twice;
      // if none succeeds, it is ended at exit)
      if (s.finalize_mpi) std::atexit([] {
          int finalized = 0;
          if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized && !detail_dist::state().initialized) MPI_Finalize();
        });
#endif
      throw;
    }
  }
  s.initialized = true;
  detail_dist::world_holder().group = std::move(group);
  s.previous_terminate = std::set_terminate(&detail_dist::abort_job_on_terminate);
  // (registered after MPI and CUDA started: it runs before their own teardown at exit)
  static const bool at_exit = std::atexit(&detail_dist::leave_at_exit) == 0;
  (void)at_exit;
}
inline bool is_initialized() { return detail_dist::state().initialized; }
inline int rank() { return detail_dist::live("rank").rank; }
inline int world_size() { return detail_dist::live("world_size").size; }
inline Backend get_backend() { return detail_dist::live("get_backend").backend; }
// The world as a group.
inline const ProcessGroup& world() {
  detail_dist::live("world");
  return *detail_dist::world_holder().group;
}
// A group of the given world ranks (every rank of the world calls it, members or not).
inline std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks, GroupOptions go = {}) {
  auto& s = detail_dist::live("new_group");
  std::sort(ranks.begin(), ranks.end());
  REEL_CHECK(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(), value_error,
             "distributed::new_group: a rank is listed twice");
  for (int r : ranks)
    REEL_CHECK(r >= 0 && r < s.size, value_error, "distributed::new_group: rank ", r, " is not in a world of ", s.size);
  std::shared_ptr<ProcessGroup> g;
  const DebugLevel debug = go.debug.value_or(s.debug);
  const auto timeout = go.timeout.value_or(s.timeout);
#if REEL_DIST_MPI
  detail_dist::comm_thread()->exclusive([&] {
    MPI_Group all, sub;
    const MPI_Comm world = detail_dist::world_holder().group->comm();
    detail_dist::check_mpi(MPI_Comm_group(world, &all), "MPI_Comm_group");
    detail_dist::check_mpi(MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &sub), "MPI_Group_incl");
    MPI_Comm comm = MPI_COMM_NULL;
    const int rc = MPI_Comm_create(world, sub, &comm);
    MPI_Group_free(&sub);
    MPI_Group_free(&all);
    detail_dist::check_mpi(rc, "MPI_Comm_create");
    g = std::make_shared<ProcessGroup>(comm, ranks, debug, timeout);
  });
#else
  REEL_CHECK(debug != DebugLevel::DETAIL, not_implemented_error,
             "distributed::new_group: DebugLevel::DETAIL compares the signatures over MPI; this build has NCCL alone");
  const auto at = std::find(ranks.begin(), ranks.end(), s.rank);
  g = std::make_shared<ProcessGroup>(ranks, at == ranks.end() ? -1 : static_cast<int>(at - ranks.begin()), debug, timeout);
#endif
  if (s.backend == Backend::NCCL) g->set_device_comm(detail_dist::device_hooks().split(world(), ranks));
  return g;
}
// Leaves the process group (and ends MPI when init_process_group started it).
inline void destroy_process_group() {
  auto& s = detail_dist::live("destroy_process_group");
  detail_dist::world_holder().group.reset();
  detail_dist::comm_thread().reset();  // (after its last job)
  std::set_terminate(s.previous_terminate);
  s.initialized = false;
#if REEL_DIST_MPI
  if (s.finalize_mpi) {
    s.finalize_mpi = false;
    detail_dist::check_mpi(MPI_Finalize(), "MPI_Finalize");
  }
#endif
}

namespace detail_dist {
// A program that returns from main (or calls exit) without destroy_process_group: leave the
// group while MPI and CUDA are still up (PyTorch warns the same way), rather than letting the
// static group's destructor free communicators after their runtimes ended (MPI would report
// a rank that exited without MPI_Finalize; NCCL's teardown would call into an ended CUDA).
inline void leave_at_exit() {
  auto& s = state();
  if (s.initialized) {
    std::fprintf(stderr,
                 "reel::distributed: rank %d of %d: the program ends without destroy_process_group(); leaving the "
                 "group now (call it before main returns: it waits for this rank's pending communication)\n",
                 s.rank, s.size);
    std::fflush(stderr);
    try {
      destroy_process_group();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "reel::distributed: rank %d: leaving the group at exit failed: %s\n", s.rank, e.what());
    }
  }
  s.exiting = true;
}
}  // namespace detail_dist

}  // namespace reel::distributed
