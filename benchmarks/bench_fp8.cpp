// FP8 scaled GEMM on the CPU (issue 17), n x n x n, one process, baseline and candidate timed
// in alternating batches (median_timer.hpp):
//   1. the fast path (use_fast_accum = true: operands decoded to float with their scales
//      folded in, one float GEMM) against the float GEMM (matmul) of the same shape, per
//      recipe: float GEMM time / scaled_mm time (goal >= 0.8, decoding included);
//   2. the exact reference (use_fast_accum = false: a double GEMM per scaling block) against
//      the same float GEMM;
//   3. quantize's cost, against the float GEMM.
// mat_b is passed as PyTorch passes it, the transpose of a contiguous [N, K] weight.
// Usage: bench_fp8 [n]   (default 1024)
#include <reel/reel.hpp>

#include <cstdio>
#include <cstdlib>

#include "median_timer.hpp"

using namespace reel;
using namespace reel::nn::functional;

namespace {
volatile double sink = 0;
}

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 1024;
  const int reps = n >= 1024 ? 7 : 21;
  Generator gen(11);
  Tensor<float> x = randn<float>({n, n}, gen), w = randn<float>({n, n}, gen);  // w: [N, K]
  Tensor<float> wt = w.mT().contiguous();                                      // [K, N] for matmul
  std::printf("%-46s %12s %12s %8s\n", "case (n = ", "float GEMM", "scaled_mm", "ratio");
  std::printf("%-46s\n", (std::to_string(n) + ", ms per call)").c_str());
  auto gemm = [&] { sink = sink + matmul(x, wt).data_ptr()[0]; };
  auto row = [&](const char* name, auto&& f) {
    f();
    auto p = reel_bench::paired_seconds(gemm, f, reps);
    std::printf("%-46s %12.2f %12.2f %7.2fx\n", name, p.base * 1e3, p.cand * 1e3, p.ratio);
  };
  struct R {
    const char* name;
    ScalingType r;
  };
  for (R r : {R{"TensorWise", ScalingType::TensorWise}, R{"RowWise", ScalingType::RowWise},
              R{"BlockWise1x128", ScalingType::BlockWise1x128}, R{"BlockWise1x32 (MXFP8)", ScalingType::BlockWise1x32}}) {
    auto qa = quantize<float8_e4m3fn>(x, r.r), qb = quantize<float8_e4m3fn>(w, r.r);
    // (1x128: scale_b [K / 128, N] is the transpose of w's [N, K / 128]; RowWise likewise)
    Scales sb = r.r == ScalingType::RowWise || r.r == ScalingType::BlockWise1x128
                    ? Scales(qb.scale.list[0].as<float>().mT())
                    : qb.scale;
    auto b = qb.data.mT();
    row((std::string("fast path, ") + r.name).c_str(), [&] {
      sink = sink + scaled_mm<float>(qa.data, b, qa.scale, qa.recipe, sb, qb.recipe, {.use_fast_accum = true})
                        .data_ptr()[0];
    });
    if (r.r == ScalingType::TensorWise || r.r == ScalingType::BlockWise1x128)
      row((std::string("exact reference, ") + r.name).c_str(),
          [&] { sink = sink + scaled_mm<float>(qa.data, b, qa.scale, qa.recipe, sb, qb.recipe).data_ptr()[0]; });
  }
  auto nvfp4_a = quantize<float4_e2m1fn_x2>(x, ScalingType::BlockWise1x16, {.two_level = true});
  auto nvfp4_b = quantize<float4_e2m1fn_x2>(w, ScalingType::BlockWise1x16, {.two_level = true});
  row("exact reference, NVFP4 (BlockWise1x16, two-level)", [&] {
    sink = sink + scaled_mm<float>(nvfp4_a.data, nvfp4_b.data.mT(), nvfp4_a.scale, nvfp4_a.recipe, nvfp4_b.scale,
                                   nvfp4_b.recipe)
                      .data_ptr()[0];
  });
  row("quantize, TensorWise", [&] { sink = sink + quantize<float8_e4m3fn>(x, ScalingType::TensorWise).data.numel(); });
  row("quantize, BlockWise1x32", [&] { sink = sink + quantize<float8_e4m3fn>(x, ScalingType::BlockWise1x32).data.numel(); });
  return 0;
}
