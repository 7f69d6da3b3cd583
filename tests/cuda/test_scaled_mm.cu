// FP8 / FP4 scaled_mm, scaled_addmm and scaled_addmm_ on CUDA (cuBLASLt) against the CPU's
// exact reference on the same quantized operands: every recipe the device has (the others
// must raise not_implemented_error naming the capability they need), operands in PyTorch's
// layout and in others, bias, alpha / beta, two-level NVFP4 scales. The bound is not fp32
// accumulation's ((K + 2) 2^-24 sum |a_k b_k|, which the first run on an H200 exceeded by up to
// a few times on 2% of the elements): Hopper's FP8 tensor cores add a block of products with
// about 14 bits kept (DeepSeek-V3's report, section 3.3.2) before cuBLASLt promotes the block's
// sum to fp32, so the bound is 2^-8 sum |a_k b_k| (32-product blocks, each off by up to 2^-13
// of its magnitude, and twice that), plus two units of the output type. A wrong scale or
// layout is off by about |result| ~ sum |a_k b_k| / sqrt(K), far past it.
// (No main here: the CUDA test executable links tests/cuda/main.cpp.)
#include "common.cuh"

using namespace rt;
namespace F = reel::nn::functional;
using F::ScalingType;
using F::SwizzleType;

namespace {

template <class Out>
double unit_of(double v) {
  const int digits = std::is_same_v<Out, float> ? 24 : std::is_same_v<Out, reel::half> ? 11 : 8;
  return v == 0 ? 0 : std::ldexp(1.0, std::ilogb(v) - digits + 1);
}
// |got - want| within the fp32 accumulation bound; mag[i]: sum_k |a_k s_a b_k s_b| (+ |beta c| + |bias|)
template <class Out>
void check_within(const Tensor<Out, CPU>& got, const Tensor<Out, CPU>& want, const std::vector<double>& mag, int64_t K) {
  auto g = got.template to<double>().to_vector(), w = want.template to<double>().to_vector();
  REQUIRE(g.size() == w.size());
  int bad = 0;
  double worst = 0;  // the largest |got - want| / sum |a_k b_k| seen, beyond the output's rounding
  for (size_t i = 0; i < g.size(); ++i) {
    const double off = std::abs(g[i] - w[i]), units = 2 * unit_of<Out>(std::abs(w[i]));
    bad += !(off <= std::ldexp(mag[i], -8) + units);
    if (mag[i] > 0) worst = std::max(worst, std::max(off - units, 0.0) / mag[i]);
  }
  CHECK(bad == 0);
  (void)K;
  MESSAGE("K = ", K, ": largest error beyond the output's rounding: 2^", worst > 0 ? std::log2(worst) : -1000.0,
          " of sum |a_k b_k|");
}
// sum_k |a_k| |b_k| over the dequantized operands ([M, K] and [K, N] doubles)
std::vector<double> magnitudes(const std::vector<double>& a, const std::vector<double>& b, int64_t M, int64_t K, int64_t N) {
  std::vector<double> m(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) m[i * N + j] += std::abs(a[i * K + k] * b[k * N + j]);
  return m;
}
template <class T>
Tensor<T, CPU> host_of(const Tensor<T, CUDA>& t) {
  return t.template to_device<CPU>();
}
// A scale (any of the Scales' tensors) moved to the device.
F::Scales dev_scales(const F::Scales& s) {
  F::Scales r = s;
  for (auto& t : r.list)
    t = t.visit([](const auto& x) -> AnyTensor { return AnyTensor(x.contiguous().template to_device<CUDA>()); });
  return r;
}
// Runs f; true when it ran, false when the device lacks the recipe (not_implemented_error).
template <class F_>
bool runs_here(const char* what, F_&& f) {
  try {
    f();
    return true;
  } catch (const not_implemented_error& e) {
    MESSAGE((std::string(what) + ": " + e.what()));
    return false;
  }
}

template <class Q, class Qb, class Out>
void check_recipe(const char* name, ScalingType r, ScalingType rb, SwizzleType sw, bool two_level, int64_t M, int64_t N,
                  int64_t K) {
  INFO(std::string(name));
  auto xa = host_randn<float>({M, K}), w = host_randn<float>({N, K});
  // mat_a quantized per row; mat_b = W^T with W quantized along K (PyTorch's layout: b = W.t())
  auto qa = F::quantize<Q>(xa, r, {.swizzle = sw, .two_level = two_level});
  auto qw = F::quantize<Qb>(w, rb, {.swizzle = sw, .two_level = two_level});
  F::Scales sb = qw.scale;
  if (rb == ScalingType::RowWise || rb == ScalingType::BlockWise1x128 || rb == ScalingType::BlockWise128x128)
    sb.list[0] = AnyTensor(sb.list[0].template as<float>().mT());  // ([K blocks, N] layouts)
  auto b = qw.data.mT();
  auto want = F::scaled_mm<Out>(qa.data, b, qa.scale, qa.recipe, sb, qw.recipe, {.swizzle_a = sw, .swizzle_b = sw});
  auto mag = magnitudes(F::dequantize<double>(qa).to_vector(), F::dequantize<double>(qw).mT().contiguous().to_vector(),
                        M, K, N);
  auto a_dev = dev(qa.data);
  auto b_dev = dev(qw.data).mT();
  const auto sa_dev = dev_scales(qa.scale), sb_dev = dev_scales(sb);
  Tensor<Out, CUDA> got;
  if (!runs_here(name, [&] {
        got = F::scaled_mm<Out>(a_dev, b_dev, sa_dev, qa.recipe, sb_dev, qw.recipe, {.swizzle_a = sw, .swizzle_b = sw});
      }))
    return;
  check_within(host_of(got), want, mag, K);
  // mat_b as a row-major [K, N] tensor (copied into cuBLASLt's layout), the same values
  auto got2 = F::scaled_mm<Out>(a_dev, Tensor<Qb, CUDA>(dev(Tensor<Qb>(qw.data.mT().contiguous()))), sa_dev, qa.recipe,
                                sb_dev, qw.recipe, {.swizzle_a = sw, .swizzle_b = sw});
  CHECK(host_of(got2).template to<float>().to_vector() == host_of(got).template to<float>().to_vector());
}

}  // namespace

