// asarray over foreign buffers: the declared PEP 3118 format decides the dtype.
#include <doctest/doctest.h>

#include <reel/reel.hpp>

using namespace reel;

TEST_CASE("native buffers are viewed without copying, in the declared dtype") {
  int16_t data[6] = {1, -2, 3, -4, 5, -6};
  BufferInfo b{data, 2, "h", {2, 3}, {}, false};
  AnyTensor a = asarray(b);
  CHECK(a.dtype() == ScalarType::Int16);
  auto t = a.as<int16_t>();
  CHECK(t.sizes() == Shape{2, 3});
  CHECK(t.to_vector() == std::vector<int16_t>{1, -2, 3, -4, 5, -6});
  t.select(1, 0).fill_(9);  // aliases the buffer
  CHECK(data[0] == 9);
  CHECK(data[3] == 9);
  // byte strides: every other column, as numpy's a[:, ::2]
  BufferInfo s{data, 2, "<h", {2, 2}, {6, 4}, false};
  CHECK(asarray<int16_t>(s).to_vector() == std::vector<int16_t>{9, 3, 9, -6});
  double d[2] = {1.5, 2.5};
  CHECK(asarray<double>(BufferInfo{d, 8, "d", {2}, {}, false}).to_vector() == std::vector<double>{1.5, 2.5});
  CHECK(asarray<double>(BufferInfo{d, 8, "d", {}, {}, false}).dim() == 0);
}

TEST_CASE("the format, not the item size, decides the type") {
  uint32_t u[1] = {0x3f800000u};  // the bits of 1.0f
  CHECK(asarray(BufferInfo{u, 4, "I", {1}, {}, false}).dtype() == ScalarType::UInt32);
  CHECK(asarray(BufferInfo{u, 4, "f", {1}, {}, false}).as<float>().item() == 1.0f);
  CHECK(asarray(BufferInfo{u, 4, "i", {1}, {}, false}).dtype() == ScalarType::Int32);
  int64_t l[1] = {7};
  CHECK(asarray(BufferInfo{l, static_cast<int64_t>(sizeof(long)), "l", {1}, {}, false}).dtype() == ScalarType::Int64);
  CHECK(asarray(BufferInfo{l, 4, "<l", {1}, {}, false}).dtype() == ScalarType::Int32);  // standard size: 4 bytes
  CHECK(asarray(BufferInfo{l, 8, "q", {1}, {}, false}).as<int64_t>().item() == 7);
  uint16_t h[1] = {0x3c00};  // 1.0 in binary16
  CHECK(asarray<half>(BufferInfo{h, 2, "e", {1}, {}, false}).item() == half(1.0f));
  std::complex<double> z[1] = {{1, -2}};
  CHECK(asarray<std::complex<double>>(BufferInfo{z, 16, "Zd", {1}, {}, false}).item() == std::complex<double>(1, -2));
  bool bo[2] = {true, false};
  CHECK(asarray<bool>(BufferInfo{bo, 1, "?", {2}, {}, false}).to_vector() == std::vector<bool>{true, false});
}

TEST_CASE("foreign byte order is converted into a copy") {
  unsigned char be[4] = {0x01, 0x02, 0xff, 0xfe};  // big-endian int16: 258, -2
  auto t = asarray<int16_t>(BufferInfo{be, 2, ">h", {2}, {}, false});
  CHECK(t.to_vector() == std::vector<int16_t>{258, -2});
  unsigned char bf[4] = {0x3f, 0xc0, 0x00, 0x00};  // big-endian 1.5f
  CHECK(asarray<float>(BufferInfo{bf, 4, "!f", {1}, {}, false}).item() == 1.5f);
}

TEST_CASE("mismatches are errors naming what was declared and what was asked") {
  float f[2] = {1, 2};
  CHECK_THROWS_WITH_AS(asarray<int32_t>(BufferInfo{f, 4, "f", {2}, {}, false}), doctest::Contains("torch.float32"), type_error);
  CHECK_THROWS_AS(asarray(BufferInfo{f, 8, "f", {2}, {}, false}), value_error);   // itemsize disagrees
  CHECK_THROWS_AS(asarray(BufferInfo{f, 4, "x", {2}, {}, false}), type_error);    // unknown code
  CHECK_THROWS_AS(asarray(BufferInfo{f, 4, "f", {2}, {-4}, false}), value_error); // negative stride
  CHECK_THROWS_AS(asarray(BufferInfo{f, 4, "f", {2}, {6}, false}), value_error);  // not a multiple of 4
  CHECK_THROWS_AS(asarray(BufferInfo{f, 4, "f", {2, 1}, {4}, false}), value_error);
  CHECK_THROWS_AS(asarray(BufferInfo{nullptr, 4, "f", {2}, {}, false}), value_error);
}

TEST_CASE("read-only buffers warn through the warnings handler") {
  std::vector<std::string> got;
  auto prev = set_warning_sink([&](const Warning& w) { got.push_back(w.message); });
  set_warning_action(WarningAction::Default);
  const float f[1] = {3};
  auto t = asarray<float>(BufferInfo{const_cast<float*>(f), 4, "f", {1}, {}, true});
  CHECK(t.item() == 3);
  REQUIRE(got.size() == 1);
  CHECK(got[0].find("not writable") != std::string::npos);
  set_warning_sink(prev);
}
