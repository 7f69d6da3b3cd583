// FP8 scaled_mm / scaled_addmm / scaled_addmm_ on the CPU: against PyTorch 2.15's CPU results
// (tests/reference/scaled_mm.py), against dequantize-then-multiply in double for the block
// recipes, and the rules.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <string>
#include <reel/reel.hpp>

#include "reference/scaled_mm.hpp"

using namespace reel;
using namespace reel::nn::functional;

namespace {
template <class F8>
Tensor<F8> fp8_from_bits(const std::vector<uint8_t>& bits, Shape s) {
  std::vector<F8> v;
  for (uint8_t b : bits) v.push_back(F8::from_bits(b));
  return from_vector<F8>(v, s);
}
template <class Out>
double out_value(uint32_t bits) {
  if constexpr (std::is_same_v<Out, float>) {
    return std::bit_cast<float>(bits);
  } else {
    const Out o = Eigen::numext::bit_cast<Out>(static_cast<uint16_t>(bits));
    return static_cast<double>(static_cast<float>(o));
  }
}
// one unit in the last place of Out at v
template <class Out>
double ulp_of(double v) {
  const int digits = std::is_same_v<Out, float> ? 24 : std::is_same_v<Out, half> ? 11 : 8;
  if (v == 0) return 0;
  return std::ldexp(1.0, std::ilogb(v) - digits + 1);
}

template <class Out, class A, class B>
void check_case(const reel_ref::ScaledMmCase& c) {
  auto a = fp8_from_bits<A>(c.a, {c.M, c.K});
  auto b = fp8_from_bits<B>(c.b, {c.K, c.N});
  const bool tw = std::string(c.recipe) == "TensorWise";
  Tensor<float> sa = tw ? from_vector<float>(c.scale_a, {}) : from_vector<float>(c.scale_a, {c.M, 1});
  Tensor<float> sb = tw ? from_vector<float>(c.scale_b, {}) : from_vector<float>(c.scale_b, {1, c.N});
  const ScalingType r = tw ? ScalingType::TensorWise : ScalingType::RowWise;
  auto y = scaled_mm<Out>(a, b, sa, r, sb, r).to_vector();
  // mat_b as PyTorch passes it: the transpose of a contiguous [N, K] tensor
  auto y2 = scaled_mm<Out>(a, b.mT().contiguous().mT(), sa, r, sb, r).to_vector();
  auto av = a.template to<double>().to_vector(), bv = b.template to<double>().to_vector();
  int exact = 0;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      const double got = static_cast<double>(static_cast<float>(y[i * c.N + j]));
      const double want = out_value<Out>(c.y[i * c.N + j]);
      CHECK(static_cast<double>(static_cast<float>(y2[i * c.N + j])) == got);
      // PyTorch accumulates in float: its result may differ from the exact one by float
      // rounding of the sum, then by one rounding to Out
      double mag = 0;
      for (int64_t k = 0; k < c.K; ++k) mag += std::abs(av[i * c.K + k] * bv[k * c.N + j]);
      mag *= std::abs(double(c.scale_a[tw ? 0 : i]) * double(c.scale_b[tw ? 0 : j]));
      const double tol = double(c.K) * std::ldexp(mag, -24) + ulp_of<Out>(std::max(std::abs(got), std::abs(want)));
      INFO("case ", c.ta, "x", c.tb, " ", c.recipe, " ", c.out, " M ", c.M, " K ", c.K, " N ", c.N, " at ", i, ",", j);
      CHECK(std::abs(got - want) <= tol);
      exact += got == want;
    }
  // bfloat16 / half results nearly all agree to the bit (float ones differ by PyTorch's
  // float accumulation)
  if (!std::is_same_v<Out, float>) CHECK(exact * 10 >= c.M * c.N * 9);
}
}  // namespace

TEST_CASE("scaled_mm: TensorWise and RowWise agree with PyTorch 2.15's CPU results") {
  for (const auto& c : reel_ref::scaled_mm_cases) {
    const std::string ta = c.ta, tb = c.tb, out = c.out;
    auto run = [&]<class Out>() {
      if (ta == "e4m3" && tb == "e4m3") check_case<Out, float8_e4m3fn, float8_e4m3fn>(c);
      if (ta == "e4m3" && tb == "e5m2") check_case<Out, float8_e4m3fn, float8_e5m2>(c);
      if (ta == "e5m2" && tb == "e4m3") check_case<Out, float8_e5m2, float8_e4m3fn>(c);
    };
    if (out == "bf16") run.template operator()<bfloat16>();
    if (out == "f32") run.template operator()<float>();
    if (out == "f16") run.template operator()<half>();
  }
}