TEST_CASE("cuda scaled_mm: every recipe the device has matches the CPU reference") {
  REQUIRE_GPU();
  using e4 = float8_e4m3fn;
  using e5 = float8_e5m2;
  using f4 = float4_e2m1fn_x2;
  const auto TW = ScalingType::TensorWise, RW = ScalingType::RowWise, B128 = ScalingType::BlockWise1x128,
             B128x128 = ScalingType::BlockWise128x128, X32 = ScalingType::BlockWise1x32, X16 = ScalingType::BlockWise1x16;
  const auto NS = SwizzleType::NoSwizzle, S44 = SwizzleType::Swizzle_32_4_4;
  check_recipe<e4, e4, bfloat16>("TensorWise e4m3 x e4m3 -> bf16", TW, TW, NS, false, 256, 128, 512);
  check_recipe<e5, e4, float>("TensorWise e5m2 x e4m3 -> f32", TW, TW, NS, false, 96, 64, 256);
  check_recipe<e4, e5, reel::half>("TensorWise e4m3 x e5m2 -> f16", TW, TW, NS, false, 64, 48, 128);
  check_recipe<e4, e4, bfloat16>("RowWise", RW, RW, NS, false, 256, 128, 512);
  check_recipe<e4, e4, float>("BlockWise1x128 x 1x128", B128, B128, NS, false, 256, 256, 640);
  check_recipe<e4, e4, bfloat16>("BlockWise1x128 x 128x128", B128, B128x128, NS, false, 256, 256, 640);
  check_recipe<e4, e4, bfloat16>("BlockWise128x128 x 1x128", B128x128, B128, NS, false, 256, 256, 640);
  check_recipe<e4, e4, bfloat16>("MXFP8, swizzled scales", X32, X32, S44, false, 256, 128, 512);
  check_recipe<e4, e4, bfloat16>("MXFP8, plain scales (swizzled by reel)", X32, X32, NS, false, 200, 128, 320);
  check_recipe<f4, f4, bfloat16>("NVFP4", X16, X16, S44, false, 256, 128, 512);
  check_recipe<f4, f4, float>("NVFP4, two-level scales", X16, X16, S44, true, 256, 128, 512);
  // MXFP4 has no cuBLASLt kernel
  auto q = F::quantize<f4>(host_randn<float>({32, 64}), X32);
  auto qd = dev(q.data);
  CHECK_THROWS_AS(F::scaled_mm(qd, qd.mT(), dev_scales(q.scale), X32, dev_scales(q.scale), X32), not_implemented_error);
}

