#pragma once
// Collective communication between processes (PyTorch's torch.distributed) on MPI, the engine
// clusters already run: a program compiled with mpicxx and launched by mpirun / srun.
//
//   reel::distributed::init_process_group(Backend::MPI);      // reads the launcher's world
//   Tensor<float> g = ...;
//   reel::distributed::all_reduce(g, ReduceOp::AVG);           // in place, on every rank
//   reel::distributed::broadcast(w, /*src=*/0);
//   reel::distributed::destroy_process_group();
//
// The MPI backend carries CPU tensors of every dtype MPI can (float16 and bfloat16 with a
// reduction of reel's own that computes in float). Every collective returns a Work; with
// {.async_op = true} it has only started (MPI's nonblocking form) and Work::wait() finishes it
// (a Work that is dropped waits). Results are written in place (a strided tensor goes through
// a contiguous copy, written back when the call completes). The ranks of a group must call
// its collectives in the same order with the same shapes; src / dst are ranks of the world,
// as in PyTorch. An MPI failure raises reel::error with MPI's message. Backend::NCCL (CUDA
// tensors) is not in this build yet: init raises not_implemented_error.
#include "core/config.hpp"
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
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/autograd.hpp"
#include "core/errors.hpp"
#include "core/tensor.hpp"
#include "ops/factories.hpp"

namespace reel::inline REEL_ABI::distributed {

enum class Backend { MPI, NCCL };
// AVG: the sum divided by the world size (floating point and complex tensors only).
enum class ReduceOp { SUM, AVG, PRODUCT, MIN, MAX };

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
  static_assert(std::is_same_v<D, CPU>, "reel::distributed: the MPI backend carries CPU tensors (CUDA tensors need NCCL)");
  (void)what;
}
}  // namespace detail_dist

struct InitOptions {
  // MPI's thread level when reel starts MPI (MPI_THREAD_SERIALIZED: one thread calls at a time).
  int mpi_thread_level = MPI_THREAD_SERIALIZED;
};

// A set of ranks that communicate (torch.distributed's ProcessGroup): the world, or a group
// made by new_group. On a rank outside it, is_member() is false and collectives on it raise.
class ProcessGroup {
 public:
  ProcessGroup() = default;
  ProcessGroup(MPI_Comm comm, std::vector<int> ranks) : comm_(comm), ranks_(std::move(ranks)) {
    if (comm_ != MPI_COMM_NULL) {
      detail_dist::check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      detail_dist::check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    }
  }
  ~ProcessGroup() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
  }
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  bool is_member() const { return comm_ != MPI_COMM_NULL; }
  int rank() const { return rank_; }  // within the group (-1 outside it)
  int size() const { return static_cast<int>(ranks_.size()); }
  const std::vector<int>& ranks() const { return ranks_; }  // the members' world ranks
  MPI_Comm comm() const { return comm_; }
  // The group rank of world rank r (raises when r is not a member).
  int group_rank(int r, const char* what) const {
    for (size_t k = 0; k < ranks_.size(); ++k)
      if (ranks_[k] == r) return static_cast<int>(k);
    raise<value_error>("distributed::", what, ": rank ", r, " is not in the group");
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::vector<int> ranks_;
  int rank_ = -1;
};

