// float8_e8m0fnu and float4_e2m1fn_x2 against PyTorch 2.15 (tests/reference/low_precision.py)
// and closed forms.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <sstream>
#include <reel/reel.hpp>

#include "reference/low_precision.hpp"

using namespace reel;

namespace {
uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
}  // namespace

TEST_CASE("float8_e8m0fnu: every encoding decodes as PyTorch's, 2^(b - 127), 0xFF NaN") {
  for (int b = 0; b < 256; ++b) {
    const float v = float8_e8m0fnu::from_bits(static_cast<uint8_t>(b)).to_float();
    CHECK(bits_of(v) == reel_ref::e8m0_to_f32[b]);
    if (b == 255)
      CHECK(std::isnan(v));
    else
      CHECK(v == std::ldexp(1.0f, b - 127));
  }
}

TEST_CASE("float8_e8m0fnu: conversions from float round as PyTorch's, element and tensor") {
  constexpr size_t n = sizeof(reel_ref::e8m0_from_f32_in) / sizeof(uint32_t);
  static_assert(n == sizeof(reel_ref::e8m0_from_f32_out));
  std::vector<float> in(n);
  for (size_t i = 0; i < n; ++i) {
    in[i] = std::bit_cast<float>(reel_ref::e8m0_from_f32_in[i]);
    INFO("bits 0x", std::hex, reel_ref::e8m0_from_f32_in[i]);
    CHECK(float8_e8m0fnu(in[i]).bits() == reel_ref::e8m0_from_f32_out[i]);
  }
  auto t = from_vector<float>(in, {int64_t(n)}).to<float8_e8m0fnu>();
  auto tv = t.to_vector();
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += tv[i].bits() != reel_ref::e8m0_from_f32_out[i];
  CHECK(bad == 0);
  // closed forms: ties go up for normal numbers, the sign is ignored, 0 is the smallest scale
  CHECK(float8_e8m0fnu(1.5f).to_float() == 2.0f);
  CHECK(float8_e8m0fnu(1.4999f).to_float() == 1.0f);
  CHECK(float8_e8m0fnu(0.75f).to_float() == 1.0f);
  CHECK(float8_e8m0fnu(-4.0f).to_float() == 4.0f);
  CHECK(float8_e8m0fnu(0.0f).bits() == 0);
  CHECK(isnan(float8_e8m0fnu(3e38f)));
  CHECK(isnan(float8_e8m0fnu(std::numeric_limits<float>::infinity())));
  // a double is rounded to float first (as PyTorch converts float64 tensors)
  CHECK(float8_e8m0fnu(1.5 - 1e-12).bits() == float8_e8m0fnu(static_cast<float>(1.5 - 1e-12)).bits());
  CHECK(Tensor<double>(full<double>({2}, 0.75)).to<float8_e8m0fnu>().to<float>().to_vector() ==
        std::vector<float>{1.0f, 1.0f});
  CHECK(std::numeric_limits<float8_e8m0fnu>::max().to_float() == std::ldexp(1.0f, 127));
  CHECK(std::numeric_limits<float8_e8m0fnu>::min().to_float() == std::ldexp(1.0f, -127));
}

TEST_CASE("float4_e2m1fn_x2: codes, rounding and packing as PyTorch's FP4 data") {
  for (int c = 0; c < 16; ++c) CHECK(bits_of(float4_e2m1fn_x2::decode(static_cast<uint8_t>(c))) == reel_ref::fp4_to_f32[c]);
  std::vector<uint32_t> in_bits(std::begin(reel_ref::e8m0_from_f32_in), std::end(reel_ref::e8m0_from_f32_in));
  in_bits.insert(in_bits.end(), std::begin(reel_ref::fp4_extra_in), std::end(reel_ref::fp4_extra_in));
  const size_t n = in_bits.size();
  REQUIRE(n == sizeof(reel_ref::fp4_from_f32_out));
  std::vector<float> in(n);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    in[i] = std::bit_cast<float>(in_bits[i]);
    if (float4_e2m1fn_x2::encode(in[i]) != reel_ref::fp4_from_f32_out[i]) {
      ++bad;
      INFO("bits 0x", std::hex, in_bits[i]);
      CHECK(int(float4_e2m1fn_x2::encode(in[i])) == int(reel_ref::fp4_from_f32_out[i]));
    }
  }
  CHECK(bad == 0);
  // the layout: the first value of each pair in the low nibble (PyTorch's pack_uint4)
  const float vals[] = {0.5f, 1.0f, 1.5f, 2.0f, -6.0f, -0.0f};  // codes 1, 2, 3, 4, 15, 8
  for (int k = 0; k < 3; ++k) CHECK(float4_e2m1fn_x2(vals[2 * k], vals[2 * k + 1]).bits() == reel_ref::fp4_packed_123_4_15_8[k]);
  // tensors: pack_fp4 halves the last dim, unpack_fp4 restores the rounded values
  std::vector<float> x(in.begin(), in.begin() + 2 * 600);
  auto p = pack_fp4(from_vector<float>(x, {2, 600}));
  CHECK(p.sizes() == Shape{2, 300});
  auto u = unpack_fp4(p).to_vector();
  REQUIRE(u.size() == x.size());
  for (size_t i = 0; i < x.size(); ++i) CHECK(bits_of(u[i]) == bits_of(float4_e2m1fn_x2::decode(float4_e2m1fn_x2::encode(x[i]))));
  CHECK(pack_fp4(from_vector<double>({0.25, 0.75, 5.0, 7.0}, {4}) * 1.0).to_vector()[1].bits() == 0x76);
  CHECK_THROWS_AS(pack_fp4(zeros<float>({2, 3})), value_error);
  // printing shows the packed byte, as PyTorch does
  std::ostringstream os;
  os << p.slice(1, 0, 1).slice(0, 0, 1);
  CHECK(os.str().find("dtype=torch.float4_e2m1fn_x2") != std::string::npos);
  CHECK(dtype_name(ScalarType::Float4_e2m1fn_x2) == "torch.float4_e2m1fn_x2");
  CHECK(dtype_name(ScalarType::Float8_e8m0fnu) == "torch.float8_e8m0fnu");
  CHECK(element_size(ScalarType::Float4_e2m1fn_x2) == 1);
}
