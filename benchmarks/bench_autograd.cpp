// Autograd costs (issue 3), measured in one process (the tape first: after the large-tensor
// cases the same loop measures about a third slower, see benchmarks/README.md):
//   1. f(x) = sum(square(h)) after 10 steps of h = tanh(1.01 h + 0.1), x a [256, 256] double
//      tensor: value + gradient vs value alone, and a Hessian-vector product (reverse over
//      reverse, as torch.autograd.functional.hvp computes it) vs value alone.
//   2. Tape overhead: a chain of 10k recorded ops on 1-element tensors, forward + backward,
//      per recorded op; and the memory the recorded chain holds (heap and pooled bytes).
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <reel/reel.hpp>

#include "median_timer.hpp"

using namespace reel;
using Td = Tensor<double>;

namespace {
using reel_bench::median_seconds;

Td chain(const Td& x) {
  Td h = x;
  for (int i = 0; i < 10; ++i) h = tanh(1.01 * h + 0.1);
  return sum(square(h));
}

// malloc'd bytes plus reel's pooled small objects
int64_t heap_in_use() { return static_cast<int64_t>(mallinfo2().uordblks) + detail::SmallPool::in_use(); }
}  // namespace

int main() {
  Generator gen(0);
  Td x0 = randn<double>({256, 256}, gen);
  Td v = randn<double>({256, 256}, gen);
  double sink = 0;

  const int n_ops = 10000;
  auto run_chain = [&] {
    Td x = tensor<double>({0.5});
    x.requires_grad_();
    Td y = x;
    for (int i = 0; i < n_ops; ++i) y = y * 1.0001;
    y.backward();
    sink += x.grad().item();
  };
  double t_tape = median_seconds(run_chain, 15);
  double t_fwd_plain = median_seconds([&] {
    Td y = tensor<double>({0.5});
    for (int i = 0; i < n_ops; ++i) y = y * 1.0001;
    sink += y.item();
  }, 15);

  double t_value = median_seconds([&] {
    autograd::no_grad ng;
    sink += chain(x0).item();
  }, 15);
  double t_grad = median_seconds([&] {
    Td x = x0.detach();
    x.requires_grad_();
    Td f = chain(x);
    auto g = autograd::grad({f}, {x})[0];
    sink += f.item() + g[0][0].item();
  }, 15);
  double t_hvp = median_seconds([&] {
    Td x = x0.detach();
    x.requires_grad_();
    Td f = chain(x);
    auto g = autograd::grad({f}, {x}, {}, {.create_graph = true})[0];
    auto hv = autograd::grad({g}, {x}, {v})[0];
    sink += f.item() + hv[0][0].item();
  }, 15);

  // memory held by the recorded chain
  int64_t before = heap_in_use();
  int64_t held = 0;
  {
    Td x = tensor<double>({0.5});
    x.requires_grad_();
    Td y = x;
    for (int i = 0; i < n_ops; ++i) y = y * 1.0001;
    held = heap_in_use() - before;
    y.backward();
  }

  std::printf("tanh chain [256, 256] double, 10 steps (medians of 15)\n");
  std::printf("  value                       %8.2f ms\n", t_value * 1e3);
  std::printf("  value + gradient            %8.2f ms   ratio %.2f (goal <= 1.3)\n", t_grad * 1e3, t_grad / t_value);
  std::printf("  Hessian-vector product      %8.2f ms   ratio %.2f (goal <= 2.0)\n", t_hvp * 1e3, t_hvp / t_value);
  std::printf("tape: chain of %d recorded ops on 1-element tensors\n", n_ops);
  std::printf("  forward + backward          %8.3f us per op (goal <= 0.5)\n", t_tape / n_ops * 1e6);
  std::printf("  forward without autograd    %8.3f us per op\n", t_fwd_plain / n_ops * 1e6);
  std::printf("  memory held by the graph    %8.1f KiB (%.0f bytes per op)\n", held / 1024.0, double(held) / n_ops);
  return sink == 12345.678 ? 1 : 0;
}
