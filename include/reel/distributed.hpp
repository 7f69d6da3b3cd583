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
// reduction of reel's own that computes in float). Collectives are synchronous and in place
// on contiguous tensors (a strided one goes through a contiguous copy); ranks must call them
// in the same order with the same shapes. An MPI failure raises reel::error with MPI's
// message. Backend::NCCL (CUDA tensors) is not in this build yet: init raises
// not_implemented_error.
#include "core/config.hpp"
#if !__has_include(<mpi.h>)
#error "reel/distributed.hpp needs MPI: compile with mpicxx (Debian: libopenmpi-dev), or add MPI's include directory"
#endif
#include <mpi.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

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

// The tensor's elements as one contiguous buffer: itself, or a copy written back by finish().
template <class T>
struct Buffer {
  Tensor<T, CPU> target, data;
  explicit Buffer(const Tensor<T, CPU>& t) : target(t), data(t.is_contiguous() ? t : t.contiguous()) {}
  void finish(bool wrote) {
    if (!wrote) return;
    if (!data.is_same_storage(target) || data.storage_offset() != target.storage_offset()) target.copy_(data);
    else target.bump_version();
  }
  T* ptr() { return data.mutable_data_ptr(); }
  int count() const {
    REEL_CHECK(data.numel() <= INT32_MAX, value_error, "distributed: a tensor of ", data.numel(),
               " elements is more than one MPI call carries (2^31 - 1)");
    return static_cast<int>(data.numel());
  }
};
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
  s.backend = backend;
  s.initialized = true;
}
inline bool is_initialized() { return detail_dist::state().initialized; }
inline int rank() { return detail_dist::live("rank").rank; }
inline int world_size() { return detail_dist::live("world_size").size; }
inline Backend get_backend() { return detail_dist::live("get_backend").backend; }
inline void barrier() { detail_dist::check_mpi(MPI_Barrier(detail_dist::live("barrier").world), "MPI_Barrier"); }
// Leaves the process group (and ends MPI when init_process_group started it).
inline void destroy_process_group() {
  auto& s = detail_dist::live("destroy_process_group");
  detail_dist::check_mpi(MPI_Comm_free(&s.world), "MPI_Comm_free");
  s.initialized = false;
  if (s.finalize_mpi) {
    s.finalize_mpi = false;
    detail_dist::check_mpi(MPI_Finalize(), "MPI_Finalize");
  }
}

// t = op over every rank's t, on every rank.
template <class T, class D>
void all_reduce(Tensor<T, D>& t, ReduceOp op = ReduceOp::SUM) {
  detail_dist::check_cpu<T, D>("all_reduce");
  auto& s = detail_dist::live("all_reduce");
  if (op == ReduceOp::AVG)
    REEL_CHECK(is_floating_v<T> || is_complex_v<T>, type_error,
               "distributed::all_reduce: AVG needs a floating point or complex tensor (an integer mean would be rounded)");
  detail_dist::Buffer<T> b(t);
  detail_dist::check_mpi(MPI_Allreduce(MPI_IN_PLACE, b.ptr(), b.count(), detail_dist::datatype<T>(),
                                       detail_dist::mpi_op<T>(op), s.world),
                         "MPI_Allreduce");
  if (op == ReduceOp::AVG && s.size > 1) {
    if constexpr (is_floating_v<T> || is_complex_v<T>) {
      T* p = b.ptr();
      for (int64_t i = 0; i < b.data.numel(); ++i) {
        if constexpr (detail_dist::is_half_v<T>)
          p[i] = static_cast<T>(static_cast<float>(p[i]) / static_cast<float>(s.size));
        else if constexpr (is_complex_v<T>)
          p[i] /= static_cast<typename T::value_type>(s.size);
        else
          p[i] /= static_cast<T>(s.size);
      }
    }
  }
  b.finish(true);
}
template <class T, class D>
void all_reduce(Tensor<T, D>&& t, ReduceOp op = ReduceOp::SUM) {
  all_reduce(t, op);
}

// t = src's t, on every rank.
template <class T, class D>
void broadcast(Tensor<T, D>& t, int src) {
  detail_dist::check_cpu<T, D>("broadcast");
  auto& s = detail_dist::live("broadcast");
  REEL_CHECK(src >= 0 && src < s.size, value_error, "distributed::broadcast: src ", src, " is not a rank of a world of ", s.size);
  detail_dist::Buffer<T> b(t);
  detail_dist::check_mpi(MPI_Bcast(b.ptr(), b.count(), detail_dist::datatype<T>(), src, s.world), "MPI_Bcast");
  b.finish(s.rank != src);
}
template <class T, class D>
void broadcast(Tensor<T, D>&& t, int src) {
  broadcast(t, src);
}

// out = the ranks' t concatenated along a new leading dim ([world_size, *t.sizes()]) or along
// dim 0 ([world_size * t.size(0), ...]), as torch.distributed.all_gather_into_tensor.
template <class T, class D>
void all_gather_into_tensor(Tensor<T, D>& out, const Tensor<T, D>& t) {
  detail_dist::check_cpu<T, D>("all_gather_into_tensor");
  auto& s = detail_dist::live("all_gather_into_tensor");
  REEL_CHECK(out.numel() == t.numel() * s.size, value_error, "distributed::all_gather_into_tensor: the output has ",
             out.numel(), " elements, world_size * input ", t.numel() * s.size);
  Tensor<T, CPU> in = t.is_contiguous() ? t : t.contiguous();
  detail_dist::Buffer<T> b(out);
  detail_dist::Buffer<T> src(in);
  detail_dist::check_mpi(MPI_Allgather(src.ptr(), src.count(), detail_dist::datatype<T>(), b.ptr(), src.count(),
                                       detail_dist::datatype<T>(), s.world),
                         "MPI_Allgather");
  b.finish(true);
}


// out[r] = rank r's t. An empty list is filled with fresh tensors shaped like t; otherwise it
// must hold world_size() tensors of t's shape.
template <class T, class D>
void all_gather(std::vector<Tensor<T, D>>& out, const Tensor<T, D>& t) {
  detail_dist::check_cpu<T, D>("all_gather");
  auto& s = detail_dist::live("all_gather");
  if (out.empty())
    for (int r = 0; r < s.size; ++r) out.push_back(empty<T, D>(t.sizes()));
  REEL_CHECK(out.size() == static_cast<size_t>(s.size), value_error, "distributed::all_gather: the output list has ",
             out.size(), " tensors for a world of ", s.size);
  for (const auto& o : out)
    REEL_CHECK(o.sizes() == t.sizes(), value_error, "distributed::all_gather: an output has shape ", o.sizes(),
               ", the input ", t.sizes());
  Shape whole = t.sizes();
  whole.insert(0, s.size);
  Tensor<T, D> all = empty<T, D>(whole);
  all_gather_into_tensor(all, t);
  for (int r = 0; r < s.size; ++r) out[static_cast<size_t>(r)].copy_(all.select(0, r));
}

}  // namespace reel::distributed
