// Autograd on CUDA tensors vs the same computation on the CPU: fused elementwise backward
// (the device interpreter of autograd/ir_program.hpp), broadcasting and views, reductions,
// matmul, grad of grad, forward mode, and a few optimizer steps.
#include "common.cuh"

using namespace rt;
namespace fad = reel::autograd::forward_ad;

namespace {
// A copy of v on device D.
template <class D, class T>
Tensor<T, D> on(const Tensor<T, CPU>& v) {
  if constexpr (std::is_same_v<D, CPU>)
    return v.clone();
  else
    return v.template to_device<D>();
}
template <class T, class D>
Tensor<T, D> leaf(const Tensor<T, CPU>& v) {
  Tensor<T, D> t = on<D>(v);
  t.requires_grad_();
  return t;
}
template <class T, class D>
Tensor<T, CPU> to_host(const Tensor<T, D>& t) {
  if constexpr (std::is_same_v<D, CPU>)
    return t;
  else
    return t.template to_device<CPU>();
}
}  // namespace

TEST_CASE("cuda autograd: fused elementwise backward with broadcasting matches the CPU") {
  REQUIRE_GPU();
  auto x0 = host_randn<double>({17, 9}), w0 = host_randn<double>({9});
  auto run = [&]<class D>(D) {
    auto x = leaf<double, D>(x0), w = leaf<double, D>(w0);
    Tensor<double, D> y = sin(x) * exp(w) + x * x / 3.0 - tanh(w);
    sum(y).backward();
    return std::pair{to_host(x.grad()), to_host(w.grad())};
  };
  auto [gx, gw] = run(CUDA{});
  auto [cx, cw] = run(CPU{});
  CHECK_CLOSE_T(gx, cx, 1e-12, 1e-12);
  CHECK_CLOSE_T(gw, cw, 1e-12, 1e-12);
}

TEST_CASE("cuda autograd: views, non-contiguous inputs, mean and a second backward accumulate") {
  REQUIRE_GPU();
  auto a0 = host_randn<float>({8, 12});
  auto run = [&]<class D>(D) {
    auto a = leaf<float, D>(a0);
    Tensor<float, D> t = a.transpose(0, 1).slice(0, 2, 10);  // [8, 8], strided
    Tensor<float, D> y = t * t.transpose(0, 1) + 1.0f;
    mean(y).backward();
    Tensor<float, D> z = sum(a, {0}) * 2.0f;
    sum(z).backward();
    return to_host(a.grad());
  };
  CHECK_CLOSE_T(run(CUDA{}), run(CPU{}), 1e-6, 1e-5);
}

TEST_CASE("cuda autograd: grad of grad and forward-over-reverse match the CPU") {
  REQUIRE_GPU();
  auto x0 = host_randn<double>({300});
  auto run = [&]<class D>(D) {
    auto x = leaf<double, D>(x0);
    Tensor<double, D> f = sum(Tensor<double, D>(tanh(x) * tanh(x) * tanh(x)));
    auto g = autograd::grad({f}, {x}, {}, {.create_graph = true})[0];
    Tensor<double, D> h = sum(Tensor<double, D>(g * g));
    auto gg = autograd::grad({h}, {x})[0];
    return std::pair{to_host(g), to_host(gg)};
  };
  auto [g, gg] = run(CUDA{});
  auto [cg, cgg] = run(CPU{});
  CHECK_CLOSE_T(g, cg, 1e-12, 1e-12);
  CHECK_CLOSE_T(gg, cgg, 1e-12, 1e-11);

  auto fwd = [&]<class D>(D) {
    fad::dual_level level;
    Tensor<double, D> p = on<D>(x0);
    Tensor<double, D> v = full<double, D>(x0.sizes(), 1.0);
    auto x = fad::make_dual(p, v);
    Tensor<double, D> y = exp(x) * sin(x);
    return to_host(fad::unpack_dual(y).tangent);
  };
  CHECK_CLOSE_T(fwd(CUDA{}), fwd(CPU{}), 1e-12, 1e-12);
}

TEST_CASE("cuda autograd: vector mode (batched jvp, jacfwd, hessian by forward over reverse) matches the CPU") {
  REQUIRE_GPU();
  auto P0 = host_randn<double>({7, 3}), V0 = host_randn<double>({5, 7, 3});
  auto run = [&]<class D>(D) {
    using TD = Tensor<double, D>;
    namespace F = autograd::functional;
    auto energy = [](const TD& x) {  // a pair energy over [n, n, 3]: short rows, broadcasts
      TD d = x.unsqueeze(1) - x.unsqueeze(0);
      return TD(sum(exp(-sum(TD(d * d), Shape{2}))));
    };
    auto [out, tan] = F::jvp(energy, std::vector<TD>{on<D>(P0)}, std::vector<TD>{on<D>(V0)});
    TD J = F::jacfwd([](const TD& x) { return TD(exp(x) * x.sum()); }, on<D>(P0));
    TD H = F::hessian(energy, on<D>(P0));
    return std::vector{to_host(tan), to_host(J), to_host(H)};
  };
  auto g = run(CUDA{});
  auto c = run(CPU{});
  for (size_t k = 0; k < g.size(); ++k) CHECK_CLOSE_T(g[k], c[k], 1e-11, 1e-10);
}

