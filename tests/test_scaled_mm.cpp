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
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, ones<float>({4, 2}), RW, rb, RW), doctest::Contains("scale_a of the RowWise recipe must have shape [4, 1] for mat_a [4, 32] and mat_b [32, 8], got [4, 2]"),
                       value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, ra, RW, ones<float>({8}), RW), doctest::Contains("scale_b of the RowWise recipe must have shape [1, 8]"),
                       value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, ones<double>({}), TW, one, TW), doctest::Contains("must be a torch.float32 tensor"), type_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, ones<float>({2}), TW, one, TW), doctest::Contains("must have one element"), value_error);
  // MX / NVFP4
  const auto X32 = ScalingType::BlockWise1x32, X16 = ScalingType::BlockWise1x16;
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, one, X32, one, X32), doctest::Contains("scale_a of the BlockWise1x32 recipe must be a torch.float8_e8m0fnu tensor"),
                       type_error);
  Tensor<float8_e8m0fnu> ea = ones<float>({4, 1}).to<float8_e8m0fnu>(), eb = ones<float>({8, 1}).to<float8_e8m0fnu>();
  CHECK(scaled_mm<float>(a, b, ea, X32, eb, X32).to_vector() == std::vector<float>(32, 32.0f));
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, ea, X32, eb.mT(), X32), doctest::Contains("scale_b of the BlockWise1x32 recipe must have shape [8, 1]"),
                       value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, ea, X32, eb, X32, {.swizzle_a = SwizzleType::Swizzle_32_4_4}),
                       doctest::Contains("must have round_up(M, 128) * round_up(ceil(K / 32), 4) = 512 elements"), value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b.to<float>().to<float8_e5m2>(), ea, X32, eb, X32),
                       doctest::Contains("BlockWise1x32 recipe takes float8_e4m3fn (MXFP8) or float4_e2m1fn_x2 (MXFP4) data, got torch.float8_e5m2 (mat_b)"),
                       value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a, b, ones<float>({4, 2}).to<float8_e4m3fn>(), X16, ones<float>({8, 2}).to<float8_e4m3fn>(), X16),
                       doctest::Contains("BlockWise1x16 recipe (NVFP4) takes float4_e2m1fn_x2 data"), value_error);
  auto a4 = pack_fp4(ones<float>({4, 32})), b4 = pack_fp4(ones<float>({8, 32})).mT();
  Tensor<float8_e4m3fn> na = ones<float>({4, 2}).to<float8_e4m3fn>(), nb = ones<float>({8, 2}).to<float8_e4m3fn>();
  CHECK(scaled_mm<float>(a4, b4, na, X16, nb, X16).to_vector() == std::vector<float>(32, 32.0f));
  CHECK_THROWS_WITH_AS(scaled_mm(a4, b4, one, TW, one, TW), doctest::Contains("float4_e2m1fn_x2 data goes with the BlockWise1x32"), value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a4, b4, na, X16, nb, X16, {.use_fast_accum = true}), doctest::Contains("use_fast_accum is not supported"),
                       value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a4, b4, {na, one}, {X16, TW}, nb, X16), doctest::Contains("both operands or for neither"), value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a4, b4, {na, ones<float>({2})}, {X16, TW}, {nb, one}, {X16, TW}),
                       doctest::Contains("global scale of two-level scales (scale_a[1]) must be a float32 tensor with one element"), value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a4, b4, {na, one}, {X32, TW}, {nb, one}, {X32, TW}), doctest::Contains("{BlockWise1x16, TensorWise}"),
                       value_error);
  CHECK_THROWS_WITH_AS(scaled_mm(a4, b4, na, X16, nb, X16, {.swizzle_a = SwizzleType::Swizzle_32_8}),
                       doctest::Contains("Swizzle_32_8 (hipBLASLt's layout of MX scales) goes with the BlockWise1x32 recipe only"), value_error);
  CHECK(scaled_mm<float>(a4, b4, {na, full<float>({}, 0.5f)}, {X16, TW}, {nb, full<float>({}, 0.25f)}, {X16, TW}).to_vector() ==
        std::vector<float>(32, 4.0f));
  // quantize / dequantize
  CHECK_THROWS_WITH_AS(quantize<float4_e2m1fn_x2>(ones<float>({4, 32}), TW), doctest::Contains("float4_e2m1fn_x2 data goes with"), value_error);
  CHECK_THROWS_WITH_AS(quantize<float8_e4m3fn>(ones<float>({4, 32}), X16), doctest::Contains("takes float4_e2m1fn_x2 data"), value_error);
  CHECK_THROWS_WITH_AS(quantize<float8_e4m3fn>(ones<float>({4, 32}), X32, {.two_level = true}), doctest::Contains("two-level scales belong"),
                       value_error);
  CHECK_THROWS_WITH_AS(quantize<float8_e4m3fn>(ones<float>({4, 32}), RW, {.swizzle = SwizzleType::Swizzle_32_4_4}),
                       doctest::Contains("not swizzled"), value_error);
  CHECK_THROWS_WITH_AS(quantize<float8_e4m3fn>(ones<float>({2, 4, 32}), RW), doctest::Contains("needs a matrix (2-D)"), value_error);
  CHECK_THROWS_WITH_AS(quantize<float4_e2m1fn_x2>(ones<float>({4, 31}), X16), doctest::Contains("must be even"), value_error);
  CHECK_THROWS_WITH_AS(dequantize(a, ones<float>({5, 1}), RW), doctest::Contains("dequantize: scale of the RowWise recipe must have shape [4, 1] for data [4, 32], got [5, 1]"),
                       value_error);
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