TEST_CASE("scaled_mm: block recipes equal dequantize-then-multiply in double") {
  Generator gen(17);
  const int64_t M = 130, K = 272, N = 129;  // partial blocks along M, K and N
  auto a = (randn<float>({M, K}, gen) * 4.0f).to<float8_e4m3fn>();
  auto b = (randn<float>({K, N}, gen) * 4.0f).to<float8_e4m3fn>();
  const int64_t kb = (K + 127) / 128, mb = (M + 127) / 128, nb = (N + 127) / 128;
  auto ad = a.to<double>().to_vector(), bd = b.to<double>().to_vector();
  for (auto [ra, rb] : {std::pair{ScalingType::BlockWise1x128, ScalingType::BlockWise1x128},
                        std::pair{ScalingType::BlockWise1x128, ScalingType::BlockWise128x128},
                        std::pair{ScalingType::BlockWise128x128, ScalingType::BlockWise1x128}}) {
    const bool a128 = ra == ScalingType::BlockWise128x128, b128 = rb == ScalingType::BlockWise128x128;
    Tensor<float> sa = rand<float>(a128 ? Shape{mb, kb} : Shape{M, kb}, gen) + 0.5f;
    Tensor<float> sb = rand<float>(b128 ? Shape{kb, nb} : Shape{kb, N}, gen) + 0.5f;
    auto sav = sa.to_vector(), sbv = sb.to_vector();
    auto y = scaled_mm<float>(a, b, sa, ra, sb, rb).to_vector();
    for (int64_t i = 0; i < M; i += 7)
      for (int64_t j = 0; j < N; j += 5) {
        double want = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double s1 = sav[a128 ? (i / 128) * kb + k / 128 : i * kb + k / 128];
          const double s2 = sbv[b128 ? (k / 128) * nb + j / 128 : (k / 128) * N + j];
          want += (ad[i * K + k] * s1) * (bd[k * N + j] * s2);
          mag += std::abs(ad[i * K + k] * s1 * bd[k * N + j] * s2);
        }
        CHECK(std::abs(double(y[i * N + j]) - want) <= std::ldexp(std::abs(want), -24) + 1e-12 * mag);
      }
  }
}

TEST_CASE("scaled_addmm / scaled_addmm_: one rounding of beta input + alpha product, in place keeps storage") {
  Generator gen(5);
  const int64_t M = 6, K = 32, N = 10;
  auto a = (randn<float>({M, K}, gen) * 2.0f).to<float8_e4m3fn>();
  auto b = (randn<float>({K, N}, gen) * 2.0f).to<float8_e5m2>();
  Tensor<float> sa = full<float>({M, 1}, 0.75f), sb = full<float>({1, N}, 1.5f);
  auto input = randn<float>({M, N}, gen).to<bfloat16>();
  auto exact = scaled_mm<float>(a, b, sa, ScalingType::RowWise, sb, ScalingType::RowWise).to<double>().to_vector();
  auto in = input.to<double>().to_vector();
  auto r = scaled_addmm(input, a, b, sa, ScalingType::RowWise, sb, ScalingType::RowWise, {.beta = 0.5, .alpha = 2.0});
  static_assert(std::is_same_v<decltype(r), Tensor<bfloat16>>);
  auto rv = r.to<double>().to_vector();
  for (int64_t i = 0; i < M * N; ++i)
    CHECK(rv[i] == static_cast<double>(static_cast<float>(bfloat16(static_cast<float>(2.0 * exact[i] + 0.5 * in[i])))) );
  // in place: the same storage, the same values
  auto before = input.data_ptr();
  auto& same = scaled_addmm_(input, a, b, sa, ScalingType::RowWise, sb, ScalingType::RowWise, {.beta = 0.5, .alpha = 2.0});
  CHECK(&same == &input);
  CHECK(input.data_ptr() == before);
  CHECK(input.to<double>().to_vector() == rv);
  // beta = 0 ignores input's values: a NaN there does not leak
  auto nan_in = full<float>({M, N}, std::numeric_limits<float>::quiet_NaN());
  auto z = scaled_addmm(nan_in, a, b, sa, ScalingType::RowWise, sb, ScalingType::RowWise, {.beta = 0.0});
  for (float v : z.to_vector()) CHECK(!std::isnan(v));
  // K == 0: zeros, plus beta * input
  auto a0 = empty<float8_e4m3fn>({M, 0}), b0 = empty<float8_e4m3fn>({0, N});
  Tensor<float> one = full<float>({}, 1.0f);
  for (auto v : scaled_mm<float>(a0, b0, one, ScalingType::TensorWise, one, ScalingType::TensorWise).to_vector()) CHECK(v == 0.0f);
  auto ones = full<float>({M, N}, 1.0f);
  for (auto v : scaled_addmm(ones, a0, b0, one, ScalingType::TensorWise, one, ScalingType::TensorWise, {.beta = 3.0}).to_vector())
    CHECK(v == 3.0f);
  // a bias (bfloat16 output): added before the one rounding
  auto bias = randn<float>({N}, gen).to<bfloat16>();
  auto yb = scaled_mm(a, b, sa, ScalingType::RowWise, sb, ScalingType::RowWise, {.bias = bias}).to<double>().to_vector();
  auto bv = bias.to<double>().to_vector();
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      CHECK(yb[i * N + j] == static_cast<double>(static_cast<float>(bfloat16(static_cast<float>(exact[i * N + j] + bv[j])))));
}

