#pragma once
// reel::distributed's NCCL engine: the collectives on Tensor<T, CUDA> (PyTorch's
// ProcessGroupNCCL). <reel/distributed.hpp> includes it in a translation unit compiled by nvcc
// where <nccl.h> is found; link -lnccl. init_process_group(Backend::NCCL) then makes the
// world's NCCL communicator (its unique id broadcast through MPI where MPI is in the build,
// else handed over in InitOptions::init_file) and new_group splits it (ncclCommSplit).
//
// Each group has a CUDA stream of its own: a collective waits there for the work queued on
// the caller's current stream so far, runs, and its Work's wait() makes the current stream
// wait for it (the host does not block, as in PyTorch); {.async_op = true} leaves that wait to
// the caller, so the collective overlaps the kernels queued meanwhile. Tensors a collective
// uses are recorded on the group's stream (their memory is not reused before it is done).
// Reductions: float16, bfloat16, float, double, complex (SUM, AVG: on the real and imaginary
// parts), integers of 8, 32 and 64 bits, bool (SUM / MAX: or, PRODUCT / MIN: and); 16-bit
// integers and the float8 / float4 types travel (broadcast, gathers, all_to_all, send / recv)
// but are not reduced: NCCL has no such reduction. send / recv ignore the tag (NCCL has none).
#if !defined(__CUDACC__)
#error "reel/cuda/nccl.cuh holds CUDA code; compile this translation unit with nvcc"
#endif
#include <nccl.h>

#include <cstdio>
#include <cstring>

#include "../cuda.hpp"
#include "../distributed/collectives.hpp"
#include "../distributed/init_file.hpp"
#include "../distributed/process_group.hpp"
#include "../distributed/work.hpp"

