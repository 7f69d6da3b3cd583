#pragma once
// nn::parallel::DistributedDataParallel on reel::distributed (see <reel/distributed.hpp>).
#include "collectives.hpp"

namespace reel::inline REEL_ABI::nn::parallel::inline REEL_DIST_ABI {

// Data-parallel training (torch.nn.parallel.DistributedDataParallel) over a process group:
//
//   nn::parallel::DistributedDataParallel<float> ddp(model.parameters());   // or (model)
//   nn::parallel::DistributedDataParallel<float, CUDA> ddp(cuda_model);      // over NCCL
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
// PyTorch leaves it undefined in that case). CUDA parameters: the buckets' all-reduces run on
// NCCL's stream while backward's kernels go on, and the averages are written on the current
// stream after it has waited for them (overlap()'s figures are then host times: when each
// all-reduce was enqueued and when it was found done).
template <class T, class D = CPU>
class DistributedDataParallel {
 public:
  struct Options {
    double bucket_cap_mb = 25;
    bool find_unused_parameters = false;
    const distributed::ProcessGroup* group = nullptr;  // null: the world
  };

  explicit DistributedDataParallel(std::vector<Tensor<T, D>> params, Options o = {}) : st_(std::make_shared<State>()) {
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
      hooks_.push_back(st_->params[k].register_post_accumulate_grad_hook([weak, k](const Tensor<T, D>&) {
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

  const std::vector<Tensor<T, D>>& parameters() const { return st_->params; }
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
  // The bucket all-reduces' time since construction (or reset_overlap) and the part of it that
  // ran while backward was still going (hidden behind it, as far as the machine's cores allow).
  struct Overlap {
    int64_t steps = 0;
    double all_reduce_seconds = 0, during_backward_seconds = 0;
    double fraction() const { return all_reduce_seconds > 0 ? during_backward_seconds / all_reduce_seconds : 0; }
  };
  Overlap overlap() const { return st_->overlap; }
  void reset_overlap() { st_->overlap = {}; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    size_t pending = 0;
    Tensor<T, D> flat;
    distributed::Work work;
  };
  struct State {
    std::vector<Tensor<T, D>> params;
    Options o;
    std::vector<Bucket> buckets;
    std::vector<size_t> bucket_of;
    std::vector<char> got;
    size_t next_launch = 0;
    bool active = false;
    std::shared_ptr<bool> no_sync = std::make_shared<bool>(false);
    std::vector<std::string> events;
    std::weak_ptr<State> me;
    Overlap overlap;

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
      if (!bk.flat.defined()) bk.flat = empty<T, D>({n});  // (kept from step to step)
      int64_t at = 0;
      autograd::no_grad ng;
      for (size_t k : bk.params) {
        const int64_t m = params[k].numel();
        Tensor<T, D> g = params[k].grad();
        Tensor<T, D> part = bk.flat.slice(0, at, at + m);
        if (g.defined())
          part.copy_(g.reshape({m}));
        else
          part.zero_();
        at += m;
      }
      bk.work = distributed::all_reduce(bk.flat, distributed::ReduceOp::SUM, {.group = &group(), .async_op = true});
      events.push_back("launch " + std::to_string(b));
    }
    void finish() {
      active = false;
      const auto backward_end = std::chrono::steady_clock::now();
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
      ++overlap.steps;
      for (auto& bk : buckets) {
        bk.work.wait();
        const auto [b0, b1] = bk.work.span();
        overlap.all_reduce_seconds += std::chrono::duration<double>(b1 - b0).count();
        if (b0 < backward_end)
          overlap.during_backward_seconds += std::chrono::duration<double>(std::min(b1, backward_end) - b0).count();
        if (world > 1) bk.flat.div_(static_cast<T>(world));
        int64_t at = 0;
        for (size_t k : bk.params) {
          Tensor<T, D>& p = params[k];
          const int64_t m = p.numel();
          Tensor<T, D> avg = bk.flat.slice(0, at, at + m).reshape(p.sizes());
          Tensor<T, D> g = p.grad();
          if (g.defined())
            g.copy_(avg);
          else
            p.set_grad(avg.clone());
          at += m;
        }
      }
      events.push_back("end");
    }
  };
  std::shared_ptr<State> st_;
  std::vector<RemovableHandle> hooks_;
};

}  // namespace reel::nn::parallel