TEST_CASE("cuda scaled_mm: bias, scaled_addmm and scaled_addmm_ (C = input in the GEMM)") {
  REQUIRE_GPU();
  const int64_t M = 128, N = 64, K = 256;
  auto qa = F::quantize<float8_e4m3fn>(host_randn<float>({M, K}), ScalingType::TensorWise);
  auto qb = F::quantize<float8_e4m3fn>(host_randn<float>({K, N}), ScalingType::TensorWise, {.dim = 0});
  auto a = dev(qa.data), b = dev(qb.data);
  const auto sa = dev_scales(qa.scale), sb = dev_scales(qb.scale);
  const auto TW = ScalingType::TensorWise;
  bool ok = runs_here("TensorWise", [&] { (void)F::scaled_mm(a, b, sa, TW, sb, TW); });
  if (!ok) return;
  auto mag = magnitudes(F::dequantize<double>(qa).to_vector(), F::dequantize<double>(qb).to_vector(), M, K, N);
  auto bias = host_randn<bfloat16>({N});
  auto want_b = F::scaled_mm(qa.data, qb.data, qa.scale, TW, qb.scale, TW, {.bias = bias});
  auto mag_b = mag;
  for (int64_t i = 0; i < M * N; ++i) mag_b[i] += std::abs(double(float(bias.to_vector()[i % N])));
  check_within(host_of(F::scaled_mm(a, b, sa, TW, sb, TW, {.bias = dev(bias)})), want_b, mag_b, K);
  auto input = host_randn<float>({M, N});
  auto want = F::scaled_addmm(input, qa.data, qb.data, qa.scale, TW, qb.scale, TW, {.beta = 0.5, .alpha = 2.0});
  auto mag2 = mag;
  auto iv = input.to_vector();
  for (int64_t i = 0; i < M * N; ++i) mag2[i] = 2 * mag2[i] + 0.5 * std::abs(double(iv[i]));
  auto in_dev = dev(input);
  auto got = F::scaled_addmm(in_dev, a, b, sa, TW, sb, TW, {.beta = 0.5, .alpha = 2.0});
  check_within(host_of(got), want, mag2, K);
  const float* before = in_dev.data_ptr();
  auto& same = F::scaled_addmm_(in_dev, a, b, sa, TW, sb, TW, {.beta = 0.5, .alpha = 2.0});
  CHECK(&same == &in_dev);
  CHECK(in_dev.data_ptr() == before);
  CHECK(host_of(in_dev).to_vector() == host_of(got).to_vector());
  // beta = 0: a NaN input does not leak
  auto nan_in = full<float, CUDA>({M, N}, std::numeric_limits<float>::quiet_NaN());
  for (float v : host_of(F::scaled_addmm(nan_in, a, b, sa, TW, sb, TW, {.beta = 0.0})).to_vector()) CHECK(!std::isnan(v));
  // K == 0: beta * input
  auto a0 = dev(empty<float8_e4m3fn>({M, 0})), b0 = dev(empty<float8_e4m3fn>({0, N}));
  for (float v : host_of(F::scaled_addmm(full<float, CUDA>({M, N}, 1.0f), a0, b0, sa, TW, sb, TW, {.beta = 3.0})).to_vector())
    CHECK(v == 3.0f);
}