namespace reel::inline REEL_ABI::distributed::inline REEL_DIST_ABI {
namespace detail_dist {

inline void check_nccl(int rc, const char* what) {
  if (rc == ncclSuccess) return;
  const char* last = ncclGetLastError(nullptr);
  raise<error>("distributed (NCCL): ", what, " failed: ", ncclGetErrorString(static_cast<ncclResult_t>(rc)),
               last && *last ? std::string(" (") + last + ")" : std::string());
}

// A group's NCCL communicator, its device and its stream.
struct NcclComm {
  ncclComm_t comm = nullptr;
  int device = 0;
  std::unique_ptr<gpu::Stream> stream;
  NcclComm(ncclComm_t c, int dev) : comm(c), device(dev) {
    detail::cuda::DeviceSwitch on(dev);
    stream = std::make_unique<gpu::Stream>();
  }
  ~NcclComm() {
    if (state().exiting) {  // (a group held by a static, freed after leave_at_exit: CUDA may be gone)
      (void)stream.release();
      return;
    }
    detail::cuda::DeviceSwitch on(device);
    stream.reset();  // (waits for its work)
    if (comm) (void)ncclCommDestroy(comm);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
};
inline NcclComm& nccl_of(const ProcessGroup& g, const char* what) {
  REEL_CHECK(g.device_comm(), error, "distributed::", what,
             ": CUDA tensors need a process group of Backend::NCCL (this one has no NCCL communicator)");
  return *static_cast<NcclComm*>(g.device_comm().get());
}

// ---- making the communicators
inline void exchange_id_by_file(char* msg, size_t len, int rank, int size, const InitOptions& o) {
  std::string path = o.init_file;
  if (path.empty())
    if (const char* v = std::getenv("REEL_INIT_FILE")) path = v;
  REEL_CHECK(!path.empty(), value_error,
             "distributed::init_process_group(Backend::NCCL): a world of several ranks without MPI needs a file "
             "to hand NCCL's unique id over: InitOptions::init_file or REEL_INIT_FILE");
  exchange_by_file(msg, len, rank, size, path, o.timeout);  // (init_file.hpp: the file is gone when it returns)
}
inline std::shared_ptr<void> nccl_world(const InitOptions& o, const ProcessGroup& world) {
  const int rank = world.rank(), size = world.size();
  const int devices = gpu::device_count();
  REEL_CHECK(devices > 0, error, "distributed::init_process_group(Backend::NCCL): no CUDA device is visible");
  const int dev = o.device >= 0 ? o.device
                                : env_int({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}, rank) % devices;
  REEL_CHECK(dev < devices, value_error, "distributed::init_process_group: device ", dev, " of ", devices);
  gpu::set_device(dev);
  ncclUniqueId id{};
  const int id_rc = rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
  if (size > 1) {
    // the id and whether rank 0 got it: a failure there ends every rank's init, not rank 0's alone
    char msg[sizeof(id.internal) + 1];
    std::memcpy(msg, id.internal, sizeof(id.internal));
    msg[sizeof(id.internal)] = id_rc == ncclSuccess ? 1 : 0;
#if REEL_DIST_MPI
    comm_thread()->exclusive([&] { check_mpi(MPI_Bcast(msg, sizeof(msg), MPI_BYTE, 0, world.comm()), "MPI_Bcast"); });
#else
    exchange_id_by_file(msg, sizeof(msg), rank, size, o);
#endif
    std::memcpy(id.internal, msg, sizeof(id.internal));
    REEL_CHECK(rank == 0 || msg[sizeof(id.internal)] == 1, error,
               "distributed::init_process_group(Backend::NCCL): rank 0 could not make NCCL's unique id "
               "(ncclGetUniqueId failed there; its error says why)");
  }
  check_nccl(id_rc, "ncclGetUniqueId");
  ncclComm_t c = nullptr;
  check_nccl(ncclCommInitRank(&c, size, id, rank), "ncclCommInitRank");
  return std::make_shared<NcclComm>(c, dev);
}
inline std::shared_ptr<void> nccl_split(const ProcessGroup& world, const std::vector<int>& ranks) {
  NcclComm& w = nccl_of(world, "new_group");
  const bool member = std::find(ranks.begin(), ranks.end(), world.rank()) != ranks.end();
  detail::cuda::DeviceSwitch on(w.device);
  ncclComm_t c = nullptr;
  check_nccl(ncclCommSplit(w.comm, member ? 0 : NCCL_SPLIT_NOCOLOR, world.rank(), &c, nullptr), "ncclCommSplit");
  if (!member) return nullptr;
  return std::make_shared<NcclComm>(c, w.device);
}
inline void nccl_barrier(const ProcessGroup& g) {
  NcclComm& c = nccl_of(g, "barrier");
  detail::cuda::DeviceSwitch on(c.device);
  auto one = empty<float, CUDA>({1});
  one.fill_(1.0f);
  gpu::record_stream(one, c.stream->get());
  cudaEvent_t ready;
  REEL_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  REEL_CUDA_CHECK(cudaEventRecord(ready, gpu::current_stream()));
  REEL_CUDA_CHECK(cudaStreamWaitEvent(c.stream->get(), ready, 0));
  REEL_CUDA_CHECK(cudaEventDestroy(ready));
  check_nccl(ncclAllReduce(one.data_ptr(), one.mutable_data_ptr(), 1, ncclFloat32, ncclSum, c.comm, c.stream->get()),
             "ncclAllReduce");
  c.stream->synchronize();  // (the host waits: that is a barrier)
}
inline const bool nccl_registered = [] {
  auto& h = device_hooks();
  h.world = &nccl_world;
  h.split = &nccl_split;
  h.barrier = &nccl_barrier;
  return true;
}();

// ---- types and reductions
template <class T>
constexpr bool nccl_reducible_v = std::is_same_v<T, bool> || std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t> ||
                                  std::is_same_v<T, int32_t> || std::is_same_v<T, uint32_t> ||
                                  std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t> || is_half_v<T> ||
                                  std::is_same_v<T, float> || std::is_same_v<T, double> || is_complex_v<T>;
// The NCCL type a T is reduced as, and how many of them one T is (complex: 2).
template <class T>
ncclDataType_t nccl_type() {
  static_assert(nccl_reducible_v<T>, "reel::distributed: NCCL has no reduction of this dtype (16-bit integers, "
                                     "float8 and float4 travel but are not reduced: convert first)");
  if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, uint8_t>) return ncclUint8;
  else if constexpr (std::is_same_v<T, int8_t>) return ncclInt8;
  else if constexpr (std::is_same_v<T, int32_t>) return ncclInt32;
  else if constexpr (std::is_same_v<T, uint32_t>) return ncclUint32;
  else if constexpr (std::is_same_v<T, int64_t>) return ncclInt64;
  else if constexpr (std::is_same_v<T, uint64_t>) return ncclUint64;
  else if constexpr (std::is_same_v<T, half>) return ncclFloat16;
  else if constexpr (std::is_same_v<T, bfloat16>) return ncclBfloat16;
  else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, std::complex<float>>) return ncclFloat32;
  else return ncclFloat64;
}
template <class T>
constexpr size_t nccl_per = is_complex_v<T> ? 2 : 1;
template <class T>
ncclRedOp_t nccl_op(ReduceOp op, const char* what) {
  check_avg<T>(op, what);
  if constexpr (is_complex_v<T>) {
    REEL_CHECK(op != ReduceOp::MIN && op != ReduceOp::MAX, type_error, "distributed::", what,
               ": MIN and MAX are not defined for complex tensors (they have no order)");
    REEL_CHECK(op != ReduceOp::PRODUCT, not_implemented_error, "distributed::", what,
               ": PRODUCT of complex tensors over NCCL (NCCL multiplies the real and imaginary parts apart)");
  }
  if constexpr (std::is_same_v<T, bool>)
    return op == ReduceOp::SUM || op == ReduceOp::MAX ? ncclMax : ncclMin;  // (or, and)
  switch (op) {
    case ReduceOp::AVG: return ncclAvg;
    case ReduceOp::PRODUCT: return ncclProd;
    case ReduceOp::MIN: return ncclMin;
    case ReduceOp::MAX: return ncclMax;
    default: return ncclSum;
  }
}

// ---- running a call
// Whether the device has passed event e (raises what the query reports other than "not yet").
inline bool event_done(cudaEvent_t e) {
  const cudaError_t q = cudaEventQuery(e);
  if (q != cudaErrorNotReady) REEL_CUDA_CHECK(q);
  return q == cudaSuccess;
}
// Enqueues call(comm, stream) on the group's stream after the current stream's work so far;
// the Work's completion makes the current stream wait for it, then runs finish there.
template <class Call>
Work nccl_launch(const ProcessGroup& g, const CollectiveOptions& o, Call call, std::function<void()> finish,
                 std::vector<std::shared_ptr<void>> keep, const char* what) {
  NcclComm& c = nccl_of(g, what);
  const cudaStream_t s = c.stream->get();
  auto st = make_state(std::move(finish), std::move(keep), what, &check_nccl);
  REEL_CHECK(gpu::current_device() == c.device, value_error, "distributed::", what, ": the current CUDA device is ",
             gpu::current_device(), ", the group's NCCL communicator is on device ", c.device);
  std::shared_ptr<CUevent_st> done;
  {
    cudaEvent_t ready, end;
    REEL_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    REEL_CUDA_CHECK(cudaEventRecord(ready, gpu::current_stream()));
    REEL_CUDA_CHECK(cudaStreamWaitEvent(s, ready, 0));
    REEL_CUDA_CHECK(cudaEventDestroy(ready));
    REEL_CUDA_CHECK(cudaEventCreateWithFlags(&end, cudaEventDisableTiming));
    done.reset(end, [](cudaEvent_t e) { (void)cudaEventDestroy(e); });
  }
  st->keep.push_back(g.device_comm());  // (the communicator and its stream outlive the Work)
  st->began = std::chrono::steady_clock::now();
  const int rc = call(c.comm, s);
  if (rc == ncclSuccess) REEL_CUDA_CHECK(cudaEventRecord(done.get(), s));
  st->ended = st->began;
  st->pending = [done, comm = c.comm, raw = st.get()](bool block, bool& finished) {
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess) return static_cast<int>(async);
    if (block) {
      REEL_CUDA_CHECK(cudaStreamWaitEvent(gpu::current_stream(), done.get(), 0));
      finished = true;
    } else {
      finished = event_done(done.get());
    }
    if (finished) raw->ended = std::chrono::steady_clock::now();
    return static_cast<int>(ncclSuccess);
  };
  st->device_done = [done] { return event_done(done.get()); };
  st->mark(rc);
  Work w(st);
  if (!o.async_op) w.wait();
  return w;
}
template <class T>
std::shared_ptr<void> hold_on(const Tensor<T, CUDA>& t, const ProcessGroup& g, const char* what) {
  gpu::record_stream(t, nccl_of(g, what).stream->get());
  return hold(t);
}
// NCCL's p2p calls of one logical operation, fused (ncclGroupStart / End).
template <class F>
ncclResult_t nccl_group(F&& f) {
  ncclResult_t rc = ncclGroupStart();
  if (rc != ncclSuccess) return rc;
  const ncclResult_t inner = f();
  rc = ncclGroupEnd();
  return inner != ncclSuccess ? inner : rc;
}
// Member r's part of a stacked buffer of `n` bytes per member.
template <class T>
const char* bytes_at(const Tensor<T, CUDA>& t, int r, size_t n) {
  return reinterpret_cast<const char*>(t.data_ptr()) + static_cast<size_t>(r) * n;
}
template <class T>
char* bytes_at(Tensor<T, CUDA>& t, int r, size_t n) {
  return reinterpret_cast<char*>(t.mutable_data_ptr()) + static_cast<size_t>(r) * n;
}
template <class T>
size_t byte_count(const Tensor<T, CUDA>& t) {
  return static_cast<size_t>(t.numel()) * sizeof(T);
}
// all = every member's `in` (both contiguous), then finish.
template <class T>
Work all_gather_call(const CollectiveOptions& o, const ProcessGroup& g, Tensor<T, CUDA> in, Tensor<T, CUDA> all,
                     std::function<void()> finish) {
  return nccl_launch(
      g, o,
      [=](ncclComm_t c, cudaStream_t s) mutable {
        return ncclAllGather(in.data_ptr(), all.mutable_data_ptr(), byte_count(in), ncclUint8, c, s);
      },
      std::move(finish), {hold_on(in, g, "all_gather"), hold_on(all, g, "all_gather")}, "ncclAllGather");
}
}  // namespace detail_dist

