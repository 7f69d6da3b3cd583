// Activation checkpointing (issue 19): a 24-layer pre-norm MLP (width 1024, batch 256, float;
// each layer h + gelu(linear(layer_norm(h)))), one training step (forward, backward into the
// parameters' .grad) without checkpointing, with every layer checkpointed, and with a policy
// that keeps the matrix products and recomputes the elementwise ops: the tensor memory the
// forward leaves for backward, the peak during the step above the parameters and their .grad
// (max_memory_allocated), and the step time (median of 5, the three
// configurations timed in turn), with ratios against the unchecked step in the same process.
//   bench_activation_checkpoint [layers] [width] [batch]
#include <cstdio>
#include <cstdlib>
#include <reel/reel.hpp>
#include <vector>

#include "median_timer.hpp"

using namespace reel;
using TF = Tensor<float>;

namespace {
struct Layer {
  TF w, b;
};
TF layer_forward(const TF& h, const Layer& p) {
  TF mu = mean(h, {-1}, true);
  TF c = h - mu;
  TF var = mean(TF(c * c), {-1}, true);
  TF n = c * rsqrt(var + 1e-5f);
  TF z = nn::functional::linear(n, p.w, p.b);
  return TF(h + nn::functional::gelu(z));
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t layers = argc > 1 ? std::atoll(argv[1]) : 24;
  const int64_t width = argc > 2 ? std::atoll(argv[2]) : 1024;
  const int64_t batch = argc > 3 ? std::atoll(argv[3]) : 256;
  Generator g(1);
  std::vector<Layer> net;
  std::vector<TF> params;
  for (int64_t l = 0; l < layers; ++l) {
    net.push_back({TF(randn<float>({width, width}, g) * (1.0f / 32)).requires_grad_(),
                   zeros<float>({width}).requires_grad_()});
    params.push_back(net.back().w);
    params.push_back(net.back().b);
  }
  const TF x = randn<float>({batch, width}, g);
  auto save_matmuls = [](const OpCall& op) {
    return op.name() == "matmul" ? CheckpointPolicy::MUST_SAVE : CheckpointPolicy::PREFER_RECOMPUTE;
  };
  // mode 0: no checkpointing, 1: each layer checkpointed, 2: each layer with the policy.
  // The gradients accumulate into .grad buffers that exist before the step (zeroed in place,
  // zero_grad(set_to_none=false)), so the memory above the baseline is activations and
  // temporaries. saved_mib: what the forward left for backward.
  double saved_mib = 0;
  auto step = [&](int mode) {
    const int64_t before = memory_allocated();
    TF h = x;
    for (int64_t l = 0; l < layers; ++l) {
      auto fn = [&net, l](const std::vector<TF>& in) { return layer_forward(in[0], net[static_cast<size_t>(l)]); };
      h = mode == 0 ? fn({h}) : mode == 1 ? checkpoint(fn, {h}) : checkpoint(fn, {h}, save_matmuls);
    }
    saved_mib = static_cast<double>(memory_allocated() - before) / (1 << 20);
    TF loss = mean(TF(h * h));
    loss.backward();
    autograd::no_grad ng;
    for (auto& p : params) p.grad().zero_();
  };
  const char* names[] = {"no checkpointing", "full checkpointing", "selective (save matmul)"};
  double peak_mib[3], fwd_mib[3], secs[3];
  const double act_mib = static_cast<double>(batch * width * 4) / (1 << 20);
  for (int mode = 0; mode < 3; ++mode) step(mode);  // warm up (allocator caches, BLAS threads)
  for (int mode = 0; mode < 3; ++mode) {
    empty_cache();
    const int64_t base = memory_allocated();
    reset_peak_memory_stats();
    step(mode);
    peak_mib[mode] = static_cast<double>(max_memory_allocated() - base) / (1 << 20);
    fwd_mib[mode] = saved_mib;
  }
  std::vector<std::vector<double>> t(3);
  for (int r = 0; r < 5; ++r)
    for (int mode = 0; mode < 3; ++mode) {
      auto once = [&] { step(mode); };
      t[mode].push_back(reel_bench::batch_seconds(once, 1));
    }
  for (int mode = 0; mode < 3; ++mode) secs[mode] = reel_bench::median(t[mode]);
  std::printf("activation checkpointing: %lld layers, width %lld, batch %lld, float (one activation: %.1f MiB)\n",
              static_cast<long long>(layers), static_cast<long long>(width), static_cast<long long>(batch), act_mib);
  std::printf("%-26s %10s %8s %10s %8s %10s %8s\n", "", "saved MiB", "x none", "peak MiB", "x none", "step ms",
              "x none");
  for (int mode = 0; mode < 3; ++mode)
    std::printf("%-26s %10.1f %8.2f %10.1f %8.2f %10.1f %8.2f\n", names[mode], fwd_mib[mode], fwd_mib[mode] / fwd_mib[0],
                peak_mib[mode], peak_mib[mode] / peak_mib[0], secs[mode] * 1e3, secs[mode] / secs[0]);
  return 0;
}