// ---------------------------------------------------------------- MX / NVFP4, quantize, fast path
namespace {
// PyTorch's to_blocked (torch/testing/_internal/common_quantized.py) written with views: the
// [H, W] scales padded with zeros to [128 i, 4 j], viewed as (H/128, 128, W/4, 4), permuted
// (0, 2, 1, 3), reshaped to (-1, 4, 32, 4), dims 1 and 2 swapped, flattened.
std::vector<float> padded(const std::vector<float>& s, int64_t H, int64_t W, int64_t Hp, int64_t Wp) {
  std::vector<float> p(static_cast<size_t>(Hp * Wp), 0.0f);
  for (int64_t i = 0; i < H; ++i)
    for (int64_t j = 0; j < W; ++j) p[i * Wp + j] = s[i * W + j];
  return p;
}
Tensor<float> to_blocked(const std::vector<float>& s, int64_t H, int64_t W) {
  const int64_t Hp = (H + 127) / 128 * 128, Wp = (W + 3) / 4 * 4;
  return from_vector<float>(padded(s, H, W, Hp, Wp), {Hp, Wp})
      .view({Hp / 128, 128, Wp / 4, 4})
      .permute({0, 2, 1, 3})
      .reshape({-1, 4, 32, 4})
      .transpose(1, 2)
      .reshape({-1});
}
// hipBLASLt's 32x8 tiles: padded to [32 i, 8 j], viewed as (H/32, 2, 16, W/8, 2, 4), permuted
// (0, 3, 5, 2, 4, 1), flattened.
Tensor<float> to_blocked_32_8(const std::vector<float>& s, int64_t H, int64_t W) {
  const int64_t Hp = (H + 31) / 32 * 32, Wp = (W + 7) / 8 * 8;
  return from_vector<float>(padded(s, H, W, Hp, Wp), {Hp, Wp})
      .view({Hp / 32, 2, 16, Wp / 8, 2, 4})
      .permute({0, 3, 5, 2, 4, 1})
      .reshape({-1});
}
// random FP4 values (every e2m1 magnitude, both signs) as floats
std::vector<float> fp4_values(int64_t n, Generator& gen) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  auto u = randint<int64_t>(0, 16, {n}, gen).to_vector();
  std::vector<float> v;
  for (int64_t c : u) v.push_back((c & 8) ? -mag[c & 7] : mag[c & 7]);
  return v;
}
}  // namespace

