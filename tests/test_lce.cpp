// The fused linear_cross_entropy against the unfused cross_entropy(linear(...)): loss and
// every gradient, for every option combination, in float (1e-5 relative) and double (1e-12),
// incl. N not divisible by the chunk, ignored rows, all rows ignored, V = 1, N = 0 and
// leading batch dims; and the memory it holds.
#include <doctest/doctest.h>

#include <reel/reel.hpp>

using namespace reel;
namespace F = nn::functional;

namespace {
// max |a - b| <= tol * max |b| (relative to the tensor's scale), NaN where b is NaN.
template <class T>
void expect_rel(const Tensor<T>& a, const Tensor<T>& b, double tol) {
  REQUIRE(a.sizes() == b.sizes());
  auto av = a.contiguous().to_vector(), bv = b.contiguous().to_vector();
  double scale = 0, err = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    if (std::isnan(static_cast<double>(bv[i]))) {
      CHECK(std::isnan(static_cast<double>(av[i])));
      continue;
    }
    scale = std::max(scale, std::abs(static_cast<double>(bv[i])));
    err = std::max(err, std::abs(static_cast<double>(av[i]) - static_cast<double>(bv[i])));
  }
  CHECK(err <= tol * std::max(scale, 1e-3));  // (an exact zero, e.g. V = 1, compares at 1e-3 scale)
}

struct Case {
  bool soft, bias, ignore_some, ignore_all;
  F::Reduction red;
  double eps;
  int64_t chunk;
};

template <class T>
void compare(const Case& c, Shape lead, int64_t D, int64_t V, uint64_t seed, double tol) {
  Generator g(seed);
  Shape hs = lead;
  hs.push_back(D);
  Tensor<T> H0 = randn<T>(hs, g), W0 = Tensor<T>(randn<T>({V, D}, g) * 0.5), b0 = randn<T>({V}, g);
  int64_t N = detail::numel_of(lead);
  auto y = randint<int64_t>(0, V, lead, g);
  if (c.ignore_some || c.ignore_all) {
    auto yf = y.reshape({N});
    for (int64_t n = 0; n < N; ++n)
      if (c.ignore_all || n % 3 == 1) yf.data_ptr()[n] = 7 == V ? -1 : -100;
  }
  Shape ts = lead;
  ts.push_back(V);
  Tensor<T> P = F::softmax(randn<T>(ts, g), -1);
  int64_t ignore = 7 == V ? -1 : -100;
  Tensor<T> go = c.red == F::Reduction::None ? Tensor<T>(rand<T>(lead, g) + T(0.5)) : full<T>({}, T(1.7));

  auto run = [&](bool fused) {
    Tensor<T> H = H0.clone().requires_grad_(), W = W0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    Tensor<T> loss;
    if (fused) {
      F::LinearCrossEntropyOptions<T> o{.ignore_index = ignore, .reduction = c.red, .label_smoothing = c.eps, .chunk_size = c.chunk};
      if (c.bias) o.bias = b;
      loss = c.soft ? F::linear_cross_entropy(H, W, P, o) : F::linear_cross_entropy(H, W, y, o);
    } else {
      // cross_entropy wants the classes in dim 1: flatten the leading dims
      Tensor<T> Z = F::linear(H.reshape({N, D}), W, c.bias ? b : Tensor<T>());
      F::CrossEntropyOptions<T> o{.ignore_index = ignore, .reduction = c.red, .label_smoothing = c.eps};
      loss = c.soft ? F::cross_entropy(Z, P.reshape({N, V}), o) : F::cross_entropy(Z, y.reshape({N}), o);
      if (c.red == F::Reduction::None) loss = loss.reshape(lead);
    }
    auto grads = autograd::grad({loss}, {H, W, b}, {go}, {.allow_unused = true});
    return std::make_tuple(loss, grads);
  };
  auto [lf, gf] = run(true);
  auto [lu, gu] = run(false);
  expect_rel(lf, lu, tol);
  expect_rel(gf[0], gu[0], tol);
  expect_rel(gf[1], gu[1], tol);
  if (c.bias) expect_rel(gf[2], gu[2], tol);
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (bool soft : {false, true})
    for (F::Reduction red : {F::Reduction::None, F::Reduction::Mean, F::Reduction::Sum})
      for (double eps : {0.0, 0.1})
        for (bool bias : {false, true})
          for (int64_t chunk : {int64_t(0), int64_t(3)})
            for (bool ig : {false, true}) {
              if (soft && ig) continue;  // (ignore_index does not apply to probabilities)
              out.push_back({soft, bias, ig, false, red, eps, chunk});
            }
  return out;
}
}  // namespace

