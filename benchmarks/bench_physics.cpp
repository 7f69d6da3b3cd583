// Physics-speed autodiff (issue 14), each row against a baseline measured in this process:
//   1. Lennard-Jones 38 atoms in the tensor formulation of examples/lj_model.hpp (double):
//      energy vs the hand-written energy loop; gradient (reverse mode) vs the hand-written
//      analytic gradient; the full 114 x 114 Hessian by functional::hessian (forward over
//      reverse, all directions in one pass with structured tangents) vs the row-by-row
//      reverse-over-reverse Jacobian of the gradient (what functional::hessian did first)
//      and vs the dense vector mode (all directions as a leading dim of every tangent).
//   1b. The same three through autograd::compile (capture once, replay the kernels), and the
//       energy with code generation (compile's option fuse: one generated loop nest per
//       fused group of kernels).
//   2. One PINN training step (examples/pinn_model.hpp: MLP 2-64-64-64-1 tanh, 1024 points,
//      Laplacian by nested reverse mode, gradient of the loss w.r.t. all weights), float.
//   3. Short dims: a [38, 38, 3] pair difference (broadcast, last dim 3) vs a contiguous
//      subtraction of the same element count; a sum over the dim of 3 vs a full sum.
//   4. GEMM 4096 x 512 x 8192 (float and double) through matmul vs Eigen's own product
//      (with -DREEL_BLAS matmul runs on the BLAS library CMake found).
// The JAX / PyTorch figures for the same rows: benchmarks/anchors/physics_anchors.py, run
// on the same machine. Pass --quick to skip the GEMMs, --pinn for the PINN row alone.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include <reel/reel.hpp>

#include "../examples/lj_model.hpp"
#include "../examples/pinn_model.hpp"
#include "median_timer.hpp"

using namespace reel;
using reel_bench::median_seconds;
using reel_bench::paired_seconds;
using Td = Tensor<double>;