TEST_CASE("swizzled scale layouts: swizzled_position inverts swizzled_index, padding holds no scale") {
  for (SwizzleType sw : {SwizzleType::Swizzle_32_4_4, SwizzleType::Swizzle_32_8})
    for (auto [rows, W] : {std::pair<int64_t, int64_t>{1, 1}, {33, 9}, {130, 5}, {256, 8}, {40, 3}}) {
      const int64_t n = detail::swizzled_numel(sw, rows, W);
      std::vector<int> hits(static_cast<size_t>(n), 0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < W; ++c) {
          const int64_t i = detail::swizzled_index(sw, r, c, W);
          REQUIRE(i >= 0);
          REQUIRE(i < n);
          ++hits[static_cast<size_t>(i)];
          int64_t pr = -1, pc = -1;
          detail::swizzled_position(sw, i, W, pr, pc);
          CHECK(pr == r);
          CHECK(pc == c);
        }
      for (int64_t i = 0; i < n; ++i) {  // every other element is padding: its position is out of range
        int64_t pr = -1, pc = -1;
        detail::swizzled_position(sw, i, W, pr, pc);
        CHECK(hits[static_cast<size_t>(i)] == ((pr < rows && pc < W) ? 1 : 0));
      }
    }
}

TEST_CASE("scaled_mm: MX and NVFP4 recipes equal dequantize-then-multiply in double, in every scale layout") {
  Generator gen(29);
  const int64_t M = 40, N = 24, K = 96;  // K / 32 = 3 and K / 16 = 6 blocks: padded in the swizzled layouts
  enum Kind { MXFP8, MXFP4, NVFP4, NVFP4_2 };
  for (Kind kind : {MXFP8, MXFP4, NVFP4, NVFP4_2}) {
    const bool fp4 = kind != MXFP8;
    const int64_t bs = kind == NVFP4 || kind == NVFP4_2 ? 16 : 32, nkb = K / bs;
    // operands as floats holding exact element values; mat_b as PyTorch passes it: b_w [N, K] transposed
    std::vector<float> av, bv;
    if (fp4) {
      av = fp4_values(M * K, gen), bv = fp4_values(N * K, gen);
    } else {
      av = (randn<float>({M * K}, gen) * 8.0f).to<float8_e4m3fn>().to<float>().to_vector();
      bv = (randn<float>({N * K}, gen) * 8.0f).to<float8_e4m3fn>().to<float>().to_vector();
    }
    // scales: powers of two (e8m0) or e4m3 values
    auto scales = [&](int64_t rows) {
      std::vector<float> s;
      if (bs == 32) {
        for (int64_t e : randint<int64_t>(-4, 5, {rows * nkb}, gen).to_vector()) s.push_back(std::ldexp(1.0f, int(e)));
      } else {
        s = (rand<float>({rows * nkb}, gen) * 3.5f + 0.5f).to<float8_e4m3fn>().to<float>().to_vector();
      }
      return s;
    };
    auto sa = scales(M), sb = scales(N);
    const float ga = 0.375f, gb = 1.25f;  // two-level global scales
    double gab = kind == NVFP4_2 ? double(ga) * double(gb) : 1.0;
    std::vector<double> want(static_cast<size_t>(M * N));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double t = 0;
        for (int64_t k = 0; k < K; ++k)
          t += double(av[i * K + k]) * sa[i * nkb + k / bs] * double(bv[j * K + k]) * sb[j * nkb + k / bs];
        want[i * N + j] = t * gab;
      }
    auto run = [&]<class E, class S>(SwizzleType sw) {
      Tensor<E> a, bw;
      if constexpr (std::is_same_v<E, float4_e2m1fn_x2>) {
        a = pack_fp4(from_vector<float>(av, {M, K})), bw = pack_fp4(from_vector<float>(bv, {N, K}));
      } else {
        a = from_vector<float>(av, {M, K}).template to<E>(), bw = from_vector<float>(bv, {N, K}).template to<E>();
      }
      auto layout = [&](const std::vector<float>& s, int64_t rows) {
        if (sw == SwizzleType::NoSwizzle) return from_vector<float>(s, {rows, nkb}).template to<S>();
        return (sw == SwizzleType::Swizzle_32_4_4 ? to_blocked(s, rows, nkb) : to_blocked_32_8(s, rows, nkb)).template to<S>();
      };
      const ScalingType r = bs == 32 ? ScalingType::BlockWise1x32 : ScalingType::BlockWise1x16;
      Tensor<float> y;
      if (kind == NVFP4_2)
        y = scaled_mm<float>(a, bw.mT(), {layout(sa, M), full<float>({}, ga)}, {r, ScalingType::TensorWise},
                             {layout(sb, N), full<float>({1}, gb)}, {r, ScalingType::TensorWise},
                             {.swizzle_a = sw, .swizzle_b = sw});
      else
        y = scaled_mm<float>(a, bw.mT(), layout(sa, M), r, layout(sb, N), r, {.swizzle_a = sw, .swizzle_b = sw});
      auto yv = y.to_vector();
      INFO("kind ", int(kind), " swizzle ", int(sw));
      for (int64_t i = 0; i < M * N; ++i) CHECK(std::abs(double(yv[i]) - want[i]) <= std::ldexp(std::abs(want[i]), -24));
      // mat_b given as a contiguous [K(/2), N] tensor reads the same values
      auto y2 = kind == NVFP4_2 ? y : scaled_mm<float>(a, bw.mT().contiguous(), layout(sa, M), r, layout(sb, N), r,
                                                       {.swizzle_a = sw, .swizzle_b = sw});
      CHECK(y2.to_vector() == yv);
    };
    for (SwizzleType sw : {SwizzleType::NoSwizzle, SwizzleType::Swizzle_32_4_4, SwizzleType::Swizzle_32_8}) {
      if (sw == SwizzleType::Swizzle_32_8 && bs == 16) continue;
      if (kind == MXFP8) run.template operator()<float8_e4m3fn, float8_e8m0fnu>(sw);
      else if (kind == MXFP4) run.template operator()<float4_e2m1fn_x2, float8_e8m0fnu>(sw);
      else run.template operator()<float4_e2m1fn_x2, float8_e4m3fn>(sw);
    }
  }
}