TEST_CASE("cuda quantize / dequantize: the same codes, scales and values as the CPU for every recipe") {
  REQUIRE_GPU();
  using e4 = float8_e4m3fn;
  auto x = host_randn<float>({136, 288});
  x = Tensor<float>(x * 3.0f);
  auto same = [&]<class Q>(ScalingType r, F::QuantizeOptions o) {
    auto c = F::quantize<Q>(x, r, o);
    auto g = F::quantize<Q>(dev(x), r, o);
    auto bits = [](const Tensor<Q, CPU>& t) {
      std::vector<int> b;
      for (const Q& v : t.contiguous().to_vector()) b.push_back(v.bits());
      return b;
    };
    CHECK(bits(host_of(g.data)) == bits(c.data));
    // dequantize on the device: the CPU's values
    CHECK(host_of(F::dequantize(g)).to_vector() == F::dequantize(c).to_vector());
    REQUIRE(g.scale.list.size() == c.scale.list.size());
    for (size_t k = 0; k < c.scale.list.size(); ++k) {
      auto values = [](const AnyTensor& t) -> std::vector<double> {
        auto on_host = [&]<class S>() {
          Tensor<S, CPU> h = t.device() == DeviceType::CPU ? t.template as<S>() : host_of(t.template as<S, CUDA>());
          return h.template to<double>().to_vector();
        };
        if (t.dtype() == ScalarType::Float) return on_host.template operator()<float>();
        if (t.dtype() == ScalarType::Float8_e8m0fnu) return on_host.template operator()<float8_e8m0fnu>();
        return on_host.template operator()<e4>();
      };
      const AnyTensor& gs = g.scale.list[k];
      auto cs = values(c.scale.list[k]), gv = values(gs);
      CHECK(gs.sizes() == c.scale.list[k].sizes());
      CHECK(gv == cs);
    }
  };
  for (auto r : {ScalingType::TensorWise, ScalingType::RowWise, ScalingType::BlockWise1x128, ScalingType::BlockWise128x128})
    for (int64_t d : {-1, 0}) {
      same.template operator()<e4>(r, {.dim = d});
      same.template operator()<float8_e5m2>(r, {.dim = d});
    }
  same.template operator()<e4>(ScalingType::BlockWise1x32, {.swizzle = SwizzleType::Swizzle_32_4_4});
  same.template operator()<float4_e2m1fn_x2>(ScalingType::BlockWise1x32, {.dim = 0});
  same.template operator()<float4_e2m1fn_x2>(ScalingType::BlockWise1x16, {.swizzle = SwizzleType::Swizzle_32_4_4, .two_level = true});
}

TEST_CASE("cuda Float8Linear: forward and gradients match the CPU's within FP8 GEMM rounding") {
  REQUIRE_GPU();
  Generator g1(5), g2(5);
  nn::Float8Linear<CPU> c(48, 40, g1);
  nn::Float8Linear<CUDA> d(48, 40, g2);
  d.weight = dev(c.weight.detach()).requires_grad_(true);
  d.bias = dev(c.bias.detach()).requires_grad_(true);
  auto x = host_randn<float>({20, 48});
  Tensor<float> xc = x.clone().requires_grad_(true);
  Tensor<float, CUDA> xd = dev(x).requires_grad_(true);
  Tensor<float> yc = c(xc);
  Tensor<float, CUDA> yd;
  if (!runs_here("Float8Linear (TensorWise)", [&] { yd = d(xd); })) return;
  CHECK_CLOSE_T(host_of(yd.detach()), yc.detach(), 1e-3, 1e-4);
  auto G = host_randn<float>({20, 40});
  Tensor<float>(yc * G).sum().backward();
  Tensor<float, CUDA>(yd * dev(G)).sum().backward();
  CHECK_CLOSE_T(host_of(xd.grad()), xc.grad(), 1e-3, 1e-4);
  CHECK_CLOSE_T(host_of(d.weight.grad()), c.weight.grad(), 1e-3, 1e-4);
}
