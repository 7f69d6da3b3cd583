// Training costs (issue 5), measured in one process (medians):
//   1. linear_cross_entropy vs the unfused cross_entropy(linear(...)) at N = 4096, D = 512,
//      V = 32768 (float), forward + backward, for hard labels, soft labels and reduction
//      none: time fused / unfused (<= 1.0 wanted) and peak extra memory fused / unfused
//      (<= 1/8 wanted), memory from reel's allocator (max_memory_allocated);
//   2. foreach::add_ over 1000 tensors of 1024 floats (<= 0.1 ms wanted) against a plain
//      Eigen loop and a per-tensor reel loop;
//   3. an AdamW step over the same parameters: foreach (optim::AdamW) vs a per-tensor loop.
//   bench_training [--quick]   (--quick: N = 1024 for item 1)
#include <cstdio>
#include <cstring>
#include <reel/reel.hpp>

#include "median_timer.hpp"

using namespace reel;
namespace F = nn::functional;
using Tf = Tensor<float>;
using reel_bench::median_seconds;

namespace {
volatile float sink = 0;

struct Run {
  double seconds;
  int64_t peak_extra;
};
// f() builds a loss from fresh leaves; forward + backward, with the peak of tensor memory.
template <class Fn>
Run measure(Fn&& f, int reps) {
  int64_t peak = 0;
  double t = median_seconds([&] {
    empty_cache();
    int64_t base = memory_allocated();
    reset_peak_memory_stats();
    f();
    peak = std::max(peak, max_memory_allocated() - base);
  }, reps);
  return {t, peak};
}

void lce(int64_t N, int reps) {
  const int64_t D = 512, V = 32768;
  Generator g(1);
  Tf H = Tf(randn<float>({N, D}, g) * 0.5f), W = Tf(randn<float>({V, D}, g) * 0.05f);
  auto y = randint<int64_t>(0, V, {N}, g);
  Tf P = F::softmax(Tf(randn<float>({N, V}, g) * 2.0f), 1);
  Tf go = rand<float>({N}, g);
  std::printf("\nlinear_cross_entropy, N = %lld, D = %lld, V = %lld, float, forward + backward (dX, dW)\n",
              static_cast<long long>(N), static_cast<long long>(D), static_cast<long long>(V));
  std::printf("%-22s %12s %12s %8s %14s %14s %8s\n", "case", "unfused (s)", "fused (s)", "time", "unfused (MiB)",
              "fused (MiB)", "memory");
  auto one = [&](const char* name, bool soft, F::Reduction red) {
    auto step = [&](bool fused) {
      Tf h = H.detach().requires_grad_(), w = W.detach().requires_grad_();
      Tf loss;
      if (fused) {
        F::LinearCrossEntropyOptions<float> o{.reduction = red};
        loss = soft ? F::linear_cross_entropy(h, w, P, o) : F::linear_cross_entropy(h, w, y, o);
      } else {
        F::CrossEntropyOptions<float> o{.reduction = red};
        Tf z = F::linear(h, w);
        loss = soft ? F::cross_entropy(z, P, o) : F::cross_entropy(z, y, o);
      }
      auto gr = red == F::Reduction::None ? autograd::grad({loss}, {h, w}, {go}) : autograd::grad({loss}, {h, w});
      sink = sink + gr[0].data_ptr()[0] + gr[1].data_ptr()[0];
    };
    Run u = measure([&] { step(false); }, reps), f = measure([&] { step(true); }, reps);
    std::printf("%-22s %12.3f %12.3f %7.2fx %14.1f %14.1f %7.3fx\n", name, u.seconds, f.seconds, f.seconds / u.seconds,
                u.peak_extra / 1048576.0, f.peak_extra / 1048576.0, double(f.peak_extra) / double(u.peak_extra));
  };
  one("hard labels, mean", false, F::Reduction::Mean);
  one("soft labels, mean", true, F::Reduction::Mean);
  one("hard labels, none", false, F::Reduction::None);
}

void foreach_and_adamw() {
  const int n = 1000, len = 1024;
  std::vector<Tf> a, b, grads;
  Generator g(2);
  for (int i = 0; i < n; ++i) {
    a.push_back(Tf(randn<float>({len}, g)).requires_grad_());
    b.push_back(randn<float>({len}, g));
    grads.push_back(Tf(randn<float>({len}, g) * 0.01f));
  }
  const int reps = 201, inner = 5;
  std::vector<Tf> x;
  for (auto& t : a) x.push_back(t.detach());
  auto eigen_loop = [&] {
    for (int i = 0; i < n; ++i) {
      Eigen::Map<Eigen::ArrayXf> xi(x[i].data_ptr(), len);
      Eigen::Map<const Eigen::ArrayXf> bi(b[i].data_ptr(), len);
      xi += 0.5f * bi;
    }
  };
  auto reel_loop = [&] {
    for (int i = 0; i < n; ++i) x[i].add_(b[i], 0.5f);
  };
  for (int w = 0; w < 20; ++w) {
    foreach::add_(x, b, 0.5);
    eigen_loop();
  }
  double te = median_seconds(eigen_loop, reps, inner);
  double tr = median_seconds(reel_loop, reps, inner);
  double tf = median_seconds([&] { foreach::add_(x, b, 0.5); }, reps, inner);
  double ts = median_seconds([&] { foreach::add_(x, 0.5); }, reps, inner);
  std::printf("\nforeach over %d tensors of %d floats (median of %d x %d calls)\n", n, len, reps, inner);
  std::printf("%-46s %10.4f ms\n", "plain Eigen loop: x[i] += 0.5 b[i]", te * 1e3);
  std::printf("%-46s %10.4f ms\n", "per-tensor reel loop: x[i].add_(b[i], 0.5)", tr * 1e3);
  std::printf("%-46s %10.4f ms   (Eigen loop / foreach: %.2fx)\n", "foreach::add_(x, b, 0.5)", tf * 1e3, te / tf);
  std::printf("%-46s %10.4f ms\n", "foreach::add_(x, 0.5)", ts * 1e3);
  // the same with 16 floats per tensor: what is left is per-tensor overhead
  std::vector<Tf> xs, bs;
  for (int i = 0; i < n; ++i) {
    xs.push_back(randn<float>({16}, g));
    bs.push_back(randn<float>({16}, g));
  }
  double to = median_seconds([&] { foreach::add_(xs, bs, 0.5); }, reps, inner);
  std::printf("%-46s %10.4f ms   (%.0f ns per tensor)\n", "foreach::add_ over 1000 tensors of 16 floats", to * 1e3,
              to * 1e9 / n);

  // AdamW: optim::AdamW (foreach) vs PyTorch's single-tensor update as a per-tensor loop
  const double lr = 1e-3, wd = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  for (int i = 0; i < n; ++i) a[i].set_grad(grads[i]);
  optim::AdamW opt(a, optim::AdamWOptions(lr).weight_decay(wd));
  std::vector<Tf> p, m, v;
  for (int i = 0; i < n; ++i) {
    p.push_back(a[i].detach().clone());
    m.push_back(zeros<float>({len}));
    v.push_back(zeros<float>({len}));
  }
  int64_t step = 0;
  auto loop_step = [&] {
    ++step;
    double bc1 = 1 - std::pow(b1, double(step)), bc2s = std::sqrt(1 - std::pow(b2, double(step)));
    float step_size = static_cast<float>(lr / bc1);
    for (int i = 0; i < n; ++i) {
      p[i].mul_(static_cast<float>(1 - lr * wd));
      m[i].copy_(m[i] + static_cast<float>(1 - b1) * (grads[i] - m[i]));        // lerp_
      v[i].mul_(static_cast<float>(b2));
      v[i].copy_(v[i] + static_cast<float>(1 - b2) * grads[i] * grads[i]);      // addcmul_
      Tf denom = sqrt(v[i]) / static_cast<float>(bc2s) + static_cast<float>(eps);
      p[i].copy_(p[i] - step_size * m[i] / denom);                               // addcdiv_
    }
  };
  for (int w = 0; w < 5; ++w) {
    opt.step();
    loop_step();
  }
  double t_opt = median_seconds([&] { opt.step(); }, 101);
  double t_loop = median_seconds(loop_step, 101);
  std::printf("\nAdamW step over %d tensors of %d floats (median of 101 steps)\n", n, len);
  std::printf("%-46s %10.4f ms\n", "per-tensor loop (PyTorch's single-tensor ops)", t_loop * 1e3);
  std::printf("%-46s %10.4f ms   (loop / foreach: %.2fx)\n", "optim::AdamW::step (foreach)", t_opt * 1e3, t_loop / t_opt);
}
}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && !std::strcmp(argv[1], "--quick");
  foreach_and_adamw();
  lce(quick ? 1024 : 4096, quick ? 1 : 3);
  return 0;
}