// ---- the collectives on CUDA tensors (the MPI ones' meaning: distributed/collectives.hpp)
template <class T>
Work all_reduce(Tensor<T, CUDA>& t, ReduceOp op = ReduceOp::SUM, CollectiveOptions o = {}) {
  const ProcessGroup& g = detail_dist::group_of(o, "all_reduce");
  const ncclRedOp_t nop = detail_dist::nccl_op<T>(op, "all_reduce");
  detail_dist::check_collective<T>(g, "all_reduce", t.sizes());
  auto data = detail_dist::contiguous_of(t);
  const size_t n = static_cast<size_t>(data.numel()) * detail_dist::nccl_per<T>;
  return detail_dist::nccl_launch(
      g, o,
      [=](ncclComm_t c, cudaStream_t s) mutable {
        return ncclAllReduce(data.data_ptr(), data.mutable_data_ptr(), n, detail_dist::nccl_type<T>(), nop, c, s);
      },
      [t, data]() { detail_dist::write_back(t, data); }, {detail_dist::hold_on(data, g, "all_reduce")}, "ncclAllReduce");
}
template <class T>
Work all_reduce(Tensor<T, CUDA>&& t, ReduceOp op = ReduceOp::SUM, CollectiveOptions o = {}) {
  return all_reduce(t, op, o);
}

