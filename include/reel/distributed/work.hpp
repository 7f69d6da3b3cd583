#pragma once
// reel::distributed's Work (a collective's completion), how a call runs (on the caller's
// thread or queued for the communication thread), and the helpers the collectives share.
#include "check.hpp"
#include "process_group.hpp"

namespace reel::inline REEL_ABI::distributed::inline REEL_DIST_ABI {

// A collective's completion: wait() returns once it is done and its results are written
// (into a strided tensor, an AVG's division). Dropping the last copy of a Work waits too.
class Work {
 public:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool ran = false;
    int rc = 0;  // the engine's code (0: success)
    const char* what = "";
    void (*check)(int rc, const char* what) = nullptr;  // raises for a failed rc
    std::function<void()> finish;  // on the waiting thread, once
    bool finished = false;
    std::vector<std::shared_ptr<void>> keep;  // buffers the call reads or writes
    // A started operation still to complete (an MPI send / receive, a CUDA stream's work):
    // pending(true, done) waits for it, pending(false, done) polls; both return an rc.
    std::function<int(bool block, bool& done)> pending;
    // Whether the device has finished the work (NCCL: its event), asked by is_completed()
    // also after wait(), which only made the caller's stream wait for it. Null: done once
    // completed.
    std::function<bool()> device_done;
    std::chrono::steady_clock::time_point began, ended;  // the engine call's (set before ran)
    void mark(int code) {
      {
        std::lock_guard<std::mutex> l(mu);
        rc = code;
        ran = true;
      }
      cv.notify_all();
    }
    // Polls (block false) or waits for the pending part; true once it is done.
    bool settle(bool block) {
      if (!pending || rc != 0) return true;
      bool done = false;
      rc = pending(block, done);
      if (done || rc != 0) pending = nullptr;
      return done || rc != 0;
    }
    void complete() {
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return ran; });
      }
      if (finished) return;
      settle(true);
      finished = true;
      if (rc != 0 && check) check(rc, what);
      if (finish) finish();
    }
  };
  Work() = default;
  explicit Work(std::shared_ptr<State> s) : h_(std::make_shared<Handle>(std::move(s))) {}
  void wait() {
    if (h_) h_->st->complete();
  }
  // When the MPI call began and returned (a collective, once completed; for a send / receive,
  // its start), e.g. to see how much of it ran during backward. For NCCL: when the call was
  // enqueued on the device and when wait() (or is_completed()) found it done.
  std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point> span() const {
    if (!h_) return {};
    return {h_->st->began, h_->st->ended};
  }
  bool is_completed() {
    if (!h_) return true;
    State& st = *h_->st;
    {
      std::lock_guard<std::mutex> l(st.mu);
      if (!st.ran) return false;
    }
    if (!st.settle(false)) return false;
    st.complete();
    return !st.device_done || st.device_done();
  }

 private:
  struct Handle {
    std::shared_ptr<State> st;
    explicit Handle(std::shared_ptr<State> s) : st(std::move(s)) {}
    ~Handle() {
      try {
        st->complete();
      } catch (...) {  // (an error nobody waited for: dropped with the Work)
      }
    }
  };
  std::shared_ptr<Handle> h_;
};

struct CollectiveOptions {
  const ProcessGroup* group = nullptr;  // null: the world
  bool async_op = false;                // return as soon as the call has started
};

