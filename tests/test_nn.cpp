// cross_entropy against PyTorch (tests/reference/training_reference.py), every option
// combination; the nn building blocks against closed forms; one check_ad line per
// differentiable op (cross_entropy, linear_cross_entropy, embedding, layer_norm, rms_norm, silu).
#include <doctest/doctest.h>

#include <reel/reel.hpp>

#include "reference/training_reference.hpp"

using namespace reel;
namespace F = nn::functional;
using Td = Tensor<double>;
using V = std::vector<Td>;
using autograd::check_ad;

namespace {
void expect_close(const Td& got, const std::vector<double>& want, double tol = 1e-12) {
  auto v = got.contiguous().to_vector();
  REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(want[i]))
      CHECK(std::isnan(v[i]));
    else
      CHECK(v[i] == doctest::Approx(want[i]).epsilon(tol).scale(1));
  }
}
F::Reduction reduction_of(int r) { return r == 0 ? F::Reduction::None : r == 1 ? F::Reduction::Mean : F::Reduction::Sum; }
}  // namespace

TEST_CASE("cross_entropy: every option combination equals PyTorch") {
  Td X0 = from_vector<double>(reel_ref::ce_logits, {5, 4});
  Td w = from_vector<double>(reel_ref::ce_weight, {4});
  for (const auto& c : reel_ref::ce_cases) {
    CAPTURE(c.name);
    Td X = X0.clone().requires_grad_();
    F::CrossEntropyOptions<double> o;
    if (c.weighted) o.weight = w;
    o.ignore_index = c.ignore_index;
    o.reduction = reduction_of(c.reduction);
    o.label_smoothing = c.label_smoothing;
    Td loss;
    if (c.soft) {
      loss = F::cross_entropy(X, from_vector<double>(reel_ref::ce_soft_target, {5, 4}), o);
    } else {
      const auto& tv = c.target_set == 0 ? reel_ref::ce_hard_target
                       : c.target_set == 1 ? reel_ref::ce_hard_target2
                                           : reel_ref::ce_all_ignored_target;
      loss = F::cross_entropy(X, from_vector<int64_t>(std::vector<int64_t>(tv.begin(), tv.end()), {5}), o);
    }
    expect_close(loss, c.loss);
    Td(sum(loss)).backward();
    expect_close(X.grad(), c.grad);
  }
}

TEST_CASE("cross_entropy: [N, C, d1] inputs equal PyTorch") {
  for (const auto& c : reel_ref::ce_kdim_cases) {
    CAPTURE(c.name);
    Td X = from_vector<double>(c.logits, {2, 3, 2}).requires_grad_();
    auto y = from_vector<int64_t>(std::vector<int64_t>(c.target.begin(), c.target.end()), {2, 2});
    F::CrossEntropyOptions<double> o;
    o.label_smoothing = c.label_smoothing;
    Td loss = F::cross_entropy(X, y, o);
    expect_close(loss, c.loss);
    loss.backward();
    expect_close(X.grad(), c.grad);
  }
}

TEST_CASE("cross_entropy: closed forms, unbatched input, bad input") {
  // two classes, logits [0, log 3]: p = [1/4, 3/4]; target 1 -> -log(3/4)
  Td x = tensor<double>({{0.0, std::log(3.0)}});
  CHECK(F::cross_entropy(x, tensor<int64_t>({1})).item() == doctest::Approx(-std::log(0.75)));
  CHECK(F::cross_entropy(x.reshape({2}), full<int64_t>({}, 0)).item() == doctest::Approx(-std::log(0.25)));
  // int32 targets work like int64 ones
  CHECK(F::cross_entropy(x, tensor<int32_t>({1})).item() == doctest::Approx(-std::log(0.75)));
  CHECK_THROWS_WITH_AS(F::cross_entropy(x, tensor<int64_t>({2})), doctest::Contains("Target 2 is out of bounds"), index_error);
  CHECK_THROWS_WITH_AS(F::cross_entropy(x, tensor<int64_t>({0, 1})), doctest::Contains("expected target of shape [1]"),
                       value_error);
  CHECK_THROWS_AS(F::cross_entropy(x, tensor<double>({0.5, 0.5})), value_error);
  F::CrossEntropyOptions<double> bad;
  bad.label_smoothing = 1.5;
  CHECK_THROWS_AS(F::cross_entropy(x, tensor<int64_t>({1}), bad), value_error);
  bad.label_smoothing = 0;
  bad.weight = ones<double>({3});
  CHECK_THROWS_WITH_AS(F::cross_entropy(x, tensor<int64_t>({1}), bad), doctest::Contains("1-D tensor of size 2"), value_error);
  // empty batch: mean is NaN, sum is 0
  Td e = zeros<double>({0, 3});
  CHECK(std::isnan(F::cross_entropy(e, zeros<int64_t>({0})).item()));
  CHECK(F::cross_entropy(e, zeros<int64_t>({0}), {.reduction = F::Reduction::Sum}).item() == 0);
}

