#pragma once
// DistributedSampler: each rank's share of a dataset's indices, as PyTorch's
// torch.utils.data.distributed.DistributedSampler deals them: an order (shuffled from
// seed + epoch, the same on every rank, or 0..n-1), padded by repeating its start to a multiple
// of the number of replicas (or, with drop_last, cut to one), then every num_replicas-th index
// from position `rank`. The shuffle is reel's (a Philox-keyed order), not torch's permutation.
#include "../core/config.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "../core/errors.hpp"
#include "../ops/factories.hpp"
#include "../random/philox.hpp"
#include "process_group.hpp"

namespace reel::inline REEL_ABI::distributed {

struct SamplerOptions {
  int num_replicas = -1;  // -1: the world's size (the process group must be up)
  int rank = -1;          // -1: this process's rank in the world
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  explicit DistributedSampler(int64_t dataset_size, SamplerOptions o = {})
      : n_(dataset_size), o_(o) {
    if (o_.num_replicas < 0) o_.num_replicas = world_size();
    if (o_.rank < 0) o_.rank = rank();
    REEL_CHECK(n_ >= 0, value_error, "DistributedSampler: dataset size ", n_, " is negative");
    REEL_CHECK(o_.num_replicas > 0, value_error, "DistributedSampler: num_replicas ", o_.num_replicas,
               " must be positive");
    REEL_CHECK(o_.rank < o_.num_replicas, value_error, "DistributedSampler: invalid rank ", o_.rank,
               ", rank should be in the interval [0, ", o_.num_replicas - 1, "]");
    const int64_t r = o_.num_replicas;
    // (torch: with drop_last, ceil((n - r) / r) when n does not divide evenly, else n / r)
    per_rank_ = o_.drop_last && n_ % r != 0 ? (n_ - r + r - 1) / r : (n_ + r - 1) / r;
    if (per_rank_ < 0) per_rank_ = 0;
  }

  // Sets the epoch the next indices() shuffles for (call it before each epoch, as with torch).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  // How many indices each rank gets; total_size() = that times num_replicas.
  int64_t num_samples() const { return per_rank_; }
  int64_t total_size() const { return per_rank_ * o_.num_replicas; }
  int64_t size() const { return per_rank_; }

  // This rank's indices for the current epoch.
  std::vector<int64_t> indices() const {
    std::vector<int64_t> order(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), int64_t(0));
    if (o_.shuffle && n_ > 1) {
      // random keys from the generator seeded with seed + epoch; ties (about n^2 / 2^63
      // likely) keep index order, so the order is a function of (seed, epoch, n) alone
      Generator g(o_.seed + static_cast<uint64_t>(epoch_));
      auto keys = randint<int64_t>(0, int64_t(1) << 62, {n_}, g).to_vector();
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return keys[static_cast<size_t>(a)] < keys[static_cast<size_t>(b)];
      });
    }
    const int64_t total = total_size();
    if (n_ > 0 && total > n_) {  // pad: the order's start, repeated as often as needed
      order.reserve(static_cast<size_t>(total));
      for (int64_t i = n_; i < total; ++i) order.push_back(order[static_cast<size_t>(i % n_)]);
    }
    order.resize(static_cast<size_t>(total));
    std::vector<int64_t> mine;
    mine.reserve(static_cast<size_t>(per_rank_));
    for (int64_t i = o_.rank; i < total; i += o_.num_replicas) mine.push_back(order[static_cast<size_t>(i)]);
    return mine;
  }

 private:
  int64_t n_;
  SamplerOptions o_;
  int64_t per_rank_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace reel::inline REEL_ABI::distributed
