// Multi-tensor apply vs one launch per tensor, on the GPU:
//  - an AdamW step (optim::AdamW::step, one fused multi-tensor kernel per group) over 1000
//    parameters of mixed sizes (~98M elements), against the same fused per-element kernel
//    launched once per parameter (the launches are what the multi-tensor form saves);
//  - foreach::add_ over 1000 tensors of 1024 floats, against Tensor::add_ in a loop.
// cudaEvent timing on reel's stream, warmup, median of repetitions. Prints one line each:
//   adamw_step fused_ms=... per_tensor_ms=... speedup=...
//   foreach_add fused_ms=... per_tensor_ms=... speedup=...
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <reel/cuda.hpp>

#include "bench_timing.cuh"

using namespace reel;

namespace {


// 1000 parameter sizes shaped like a transformer's: a few large matrices, many vectors.
std::vector<int64_t> param_sizes() {
  std::vector<int64_t> n;
  for (int i = 0; i < 40; ++i) n.push_back(1536 * 1024);
  for (int i = 0; i < 60; ++i) n.push_back(512 * 1024);
  const int64_t small[] = {768, 1024, 3072, 4096, 6000, 8191};
  for (int i = 0; i < 900; ++i) n.push_back(small[i % 6]);
  return n;
}

void bench_adamw() {
  const auto sizes = param_sizes();
  int64_t total = 0;
  std::vector<Tensor<float, CUDA>> params;
  for (int64_t n : sizes) {
    total += n;
    auto p = full<float, CUDA>({n}, 0.01f);
    p.requires_grad_();
    p.set_grad(full<float, CUDA>({n}, 1e-3f));
    params.push_back(p);
  }
  const auto opts = optim::AdamWOptions(1e-3).weight_decay(0.01);
  optim::AdamW<float, CUDA> opt(params, opts);
  const double fused = median_ms([&] { opt.step(); }, 5, 31);

  // The same per-element update (detail::cuda::mt::AdamOp) launched once per parameter on the
  // optimizer's own state (created by the steps above).
  using Op = detail::cuda::mt::AdamOp<float, false>;
  Op op{};
  op.k = optim::detail::adam_coeffs<float>(opts, true);
  const double step_size = -1e-3 / (1 - 0.9), bc2_sqrt = std::sqrt(1 - 0.999);
  auto& g = opt.param_groups()[0];
  const double per_tensor = median_ms([&] {
    for (size_t i = 0; i < g.params.size(); ++i) {
      auto& s = g.state[i];
      detail::cuda::mt::Work<4, 2> w;
      w.add(g.params[i].numel(),
            {g.params[i].mutable_data_ptr(), g.params[i].grad().mutable_data_ptr(), s.exp_avg.mutable_data_ptr(),
             s.exp_avg_sq.mutable_data_ptr()},
            {step_size, bc2_sqrt});
      detail::cuda::mt::multi_tensor_apply<float>(w, op);
    }
  }, 5, 31);
  std::printf("adamw_step params=%zu elements=%lld fused_ms=%.3f per_tensor_ms=%.3f speedup=%.2f\n", sizes.size(),
              static_cast<long long>(total), fused, per_tensor, per_tensor / fused);
}

void bench_foreach_add() {
  std::vector<Tensor<float, CUDA>> a, b;
  for (int i = 0; i < 1000; ++i) {
    a.push_back(full<float, CUDA>({1024}, 1.0f));
    b.push_back(full<float, CUDA>({1024}, 1e-3f));
  }
  const double fused = median_ms([&] { foreach::add_(a, b, 0.5); }, 5, 31);
  const double per_tensor = median_ms([&] {
    for (size_t i = 0; i < a.size(); ++i) a[i].add_(b[i], 0.5f);
  }, 5, 31);
  std::printf("foreach_add tensors=1000x1024 fused_ms=%.3f per_tensor_ms=%.3f speedup=%.2f\n", fused, per_tensor,
              per_tensor / fused);
}

}  // namespace

int main() {
  if (!gpu::is_available()) {
    std::printf("bench_adamw: no CUDA device, skipped\n");
    return 0;
  }
  bench_adamw();
  bench_foreach_add();
  return 0;
}
