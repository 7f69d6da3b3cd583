// Tensor handles, views, storage sharing, Meta tensors, printing.
#include <doctest/doctest.h>

#include <reel/reel.hpp>
#include <sstream>

using namespace reel;

template <class T>
static std::string str(const T& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

TEST_CASE("handles alias, views share storage") {
  auto a = tensor<float>({{1, 2, 3}, {4, 5, 6}});
  auto b = a;  // copying a handle aliases
  b.fill_(7);
  CHECK(a.to_vector() == std::vector<float>(6, 7));
  auto v = a.view({3, 2});
  CHECK(v.is_same_storage(a));
  CHECK(!a.clone().is_same_storage(a));
  CHECK(a.dim() == 2);
  CHECK(a.numel() == 6);
  CHECK(a.size(-1) == 3);
  CHECK(a.sizes() == Shape{2, 3});
  CHECK(a.strides() == Shape{3, 1});
}

TEST_CASE("views: select, slice, transpose, permute, expand, squeeze") {
  auto a = from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  CHECK(a[1].to_vector() == std::vector<int64_t>{4, 5, 6, 7});
  CHECK(a.select(1, -1).to_vector() == std::vector<int64_t>{3, 7, 11});
  auto s = a.slice(1, 1, 4, 2);
  CHECK(s.sizes() == Shape{3, 2});
  CHECK(s.to_vector() == std::vector<int64_t>{1, 3, 5, 7, 9, 11});
  CHECK(s.storage_offset() == 1);
  CHECK(!s.is_contiguous());
  auto t = a.transpose(0, 1);
  CHECK(t.sizes() == Shape{4, 3});
  CHECK(t.to_vector() == std::vector<int64_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(a.mT().to_vector() == t.to_vector());
  CHECK(a.reshape({2, 6}).permute({1, 0}).sizes() == Shape{6, 2});
  auto e = tensor<float>({1, 2}).unsqueeze(1).expand({2, 3});
  CHECK(e.strides() == Shape{1, 0});
  CHECK(e.to_vector() == std::vector<float>{1, 1, 1, 2, 2, 2});
  CHECK(e.unsqueeze(0).sizes() == Shape{1, 2, 3});
  CHECK(e.unsqueeze(0).squeeze(0).sizes() == Shape{2, 3});
  CHECK(a.flatten().sizes() == Shape{12});
  CHECK(a.reshape({3, 2, 2}).flatten(1).sizes() == Shape{3, 4});
  CHECK(a.view({-1}).sizes() == Shape{12});
  CHECK(a.reshape({2, -1}).sizes() == Shape{2, 6});
  CHECK(a.narrow(0, 1, 2).to_vector() == std::vector<int64_t>{4, 5, 6, 7, 8, 9, 10, 11});
}

TEST_CASE("view needs compatible strides, reshape copies when it must") {
  auto a = tensor<float>({{1, 2, 3}, {4, 5, 6}});
  auto t = a.transpose(0, 1);
  CHECK_THROWS_WITH_AS(t.view({6}), doctest::Contains("reshape"), error);
  auto r = t.reshape({6});
  CHECK(r.to_vector() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(!r.is_same_storage(a));
  CHECK(a.reshape({6}).is_same_storage(a));  // contiguous: no copy
}

TEST_CASE("bad dims and indices raise index_error, bad shapes value_error") {
  auto a = zeros<float>({2, 3});
  CHECK_THROWS_AS(a.size(2), index_error);
  CHECK_THROWS_AS(a.select(0, 2), index_error);
  CHECK_THROWS_AS(a.transpose(0, 5), index_error);
  CHECK_THROWS_AS(a.view({4}), value_error);
  CHECK_THROWS_AS(a.expand({3, 3}), value_error);
  CHECK_THROWS_AS(a.item(), value_error);
  CHECK_THROWS_AS(a.permute({0, 0}), value_error);
  CHECK_THROWS_AS(empty<float>({-1, 2}), value_error);
  CHECK_THROWS_WITH_AS((void)Tensor<float>(a + zeros<float>({4})), doctest::Contains("[2, 3]"), value_error);
  Tensor<float> undefined;
  CHECK_FALSE(undefined.defined());
  CHECK_THROWS_AS(undefined.numel(), error);
}

TEST_CASE("assignment rebinds, copy_ writes in place") {
  auto a = tensor<float>({1, 2});
  auto b = tensor<float>({3, 4});
  auto y = zeros<float>({2});
  auto alias = y;
  y = a * b + 1;  // rebinding: alias keeps the old storage
  CHECK(alias.to_vector() == std::vector<float>{0, 0});
  CHECK(y.to_vector() == std::vector<float>{4, 9});
  alias.copy_(a * b + 1);
  CHECK(alias.to_vector() == std::vector<float>{4, 9});
  uint64_t v0 = alias.version();
  alias.add_(a, 2.0f);
  CHECK(alias.version() > v0);
  CHECK(alias.to_vector() == std::vector<float>{6, 13});
  alias.mul_(2.0f).sub_(b);
  CHECK(alias.to_vector() == std::vector<float>{9, 22});
  alias.add_(1.0f).sub_(2.0f, 3.0f).div_(2.0f);
  CHECK(alias.to_vector() == std::vector<float>{2, 8.5});
  alias.sub_(b, 0.5f).add_(1.0f, 2.0f);
  CHECK(alias.to_vector() == std::vector<float>{2.5, 8.5});
  // writing into a strided view
  auto m = zeros<int32_t>({2, 3});
  m.select(1, 1).copy_(tensor<int32_t>({5, 6}));
  CHECK(m.to_vector() == std::vector<int32_t>{0, 5, 0, 0, 6, 0});
  m.transpose(0, 1).slice(0, 0, 1).fill_(-1);
  CHECK(m.to_vector() == std::vector<int32_t>{-1, 5, 0, -1, 6, 0});
  // broadcasting source
  m.copy_(tensor<int32_t>({1, 2, 3}));
  CHECK(m.to_vector() == std::vector<int32_t>{1, 2, 3, 1, 2, 3});
  CHECK_THROWS_AS(m.copy_(zeros<int32_t>({3, 3})), value_error);
}

TEST_CASE("copy_ from an overlapping view of itself is evaluated before writing") {
  auto a = arange<int64_t>(6);
  a.slice(0, 1, 6).copy_(a.slice(0, 0, 5) + 0);
  CHECK(a.to_vector() == std::vector<int64_t>{0, 0, 1, 2, 3, 4});
}

TEST_CASE("to<U>, clone, contiguous, item, scalar tensors") {
  auto a = tensor<double>({1.5, -2.5, 3.0});
  CHECK(a.to<int32_t>().to_vector() == std::vector<int32_t>{1, -2, 3});
  CHECK(a.to<half>().to<double>().to_vector() == std::vector<double>{1.5, -2.5, 3.0});
  CHECK(a.to<bool>().to_vector() == std::vector<bool>{true, true, true});
  CHECK(a.to<std::complex<float>>().to_vector()[1] == std::complex<float>(-2.5f, 0));
  auto s = scalar_tensor<float>(2.5f);
  CHECK(s.dim() == 0);
  CHECK(s.item() == 2.5f);
  auto t = a.unsqueeze(1).expand({3, 2}).transpose(0, 1);
  auto c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.to_vector() == std::vector<double>{1.5, -2.5, 3, 1.5, -2.5, 3});
}

TEST_CASE("printing follows PyTorch") {
  CHECK(str(tensor<float>({1, 2, 3})) == "tensor([1., 2., 3.])");
  CHECK(str(tensor<float>({1.5, -2.25})) == "tensor([ 1.5000, -2.2500])");
  CHECK(str(tensor<int64_t>({{1, 2}, {3, 4}})) == "tensor([[1, 2],\n        [3, 4]])");
  CHECK(str(tensor<int32_t>({1, 2})) == "tensor([1, 2], dtype=torch.int32)");
  CHECK(str(tensor<double>({0.5})) == "tensor([0.5000], dtype=torch.float64)");
  CHECK(str(tensor<bool>({true, false})) == "tensor([ True, False])");
  CHECK(str(scalar_tensor<float>(3)) == "tensor(3.)");
  CHECK(str(tensor<float>({1e-5, 1})) == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(str(empty<float>({0})) == "tensor([])");
  CHECK(str(empty<float, Meta>({2, 3})) == "tensor(..., device='meta', size=(2, 3))");
  CHECK(str(arange<float>(2000)).find("...") != std::string::npos);
  CHECK(str(tensor<float>({NAN, INFINITY, 1})) == "tensor([nan, inf, 1.])");
}

TEST_CASE("meta tensors: shapes, strides, storage identity, no data") {
  auto m = empty<float, Meta>({4, 5});
  CHECK(m.sizes() == Shape{4, 5});
  CHECK(m.strides() == Shape{5, 1});
  CHECK(m.is_meta());
  auto v = m.transpose(0, 1);
  CHECK(v.is_same_storage(m));
  CHECK_THROWS_WITH_AS(m.data_ptr(), doctest::Contains("meta"), error);
  CHECK_THROWS_AS(m.item(), error);
  CHECK_THROWS_AS(m.to_vector(), error);
  Tensor<float, Meta> e = m * 2 + m;  // expressions compute shapes only
  CHECK(e.sizes() == Shape{4, 5});
  CHECK(sum(m, {1}).sizes() == Shape{4});
  CHECK(matmul(m, v).sizes() == Shape{4, 4});
  CHECK(tensor<float>({1, 2}).to_device<Meta>().sizes() == Shape{2});
}

TEST_CASE("64-bit sizes: meta tensors beyond 2^31 and 2^32 elements") {
  const int64_t big = (int64_t(1) << 32) + 3;
  auto m = empty<half, Meta>({big});
  CHECK(m.numel() == big);
  auto s = m.slice(0, int64_t(1) << 31, big, 2);
  CHECK(s.size(0) == (big - (int64_t(1) << 31) + 1) / 2);
  CHECK(s.storage_offset() == int64_t(1) << 31);
  auto r = empty<float, Meta>({int64_t(1) << 17, int64_t(1) << 17});  // 2^34 elements
  CHECK(r.numel() == int64_t(1) << 34);
  CHECK(r.strides() == Shape{int64_t(1) << 17, 1});
  auto rv = r.view({-1});
  CHECK(rv.size(0) == int64_t(1) << 34);
  CHECK(r.transpose(0, 1).reshape({-1}).numel() == int64_t(1) << 34);
  CHECK(linspace<half, Meta>(0, 1, big).numel() == big);
  CHECK(arange<bfloat16, Meta>(int64_t(0), big, int64_t(1)).numel() == big);
  // the offset math itself
  Shape sizes{int64_t(1) << 17, int64_t(1) << 17}, strides{1, int64_t(1) << 17};
  int64_t idx = (int64_t(1) << 34) - 2;  // row 2^17-1, col 2^17-2
  CHECK(detail::linear_to_offset(idx, sizes, strides) == ((int64_t(1) << 17) - 1) + ((int64_t(1) << 17) - 2) * (int64_t(1) << 17));
  CHECK_THROWS_AS((empty<float, Meta>({int64_t(1) << 62, 8})), value_error);  // element count overflows
}

TEST_CASE("float8 tensors: non-saturating and saturating casts") {
  auto x = tensor<float>({1.0, 448.0, 500.0, -1e6, NAN});
  auto a = x.to<float8_e4m3fn>().to<float>().to_vector();
  CHECK(a[0] == 1);
  CHECK(a[1] == 448);
  CHECK(std::isnan(a[2]));  // e4m3fn has no infinity: overflow is NaN
  CHECK(std::isnan(a[3]));
  CHECK(std::isnan(a[4]));
  auto s = Tensor<float8_e4m3fn>(saturating_cast<float8_e4m3fn>(x)).to<float>().to_vector();
  CHECK(s[2] == 448);
  CHECK(s[3] == -448);
  CHECK(std::isnan(s[4]));
  auto e = Tensor<float8_e5m2>(saturating_cast<float8_e5m2>(tensor<double>({1e6, 3.0}))).to<double>().to_vector();
  CHECK(e == std::vector<double>{57344, 3});
  CHECK(std::isinf(tensor<double>({1e6}).to<float8_e5m2>().to<double>().item()));
}

TEST_CASE("the caching allocator recycles large blocks") {
  const void* p1;
  {
    auto big = empty<float>({1 << 20});
    p1 = big.data_ptr();
  }
  auto again = empty<float>({1 << 20});
  CHECK(again.data_ptr() == p1);
  empty_cache();
}
