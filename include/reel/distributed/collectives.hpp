#pragma once
// reel::distributed's collectives on CPU tensors, over MPI (see <reel/distributed.hpp>; CUDA
// tensors: reel/cuda/nccl.cuh).
#include "work.hpp"
#if REEL_DIST_MPI
#include "mpi_types.hpp"

namespace reel::inline REEL_ABI::distributed::inline REEL_DIST_ABI {

// t = op over the group's t, on every member.
template <class T, class D>
Work all_reduce(Tensor<T, D>& t, ReduceOp op = ReduceOp::SUM, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("all_reduce");
  detail_dist::check_avg<T>(op, "all_reduce");
  const ProcessGroup& g = detail_dist::group_of(o, "all_reduce");
  detail_dist::check_collective<T>(g, "all_reduce", t.sizes());
  auto data = detail_dist::contiguous_of(t);
  const int n = detail_dist::count_of(data.numel(), "all_reduce");
  return detail_dist::launch(
      o,
      [=, c = g.comm()]() mutable {
        return MPI_Allreduce(MPI_IN_PLACE, data.mutable_data_ptr(), n, detail_dist::datatype<T>(),
                              detail_dist::mpi_op<T>(op), c);
      },
      [t, data, op, size = g.size()]() mutable {
        if (op == ReduceOp::AVG) detail_dist::divide(data, size);
        detail_dist::write_back(t, data);
      },
      {detail_dist::hold(data)}, "MPI_Allreduce");
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
  detail_dist::check_collective<T>(g, "reduce", t.sizes(), root);
  const bool mine = g.rank() == root;
  auto data = detail_dist::contiguous_of(t);
  auto out = mine ? data : empty<T, CPU>(t.sizes());  // (the others' results go nowhere)
  const int n = detail_dist::count_of(data.numel(), "reduce");
  return detail_dist::launch(
      o,
      [=, c = g.comm()]() mutable {
        return MPI_Reduce(mine ? MPI_IN_PLACE : data.mutable_data_ptr(), mine ? data.mutable_data_ptr() : out.mutable_data_ptr(),
                           n, detail_dist::datatype<T>(), detail_dist::mpi_op<T>(op), root, c);
      },
      [t, data, op, mine, size = g.size()]() mutable {
        if (!mine) return;
        if (op == ReduceOp::AVG) detail_dist::divide(data, size);
        detail_dist::write_back(t, data);
      },
      {detail_dist::hold(data), detail_dist::hold(out)}, "MPI_Reduce");
}

// t = src's t, on every member.
template <class T, class D>
Work broadcast(Tensor<T, D>& t, int src, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("broadcast");
  const ProcessGroup& g = detail_dist::group_of(o, "broadcast");
  const int root = g.group_rank(src, "broadcast");
  detail_dist::check_collective<T>(g, "broadcast", t.sizes(), root);
  auto data = detail_dist::contiguous_of(t);
  const int n = detail_dist::count_of(data.numel(), "broadcast");
  return detail_dist::launch(
      o, [=, c = g.comm()]() mutable { return MPI_Bcast(data.mutable_data_ptr(), n, detail_dist::datatype<T>(), root, c); },
      [t, data, mine = g.rank() == root]() {
        if (!mine) detail_dist::write_back(t, data);
      },
      {detail_dist::hold(data)}, "MPI_Bcast");
}
template <class T, class D>
Work broadcast(Tensor<T, D>&& t, int src, CollectiveOptions o = {}) {
  return broadcast(t, src, o);
}

namespace detail_dist {
// all = every member's `in` (both contiguous), then finish.
template <class T>
Work all_gather_call(const CollectiveOptions& o, const ProcessGroup& g, Tensor<T, CPU> in, Tensor<T, CPU> all,
                     std::function<void()> finish) {
  const int n = count_of(in.numel(), "all_gather");
  return launch(
      o,
      [=, c = g.comm()]() mutable {
        return MPI_Allgather(in.mutable_data_ptr(), n, datatype<T>(), all.mutable_data_ptr(), n, datatype<T>(), c);
      },
      std::move(finish), {hold(in), hold(all)}, "MPI_Allgather");
}
}  // namespace detail_dist

// out = the members' t, in group order: [size * t.numel()] elements (e.g. [size, *t.sizes()]
// or t's dim 0 times size), as torch.distributed.all_gather_into_tensor.
template <class T, class D>
Work all_gather_into_tensor(Tensor<T, D>& out, const Tensor<T, D>& t, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("all_gather_into_tensor");
  const ProcessGroup& g = detail_dist::group_of(o, "all_gather_into_tensor");
  REEL_CHECK(out.numel() == t.numel() * g.size(), value_error, "distributed::all_gather_into_tensor: the output has ",
             out.numel(), " elements, the group's size times the input's ", t.numel() * g.size());
  detail_dist::check_collective<T>(g, "all_gather_into_tensor", t.sizes());
  auto data = detail_dist::contiguous_of(out);
  return detail_dist::all_gather_call(o, g, detail_dist::contiguous_of(t), data,
                                      [out, data]() { detail_dist::write_back(out, data); });
}
// out[k] = member k's t. An empty list is filled with tensors shaped like t.
template <class T, class D>
Work all_gather(std::vector<Tensor<T, D>>& out, const Tensor<T, D>& t, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("all_gather");
  const ProcessGroup& g = detail_dist::group_of(o, "all_gather");
  if (out.empty())
    for (int r = 0; r < g.size(); ++r) out.push_back(empty<T, D>(t.sizes()));
  detail_dist::same_shapes(out, t.sizes(), static_cast<size_t>(g.size()), "all_gather");
  detail_dist::check_collective<T>(g, "all_gather", t.sizes());
  Shape whole = t.sizes();
  whole.insert(0, g.size());
  auto all = empty<T, CPU>(whole);
  return detail_dist::all_gather_call(o, g, detail_dist::contiguous_of(t), all,
                                      [list = out, all]() mutable { detail_dist::unstack_into(list, all); });
}

// out = op over the members of their in[k], where k is this rank's place in the group.
template <class T, class D>
Work reduce_scatter(Tensor<T, D>& out, const std::vector<Tensor<T, D>>& in, ReduceOp op = ReduceOp::SUM,
                    CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("reduce_scatter");
  detail_dist::check_avg<T>(op, "reduce_scatter");
  const ProcessGroup& g = detail_dist::group_of(o, "reduce_scatter");
  detail_dist::same_shapes(in, out.sizes(), static_cast<size_t>(g.size()), "reduce_scatter");
  detail_dist::check_collective<T>(g, "reduce_scatter", out.sizes());
  auto all = detail_dist::stacked(in, out.sizes());
  auto data = empty<T, CPU>(out.sizes());
  const int n = detail_dist::count_of(data.numel(), "reduce_scatter");
  return detail_dist::launch(
      o,
      [=, c = g.comm()]() mutable {
        return MPI_Reduce_scatter_block(all.mutable_data_ptr(), data.mutable_data_ptr(), n, detail_dist::datatype<T>(),
                                         detail_dist::mpi_op<T>(op), c);
      },
      [out, data, op, size = g.size()]() mutable {
        if (op == ReduceOp::AVG) detail_dist::divide(data, size);
        out.copy_(data);
      },
      {detail_dist::hold(all), detail_dist::hold(data)}, "MPI_Reduce_scatter_block");
}

// dst gets every member's t in gather_list (group order); the others pass an empty list.
template <class T, class D>
Work gather(const Tensor<T, D>& t, std::vector<Tensor<T, D>>& gather_list, int dst, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("gather");
  const ProcessGroup& g = detail_dist::group_of(o, "gather");
  const auto args = detail_dist::gather_args(g, t, gather_list, dst);
  const int root = args.root;
  const bool mine = args.mine;
  auto all = args.all;
  auto in = detail_dist::contiguous_of(t);
  const int n = detail_dist::count_of(in.numel(), "gather");
  return detail_dist::launch(
      o,
      [=, c = g.comm()]() mutable {
        return MPI_Gather(in.mutable_data_ptr(), n, detail_dist::datatype<T>(), mine ? all.mutable_data_ptr() : nullptr,
                           n, detail_dist::datatype<T>(), root, c);
      },
      [list = gather_list, all, mine]() mutable {
        if (mine) detail_dist::unstack_into(list, all);
      },
      {detail_dist::hold(in), detail_dist::hold(all)}, "MPI_Gather");
}

// out = scatter_list[k] of rank src, where k is this rank's place in the group (the others
// pass an empty list).
template <class T, class D>
Work scatter(Tensor<T, D>& out, const std::vector<Tensor<T, D>>& scatter_list, int src, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("scatter");
  const ProcessGroup& g = detail_dist::group_of(o, "scatter");
  const auto args = detail_dist::scatter_args(g, out, scatter_list, src);
  const int root = args.root;
  const bool mine = args.mine;
  auto all = args.all;
  auto data = empty<T, CPU>(out.sizes());
  const int n = detail_dist::count_of(data.numel(), "scatter");
  return detail_dist::launch(
      o,
      [=, c = g.comm()]() mutable {
        return MPI_Scatter(mine ? all.mutable_data_ptr() : nullptr, n, detail_dist::datatype<T>(), data.mutable_data_ptr(),
                            n, detail_dist::datatype<T>(), root, c);
      },
      [out, data]() mutable { out.copy_(data); }, {detail_dist::hold(all), detail_dist::hold(data)}, "MPI_Scatter");
}

// out[k] = member k's in[r], where r is this rank's place: every member sends in[k] to member k.
template <class T, class D>
Work all_to_all(std::vector<Tensor<T, D>>& out, const std::vector<Tensor<T, D>>& in, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("all_to_all");
  const ProcessGroup& g = detail_dist::group_of(o, "all_to_all");
  auto bufs = detail_dist::all_to_all_args(g, out, in);
  auto send = bufs.first, recv = bufs.second;
  const int n = detail_dist::count_of(in[0].numel(), "all_to_all");
  return detail_dist::launch(
      o,
      [=, c = g.comm()]() mutable {
        return MPI_Alltoall(send.mutable_data_ptr(), n, detail_dist::datatype<T>(), recv.mutable_data_ptr(), n,
                             detail_dist::datatype<T>(), c);
      },
      [list = out, recv]() mutable { detail_dist::unstack_into(list, recv); },
      {detail_dist::hold(send), detail_dist::hold(recv)}, "MPI_Alltoall");
}

// Point to point (dst / src: world ranks). {.async_op = true}: isend / irecv, started in
// order with the other asynchronous calls; wait() completes them. Synchronous ones block as
// MPI_Send / MPI_Recv do (two ranks that both send first may deadlock on large messages).
template <class T, class D>
Work send(const Tensor<T, D>& t, int dst, int tag = 0, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("send");
  const ProcessGroup& g = detail_dist::group_of(o, "send");
  const int peer = g.group_rank(dst, "send");
  auto data = detail_dist::contiguous_of(t);
  const int n = detail_dist::count_of(data.numel(), "send");
  return detail_dist::launch_p2p(
      o,
      [=, c = g.comm()](MPI_Request* r) mutable {
        return MPI_Isend(data.mutable_data_ptr(), n, detail_dist::datatype<T>(), peer, tag, c, r);
      },
      {}, {detail_dist::hold(data)}, "MPI_Isend");
}
template <class T, class D>
Work recv(Tensor<T, D>& t, int src, int tag = 0, CollectiveOptions o = {}) {
  detail_dist::check_cpu<T, D>("recv");
  const ProcessGroup& g = detail_dist::group_of(o, "recv");
  const int peer = g.group_rank(src, "recv");
  auto data = detail_dist::contiguous_of(t);
  const int n = detail_dist::count_of(data.numel(), "recv");
  return detail_dist::launch_p2p(
      o,
      [=, c = g.comm()](MPI_Request* r) mutable {
        return MPI_Irecv(data.mutable_data_ptr(), n, detail_dist::datatype<T>(), peer, tag, c, r);
      },
      [t, data]() { detail_dist::write_back(t, data); }, {detail_dist::hold(data)}, "MPI_Irecv");
}

}  // namespace reel::distributed
#endif  // REEL_DIST_MPI

// CUDA tensors' overloads (NCCL), declared before anything that calls the collectives
#if defined(__CUDACC__) && __has_include(<nccl.h>)
#include "../cuda/nccl.cuh"
#endif