TEST_CASE("check_ad: cross_entropy and linear_cross_entropy, hard and soft targets") {
  Generator g(5);
  Td X = randn<double>({3, 4}, g), P = F::softmax(randn<double>({3, 4}, g), 1), w = tensor<double>({0.5, 1.0, 2.0, 0.25});
  auto y = tensor<int64_t>({2, -100, 0});
  check_ad([&](const V& v) { return F::cross_entropy(v[0], y, {.weight = w, .label_smoothing = 0.1}); }, V{X});
  check_ad([&](const V& v) { return F::cross_entropy(v[0], y, {.reduction = F::Reduction::None}); }, V{X});
  check_ad([&](const V& v) { return F::cross_entropy(v[0], v[1], {.weight = w, .label_smoothing = 0.2}); }, V{X, P});
  Td H = randn<double>({3, 2}, g), W = randn<double>({4, 2}, g), b = randn<double>({4}, g);
  check_ad([&](const V& v) { return F::linear_cross_entropy(v[0], v[1], y, {.bias = v[2], .label_smoothing = 0.1}); },
           V{H, W, b});
  check_ad([&](const V& v) {
    return F::linear_cross_entropy(v[0], v[1], P, {.reduction = F::Reduction::None, .chunk_size = 2});
  }, V{H, W});
}

TEST_CASE("check_ad: embedding, layer_norm, rms_norm, silu") {
  Generator g(6);
  Td E = randn<double>({5, 3}, g), x = randn<double>({2, 3}, g), w = randn<double>({3}, g), b = randn<double>({3}, g);
  auto idx = tensor<int64_t>({{4, 0}, {4, 2}});
  check_ad([&](const V& v) { return F::embedding(idx, v[0]); }, V{E});
  check_ad([&](const V& v) { return F::layer_norm(v[0], {3}, v[1], v[2]); }, V{x, w, b});
  check_ad([&](const V& v) { return F::layer_norm(v[0], {2, 3}); }, V{x});
  check_ad([&](const V& v) { return F::rms_norm(v[0], {3}, v[1], 1e-6); }, V{x, w});
  check_ad([&](const V& v) { return F::silu(v[0]); }, V{x});
}

TEST_CASE("nn: embedding, layer_norm and rms_norm values") {
  Td E = tensor<double>({{1.0, 2.0}, {3.0, 4.0}, {5.0, 6.0}});
  auto r = F::embedding(tensor<int32_t>({{2, 0}}), E);
  CHECK(r.sizes() == Shape{1, 2, 2});
  CHECK(r.to_vector() == std::vector<double>{5, 6, 1, 2});
  CHECK_THROWS_WITH_AS(F::embedding(tensor<int64_t>({3}), E), doctest::Contains("index 3 is out of range"), index_error);
  // layer_norm of [1, 2, 3]: mean 2, biased var 2/3
  Td x = tensor<double>({1.0, 2.0, 3.0});
  auto ln = F::layer_norm(x, {3}, Td(), Td(), 0.0).to_vector();
  CHECK(ln[0] == doctest::Approx(-1 / std::sqrt(2.0 / 3)));
  CHECK(ln[1] == doctest::Approx(0.0));
  // rms_norm of [3, 4]: rms = sqrt(12.5)
  auto rn = F::rms_norm(tensor<double>({3.0, 4.0}), {2}, tensor<double>({1.0, 2.0}), 0.0).to_vector();
  CHECK(rn[0] == doctest::Approx(3 / std::sqrt(12.5)));
  CHECK(rn[1] == doctest::Approx(8 / std::sqrt(12.5)));
  CHECK_THROWS_AS(F::layer_norm(x, {2}), value_error);
}

namespace {
struct Block : nn::Module<double> {
  nn::RMSNorm<double> norm;
  nn::Linear<double> up, down;
  Block(int64_t d, Generator& g) : norm({d}), up(d, 2 * d, g), down(2 * d, d, g, false) {
    register_module("norm", norm);
    register_module("up", up);
    register_module("down", down);
  }
  Td operator()(const Td& x) const { return Td(x + down(F::gelu(up(norm(x))))); }
};
}  // namespace