template <class T>
Work reduce(Tensor<T, CUDA>& t, int dst, ReduceOp op = ReduceOp::SUM, CollectiveOptions o = {}) {
  const ProcessGroup& g = detail_dist::group_of(o, "reduce");
  const int root = g.group_rank(dst, "reduce");
  const ncclRedOp_t nop = detail_dist::nccl_op<T>(op, "reduce");
  detail_dist::check_collective<T>(g, "reduce", t.sizes(), root);
  auto data = detail_dist::contiguous_of(t);
  const size_t n = static_cast<size_t>(data.numel()) * detail_dist::nccl_per<T>;
  return detail_dist::nccl_launch(
      g, o,
      [=](ncclComm_t c, cudaStream_t s) mutable {
        return ncclReduce(data.data_ptr(), data.mutable_data_ptr(), n, detail_dist::nccl_type<T>(), nop, root, c, s);
      },
      [t, data, mine = g.rank() == root]() {
        if (mine) detail_dist::write_back(t, data);
      },
      {detail_dist::hold_on(data, g, "reduce")}, "ncclReduce");
}

template <class T>
Work broadcast(Tensor<T, CUDA>& t, int src, CollectiveOptions o = {}) {
  const ProcessGroup& g = detail_dist::group_of(o, "broadcast");
  const int root = g.group_rank(src, "broadcast");
  detail_dist::check_collective<T>(g, "broadcast", t.sizes(), root);
  auto data = detail_dist::contiguous_of(t);
  return detail_dist::nccl_launch(
      g, o,
      [=](ncclComm_t c, cudaStream_t s) mutable {
        return ncclBroadcast(data.data_ptr(), data.mutable_data_ptr(), detail_dist::byte_count(data), ncclUint8, root, c, s);
      },
      [t, data, mine = g.rank() == root]() {
        if (!mine) detail_dist::write_back(t, data);
      },
      {detail_dist::hold_on(data, g, "broadcast")}, "ncclBroadcast");
}
template <class T>
Work broadcast(Tensor<T, CUDA>&& t, int src, CollectiveOptions o = {}) {
  return broadcast(t, src, o);
}