TEST_CASE("quantize / dequantize: each recipe's scale rule, the round trip, and scaled_mm of quantized operands") {
  Generator gen(31);
  const int64_t M = 136, K = 288, N = 40;  // partial 128-blocks along M and K
  Tensor<float> xa = randn<float>({M, K}, gen) * 3.0f, xb = randn<float>({K, N}, gen) * 0.5f;
  xa = xa + (rand<float>({M, K}, gen) > 0.995f).to<float>() * 40.0f;  // outliers
  struct Case { ScalingType r; int q; bool two_level = false; SwizzleType sw = SwizzleType::NoSwizzle; };
  const Case cases[] = {{ScalingType::TensorWise, 0},       {ScalingType::TensorWise, 1},
                        {ScalingType::RowWise, 0},          {ScalingType::BlockWise1x128, 0},
                        {ScalingType::BlockWise128x128, 0}, {ScalingType::BlockWise1x32, 0, false, SwizzleType::Swizzle_32_4_4},
                        {ScalingType::BlockWise1x32, 2},    {ScalingType::BlockWise1x16, 2},
                        {ScalingType::BlockWise1x16, 2, true, SwizzleType::Swizzle_32_4_4}};
  for (const Case& c : cases) {
    INFO("recipe ", int(c.r), " type ", c.q, " two_level ", c.two_level);
    auto check = [&]<class Q, class Qb>() {
      const float qmax = c.q == 0 ? 448.0f : c.q == 1 ? 57344.0f : 6.0f;
      const int mant = c.q == 0 ? 3 : c.q == 1 ? 2 : 1;
      auto qa = quantize<Q>(xa, c.r, {.swizzle = c.sw, .two_level = c.two_level});
      auto da = dequantize<double>(qa).to_vector();
      auto x = xa.to<double>().to_vector();
      std::vector<double> codes;
      if constexpr (std::is_same_v<Q, float4_e2m1fn_x2>)
        codes = unpack_fp4(qa.data).template to<double>().to_vector();
      else
        codes = qa.data.template to<double>().to_vector();
      // the scale rule, per group: amax / max_q (float32 recipes), a power of two 2^e with
      // 2^emax <= amax / 2^e < 2^(emax + 1) (MX), amax / 6 within e4m3's rounding (NVFP4)
      const int64_t kb = c.r == ScalingType::TensorWise || c.r == ScalingType::RowWise ? K
                         : c.r == ScalingType::BlockWise1x32 ? 32 : c.r == ScalingType::BlockWise1x16 ? 16 : 128;
      const int64_t rb = c.r == ScalingType::TensorWise ? M : c.r == ScalingType::BlockWise128x128 ? 128 : 1;
      const double g = c.two_level ? double(qa.scale.list[1].template as<float>().item()) : 1.0;
      for (int64_t i0 = 0; i0 < M; i0 += rb)
        for (int64_t k0 = 0; k0 < K; k0 += kb) {
          double amax = 0, dmax = 0, s = 0;
          for (int64_t i = i0; i < std::min(M, i0 + rb); ++i)
            for (int64_t k = k0; k < std::min(K, k0 + kb); ++k) {
              amax = std::max(amax, std::abs(x[i * K + k]));
              dmax = std::max(dmax, std::abs(da[i * K + k]));
            }
          // the group's decoding scale: its largest dequantized value over its largest code
          double cmax = 0;
          for (int64_t i = i0; i < std::min(M, i0 + rb); ++i)
            for (int64_t k = k0; k < std::min(K, k0 + kb); ++k) cmax = std::max(cmax, std::abs(codes[i * K + k]));
          s = dmax / cmax;
          if (c.r == ScalingType::BlockWise1x32) {
            const double e = std::log2(s);
            CHECK(e == std::round(e));
            CHECK(std::ldexp(s, c.q == 0 ? 8 : 2) <= amax);
            CHECK(amax < std::ldexp(s, c.q == 0 ? 9 : 3));
          } else if (c.r == ScalingType::BlockWise1x16) {
            CHECK(std::abs(s / g - amax / 6 / g) <= std::ldexp(amax / 6 / g, -4));
          } else {
            CHECK(std::abs(s - amax / qmax) <= std::ldexp(amax / qmax, -22));
          }
          // round trip: within half a unit of the element type at the scaled value (MX: plus
          // what saturates above max_q)
          for (int64_t i = i0; i < std::min(M, i0 + rb); ++i)
            for (int64_t k = k0; k < std::min(K, k0 + kb); ++k) {
              const double v = std::abs(x[i * K + k]) / s, sat = std::max(0.0, v - qmax);
              const double half_unit = std::ldexp(1.0, std::max(std::ilogb(std::max(v, 1e-30)), c.q == 0 ? -6 : c.q == 1 ? -14 : 0) - mant - 1);
              CHECK(std::abs(da[i * K + k] - x[i * K + k]) <= (half_unit + sat) * s * (1 + 1e-6));
            }
        }
      // scaled_mm of the quantized operands (mat_b quantized along dim 0) equals the product
      // of the dequantized ones
      // ((128x128, 128x128) is no recipe pair; e5m2 x e5m2 no type pair)
      const ScalingType rb_ = c.r == ScalingType::BlockWise128x128 ? ScalingType::BlockWise1x128 : c.r;
      auto qb = quantize<Qb>(xb, rb_, {.dim = 0, .swizzle = c.sw, .two_level = c.two_level});
      auto db = dequantize<double>(qb).to_vector();
      auto y = scaled_mm<float>(qa.data, qb.data, qa.scale, qa.recipe, qb.scale, qb.recipe,
                                {.swizzle_a = c.sw, .swizzle_b = c.sw}).to_vector();
      for (int64_t i = 0; i < M; i += 9)
        for (int64_t j = 0; j < N; ++j) {
          double want = 0;
          for (int64_t k = 0; k < K; ++k) want += da[i * K + k] * db[k * N + j];
          CHECK(std::abs(double(y[i * N + j]) - want) <= std::ldexp(std::abs(want), -24) + 1e-9);
        }
    };
    if (c.q == 0) check.template operator()<float8_e4m3fn, float8_e4m3fn>();
    if (c.q == 1) check.template operator()<float8_e5m2, float8_e4m3fn>();
    if (c.q == 2) check.template operator()<float4_e2m1fn_x2, float4_e2m1fn_x2>();
  }
  // zeros: finite scales, zero data
  auto z = quantize<float8_e4m3fn>(zeros<float>({4, 32}), ScalingType::BlockWise1x32);
  CHECK(z.scale.list[0].as<float8_e8m0fnu>().to<float>().to_vector() == std::vector<float>(4, std::ldexp(1.0f, -127)));
  for (float v : dequantize(z).to_vector()) CHECK(v == 0.0f);
  auto zt = quantize<float8_e4m3fn>(zeros<float>({3, 16}), ScalingType::TensorWise);
  CHECK(std::isfinite(zt.scale.list[0].as<float>().item()));
}