template <class T>
void every_option(uint64_t seed, Shape lead, int64_t D, int64_t V, double tol) {
  for (const auto& c : all_cases()) {
    CAPTURE(c.soft);
    CAPTURE(int(c.red));
    CAPTURE(c.eps);
    CAPTURE(c.bias);
    CAPTURE(c.chunk);
    CAPTURE(c.ignore_some);
    compare<T>(c, lead, D, V, seed++, tol);
  }
}

TEST_CASE("linear_cross_entropy equals cross_entropy(linear(...)): every option, double") {
  every_option<double>(10, {10}, 5, 9, 1e-12);
}

TEST_CASE("linear_cross_entropy equals cross_entropy(linear(...)): every option, float") {
  every_option<float>(100, {37}, 16, 50, 1e-5);
}

TEST_CASE("linear_cross_entropy: leading batch dims, all rows ignored, V = 1, N = 0, chunk of 1") {
  for (auto red : {F::Reduction::None, F::Reduction::Mean, F::Reduction::Sum}) {
    CAPTURE(int(red));
    compare<double>({false, true, true, false, red, 0.1, 4}, {2, 5}, 3, 7, 1, 1e-12);  // [B, S, D], ignore_index -1
    compare<double>({true, true, false, false, red, 0.2, 0}, {2, 5}, 3, 6, 2, 1e-12);
    compare<double>({false, true, false, true, red, 0.0, 2}, {4}, 3, 5, 3, 1e-12);      // all ignored
    compare<double>({false, true, false, false, red, 0.3, 0}, {6}, 3, 1, 4, 1e-12);     // V = 1
    compare<double>({true, false, false, false, red, 0.0, 0}, {6}, 3, 1, 5, 1e-12);
    compare<double>({false, true, false, false, red, 0.1, 1}, {5}, 3, 4, 6, 1e-12);     // chunk 1
    compare<double>({false, true, false, false, red, 0.0, 0}, {0}, 3, 4, 7, 1e-12);     // N = 0
    compare<double>({true, false, false, false, red, 0.0, 0}, {0}, 3, 4, 8, 1e-12);
  }
  // all ignored, mean: NaN as in PyTorch; gradients are zeros
  Tensor<double> H = ones<double>({3, 2}).requires_grad_(), W = ones<double>({4, 2});
  auto l = F::linear_cross_entropy(H, W, full<int64_t>({3}, -100));
  CHECK(std::isnan(l.item()));
  l.backward();
  CHECK(H.grad().to_vector() == std::vector<double>(6, 0.0));
}

TEST_CASE("linear_cross_entropy: closed form and bad input") {
  // D = 1, W = [[0], [log 3]]: logits [0, log 3] for hidden 1; target 1 -> -log(3/4)
  Tensor<double> H = ones<double>({1, 1}), W = tensor<double>({{0.0}, {std::log(3.0)}});
  CHECK(F::linear_cross_entropy(H, W, tensor<int64_t>({1})).item() == doctest::Approx(-std::log(0.75)));
  CHECK_THROWS_WITH_AS(F::linear_cross_entropy(H, W, tensor<int64_t>({2})), doctest::Contains("Target 2 is out of bounds"),
                       index_error);
  CHECK_THROWS_WITH_AS(F::linear_cross_entropy(H, ones<double>({2, 3}), tensor<int64_t>({1})),
                       doctest::Contains("hidden has 1 features"), value_error);
  CHECK_THROWS_WITH_AS(F::linear_cross_entropy(H, W, tensor<int64_t>({1, 0})), doctest::Contains("expected target of shape [1]"),
                       value_error);
  CHECK_THROWS_AS(F::linear_cross_entropy(H, W, tensor<int64_t>({1}), {.bias = ones<double>({3})}), value_error);
  CHECK_THROWS_AS(F::linear_cross_entropy(H, W, tensor<int64_t>({1}), {.chunk_size = -1}), value_error);
  Tensor<double> P = tensor<double>({{0.5, 0.5}}).requires_grad_();
  CHECK_THROWS_AS(F::linear_cross_entropy(H, W, P), not_implemented_error);
  // shapes only on Meta
  auto m = F::linear_cross_entropy(empty<float, Meta>({2, 8, 4}), empty<float, Meta>({100, 4}), empty<int64_t, Meta>({2, 8}),
                                   {.reduction = F::Reduction::None});
  CHECK(m.sizes() == Shape{2, 8});
}