// A collective's completion: wait() returns once it is done (and its results written).
class Work {
 public:
  struct State {
    MPI_Request request = MPI_REQUEST_NULL;
    std::function<void()> finish;  // after completion: write results back
    bool done = false;
    std::vector<std::shared_ptr<void>> keep;  // buffers the call reads or writes
    ~State() {
      if (!done && request != MPI_REQUEST_NULL) MPI_Wait(&request, MPI_STATUS_IGNORE);  // (never abandon a buffer in flight)
    }
  };
  Work() = default;
  explicit Work(std::shared_ptr<State> s) : s_(std::move(s)) {}
  void wait() {
    if (!s_ || s_->done) return;
    detail_dist::check_mpi(MPI_Wait(&s_->request, MPI_STATUS_IGNORE), "MPI_Wait");
    s_->done = true;
    if (s_->finish) s_->finish();
  }
  bool is_completed() {
    if (!s_ || s_->done) return true;
    int flag = 0;
    detail_dist::check_mpi(MPI_Test(&s_->request, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    if (flag) {
      s_->done = true;
      if (s_->finish) s_->finish();
    }
    return s_->done;
  }

 private:
  std::shared_ptr<State> s_;
};

struct CollectiveOptions {
  const ProcessGroup* group = nullptr;  // null: the world
  bool async_op = false;                // return as soon as the call has started
};

namespace detail_dist {
struct World {
  std::unique_ptr<ProcessGroup> group;
};
inline World& world_holder() {
  static World w;
  return w;
}
inline const ProcessGroup& group_of(const CollectiveOptions& o, const char* what) {
  live(what);
  const ProcessGroup& g = o.group ? *o.group : *world_holder().group;
  REEL_CHECK(g.is_member(), error, "distributed::", what, ": this rank (", state().rank, ") is not in the group");
  return g;
}
// Starts a nonblocking call (start(request)), and waits for it unless the call is async.
template <class Start>
Work launch(const CollectiveOptions& o, Start&& start, std::function<void()> finish,
            std::vector<std::shared_ptr<void>> keep, const char* what) {
  auto st = std::make_shared<Work::State>();
  st->finish = std::move(finish);
  st->keep = std::move(keep);
  check_mpi(start(&st->request), what);
  Work w(st);
  if (!o.async_op) w.wait();
  return w;
}
template <class T>
std::shared_ptr<void> hold(const Tensor<T, CPU>& t) {
  return std::make_shared<Tensor<T, CPU>>(t);
}
template <class T>
void divide(Tensor<T, CPU>& t, int n) {
  if constexpr (is_floating_v<T> || is_complex_v<T>) {
    T* p = t.mutable_data_ptr();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (is_half_v<T>)
        p[i] = static_cast<T>(static_cast<float>(p[i]) / static_cast<float>(n));
      else if constexpr (is_complex_v<T>)
        p[i] /= static_cast<typename T::value_type>(n);
      else
        p[i] /= static_cast<T>(n);
    }
  }
}
template <class T>
void check_avg(ReduceOp op, const char* what) {
  if (op == ReduceOp::AVG)
    REEL_CHECK(is_floating_v<T> || is_complex_v<T>, type_error, "distributed::", what,
               ": AVG needs a floating point or complex tensor (an integer mean would be rounded)");
}
template <class T>
Tensor<T, CPU> contiguous_of(const Tensor<T, CPU>& t) {
  return t.is_contiguous() ? t : t.contiguous();
}
// Writes `data` (a contiguous result) back into `target` when they differ, and marks the write.
template <class T>
void write_back(Tensor<T, CPU> target, Tensor<T, CPU> data) {
  if (!data.is_same_storage(target) || data.storage_offset() != target.storage_offset() || !target.is_contiguous())
    target.copy_(data);
  else
    target.bump_version();
}
inline int count_of(int64_t n, const char* what) {
  REEL_CHECK(n <= INT32_MAX, value_error, "distributed::", what, ": ", n,
             " elements is more than one MPI call carries (2^31 - 1)");
  return static_cast<int>(n);
}
template <class T>
void same_shapes(const std::vector<Tensor<T, CPU>>& list, const Shape& sizes, size_t n, const char* what) {
  REEL_CHECK(list.size() == n, value_error, "distributed::", what, ": the list has ", list.size(),
             " tensors for a group of ", n);
  for (const auto& x : list)
    REEL_CHECK(x.sizes() == sizes, value_error, "distributed::", what, ": a listed tensor has shape ", x.sizes(),
               ", the other argument ", sizes);
}
// The list's tensors stacked into one contiguous tensor ([n, *sizes]).
template <class T>
Tensor<T, CPU> stacked(const std::vector<Tensor<T, CPU>>& list, const Shape& sizes) {
  Shape whole = sizes;
  whole.insert(0, static_cast<int64_t>(list.size()));
  Tensor<T, CPU> all = empty<T, CPU>(whole);
  for (size_t r = 0; r < list.size(); ++r) all.select(0, static_cast<int64_t>(r)).copy_(list[r]);
  return all;
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
  if (!started) {
    int provided = 0;
    detail_dist::check_mpi(MPI_Init_thread(nullptr, nullptr, o.mpi_thread_level, &provided), "MPI_Init_thread");
    s.finalize_mpi = true;
  }
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
  detail_dist::world_holder().group = std::make_unique<ProcessGroup>(world_copy, std::move(all));
  s.backend = backend;
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
inline std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks) {
  auto& s = detail_dist::live("new_group");
  std::sort(ranks.begin(), ranks.end());
  REEL_CHECK(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(), value_error,
             "distributed::new_group: a rank is listed twice");
  for (int r : ranks)
    REEL_CHECK(r >= 0 && r < s.size, value_error, "distributed::new_group: rank ", r, " is not in a world of ", s.size);
  MPI_Group all, sub;
  detail_dist::check_mpi(MPI_Comm_group(s.world, &all), "MPI_Comm_group");
  detail_dist::check_mpi(MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &sub), "MPI_Group_incl");
  MPI_Comm comm = MPI_COMM_NULL;
  detail_dist::check_mpi(MPI_Comm_create(s.world, sub, &comm), "MPI_Comm_create");
  MPI_Group_free(&sub);
  MPI_Group_free(&all);
  return std::make_shared<ProcessGroup>(comm, std::move(ranks));
}
inline void barrier(CollectiveOptions o = {}) {
  const ProcessGroup& g = detail_dist::group_of(o, "barrier");
  detail_dist::launch(o, [&](MPI_Request* r) { return MPI_Ibarrier(g.comm(), r); }, {}, {}, "MPI_Ibarrier").wait();
}
// Leaves the process group (and ends MPI when init_process_group started it).
inline void destroy_process_group() {
  auto& s = detail_dist::live("destroy_process_group");
  detail_dist::world_holder().group.reset();
  detail_dist::check_mpi(MPI_Comm_free(&s.world), "MPI_Comm_free");
  s.initialized = false;
  if (s.finalize_mpi) {
    s.finalize_mpi = false;
    detail_dist::check_mpi(MPI_Finalize(), "MPI_Finalize");
  }
}

// t = op over the group's t, on every member.
template <class T, class D>
Work all_reduce(Tensor<T, D>& t, ReduceOp op = ReduceOp::SUM, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("all_reduce");
  detail_dist::check_avg<T>(op, "all_reduce");
  const ProcessGroup& g = detail_dist::group_of(o, "all_reduce");
  auto data = detail_dist::contiguous_of(t);
  const int n = detail_dist::count_of(data.numel(), "all_reduce");
  return detail_dist::launch(
      o,
      [&](MPI_Request* r) {
        return MPI_Iallreduce(MPI_IN_PLACE, data.mutable_data_ptr(), n, detail_dist::datatype<T>(),
                              detail_dist::mpi_op<T>(op), g.comm(), r);
      },
      [t, data, op, size = g.size()]() mutable {
        if (op == ReduceOp::AVG) detail_dist::divide(data, size);
        detail_dist::write_back(t, data);
      },
      {detail_dist::hold(data)}, "MPI_Iallreduce");
}
template <class T, class D>
Work all_reduce(Tensor<T, D>&& t, ReduceOp op = ReduceOp::SUM, CollectiveOptions o = {}) {
  return all_reduce(t, op, o);
}

// t = op over the group's t, on rank dst only (the others' t is unchanged).
template <class T, class D>
Work reduce(Tensor<T, D>& t, int dst, ReduceOp op = ReduceOp::SUM, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("reduce");
  detail_dist::check_avg<T>(op, "reduce");
  const ProcessGroup& g = detail_dist::group_of(o, "reduce");
  const int root = g.group_rank(dst, "reduce");
  const bool mine = g.rank() == root;
  auto data = detail_dist::contiguous_of(t);
  auto out = mine ? data : empty<T, CPU>(t.sizes());  // (the others' results go nowhere)
  const int n = detail_dist::count_of(data.numel(), "reduce");
  return detail_dist::launch(
      o,
      [&](MPI_Request* r) {
        return MPI_Ireduce(mine ? MPI_IN_PLACE : data.mutable_data_ptr(), mine ? data.mutable_data_ptr() : out.mutable_data_ptr(),
                           n, detail_dist::datatype<T>(), detail_dist::mpi_op<T>(op), root, g.comm(), r);
      },
      [t, data, op, mine, size = g.size()]() mutable {
        if (!mine) return;
        if (op == ReduceOp::AVG) detail_dist::divide(data, size);
        detail_dist::write_back(t, data);
      },
      {detail_dist::hold(data), detail_dist::hold(out)}, "MPI_Ireduce");
}

// t = src's t, on every member.
template <class T, class D>
Work broadcast(Tensor<T, D>& t, int src, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("broadcast");
  const ProcessGroup& g = detail_dist::group_of(o, "broadcast");
  const int root = g.group_rank(src, "broadcast");
  auto data = detail_dist::contiguous_of(t);
  const int n = detail_dist::count_of(data.numel(), "broadcast");
  return detail_dist::launch(
      o, [&](MPI_Request* r) { return MPI_Ibcast(data.mutable_data_ptr(), n, detail_dist::datatype<T>(), root, g.comm(), r); },
      [t, data, mine = g.rank() == root]() {
        if (!mine) detail_dist::write_back(t, data);
      },
      {detail_dist::hold(data)}, "MPI_Ibcast");
}
template <class T, class D>
Work broadcast(Tensor<T, D>&& t, int src, CollectiveOptions o = {}) {
  return broadcast(t, src, o);
}

// out = the members' t, in group order: [size * t.numel()] elements (e.g. [size, *t.sizes()]
// or t's dim 0 times size), as torch.distributed.all_gather_into_tensor.
template <class T, class D>
Work all_gather_into_tensor(Tensor<T, D>& out, const Tensor<T, D>& t, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("all_gather_into_tensor");
  const ProcessGroup& g = detail_dist::group_of(o, "all_gather_into_tensor");
  REEL_CHECK(out.numel() == t.numel() * g.size(), value_error, "distributed::all_gather_into_tensor: the output has ",
             out.numel(), " elements, the group's size times the input's ", t.numel() * g.size());
  auto in = detail_dist::contiguous_of(t);
  auto data = detail_dist::contiguous_of(out);
  const int n = detail_dist::count_of(in.numel(), "all_gather_into_tensor");
  return detail_dist::launch(
      o,
      [&](MPI_Request* r) {
        return MPI_Iallgather(in.mutable_data_ptr(), n, detail_dist::datatype<T>(), data.mutable_data_ptr(), n,
                              detail_dist::datatype<T>(), g.comm(), r);
      },
      [out, data]() { detail_dist::write_back(out, data); }, {detail_dist::hold(in), detail_dist::hold(data)},
      "MPI_Iallgather");
}
// out[k] = member k's t. An empty list is filled with tensors shaped like t.
template <class T, class D>
Work all_gather(std::vector<Tensor<T, D>>& out, const Tensor<T, D>& t, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("all_gather");
  const ProcessGroup& g = detail_dist::group_of(o, "all_gather");
  if (out.empty())
    for (int r = 0; r < g.size(); ++r) out.push_back(empty<T, D>(t.sizes()));
  detail_dist::same_shapes(out, t.sizes(), static_cast<size_t>(g.size()), "all_gather");
  Shape whole = t.sizes();
  whole.insert(0, g.size());
  auto all = empty<T, CPU>(whole);
  auto in = detail_dist::contiguous_of(t);
  const int n = detail_dist::count_of(in.numel(), "all_gather");
  return detail_dist::launch(
      o,
      [&](MPI_Request* r) {
        return MPI_Iallgather(in.mutable_data_ptr(), n, detail_dist::datatype<T>(), all.mutable_data_ptr(), n,
                              detail_dist::datatype<T>(), g.comm(), r);
      },
      [list = out, all]() mutable {
        for (size_t k = 0; k < list.size(); ++k) list[k].copy_(all.select(0, static_cast<int64_t>(k)));
      },
      {detail_dist::hold(in), detail_dist::hold(all)}, "MPI_Iallgather");
}

// out = op over the members of their in[k], where k is this rank's place in the group.
template <class T, class D>
Work reduce_scatter(Tensor<T, D>& out, const std::vector<Tensor<T, D>>& in, ReduceOp op = ReduceOp::SUM,
                    CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("reduce_scatter");
  detail_dist::check_avg<T>(op, "reduce_scatter");
  const ProcessGroup& g = detail_dist::group_of(o, "reduce_scatter");
  detail_dist::same_shapes(in, out.sizes(), static_cast<size_t>(g.size()), "reduce_scatter");
  auto all = detail_dist::stacked(in, out.sizes());
  auto data = empty<T, CPU>(out.sizes());
  const int n = detail_dist::count_of(data.numel(), "reduce_scatter");
  return detail_dist::launch(
      o,
      [&](MPI_Request* r) {
        return MPI_Ireduce_scatter_block(all.mutable_data_ptr(), data.mutable_data_ptr(), n, detail_dist::datatype<T>(),
                                         detail_dist::mpi_op<T>(op), g.comm(), r);
      },
      [out, data, op, size = g.size()]() mutable {
        if (op == ReduceOp::AVG) detail_dist::divide(data, size);
        out.copy_(data);
      },
      {detail_dist::hold(all), detail_dist::hold(data)}, "MPI_Ireduce_scatter_block");
}

// dst gets every member's t in gather_list (group order); the others pass an empty list.
template <class T, class D>
Work gather(const Tensor<T, D>& t, std::vector<Tensor<T, D>>& gather_list, int dst, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("gather");
  const ProcessGroup& g = detail_dist::group_of(o, "gather");
  const int root = g.group_rank(dst, "gather");
  const bool mine = g.rank() == root;
  if (mine && gather_list.empty())
    for (int r = 0; r < g.size(); ++r) gather_list.push_back(empty<T, D>(t.sizes()));
  if (mine) detail_dist::same_shapes(gather_list, t.sizes(), static_cast<size_t>(g.size()), "gather");
  Shape whole = t.sizes();
  whole.insert(0, mine ? g.size() : 0);
  auto all = empty<T, CPU>(whole);
  auto in = detail_dist::contiguous_of(t);
  const int n = detail_dist::count_of(in.numel(), "gather");
  return detail_dist::launch(
      o,
      [&](MPI_Request* r) {
        return MPI_Igather(in.mutable_data_ptr(), n, detail_dist::datatype<T>(), mine ? all.mutable_data_ptr() : nullptr,
                           n, detail_dist::datatype<T>(), root, g.comm(), r);
      },
      [list = gather_list, all, mine]() mutable {
        if (mine)
          for (size_t k = 0; k < list.size(); ++k) list[k].copy_(all.select(0, static_cast<int64_t>(k)));
      },
      {detail_dist::hold(in), detail_dist::hold(all)}, "MPI_Igather");
}

// out = scatter_list[k] of rank src, where k is this rank's place in the group (the others
// pass an empty list).
template <class T, class D>
Work scatter(Tensor<T, D>& out, const std::vector<Tensor<T, D>>& scatter_list, int src, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("scatter");
  const ProcessGroup& g = detail_dist::group_of(o, "scatter");
  const int root = g.group_rank(src, "scatter");
  const bool mine = g.rank() == root;
  if (mine) detail_dist::same_shapes(scatter_list, out.sizes(), static_cast<size_t>(g.size()), "scatter");
  auto all = mine ? detail_dist::stacked(scatter_list, out.sizes()) : empty<T, CPU>({0});
  auto data = empty<T, CPU>(out.sizes());
  const int n = detail_dist::count_of(data.numel(), "scatter");
  return detail_dist::launch(
      o,
      [&](MPI_Request* r) {
        return MPI_Iscatter(mine ? all.mutable_data_ptr() : nullptr, n, detail_dist::datatype<T>(), data.mutable_data_ptr(),
                            n, detail_dist::datatype<T>(), root, g.comm(), r);
      },
      [out, data]() mutable { out.copy_(data); }, {detail_dist::hold(all), detail_dist::hold(data)}, "MPI_Iscatter");
}

// out[k] = member k's in[r], where r is this rank's place: every member sends in[k] to member k.
template <class T, class D>
Work all_to_all(std::vector<Tensor<T, D>>& out, const std::vector<Tensor<T, D>>& in, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("all_to_all");
  const ProcessGroup& g = detail_dist::group_of(o, "all_to_all");
  REEL_CHECK(!in.empty(), value_error, "distributed::all_to_all: the input list is empty");
  detail_dist::same_shapes(in, in[0].sizes(), static_cast<size_t>(g.size()), "all_to_all");
  if (out.empty())
    for (int r = 0; r < g.size(); ++r) out.push_back(empty<T, D>(in[0].sizes()));
  detail_dist::same_shapes(out, in[0].sizes(), static_cast<size_t>(g.size()), "all_to_all");
  auto send = detail_dist::stacked(in, in[0].sizes());
  auto recv = empty<T, CPU>(send.sizes());
  const int n = detail_dist::count_of(in[0].numel(), "all_to_all");
  return detail_dist::launch(
      o,
      [&](MPI_Request* r) {
        return MPI_Ialltoall(send.mutable_data_ptr(), n, detail_dist::datatype<T>(), recv.mutable_data_ptr(), n,
                             detail_dist::datatype<T>(), g.comm(), r);
      },
      [list = out, recv]() mutable {
        for (size_t k = 0; k < list.size(); ++k) list[k].copy_(recv.select(0, static_cast<int64_t>(k)));
      },
      {detail_dist::hold(send), detail_dist::hold(recv)}, "MPI_Ialltoall");
}

// Point to point (dst / src: world ranks). {.async_op = true}: isend / irecv.
template <class T, class D>
Work send(const Tensor<T, D>& t, int dst, int tag = 0, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("send");
  const ProcessGroup& g = detail_dist::group_of(o, "send");
  const int peer = g.group_rank(dst, "send");
  auto data = detail_dist::contiguous_of(t);
  const int n = detail_dist::count_of(data.numel(), "send");
  return detail_dist::launch(
      o, [&](MPI_Request* r) { return MPI_Isend(data.mutable_data_ptr(), n, detail_dist::datatype<T>(), peer, tag, g.comm(), r); },
      {}, {detail_dist::hold(data)}, "MPI_Isend");
}
template <class T, class D>
Work recv(Tensor<T, D>& t, int src, int tag = 0, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("recv");
  const ProcessGroup& g = detail_dist::group_of(o, "recv");
  const int peer = g.group_rank(src, "recv");
  auto data = detail_dist::contiguous_of(t);
  const int n = detail_dist::count_of(data.numel(), "recv");
  return detail_dist::launch(
      o, [&](MPI_Request* r) { return MPI_Irecv(data.mutable_data_ptr(), n, detail_dist::datatype<T>(), peer, tag, g.comm(), r); },
      [t, data]() { detail_dist::write_back(t, data); }, {detail_dist::hold(data)}, "MPI_Irecv");
}

}  // namespace reel::distributed