TEST_CASE("nn: state_dict shares the parameters; load_state_dict copies in place, converts floats, reports keys") {
  Generator g(11);
  Block a(4, g), b(4, g);
  StateDict sd = a.state_dict();
  CHECK(sd.keys() == std::vector<std::string>{"norm.weight", "up.weight", "up.bias", "down.weight"});
  CHECK(sd.at("up.weight").is_same_storage(AnyTensor(a.up.weight)));
  Td x = randn<double>({3, 4}, g);
  CHECK(a(x).to_vector() != b(x).to_vector());
  auto params_before = b.parameters();
  optim::SGD opt(b.parameters(), optim::SGDOptions().lr(0.1));
  auto r = b.load_state_dict(sd);
  CHECK(r.missing_keys.empty());
  CHECK(r.unexpected_keys.empty());
  CHECK(a(x).to_vector() == b(x).to_vector());
  CHECK(b.up.weight.is_same_storage(params_before[1]));  // in place: the optimizer's tensors
  CHECK(b.up.weight.requires_grad());
  CHECK_FALSE(b.up.weight.is_same_storage(a.up.weight));  // copied, not aliased
  // a float32 state dict (a checkpoint in another precision) converts as copy_ does
  StateDict f32;
  for (const auto& [n, t] : sd) f32[n] = AnyTensor(t.as<double>().to<float>());
  Block c(4, g);
  c.load_state_dict(f32);
  CHECK(c.up.weight.to_vector() == a.up.weight.to<float>().to<double>().to_vector());
  // strict: every missing and unexpected key named, nothing copied
  StateDict partial = sd;
  partial.erase("up.bias");
  partial["extra"] = AnyTensor(zeros<double>({1}));
  Block d(4, g);
  const Td d_up = d.up.weight.clone();
  CHECK_THROWS_WITH_AS(d.load_state_dict(partial),
                       doctest::Contains("Missing key(s) in state_dict: \"up.bias\". Unexpected key(s) in state_dict: \"extra\"."),
                       value_error);
  CHECK(d.up.weight.to_vector() == d_up.to_vector());
  auto lenient = d.load_state_dict(partial, false);
  CHECK(lenient.missing_keys == std::vector<std::string>{"up.bias"});
  CHECK(lenient.unexpected_keys == std::vector<std::string>{"extra"});
  CHECK(d.up.weight.to_vector() == a.up.weight.to_vector());
  StateDict wrong = sd;
  wrong["up.weight"] = AnyTensor(zeros<double>({4, 8}));
  CHECK_THROWS_WITH_AS(d.load_state_dict(wrong), doctest::Contains("size mismatch for up.weight: copying a param with shape [4, 8]"),
                       value_error);
  wrong["up.weight"] = AnyTensor(zeros<int64_t>({8, 4}));
  CHECK_THROWS_WITH_AS(d.load_state_dict(wrong), doctest::Contains("is torch.int64 in the state dict and torch.float64"),
                       type_error);
}

TEST_CASE("nn: modules list parameters in registration order and survive moves") {
  Generator g(7);
  std::vector<Block> blocks;
  blocks.emplace_back(4, g);
  blocks.emplace_back(4, g);  // (moves the first block)
  auto named = blocks[0].named_parameters();
  std::vector<std::string> names;
  for (auto& [n, p] : named) names.push_back(n);
  CHECK(names == std::vector<std::string>{"norm.weight", "up.weight", "up.bias", "down.weight"});
  CHECK(named[1].second.sizes() == Shape{8, 4});
  CHECK(named[1].second.is_same_storage(blocks[0].up.weight));
  for (auto& p : blocks[0].parameters()) CHECK(p.requires_grad());
  // PyTorch's Linear init bound: 1 / sqrt(in_features)
  CHECK(amax(abs(blocks[0].up.weight)).item() <= 0.5);
  Td x = randn<double>({3, 4}, g);
  Td y = blocks[1](blocks[0](x));
  Td(sum(y * y)).backward();
  CHECK(blocks[0].up.weight.grad().defined());
  CHECK(blocks[0].norm.weight.grad().sizes() == Shape{4});
  nn::Embedding<double> emb(10, 3, g);
  CHECK(emb(tensor<int64_t>({1, 2})).sizes() == Shape{2, 3});
  nn::LayerNorm<double> ln({3});
  CHECK(ln.named_parameters().size() == 2);
  CHECK(nn::SiLU{}(tensor<double>({0.0})).item() == 0.0);
}