TEST_CASE("cuda autograd: a two-layer network's gradients (matmul, broadcast bias, mean) match the CPU") {
  REQUIRE_GPU();
  auto X0 = host_randn<float>({64, 32}), Y0 = host_randn<float>({64, 8});
  auto W10 = host_randn<float>({32, 48}), b10 = host_randn<float>({48}), W20 = host_randn<float>({48, 8});
  auto run = [&]<class D>(D) {
    auto W1 = leaf<float, D>(W10), b1 = leaf<float, D>(b10), W2 = leaf<float, D>(W20);
    Tensor<float, D> X = on<D>(X0), Y = on<D>(Y0);
    Tensor<float, D> h = tanh(matmul(X, W1) + b1);
    Tensor<float, D> d = matmul(h, W2) - Y;
    mean(Tensor<float, D>(d * d)).backward();
    return std::vector{to_host(W1.grad()), to_host(b1.grad()), to_host(W2.grad())};
  };
  auto g = run(CUDA{});
  auto c = run(CPU{});
  for (size_t k = 0; k < g.size(); ++k) CHECK_CLOSE_T(g[k], c[k], 1e-5, 1e-4);
}

TEST_CASE("cuda autograd: activation checkpointing (full and selective) gives the unchecked gradients") {
  REQUIRE_GPU();
  auto X0 = host_randn<float>({64, 32}), W10 = host_randn<float>({32, 32}), W20 = host_randn<float>({32, 8});
  auto run = [&]<class D>(D, int mode) {
    auto W1 = leaf<float, D>(W10), W2 = leaf<float, D>(W20);
    Tensor<float, D> X = on<D>(X0);
    auto block = [&](const std::vector<Tensor<float, D>>& in) {
      return Tensor<float, D>(matmul(Tensor<float, D>(tanh(matmul(in[0], W1))), W2));
    };
    auto keep_matmul = [](const reel::OpCall& op) {
      return op.name() == "matmul" ? reel::CheckpointPolicy::MUST_SAVE : reel::CheckpointPolicy::PREFER_RECOMPUTE;
    };
    Tensor<float, D> y = mode == 0 ? block({X}) : mode == 1 ? reel::checkpoint(block, {X}) : reel::checkpoint(block, {X}, keep_matmul);
    mean(Tensor<float, D>(y * y)).backward();
    return std::vector{to_host(W1.grad()), to_host(W2.grad())};
  };
  auto c = run(CPU{}, 0);
  for (int mode = 0; mode < 3; ++mode) {
    auto g = run(CUDA{}, mode);
    for (size_t k = 0; k < g.size(); ++k) CHECK_CLOSE_T(g[k], c[k], 1e-5, 1e-4);
  }
}

TEST_CASE("cuda autograd: embedding (a gather) and its scatter-add backward match the CPU, repeated rows included") {
  REQUIRE_GPU();
  auto W0 = host_randn<float>({50, 16});
  auto ids = tensor<int64_t>({3, 7, 3, 49, 0, 3, 7, 12}).reshape({2, 4});
  auto run = [&]<class D>(D) {
    auto W = leaf<float, D>(W0);
    Tensor<float, D> e = nn::functional::embedding(on<D>(ids), W);
    Tensor<float, D> y = sum(Tensor<float, D>(tanh(e) * e));
    y.backward();
    return std::pair{to_host(e), to_host(W.grad())};
  };
  auto [ge, gw] = run(CUDA{});
  auto [ce, cw] = run(CPU{});
  CHECK_CLOSE_T(ge, ce, 0, 0);
  CHECK_CLOSE_T(gw, cw, 1e-6, 1e-5);
}

TEST_CASE("cuda autograd: ops compiled in two .cu files differentiate in one graph kernel (-rdc)") {
  REQUIRE_GPU();
  auto x0 = host_randn<double>({257});
  auto run = [&]<class D>(D) {
    auto x = leaf<double, D>(x0);
    Tensor<double, D> y = rt::second_file_expr(x);  // recorded by the other file's code (declared in common.cuh)
    Tensor<double, D> z = sum(Tensor<double, D>(sin(y) * x));
    auto g = autograd::grad({z}, {x}, {}, {.create_graph = true})[0];
    auto gg = autograd::grad({sum(Tensor<double, D>(g * g))}, {x})[0];  // the other file's ops, differentiated again
    return std::pair{to_host(g), to_host(gg)};
  };
  auto [g, gg] = run(CUDA{});
  auto [cg, cgg] = run(CPU{});
  CHECK_CLOSE_T(g, cg, 1e-12, 1e-11);
  CHECK_CLOSE_T(gg, cgg, 1e-11, 1e-10);
}

TEST_CASE("cuda autograd: the stack limit covers the graph kernel's frame and its callees") {
  REQUIRE_GPU();
  namespace dc = reel::detail::cuda;
  const size_t limit = dc::program_stack_limit();
  cudaFuncAttributes attr{};
  REQUIRE(cudaFuncGetAttributes(&attr, dc::ir_eval_kernel<0>) == cudaSuccess);
  MESSAGE("graph kernel: ", attr.localSizeBytes, " bytes of local memory per thread, ", attr.numRegs,
          " registers; stack limit ", limit, " bytes");
  CHECK(attr.localSizeBytes >= size_t(reel::detail::ir::kProgSlots) * reel::detail::ir::kSlotBytes);  // it does count the frame
  CHECK(limit >= attr.localSizeBytes + dc::kCalleeStack);
}

TEST_CASE("cuda autograd: complex CUDA tensors cannot require grad yet (a clear error)") {
  REQUIRE_GPU();
  auto z = empty<std::complex<float>, CUDA>({2});
  CHECK_THROWS_WITH_AS(z.requires_grad_(), doctest::Contains("floating point CUDA tensors"), type_error);
}