TEST_CASE("scaled_mm: the fast path (use_fast_accum) stays within its bound of the exact reference") {
  Generator gen(37);
  const int64_t M = 70, K = 384, N = 50;
  auto xa = randn<float>({M, K}, gen), xb = randn<float>({K, N}, gen);
  for (ScalingType r : {ScalingType::TensorWise, ScalingType::RowWise, ScalingType::BlockWise1x128,
                        ScalingType::BlockWise1x32}) {
    auto qa = quantize<float8_e4m3fn>(xa, r), qb = quantize<float8_e4m3fn>(xb, r, {.dim = 0});
    // both layouts of mat_b
    for (bool kn : {true, false}) {
      auto b = kn ? qb.data : qb.data.mT().contiguous().mT();
      auto exact = scaled_mm<float>(qa.data, b, qa.scale, qa.recipe, qb.scale, qb.recipe).to<double>().to_vector();
      auto fast = scaled_mm<float>(qa.data, b, qa.scale, qa.recipe, qb.scale, qb.recipe, {.use_fast_accum = true})
                      .to<double>().to_vector();
      auto da = dequantize<double>(qa).to_vector(), db = dequantize<double>(qb).to_vector();
      int differ = 0;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double mag = 0;
          for (int64_t k = 0; k < K; ++k) mag += std::abs(da[i * K + k] * db[k * N + j]);
          const double e = exact[i * N + j], f = fast[i * N + j];
          INFO("recipe ", int(r), " at ", i, ",", j);
          CHECK(std::abs(f - e) <= double(K + 2) * std::ldexp(mag, -24) + ulp_of<float>(std::abs(e)));
          differ += f != e;
        }
      CHECK(differ > 0);  // (the fast path does round: the two are not the same computation)
    }
  }
}