namespace reel::inline REEL_ABI::nn::parallel {

// Data-parallel training (torch.nn.parallel.DistributedDataParallel) over a process group:
//
//   nn::parallel::DistributedDataParallel<float> ddp(model.parameters());   // or (model)
//   loss(model(x_shard)).backward();     // gradients arrive averaged over the ranks
//   { auto guard = ddp.no_sync(); loss2.backward(); }   // accumulate locally, reduce later
//
// At construction the parameters are broadcast from rank 0 (of the group). The parameters are
// grouped in buckets (bucket_cap_mb, in reverse registration order: the order backward
// completes them); each parameter's post-accumulate-grad hook counts its bucket down, and a
// complete bucket's gradients are flattened and all-reduced asynchronously at once, in bucket
// order on every rank, while backward goes on. When the pass ends (a queued callback) the
// reductions are waited for and the averages written into the .grad. A parameter that got no
// gradient raises reel::error then, unless find_unused_parameters is set: its gradient counts
// as zeros (so its .grad ends up the average of the ranks that used it, zeros where none did;
// PyTorch leaves it undefined in that case).
template <class T>
class DistributedDataParallel {
 public:
  struct Options {
    double bucket_cap_mb = 25;
    bool find_unused_parameters = false;
    const distributed::ProcessGroup* group = nullptr;  // null: the world
  };