TEST_CASE("linear_cross_entropy never holds the [N, V] logits") {
  const int64_t N = 512, D = 16, V = 2000, chunk = 32;
  Generator g(9);
  Tensor<float> H = randn<float>({N, D}, g).requires_grad_(), W = randn<float>({V, D}, g).requires_grad_();
  auto y = randint<int64_t>(0, V, {N}, g);
  for (auto red : {F::Reduction::Mean, F::Reduction::None}) {
    empty_cache();
    int64_t base = memory_allocated();
    reset_peak_memory_stats();
    auto loss = F::linear_cross_entropy(H, W, y, {.reduction = red, .chunk_size = chunk});
    auto gr = autograd::grad({Tensor<float>(sum(loss))}, {H, W});
    int64_t extra = max_memory_allocated() - base;
    // chunk buffer + dW (+ dX, grads, small vectors): well under one [N, V] float matrix
    int64_t bound = (chunk * V + 2 * V * D + 3 * N * D + 4 * N) * 4 + (int64_t(1) << 16);
    CHECK(extra <= bound);
    CHECK(extra < N * V * 4 / 4);
  }
}

TEST_CASE("linear_cross_entropy: a second backward through the same graph gives the same gradients") {
  Generator g(11);
  Tensor<double> H = randn<double>({6, 3}, g).requires_grad_(), W = randn<double>({5, 3}, g).requires_grad_();
  auto y = randint<int64_t>(0, 5, {6}, g);
  for (auto red : {F::Reduction::Mean, F::Reduction::Sum, F::Reduction::None}) {
    auto loss = F::linear_cross_entropy(H, W, y, {.reduction = red, .chunk_size = 4});
    Tensor<double> go = red == F::Reduction::None ? full<double>({6}, 0.5) : full<double>({}, 0.5);
    auto first = autograd::grad({loss}, {H, W}, {go}, {.retain_graph = true});
    auto second = autograd::grad({loss}, {H, W}, {go});
    CHECK(first[0].to_vector() == second[0].to_vector());
    for (size_t k = 0; k < first[1].to_vector().size(); ++k)
      CHECK(first[1].to_vector()[k] == doctest::Approx(second[1].to_vector()[k]).epsilon(1e-14));
  }
}

TEST_CASE("options declared without an element type take the call's (CrossEntropyOptions, LinearCrossEntropyOptions)") {
  Tensor<double> H = tensor<double>({{0.3, -0.2}, {1.1, 0.4}, {-0.5, 0.9}});
  Tensor<double> W = tensor<double>({{0.2, -0.1}, {0.7, 0.3}, {-0.4, 0.5}});
  auto y = tensor<int64_t>({2, 0, 1});
  F::LinearCrossEntropyOptions o;  // no element type: used with double tensors below
  o.reduction = F::Reduction::None;
  auto typed = F::linear_cross_entropy(H, W, y, F::LinearCrossEntropyOptions<double>{.reduction = F::Reduction::None});
  CHECK(F::linear_cross_entropy(H, W, y, o).to_vector() == typed.to_vector());
  auto b = tensor<double>({0.1, -0.2, 0.3});
  o.bias = b;
  expect_rel(F::linear_cross_entropy(H, W, y, o),
             F::cross_entropy(Tensor<double>(matmul(H, W.mT()) + b), y, F::CrossEntropyOptions<double>{.reduction = F::Reduction::None}),
             1e-12);
  // the same object with float tensors, once its double bias is gone
  o.bias = {};
  auto Hf = H.to<float>(), Wf = W.to<float>();
  CHECK(F::linear_cross_entropy(Hf, Wf, y, o).sizes() == Shape{3});
  o.bias = b.to<float>();
  CHECK_THROWS_WITH_AS(F::linear_cross_entropy(H, W, y, o), doctest::Contains("LinearCrossEntropyOptions::bias holds"), type_error);

  F::CrossEntropyOptions c;
  c.weight = tensor<double>({1.0, 2.0, 0.5});
  c.label_smoothing = 0.1;
  auto logits = Tensor<double>(matmul(H, W.mT()));
  CHECK(F::cross_entropy(logits, y, c).item() ==
        F::cross_entropy(logits, y, F::CrossEntropyOptions<double>{.weight = c.weight.as<double>(), .label_smoothing = 0.1}).item());
  auto probs = Tensor<double>(F::softmax(Tensor<double>(logits * 0.5), 1));
  CHECK(F::cross_entropy(logits, probs, c).item() ==
        F::cross_entropy(logits, probs, F::CrossEntropyOptions<double>{.weight = c.weight.as<double>(), .label_smoothing = 0.1}).item());
  CHECK_THROWS_AS(F::cross_entropy(logits.to<float>(), y, c), type_error);
}