namespace {
// t with dim d zero-padded to a multiple of 16
Tensor<float> padded16(const Tensor<float>& t, int64_t d) {
  const int64_t n = t.size(d), p = (n + 15) / 16 * 16;
  Shape s = t.sizes();
  s[d] = p;
  Tensor<float> z = zeros<float>(s);
  z.narrow(d, 0, n).copy_(t);
  return z;
}
// |a - b| <= tol * (|A| |B|) elementwise, A [M, K], B [K, N]
void check_near_product(const Tensor<float>& got, const Tensor<float>& A, const Tensor<float>& B, double tol) {
  auto g = got.to<double>().to_vector(), a = A.to<double>().to_vector(), b = B.to<double>().to_vector();
  const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        want += a[i * K + k] * b[k * N + j];
        mag += std::abs(a[i * K + k] * b[k * N + j]);
      }
      CHECK(std::abs(g[i * N + j] - want) <= tol * mag + 1e-6);
    }
}
}  // namespace

TEST_CASE("Float8Linear: FP8 forward and gradients near fp32's; micro-batches accumulate weight.grad by scaled_addmm_") {
  Generator gen(41);
  for (ScalingType r : {ScalingType::TensorWise, ScalingType::RowWise}) {
    INFO("recipe ", int(r));
    // in 40, out 24, 18 rows: every contraction padded to a multiple of 16
    nn::Float8Linear<> f(40, 24, gen, true, {.recipe = r});
    Tensor<float> x = randn<float>({2, 9, 40}, gen);
    x.requires_grad_(true);
    Tensor<float> y = f(x);
    CHECK(y.sizes() == Shape{2, 9, 24});
    Tensor<float> x2 = x.detach().reshape({18, 40}), W = f.weight.detach();
    // e4m3 keeps 4 significant bits: each product within 2 * 2^-4 (+ its square) of fp32's
    check_near_product(Tensor<float>(y.detach().reshape({18, 24}) - f.bias.detach()), x2, W.mT().contiguous(), 0.13);
    Tensor<float> G = randn<float>({2, 9, 24}, gen);
    Tensor<float>(y * G).sum().backward();
    Tensor<float> G2 = G.reshape({18, 24});
    // e5m2 keeps 3: within 2^-3 + 2^-4 + their product
    check_near_product(x.grad().reshape({18, 40}), G2, W, 0.2);
    check_near_product(f.weight.grad(), G2.mT().contiguous(), x2, 0.2);
    Tensor<float> db = sum(G2, {0});
    for (int64_t j = 0; j < 24; ++j) CHECK(std::abs(f.bias.grad().to_vector()[j] - db.to_vector()[j]) <= 1e-5f);
    // a second micro-batch: weight.grad += dY^T X in one scaled_addmm_ (one rounding), what the
    // same quantization gives through the public functions
    Tensor<float> before = f.weight.grad().clone();
    const float* storage = f.weight.grad().data_ptr();
    Tensor<float> xb = randn<float>({18, 40}, gen), Gb = randn<float>({18, 24}, gen);
    Tensor<float>(f(xb) * Gb).sum().backward();
    auto qa = quantize<float8_e5m2>(padded16(Gb.mT().contiguous(), 1), r);
    auto qb = quantize<float8_e4m3fn>(padded16(xb, 0), r, {.dim = 0});
    auto want = scaled_addmm(before, qa.data, qb.data, qa.scale, qa.recipe, qb.scale, qb.recipe);
    CHECK(f.weight.grad().data_ptr() == storage);
    CHECK(f.weight.grad().to_vector() == want.to_vector());
    // autograd::grad does not accumulate: the plain product, weight.grad untouched
    Tensor<float> wgrad = autograd::grad({Tensor<float>(Tensor<float>(f(xb) * Gb).sum())}, {f.weight})[0];
    CHECK(wgrad.to_vector() == scaled_mm<float>(qa.data, qb.data, qa.scale, qa.recipe, qb.scale, qb.recipe).to_vector());
    CHECK(f.weight.grad().to_vector() == want.to_vector());
  }
  Tensor<float> w = ones<float>({4, 16});
  CHECK_THROWS_WITH_AS(nn::functional::float8_linear(ones<float>({2, 16}), w, {}, {.recipe = ScalingType::BlockWise1x128}),
                       doctest::Contains("TensorWise or RowWise"), value_error);
  CHECK_THROWS_WITH_AS(nn::functional::float8_linear(ones<float>({2, 8}), w), doctest::Contains("do not match"), value_error);
}