TEST_CASE("scaled_mm: every rule raises its error and writes nothing") {
  auto a = full<float>({4, 32}, 1.0f).to<float8_e4m3fn>();
  auto b = full<float>({32, 8}, 1.0f).to<float8_e4m3fn>();
  Tensor<float> one = full<float>({}, 1.0f);
  const auto TW = ScalingType::TensorWise, RW = ScalingType::RowWise;
  Tensor<float> ra = ones<float>({4, 1}), rb = ones<float>({1, 8});
  CHECK_THROWS_WITH_AS(scaled_mm(full<float>({4, 24}, 1.0f).to<float8_e4m3fn>(), full<float>({24, 8}, 1.0f).to<float8_e4m3fn>(), one, TW, one, TW),
                       doctest::Contains("multiple of 16"), value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, full<float>({16, 8}, 1.0f).to<float8_e4m3fn>(), one, TW, one, TW),
                       doctest::Contains("cannot be multiplied (4x32 and 16x8)"), value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a.reshape({128}), b, one, TW, one, TW), doctest::Contains("matrices (2-D)"), value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, one, TW, rb, RW), doctest::Contains("recipe pair (TensorWise, RowWise)"), value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, ones<float>({4, 2}), RW, rb, RW), doctest::Contains("scale_a of the RowWise recipe must have shape [4, 1]"),
                       value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, ra, RW, ones<float>({8}), RW), doctest::Contains("scale_b of the RowWise recipe must have shape [1, 8]"),
                       value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, ones<double>({}), TW, one, TW), doctest::Contains("must be a float32 tensor"), type_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, ones<float>({2}), TW, one, TW), doctest::Contains("must have one element"), value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, one, ScalingType::BlockWise1x32, one, ScalingType::BlockWise1x32), doctest::Contains("not implemented yet"),
                       not_implemented_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, one, TW, one, TW, {.bias = {}, .swizzle_a = SwizzleType::Swizzle_32_4_4}), doctest::Contains("not swizzled"),
                       value_error);
  CHECK_THROWS_WITH_AS(scaled_mm<float>(a, b, one, TW, one, TW, {.bias = ones<float>({8})}), doctest::Contains("bfloat16 and half outputs"),
                       value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, one, TW, one, TW, {.bias = ones<half>({8})}), doctest::Contains("the output's dtype"), type_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, one, TW, one, TW, {.bias = ones<bfloat16>({4})}), doctest::Contains("shape [8]"), value_error);
  // scaled_addmm_: input untouched when a check fails
  auto input = full<float>({4, 8}, 7.0f);
  CHECK_THROWS_AS(scaled_addmm_(input, a, b, one, TW, rb, RW), value_error);
  CHECK_THROWS_WITH_AS(scaled_addmm_(full<float>({4, 7}, 7.0f), a, b, one, TW, one, TW), doctest::Contains("input must have shape [M, N] = [4, 8]"),
                       value_error);
  CHECK_THROWS_WITH_AS(scaled_addmm_(full<float>({8, 4}, 7.0f).mT(), a, b, one, TW, one, TW), doctest::Contains("contiguous"), value_error);
  for (float v : input.to_vector()) CHECK(v == 7.0f);
}