template <class T>
Work all_gather_into_tensor(Tensor<T, CUDA>& out, const Tensor<T, CUDA>& t, CollectiveOptions o = {}) {
  const ProcessGroup& g = detail_dist::group_of(o, "all_gather_into_tensor");
  REEL_CHECK(out.numel() == t.numel() * g.size(), value_error, "distributed::all_gather_into_tensor: the output has ",
             out.numel(), " elements, the group's size times the input's ", t.numel() * g.size());
  detail_dist::check_collective<T>(g, "all_gather_into_tensor", t.sizes());
  auto data = detail_dist::contiguous_of(out);
  return detail_dist::all_gather_call(o, g, detail_dist::contiguous_of(t), data,
                                      [out, data]() { detail_dist::write_back(out, data); });
}
template <class T>
Work all_gather(std::vector<Tensor<T, CUDA>>& out, const Tensor<T, CUDA>& t, CollectiveOptions o = {}) {
  const ProcessGroup& g = detail_dist::group_of(o, "all_gather");
  if (out.empty())
    for (int r = 0; r < g.size(); ++r) out.push_back(empty<T, CUDA>(t.sizes()));
  detail_dist::same_shapes(out, t.sizes(), static_cast<size_t>(g.size()), "all_gather");
  detail_dist::check_collective<T>(g, "all_gather", t.sizes());
  Shape whole = t.sizes();
  whole.insert(0, g.size());
  auto all = empty<T, CUDA>(whole);
  return detail_dist::all_gather_call(o, g, detail_dist::contiguous_of(t), all,
                                      [list = out, all]() mutable { detail_dist::unstack_into(list, all); });
}

template <class T>
Work reduce_scatter(Tensor<T, CUDA>& out, const std::vector<Tensor<T, CUDA>>& in, ReduceOp op = ReduceOp::SUM,
                    CollectiveOptions o = {}) {
  const ProcessGroup& g = detail_dist::group_of(o, "reduce_scatter");
  const ncclRedOp_t nop = detail_dist::nccl_op<T>(op, "reduce_scatter");
  detail_dist::same_shapes(in, out.sizes(), static_cast<size_t>(g.size()), "reduce_scatter");
  detail_dist::check_collective<T>(g, "reduce_scatter", out.sizes());
  auto all = detail_dist::stacked(in, out.sizes());
  auto data = detail_dist::contiguous_of(out);
  const size_t n = static_cast<size_t>(data.numel()) * detail_dist::nccl_per<T>;
  return detail_dist::nccl_launch(
      g, o,
      [=](ncclComm_t c, cudaStream_t s) mutable {
        return ncclReduceScatter(all.data_ptr(), data.mutable_data_ptr(), n, detail_dist::nccl_type<T>(), nop, c, s);
      },
      [out, data]() { detail_dist::write_back(out, data); },
      {detail_dist::hold_on(all, g, "reduce_scatter"), detail_dist::hold_on(data, g, "reduce_scatter")},
      "ncclReduceScatter");
}

// (gather, scatter, all_to_all: NCCL's sends and receives, one group call; a rank's own part
// goes through NCCL too)
template <class T>
Work gather(const Tensor<T, CUDA>& t, std::vector<Tensor<T, CUDA>>& gather_list, int dst, CollectiveOptions o = {}) {
  const ProcessGroup& g = detail_dist::group_of(o, "gather");
  const auto args = detail_dist::gather_args(g, t, gather_list, dst);
  const int root = args.root;
  const bool mine = args.mine;
  auto all = args.all;
  auto in = detail_dist::contiguous_of(t);
  const size_t n = detail_dist::byte_count(in);
  return detail_dist::nccl_launch(
      g, o,
      [=, size = g.size()](ncclComm_t c, cudaStream_t s) mutable {
        return detail_dist::nccl_group([&] {
          if (mine)
            for (int r = 0; r < size; ++r) {
              auto* at = detail_dist::bytes_at(all, r, n);
              if (auto rc = ncclRecv(at, n, ncclUint8, r, c, s); rc != ncclSuccess) return rc;
            }
          return ncclSend(in.data_ptr(), n, ncclUint8, root, c, s);
        });
      },
      [list = gather_list, all, mine]() mutable {
        if (mine) detail_dist::unstack_into(list, all);
      },
      {detail_dist::hold_on(in, g, "gather"), detail_dist::hold_on(all, g, "gather")}, "ncclSend / ncclRecv");
}

