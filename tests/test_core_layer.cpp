// The core and the evaluator on their own: tensors, views, expressions, in-place writes and
// printing, compiled with REEL_NO_AUTOGRAD from headers that include nothing of autograd
// (DESIGN.md §1: dependencies point down; the engine offers a hook that autograd installs).
// tests/layers/run.cmake checks this file's include list, and that without REEL_NO_AUTOGRAD
// and without autograd a recorded op does not compile.
#include <doctest/doctest.h>

#include <reel/core/tensor.hpp>
#include <reel/ops/factories.hpp>
#include <sstream>

using namespace reel;

using V = std::vector<double>;

TEST_CASE("core layer: expressions broadcast and evaluate without autograd") {
  auto a = tensor<double>({{1, 2, 3}, {4, 5, 6}});
  auto b = tensor<double>({10, 20, 30});
  Tensor<double> c = a * b + 1.0;
  CHECK(c.sizes() == Shape{2, 3});
  CHECK(c.to_vector() == V{11, 41, 91, 41, 101, 181});
  Tensor<double> e = exp(a - a) * sqrt(b * b);  // exp(0) * |b|
  CHECK(e.to_vector() == V{10, 20, 30, 10, 20, 30});
  Tensor<float> f = c.to<float>();
  CHECK(f.to_vector() == std::vector<float>{11, 41, 91, 41, 101, 181});
  Tensor<float> q = tensor<int64_t>({7, -7}) / tensor<int64_t>({2, 2});  // true division, as in PyTorch
  CHECK(q.to_vector() == std::vector<float>{3.5f, -3.5f});
}

TEST_CASE("core layer: views share storage and evaluate through their strides") {
  auto a = tensor<double>({{1, 2, 3}, {4, 5, 6}});
  CHECK(a.select(1, 2).to_vector() == V{3, 6});
  CHECK(a.t().contiguous().to_vector() == V{1, 4, 2, 5, 3, 6});
  CHECK(a.slice(1, 0, 3, 2).to_vector() == V{1, 3, 4, 6});
  CHECK(a.view({3, 2}).to_vector() == V{1, 2, 3, 4, 5, 6});
  CHECK(a.unsqueeze(0).expand({2, 2, 3}).contiguous().to_vector() == V{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6});
  CHECK(a.as_strided({2, 2}, {1, 3}, 1).to_vector() == V{2, 5, 3, 6});
  auto row = a[1];
  row.fill_(0);  // writes through the view
  CHECK(a.to_vector() == V{1, 2, 3, 0, 0, 0});
  CHECK(row.is_same_storage(a));
  CHECK(!a.clone().is_same_storage(a));
}

TEST_CASE("core layer: in-place writes bump the version and handle overlap") {
  auto a = tensor<double>({1, 2, 3, 4});
  const uint64_t v0 = a.version();
  a.mul_(2.0).add_(tensor<double>({1, 1, 1, 1}), 0.5);
  CHECK(a.to_vector() == V{2.5, 4.5, 6.5, 8.5});
  CHECK(a.version() > v0);
  // The source overlaps the destination shifted by one: it is read before it is written.
  auto x = tensor<double>({1, 2, 3, 4});
  x.slice(0, 1, 4).copy_(x.slice(0, 0, 3));
  CHECK(x.to_vector() == V{1, 1, 2, 3});
  auto y = tensor<double>({1, 2, 3, 4});
  y.slice(0, 1, 4).add_(y.slice(0, 0, 3));  // y[i] += y[i - 1], all read before any write
  CHECK(y.to_vector() == V{1, 3, 5, 7});
  CHECK_THROWS_AS(x.copy_(tensor<double>({1, 2})), value_error);
}

TEST_CASE("core layer: meta tensors and printing") {
  auto m = empty<float, Meta>({1000, 1000});
  CHECK(m.numel() == 1000000);
  Tensor<float, Meta> n = m * 2.0f + m;  // shapes only
  CHECK(n.sizes() == Shape{1000, 1000});
  CHECK_THROWS_AS(m.data_ptr(), error);
  std::ostringstream os;
  os << tensor<int32_t>({1, 2});
  CHECK(os.str().find("1") != std::string::npos);
  CHECK(os.str().find("2") != std::string::npos);
}