namespace detail_dist {
inline const ProcessGroup& group_of(const CollectiveOptions& o, const char* what) {
  live(what);
  const ProcessGroup& g = o.group ? *o.group : *world_holder().group;
  REEL_CHECK(g.is_member(), error, "distributed::", what, ": this rank (", state().rank, ") is not in the group");
  return g;
}
inline std::shared_ptr<Work::State> make_state(std::function<void()> finish, std::vector<std::shared_ptr<void>> keep,
                                               const char* what, void (*check)(int, const char*)) {
  auto st = std::make_shared<Work::State>();
  st->finish = std::move(finish);
  st->keep = std::move(keep);
  st->what = what;
  st->check = check;
  return st;
}
#if REEL_DIST_MPI
// Runs call() (a blocking MPI call, capturing what it needs by value): on this thread once
// the communication thread is idle, or, for {.async_op = true}, queued for that thread (calls
// run in the order they were made, so every rank issues its collectives in program order while
// the caller goes on: PyTorch's ProcessGroupMPI works the same way).
template <class Call>
Work launch(const CollectiveOptions& o, Call call, std::function<void()> finish,
            std::vector<std::shared_ptr<void>> keep, const char* what) {
  auto st = make_state(std::move(finish), std::move(keep), what, &check_mpi);
  auto timed = [](Work::State& s, Call& c) {
    s.began = std::chrono::steady_clock::now();
    const int rc = c();
    s.ended = std::chrono::steady_clock::now();
    return rc;
  };
  if (o.async_op) {
    comm_thread()->post([st, call = std::move(call), timed]() mutable { st->mark(timed(*st, call)); });
  } else {
    int rc = MPI_SUCCESS;
    comm_thread()->exclusive([&] { rc = timed(*st, call); });
    st->mark(rc);
  }
  Work w(st);
  if (!o.async_op) w.wait();
  return w;
}
// A send or receive: start(&request) starts it (MPI_Isend / MPI_Irecv), on this thread or
// queued; completing the Work waits for it.
template <class Start>
Work launch_p2p(const CollectiveOptions& o, Start start, std::function<void()> finish,
                std::vector<std::shared_ptr<void>> keep, const char* what) {
  auto st = make_state(std::move(finish), std::move(keep), what, &check_mpi);
  auto request = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
  st->pending = [request, what](bool block, bool& done) {
    int rc = MPI_SUCCESS, flag = 0;
    REEL_CHECK(comm_thread(), error, "distributed::", what,
               ": the Work was waited for after destroy_process_group (MPI has ended; wait before leaving the group)");
    comm_thread()->exclusive([&] {
      rc = block ? MPI_Wait(request.get(), MPI_STATUS_IGNORE) : MPI_Test(request.get(), &flag, MPI_STATUS_IGNORE);
    });
    done = block || flag;
    return rc;
  };
  auto job = [st, request, start = std::move(start)]() mutable { st->mark(start(request.get())); };
  if (o.async_op)
    comm_thread()->post(std::move(job));
  else
    comm_thread()->exclusive(job);
  Work w(st);
  if (!o.async_op) w.wait();
  return w;
}
#endif
template <class T, class D>
std::shared_ptr<void> hold(const Tensor<T, D>& t) {
  return std::make_shared<Tensor<T, D>>(t);
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
template <class T, class D>
Tensor<T, D> contiguous_of(const Tensor<T, D>& t) {
  return t.is_contiguous() ? t : t.contiguous();
}
// Writes `data` (a contiguous result) back into `target` when they differ, and marks the write.
template <class T, class D>
void write_back(Tensor<T, D> target, Tensor<T, D> data) {
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
template <class T, class D>
void same_shapes(const std::vector<Tensor<T, D>>& list, const Shape& sizes, size_t n, const char* what) {
  REEL_CHECK(list.size() == n, value_error, "distributed::", what, ": the list has ", list.size(),
             " tensors for a group of ", n);
  for (const auto& x : list)
    REEL_CHECK(x.sizes() == sizes, value_error, "distributed::", what, ": a listed tensor has shape ", x.sizes(),
               ", the other argument ", sizes);
}
// list[k] = all[k] for each k (a received [n, *sizes] tensor into the caller's list).
template <class T, class D>
void unstack_into(std::vector<Tensor<T, D>>& list, const Tensor<T, D>& all) {
  for (size_t k = 0; k < list.size(); ++k) list[k].copy_(all.select(0, static_cast<int64_t>(k)));
}
// The list's tensors stacked into one contiguous tensor ([n, *sizes]).
template <class T, class D>
Tensor<T, D> stacked(const std::vector<Tensor<T, D>>& list, const Shape& sizes) {
  Shape whole = sizes;
  whole.insert(0, static_cast<int64_t>(list.size()));
  Tensor<T, D> all = empty<T, D>(whole);
  for (size_t r = 0; r < list.size(); ++r) all.select(0, static_cast<int64_t>(r)).copy_(list[r]);
  return all;
}
// What gather, scatter and all_to_all check and prepare alike on every engine.
template <class T, class D>
struct RootedArgs {
  int root;
  bool mine;         // this rank is the root
  Tensor<T, D> all;  // the root's [size, *sizes] buffer (empty elsewhere)
};
// gather: the root's list (filled with fresh tensors when empty) of one tensor per member
// shaped like t, the signature checked; `all` receives every member's t.
template <class T, class D>
RootedArgs<T, D> gather_args(const ProcessGroup& g, const Tensor<T, D>& t, std::vector<Tensor<T, D>>& list, int dst) {
  const int root = g.group_rank(dst, "gather");
  const bool mine = g.rank() == root;
  if (mine && list.empty())
    for (int r = 0; r < g.size(); ++r) list.push_back(empty<T, D>(t.sizes()));
  if (mine) same_shapes(list, t.sizes(), static_cast<size_t>(g.size()), "gather");
  check_collective<T>(g, "gather", t.sizes(), root);
  Shape whole = t.sizes();
  whole.insert(0, mine ? g.size() : 0);
  return {root, mine, empty<T, D>(whole)};
}
// scatter: the root's list checked against out, the signature checked; `all` holds the list.
template <class T, class D>
RootedArgs<T, D> scatter_args(const ProcessGroup& g, const Tensor<T, D>& out, const std::vector<Tensor<T, D>>& list,
                              int src) {
  const int root = g.group_rank(src, "scatter");
  const bool mine = g.rank() == root;
  if (mine) same_shapes(list, out.sizes(), static_cast<size_t>(g.size()), "scatter");
  check_collective<T>(g, "scatter", out.sizes(), root);
  return {root, mine, mine ? stacked(list, out.sizes()) : empty<T, D>({0})};
}
// all_to_all: both lists one tensor per member of one shape (out filled when empty), the
// signature checked; returns the stacked send buffer and a receive buffer like it.
template <class T, class D>
std::pair<Tensor<T, D>, Tensor<T, D>> all_to_all_args(const ProcessGroup& g, std::vector<Tensor<T, D>>& out,
                                                      const std::vector<Tensor<T, D>>& in) {
  REEL_CHECK(!in.empty(), value_error, "distributed::all_to_all: the input list is empty");
  same_shapes(in, in[0].sizes(), static_cast<size_t>(g.size()), "all_to_all");
  if (out.empty())
    for (int r = 0; r < g.size(); ++r) out.push_back(empty<T, D>(in[0].sizes()));
  same_shapes(out, in[0].sizes(), static_cast<size_t>(g.size()), "all_to_all");
  check_collective<T>(g, "all_to_all", in[0].sizes());
  auto send = stacked(in, in[0].sizes());
  auto recv = empty<T, D>(send.sizes());
  return {std::move(send), std::move(recv)};
}
}  // namespace detail_dist
// Waits until every member of the group has called it (over MPI where the group has an MPI
// communicator, else over the device engine: NCCL).
inline void barrier(CollectiveOptions o = {}) {
  const ProcessGroup& g = detail_dist::group_of(o, "barrier");
  detail_dist::check_barrier(g);
#if REEL_DIST_MPI
  if (g.comm() != MPI_COMM_NULL) {
    detail_dist::launch(o, [c = g.comm()] { return MPI_Barrier(c); }, {}, {}, "MPI_Barrier").wait();
    return;
  }
#endif
  REEL_CHECK(detail_dist::device_hooks().barrier && g.device_comm(), error, "distributed::barrier: the group has no engine");
  detail_dist::device_hooks().barrier(g);
}

}  // namespace reel::inline REEL_ABI::distributed