namespace {
double sink = 0;

// Baseline and reel timed in alternating batches: medians, and the median of the pairs' ratios.
void row(const char* name, const reel_bench::Paired& p, const char* unit, double scale) {
  std::printf("%-72s %12.2f %12.2f %s  ratio %.2fx\n", name, p.base * scale, p.cand * scale, unit, p.ratio);
}
void row(const char* name, double base, double reel_t, const char* unit, double scale) {
  row(name, reel_bench::Paired{base, reel_t, base / reel_t}, unit, scale);
}

template <class T>
void gemm_row(const char* name) {
  const int64_t M = 4096, K = 512, N = 8192;
  Generator gen(3);
  auto a = randn<T>({M, K}, gen), b = randn<T>({K, N}, gen);
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const Mat> A(a.data_ptr(), M, K), B(b.data_ptr(), K, N);
  Mat C(M, N);
  double t_eigen = median_seconds([&] {
    C.noalias() = A * B;
    sink += C(1, 1);
  }, 3);
  double t_reel = median_seconds([&] {
    auto c = matmul(a, b);
    sink += c.data_ptr()[1];
  }, 3);
  double flops = 2.0 * M * K * N;
  std::printf("%-72s %12.1f %12.1f GFLOP/s  ratio %.2fx\n", name, flops / t_eigen * 1e-9, flops / t_reel * 1e-9,
              t_eigen / t_reel);
}

// 2. One PINN training step, eager and with the loss and its gradients compiled.
void pinn_row() {
  Generator gen(2026);
  pinn::Mlp net(gen);
  auto params = net.parameters();
  optim::Adam<float> opt(params, optim::AdamOptions(1e-3));
  auto X = pinn::interior(1024, gen), Xb = pinn::boundary(256, gen);
  double t_step = median_seconds([&] {
    opt.zero_grad();
    auto l = pinn::loss(net, X, Xb);
    l.backward();
    opt.step();
    sink += l.item();
  }, 11);
  // the same step with the loss and its gradients compiled (the optimizer runs outside)
  auto loss_grads = autograd::compile([&](const pinn::Tf& x, const pinn::Tf& xb) {
    auto l = pinn::loss(net, x, xb);
    return std::make_pair(l.detach(), autograd::grad(std::vector<pinn::Tf>{l}, params));
  });
  double t_step_c = median_seconds([&] {
    auto [l, g] = loss_grads(X, Xb);
    for (size_t i = 0; i < g.size(); ++i) params[i].set_grad(g[i]);
    opt.step();
    sink += l.item();
  }, 11);
  row("PINN step (2-64-64-64-1 tanh, 1024 points, float): eager vs compiled loss+grad", t_step, t_step_c, "ms", 1e3);
}
}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  std::printf("%-72s %12s %12s\n", "case", "baseline", "reel");
  if (argc > 1 && std::strcmp(argv[1], "--pinn") == 0) {  // the PINN row alone (physics_anchors.py --pairs)
    pinn_row();
    return 0;
  }

  // 1. LJ38
  Td P = lj::random_cluster(38, 1);
  auto xs = P.to_vector();
  std::vector<double> g(xs.size());
  auto e_hand = [&] { sink += lj::energy_by_hand(xs.data(), 38); };
  row("LJ38 energy: hand-written loop vs tensor form", paired_seconds(e_hand, [&] {
    autograd::no_grad ng;
    sink += lj::energy(P).item();
  }, 31, 50), "us", 1e6);
  auto energy_c = autograd::compile([](const Td& x) {
    autograd::no_grad ng;
    return lj::energy(x);
  });
  row("LJ38 energy: hand-written loop vs compile(energy)",
      paired_seconds(e_hand, [&] { sink += energy_c(P).item(); }, 31, 50), "us", 1e6);
  {
    // with code generation: the first call captures, fuses, compiles (into a fresh cache
    // directory here) and loads; a second compiled function finds the library in the cache
    auto cache = std::filesystem::temp_directory_path() / ("reel-bench-jit-" + std::to_string(::getpid()));
    setenv("REEL_JIT_CACHE", cache.c_str(), 1);
    auto energy_f = [] {
      return autograd::compile(
          [](const Td& x) {
            autograd::no_grad ng;
            return lj::energy(x);
          },
          {.fuse = true});
    };
    auto ef = energy_f();
    auto t1 = std::chrono::steady_clock::now();
    sink += ef(P).item();
    auto t2 = std::chrono::steady_clock::now();
    auto ef2 = energy_f();
    sink += ef2(P).item();
    auto t3 = std::chrono::steady_clock::now();
    std::printf("%-72s %12.1f %12.1f ms  (%d loop nests; %s)\n", "LJ38 energy, compile(fuse) first call: compiling vs cached",
                std::chrono::duration<double>(t2 - t1).count() * 1e3,
                std::chrono::duration<double>(t3 - t2).count() * 1e3, ef.fused_kernels(),
                ef.fusion_reason().empty() ? "generated" : ef.fusion_reason().c_str());
    row("LJ38 energy: hand-written loop vs compile(energy, {.fuse = true})",
        paired_seconds(e_hand, [&] { sink += ef(P).item(); }, 31, 50), "us", 1e6);
    std::filesystem::remove_all(cache);
    unsetenv("REEL_JIT_CACHE");
  }
  auto g_hand = [&] {
    lj::gradient_by_hand(xs.data(), 38, g.data());
    sink += g[0];
  };
  auto t0 = std::chrono::steady_clock::now();  // the first call builds and caches the backward plans
  sink += lj::forces(P).data_ptr()[0];
  double t_first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto p_g = paired_seconds(g_hand, [&] { sink += lj::forces(P).data_ptr()[0]; }, 31, 50);
  row("LJ38 gradient: first call vs repeated calls", t_first, p_g.cand, "us", 1e6);
  row("LJ38 gradient: analytic loop vs reverse mode", p_g, "us", 1e6);
  auto forces_c = autograd::compile([](const Td& x) { return lj::forces(x); });
  row("LJ38 gradient: analytic loop vs compile(forces)",
      paired_seconds(g_hand, [&] { sink += forces_c(P).data_ptr()[0]; }, 31, 50), "us", 1e6);
  auto forces_f = autograd::compile([](const Td& x) { return lj::forces(x); }, {.fuse = true});
  sink += forces_f(P).data_ptr()[0];  // (capture and code generation)
  row("LJ38 gradient: analytic loop vs compile(forces, {.fuse = true})",
      paired_seconds(g_hand, [&] { sink += forces_f(P).data_ptr()[0]; }, 31, 50), "us", 1e6);
  auto grad_fn = [](const Td& x) {
    return autograd::grad({lj::energy(x)}, {x}, {}, {.create_graph = true})[0].reshape({-1});
  };
  auto h_rows = [&] {
    Td x = P.detach();
    x.requires_grad_();
    sink += autograd::functional::jacobian(grad_fn, x).data_ptr()[0];
  };
  auto h_fwd = [&] { sink += autograd::functional::hessian(lj::energy, P).data_ptr()[0]; };
  row("LJ38 Hessian 114x114: 114 reverse passes vs hessian()", paired_seconds(h_rows, h_fwd, 5), "ms", 1e3);
  // an explicit chunk size takes the dense vector mode (every direction a slice of each tangent)
  auto h_dense = [&] { sink += autograd::functional::hessian(lj::energy, P, false, false, 114).data_ptr()[0]; };
  row("LJ38 Hessian 114x114: dense vector mode vs hessian() (structured)", paired_seconds(h_dense, h_fwd, 5), "ms",
      1e3);
  auto hessian_c = autograd::compile([](const Td& x) { return autograd::functional::hessian(lj::energy, x); });
  row("LJ38 Hessian 114x114: hessian() vs compile(hessian)",
      paired_seconds(h_fwd, [&] { sink += hessian_c(P).data_ptr()[0]; }, 11), "ms", 1e3);
  auto hessian_f = autograd::compile([](const Td& x) { return autograd::functional::hessian(lj::energy, x); },
                                     {.fuse = true});
  sink += hessian_f(P).data_ptr()[0];
  row("LJ38 Hessian 114x114: compile(hessian) vs compile(hessian, {.fuse = true})",
      paired_seconds([&] { sink += hessian_c(P).data_ptr()[0]; }, [&] { sink += hessian_f(P).data_ptr()[0]; }, 11),
      "ms", 1e3);

  // 2. PINN step
  pinn_row();

  // 3. short dims
  {
    Generator gen(5);
    Td a = randn<double>({38, 38, 3}, gen), b = randn<double>({38, 38, 3}, gen);
    row("[38,38,3]: contiguous a - b vs P[:,None] - P[None]", paired_seconds([&] {
      Td d = a - b;
      sink += d.data_ptr()[1];
    }, [&] {
      Td d = P.unsqueeze(1) - P.unsqueeze(0);
      sink += d.data_ptr()[1];
    }, 61, 200), "us", 1e6);
    row("[38,38,3]: sum of all elements vs sum over the dim of 3", paired_seconds([&] { sink += sum(a).item(); }, [&] {
      Td s = sum(a, Shape{2});
      sink += s.data_ptr()[0];
    }, 61, 200), "us", 1e6);
  }

  // 4. GEMM
  if (!quick) {
    gemm_row<float>("GEMM 4096x512x8192 float: Eigen vs matmul");
    gemm_row<double>("GEMM 4096x512x8192 double: Eigen vs matmul");
  }
  std::printf("(ratio = baseline / reel: above 1 reel is faster; checksum %g)\n", sink);
  return 0;
}