  explicit DistributedDataParallel(std::vector<Tensor<T>> params, Options o = {}) : st_(std::make_shared<State>()) {
    REEL_CHECK(!params.empty(), value_error, "DistributedDataParallel: no parameters");
    st_->params = std::move(params);
    st_->o = o;
    st_->me = st_;
    const distributed::ProcessGroup& g = o.group ? *o.group : distributed::world();
    {
      autograd::no_grad ng;
      for (auto& p : st_->params) distributed::broadcast(p, g.ranks()[0], {.group = &g});
    }
    // buckets, last parameter first
    const double cap = o.bucket_cap_mb * 1024 * 1024;
    st_->bucket_of.assign(st_->params.size(), 0);
    double bytes = 0;
    for (size_t k = st_->params.size(); k-- > 0;) {
      const double b = static_cast<double>(st_->params[k].numel()) * sizeof(T);
      if (st_->buckets.empty() || (bytes + b > cap && !st_->buckets.back().params.empty())) {
        st_->buckets.emplace_back();
        bytes = 0;
      }
      st_->buckets.back().params.push_back(k);
      st_->bucket_of[k] = st_->buckets.size() - 1;
      bytes += b;
    }
    std::weak_ptr<State> weak = st_;
    for (size_t k = 0; k < st_->params.size(); ++k)
      hooks_.push_back(st_->params[k].register_post_accumulate_grad_hook([weak, k](const Tensor<T>&) {
        if (auto s = weak.lock()) s->ready(k);
      }));
  }
  template <class M>
    requires requires(const M& m) { m.parameters(); }
  explicit DistributedDataParallel(const M& module, Options o = {}) : DistributedDataParallel(module.parameters(), o) {}
  ~DistributedDataParallel() {
    for (auto& h : hooks_) h.remove();
  }
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // While the guard lives, backward accumulates gradients locally (no communication); the
  // next backward outside one reduces what accumulated.
  class NoSync {
   public:
    explicit NoSync(std::shared_ptr<bool> flag) : flag_(std::move(flag)) { *flag_ = true; }
    ~NoSync() { *flag_ = false; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    std::shared_ptr<bool> flag_;
  };
  NoSync no_sync() { return NoSync(st_->no_sync); }