TEST_CASE("quantize's float -> FP8 encoder equals the saturating conversion on every kind of float") {
  // every 4099th float bit pattern (all exponents, NaNs and infinities included), and around
  // each FP8 value and each midpoint between neighbours (ties to even, the subnormal edge)
  auto same = [](float v) {
    CHECK(detail::fp8_code_saturating<detail::e4m3fn_format>(v) == to_float8_e4m3fn(v, true).bits());
    CHECK(detail::fp8_code_saturating<detail::e5m2_format>(v) == to_float8_e5m2(v, true).bits());
  };
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) same(std::bit_cast<float>(static_cast<uint32_t>(u)));
  for (int c = 0; c < 256; ++c)
    for (double x : {double(float8_e4m3fn::from_bits(uint8_t(c))), double(float8_e5m2::from_bits(uint8_t(c)))}) {
      if (!std::isfinite(x)) continue;
      for (double m : {x, x * (1 + 1.0 / 32), x * (1 + 1.0 / 16), x * (1 + 1.0 / 8), x + std::ldexp(1.0, -10), x + std::ldexp(1.0, -17)}) {
        const float f = static_cast<float>(m);
        for (float g : {f, std::nextafter(f, 0.0f), std::nextafter(f, 1e30f), -f})
          same(g);
      }
    }
}
