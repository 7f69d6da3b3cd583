#pragma once
// reel::distributed on MPI: the MPI types and reductions, process groups, Work, and joining
// and leaving the world (see <reel/distributed.hpp>).
#include "../core/config.hpp"
#if !__has_include(<mpi.h>)
#error "reel/distributed.hpp needs MPI: compile with mpicxx (Debian: libopenmpi-dev), or add MPI's include directory"
#endif
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // (only MPI's C interface is used: not its deprecated C++ bindings)
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

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

namespace reel::inline REEL_ABI::distributed {

enum class Backend { MPI, NCCL };
// AVG: the sum divided by the world size (floating point and complex tensors only).
enum class ReduceOp { SUM, AVG, PRODUCT, MIN, MAX };
// PyTorch's TORCH_DISTRIBUTED_DEBUG levels. DETAIL checks every collective's signature (its
// sequence number in the group, the op, dtype, shape and root) across the group before the call,
// and raises on every member, naming the ranks, when they differ or when a member has not
// joined within the group's timeout (distributed/check.hpp). OFF and INFO check nothing.
enum class DebugLevel { OFF, INFO, DETAIL };

namespace detail_dist {
inline void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  raise<error>("distributed: ", what, " failed: ", std::string(msg, static_cast<size_t>(len)));
}
struct State {
  bool initialized = false;
  bool finalize_mpi = false;  // reel started MPI, so it ends it
  Backend backend = Backend::MPI;
  MPI_Comm world = MPI_COMM_NULL;
  int rank = 0, size = 1;
  DebugLevel debug = DebugLevel::OFF;  // the world group's (new groups' default)
  std::chrono::milliseconds timeout{};
  std::terminate_handler previous_terminate = nullptr;
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

// float16 / bfloat16: two bytes on the wire, reduced in float.
template <class T>
void reduce_in_float(void* in, void* inout, int* len, MPI_Datatype*, int op) {
  auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    b[i] = static_cast<T>(op == 0 ? x + y : op == 1 ? x * y : op == 2 ? (y < x || y != y ? y : x) : (y > x || y != y ? y : x));
  }
}
template <class T, int Op>
void reduce_fn(void* in, void* inout, int* len, MPI_Datatype* type) {
  reduce_in_float<T>(in, inout, len, type, Op);
}
template <class T>
MPI_Datatype half_type() {
  static MPI_Datatype t = [] {
    MPI_Datatype d;
    check_mpi(MPI_Type_contiguous(static_cast<int>(sizeof(T)), MPI_BYTE, &d), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&d), "MPI_Type_commit");
    return d;
  }();
  return t;
}
template <class T, int Op>
MPI_Op half_op() {
  static MPI_Op o = [] {
    MPI_Op op;
    check_mpi(MPI_Op_create(&reduce_fn<T, Op>, /*commute=*/1, &op), "MPI_Op_create");
    return op;
  }();
  return o;
}

template <class T>
constexpr bool is_half_v = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

template <class T>
MPI_Datatype datatype() {
  if constexpr (std::is_same_v<T, bool>) return MPI_C_BOOL;
  else if constexpr (std::is_same_v<T, int8_t>) return MPI_INT8_T;
  else if constexpr (std::is_same_v<T, int16_t>) return MPI_INT16_T;
  else if constexpr (std::is_same_v<T, int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, uint8_t>) return MPI_UINT8_T;
  else if constexpr (std::is_same_v<T, uint16_t>) return MPI_UINT16_T;
  else if constexpr (std::is_same_v<T, uint32_t>) return MPI_UINT32_T;
  else if constexpr (std::is_same_v<T, uint64_t>) return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::complex<float>>) return MPI_C_FLOAT_COMPLEX;
  else if constexpr (std::is_same_v<T, std::complex<double>>) return MPI_C_DOUBLE_COMPLEX;
  else if constexpr (is_half_v<T>) return half_type<T>();
  else static_assert(sizeof(T) == 0, "reel::distributed: MPI does not carry this dtype (float8 / float4: convert first)");
}

template <class T>
MPI_Op mpi_op(ReduceOp op) {
  if constexpr (is_half_v<T>) {
    switch (op) {
      case ReduceOp::PRODUCT: return half_op<T, 1>();
      case ReduceOp::MIN: return half_op<T, 2>();
      case ReduceOp::MAX: return half_op<T, 3>();
      default: return half_op<T, 0>();
    }
  } else {
    if constexpr (is_complex_v<T>)
      REEL_CHECK(op != ReduceOp::MIN && op != ReduceOp::MAX, type_error,
                 "distributed: MIN and MAX are not defined for complex tensors (they have no order)");
    if constexpr (std::is_same_v<T, bool>) {
      switch (op) {  // (MPI's logical ops: bool has no arithmetic)
        case ReduceOp::SUM: case ReduceOp::MAX: return MPI_LOR;
        default: return MPI_LAND;
      }
    }
    switch (op) {
      case ReduceOp::PRODUCT: return MPI_PROD;
      case ReduceOp::MIN: return MPI_MIN;
      case ReduceOp::MAX: return MPI_MAX;
      default: return MPI_SUM;
    }
  }
}