template <class T>
Work scatter(Tensor<T, CUDA>& out, const std::vector<Tensor<T, CUDA>>& scatter_list, int src, CollectiveOptions o = {}) {
  const ProcessGroup& g = detail_dist::group_of(o, "scatter");
  const auto args = detail_dist::scatter_args(g, out, scatter_list, src);
  const int root = args.root;
  const bool mine = args.mine;
  auto all = args.all;
  auto data = detail_dist::contiguous_of(out);
  const size_t n = detail_dist::byte_count(data);
  return detail_dist::nccl_launch(
      g, o,
      [=, size = g.size()](ncclComm_t c, cudaStream_t s) mutable {
        return detail_dist::nccl_group([&] {
          if (mine)
            for (int r = 0; r < size; ++r) {
              const auto* at = detail_dist::bytes_at(std::as_const(all), r, n);
              if (auto rc = ncclSend(at, n, ncclUint8, r, c, s); rc != ncclSuccess) return rc;
            }
          return ncclRecv(data.mutable_data_ptr(), n, ncclUint8, root, c, s);
        });
      },
      [out, data]() { detail_dist::write_back(out, data); },
      {detail_dist::hold_on(all, g, "scatter"), detail_dist::hold_on(data, g, "scatter")}, "ncclSend / ncclRecv");
}

template <class T>
Work all_to_all(std::vector<Tensor<T, CUDA>>& out, const std::vector<Tensor<T, CUDA>>& in, CollectiveOptions o = {}) {
  const ProcessGroup& g = detail_dist::group_of(o, "all_to_all");
  auto bufs = detail_dist::all_to_all_args(g, out, in);
  auto send = bufs.first, recv = bufs.second;
  const size_t n = detail_dist::byte_count(in[0]);
  return detail_dist::nccl_launch(
      g, o,
      [=, size = g.size()](ncclComm_t c, cudaStream_t s) mutable {
        return detail_dist::nccl_group([&] {
          for (int r = 0; r < size; ++r) {
            const auto* from = detail_dist::bytes_at(std::as_const(send), r, n);
            auto* to = detail_dist::bytes_at(recv, r, n);
            if (auto rc = ncclSend(from, n, ncclUint8, r, c, s); rc != ncclSuccess) return rc;
            if (auto rc = ncclRecv(to, n, ncclUint8, r, c, s); rc != ncclSuccess) return rc;
          }
          return ncclSuccess;
        });
      },
      [list = out, recv]() mutable { detail_dist::unstack_into(list, recv); },
      {detail_dist::hold_on(send, g, "all_to_all"), detail_dist::hold_on(recv, g, "all_to_all")}, "ncclSend / ncclRecv");
}

// Point to point (dst / src: world ranks; the tag is not used: NCCL has none). A group's sends
// and receives run on its stream in call order, and a send completes on the device only with
// its receive: ranks call them in matching order (a rank's send to itself, or two ranks that
// both send first, would wait forever; all_to_all exchanges in one call).
template <class T>
Work send(const Tensor<T, CUDA>& t, int dst, int tag = 0, CollectiveOptions o = {}) {
  (void)tag;
  const ProcessGroup& g = detail_dist::group_of(o, "send");
  const int peer = g.group_rank(dst, "send");
  auto data = detail_dist::contiguous_of(t);
  return detail_dist::nccl_launch(
      g, o,
      [=](ncclComm_t c, cudaStream_t s) mutable {
        return ncclSend(data.data_ptr(), detail_dist::byte_count(data), ncclUint8, peer, c, s);
      },
      {}, {detail_dist::hold_on(data, g, "send")}, "ncclSend");
}
template <class T>
Work recv(Tensor<T, CUDA>& t, int src, int tag = 0, CollectiveOptions o = {}) {
  (void)tag;
  const ProcessGroup& g = detail_dist::group_of(o, "recv");
  const int peer = g.group_rank(src, "recv");
  auto data = detail_dist::contiguous_of(t);
  return detail_dist::nccl_launch(
      g, o,
      [=](ncclComm_t c, cudaStream_t s) mutable {
        return ncclRecv(data.mutable_data_ptr(), detail_dist::byte_count(data), ncclUint8, peer, c, s);
      },
      [t, data]() { detail_dist::write_back(t, data); }, {detail_dist::hold_on(data, g, "recv")}, "ncclRecv");
}

}  // namespace reel::inline REEL_ABI::distributed
