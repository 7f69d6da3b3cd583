#pragma once
// What the checkpoint suites (safetensors, .pt) share: the fixtures' tensors, computed here
// with the formulas of tests/reference/safetensors/make_fixtures.py, and byte-level helpers.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <reel/reel.hpp>
#include <string>
#include <vector>

namespace reel_test {
using namespace reel;

inline std::vector<unsigned char> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
// The elements' bytes in row-major order (any strides).
inline std::vector<unsigned char> logical_bytes(const AnyTensor& t) {
  const int64_t es = element_size(t.dtype());
  const auto* base = static_cast<const unsigned char*>(t.impl_ptr()->storage->data);
  std::vector<unsigned char> out(static_cast<size_t>(t.numel() * es));
  for (int64_t i = 0; i < t.numel(); ++i)
    std::memcpy(out.data() + i * es, base + (t.storage_offset() + detail::linear_to_offset(i, t.sizes(), t.strides())) * es,
                static_cast<size_t>(es));
  return out;
}
// A CPU tensor of `dtype` and `shape` holding random bytes (bools 0 or 1).
inline AnyTensor random_tensor(ScalarType dtype, Shape shape, std::mt19937& rng) {
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->sizes = shape;
  impl->strides = detail::contiguous_strides(shape);
  impl->dtype = dtype;
  const int64_t n = detail::numel_of(shape) * element_size(dtype);
  impl->storage = detail::make_storage(static_cast<size_t>(n), DeviceType::CPU);
  auto* p = static_cast<unsigned char*>(impl->storage->data);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(rng() & (dtype == ScalarType::Bool ? 1u : 0xffu));
  return AnyTensor(impl);
}
// value(name, i) of tests/reference/safetensors/make_fixtures.py at flat index i, as a [3, 4]
// tensor (the same formulas, written again here).
template <class T, class F>
AnyTensor fixture_filled(F f) {
  auto t = empty<T>({3, 4});
  for (int64_t i = 0; i < 12; ++i) t.mutable_data_ptr()[i] = f(i);
  return AnyTensor(t);
}
inline AnyTensor fixture_tensor(const std::string& name) {
  auto q = [](int64_t i) { return static_cast<float>(i - 5) * 0.25f; };  // exact in every float type
  if (name == "bool") return fixture_filled<bool>([](int64_t i) { return i % 3 == 0; });
  if (name == "uint8") return fixture_filled<uint8_t>([](int64_t i) { return uint8_t((i * 37) % 256); });
  if (name == "int8") return fixture_filled<int8_t>([](int64_t i) { return int8_t((i * 37) % 256 - 128); });
  if (name == "int16") return fixture_filled<int16_t>([](int64_t i) { return int16_t(i * 5000 - 30000); });
  if (name == "uint16") return fixture_filled<uint16_t>([](int64_t i) { return uint16_t(65535 - i * 4099); });
  if (name == "int32") return fixture_filled<int32_t>([](int64_t i) { return int32_t(i * 300000007 - 2000000000); });
  if (name == "uint32") return fixture_filled<uint32_t>([](int64_t i) { return uint32_t(4294967295 - i * 123456789); });
  if (name == "int64")
    return fixture_filled<int64_t>([](int64_t i) { return i * 700000000000000001 - 4000000000000000000; });
  if (name == "uint64") return fixture_filled<uint64_t>([](int64_t i) { return ~uint64_t(0) - uint64_t(i); });
  if (name == "float16") return fixture_filled<half>([&](int64_t i) { return half(q(i)); });
  if (name == "bfloat16") return fixture_filled<bfloat16>([&](int64_t i) { return bfloat16(q(i)); });
  if (name == "float32") return fixture_filled<float>(q);
  if (name == "float64") return fixture_filled<double>([&](int64_t i) { return double(q(i)); });
  if (name == "complex64")
    return fixture_filled<std::complex<float>>([&](int64_t i) { return std::complex<float>(q(i), float(i) * 0.5f); });
  if (name == "complex128")
    return fixture_filled<std::complex<double>>([&](int64_t i) { return std::complex<double>(q(i), double(i) * 0.5); });
  if (name == "float8_e4m3fn") return fixture_filled<float8_e4m3fn>([&](int64_t i) { return float8_e4m3fn(q(i)); });
  if (name == "float8_e5m2") return fixture_filled<float8_e5m2>([&](int64_t i) { return float8_e5m2(q(i)); });
  if (name == "float8_e8m0fnu")  // 2^(i - 5): exponent field 127 + i - 5
    return fixture_filled<float8_e8m0fnu>([](int64_t i) { return float8_e8m0fnu::from_bits(uint8_t(122 + i)); });
  if (name == "float4_e2m1fn_x2")
    return fixture_filled<float4_e2m1fn_x2>([](int64_t i) { return float4_e2m1fn_x2::from_bits(uint8_t((i * 17) % 256)); });
  FAIL("unknown fixture tensor " << name);
  return {};
}
inline const std::vector<std::string> kFixtureNames = {
    "bool",  "uint8",     "int8",    "int16",   "uint16", "float16",       "bfloat16",    "int32",          "uint32",
    "float32", "complex64", "float64", "int64", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn_x2"};
}  // namespace reel_test