  const std::vector<Tensor<T>>& parameters() const { return st_->params; }
  size_t bucket_count() const { return st_->buckets.size(); }
  // The parameter indices of each bucket, in launch order.
  std::vector<std::vector<size_t>> buckets() const {
    std::vector<std::vector<size_t>> r;
    for (const auto& b : st_->buckets) r.push_back(b.params);
    return r;
  }
  // The last backward's events, in order ("ready k": parameter k's gradient is in; "launch b":
  // bucket b's all-reduce started; "end": backward ended), for checking the overlap.
  const std::vector<std::string>& events() const { return st_->events; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    size_t pending = 0;
    Tensor<T> flat;
    distributed::Work work;
  };
  struct State {
    std::vector<Tensor<T>> params;
    Options o;
    std::vector<Bucket> buckets;
    std::vector<size_t> bucket_of;
    std::vector<char> got;
    size_t next_launch = 0;
    bool active = false;
    std::shared_ptr<bool> no_sync = std::make_shared<bool>(false);
    std::vector<std::string> events;
    std::weak_ptr<State> me;

    const distributed::ProcessGroup& group() const { return o.group ? *o.group : distributed::world(); }
    void start() {
      active = true;
      events.clear();
      got.assign(params.size(), 0);
      next_launch = 0;
      for (auto& b : buckets) b.pending = b.params.size();
      autograd::queue_callback([w = me] {
        if (auto s = w.lock()) s->finish();
      });
    }
    void ready(size_t k) {
      if (*no_sync) return;
      if (!active) start();
      if (got[k]) return;
      got[k] = 1;
      events.push_back("ready " + std::to_string(k));
      --buckets[bucket_of[k]].pending;
      launch_ready();
    }
    void launch_ready() {
      while (next_launch < buckets.size() && buckets[next_launch].pending == 0) launch(next_launch++);
    }
    void launch(size_t b) {
      Bucket& bk = buckets[b];
      int64_t n = 0;
      for (size_t k : bk.params) n += params[k].numel();
      bk.flat = zeros<T>({n});
      int64_t at = 0;
      autograd::no_grad ng;
      for (size_t k : bk.params) {
        const int64_t m = params[k].numel();
        Tensor<T> g = params[k].grad();
        if (g.defined()) bk.flat.slice(0, at, at + m).copy_(g.reshape({m}));
        at += m;
      }
      bk.work = distributed::all_reduce(bk.flat, distributed::ReduceOp::SUM, {.group = &group(), .async_op = true});
      events.push_back("launch " + std::to_string(b));
    }
    void finish() {
      active = false;
      std::vector<size_t> missing;
      for (size_t k = 0; k < params.size(); ++k)
        if (!got[k]) missing.push_back(k);
      if (!missing.empty()) {
        if (!o.find_unused_parameters) {
          for (size_t b = 0; b < next_launch; ++b) buckets[b].work.wait();  // (leave no call in flight)
          std::string list;
          for (size_t k : missing) list += (list.empty() ? "" : ", ") + std::to_string(k);
          raise<error>("DistributedDataParallel: parameters ", list, " received no gradient in this backward pass, so ",
                       "their buckets cannot be reduced; pass find_unused_parameters = true if some parameters are ",
                       "not used in every iteration");
        }
        for (size_t k : missing) --buckets[bucket_of[k]].pending;
        launch_ready();
      }
      const double world = group().size();
      autograd::no_grad ng;
      for (auto& bk : buckets) {
        bk.work.wait();
        bk.flat.div_(static_cast<T>(world));
        int64_t at = 0;
        for (size_t k : bk.params) {
          Tensor<T>& p = params[k];
          const int64_t m = p.numel();
          Tensor<T> avg = bk.flat.slice(0, at, at + m).reshape(p.sizes());
          Tensor<T> g = p.grad();
          if (g.defined())
            g.copy_(avg);
          else
            p.set_grad(avg.clone());
          at += m;
        }
        bk.flat = Tensor<T>();
      }
      events.push_back("end");
    }
  };
  std::shared_ptr<State> st_;
  std::vector<RemovableHandle> hooks_;
};

}  // namespace reel::nn::parallel