template <class T, class D>
void check_cpu(const char* what) {
  static_assert(reel::detail::Backend<D>::host_memory && reel::detail::Backend<D>::has_data,
                "reel::distributed: the MPI backend carries CPU tensors (CUDA tensors need NCCL)");
  (void)what;
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
// While a process group is up, an exception that nothing catches (or any std::terminate)
// ends every rank with a message naming this one: the others would otherwise wait in their
// next collective for a rank that is gone.
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
  std::fprintf(stderr, "reel::distributed: rank %d of %d: %s; aborting every rank (MPI_Abort)\n", state().rank,
               state().size, what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
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
  // MPI's thread level when reel starts MPI (MPI_THREAD_SERIALIZED: one thread calls at a time).
  int mpi_thread_level = MPI_THREAD_SERIALIZED;
  // The world group's checks (new_group's groups take these unless told otherwise).
  DebugLevel debug = detail_dist::debug_level_from_env();
  // How long a checked collective waits for every member to join it (torch's default: 10 min).
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
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
  ~ProcessGroup() {
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
  }
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  bool is_member() const { return comm_ != MPI_COMM_NULL; }
  int rank() const { return rank_; }  // within the group (-1 outside it)
  int size() const { return static_cast<int>(ranks_.size()); }
  const std::vector<int>& ranks() const { return ranks_; }  // the members' world ranks
  MPI_Comm comm() const { return comm_; }
  DebugLevel debug() const { return debug_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // (the checks' own communicator, and the number of the group's next checked collective)
  MPI_Comm check_comm() const { return check_; }
  int64_t next_seq() const { return seq_++; }
  // The group rank of world rank r (raises when r is not a member).
  int group_rank(int r, const char* what) const {
    for (size_t k = 0; k < ranks_.size(); ++k)
      if (ranks_[k] == r) return static_cast<int>(k);
    raise<value_error>("distributed::", what, ": rank ", r, " is not in the group");
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL, check_ = MPI_COMM_NULL;
  std::vector<int> ranks_;
  int rank_ = -1;
  DebugLevel debug_ = DebugLevel::OFF;
  std::chrono::milliseconds timeout_{};
  mutable int64_t seq_ = 0;
};

namespace detail_dist {
struct World {
  std::unique_ptr<ProcessGroup> group;
};
inline World& world_holder() {
  static World w;
  return w;
}
}  // namespace detail_dist

// Joins the launcher's world (mpirun / srun: MPI knows the ranks). Starts MPI unless the
// program did; a second call raises.
inline void init_process_group(Backend backend = Backend::MPI, InitOptions o = {}) {
  auto& s = detail_dist::state();
  REEL_CHECK(!s.initialized, error, "distributed::init_process_group: the default process group is initialized already");
  REEL_CHECK(backend == Backend::MPI, not_implemented_error,
             "distributed: Backend::NCCL is not in this build yet; use Backend::MPI (CPU tensors)");
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
  detail_dist::check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &s.world), "MPI_Comm_dup");
  detail_dist::check_mpi(MPI_Comm_set_errhandler(s.world, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  detail_dist::check_mpi(MPI_Comm_rank(s.world, &s.rank), "MPI_Comm_rank");
  detail_dist::check_mpi(MPI_Comm_size(s.world, &s.size), "MPI_Comm_size");
  // The launcher's view must agree with MPI's (a program started outside mpirun sees a world of one).
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK"})
    if (const char* v = std::getenv(var)) {
      REEL_CHECK(std::atoi(v) == s.rank, error, "distributed::init_process_group: ", var, "=", v,
                 " but MPI says this is rank ", s.rank, " (was the program started by another launcher?)");
      break;
    }
  std::vector<int> all(static_cast<size_t>(s.size));
  for (int r = 0; r < s.size; ++r) all[static_cast<size_t>(r)] = r;
  MPI_Comm world_copy;
  detail_dist::check_mpi(MPI_Comm_dup(s.world, &world_copy), "MPI_Comm_dup");
  detail_dist::world_holder().group = std::make_unique<ProcessGroup>(world_copy, std::move(all), o.debug, o.timeout);
  detail_dist::comm_thread() = std::make_unique<detail_dist::CommThread>();
  s.backend = backend;
  s.debug = o.debug;
  s.timeout = o.timeout;
  s.previous_terminate = std::set_terminate(&detail_dist::abort_job_on_terminate);
  s.initialized = true;
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
  detail_dist::comm_thread()->exclusive([&] {
    MPI_Group all, sub;
    detail_dist::check_mpi(MPI_Comm_group(s.world, &all), "MPI_Comm_group");
    detail_dist::check_mpi(MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &sub), "MPI_Group_incl");
    MPI_Comm comm = MPI_COMM_NULL;
    const int rc = MPI_Comm_create(s.world, sub, &comm);
    MPI_Group_free(&sub);
    MPI_Group_free(&all);
    detail_dist::check_mpi(rc, "MPI_Comm_create");
    g = std::make_shared<ProcessGroup>(comm, ranks, go.debug.value_or(s.debug), go.timeout.value_or(s.timeout));
  });
  return g;
}
// Leaves the process group (and ends MPI when init_process_group started it).
inline void destroy_process_group() {
  auto& s = detail_dist::live("destroy_process_group");
  detail_dist::world_holder().group.reset();
  detail_dist::comm_thread().reset();  // (after its last job)
  detail_dist::check_mpi(MPI_Comm_free(&s.world), "MPI_Comm_free");
  std::set_terminate(s.previous_terminate);
  s.initialized = false;
  if (s.finalize_mpi) {
    s.finalize_mpi = false;
    detail_dist::check_mpi(MPI_Finalize(), "MPI_Finalize");
  }
}

}  // namespace reel::distributed
