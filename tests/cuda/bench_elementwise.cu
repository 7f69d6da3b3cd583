// Bandwidth of reel's elementwise kernels against a device-to-device copy in the same process.
// Prints one line per case: effective GB/s (bytes read + written / time) and the ratio to the
// copy's GB/s. Goal: a * b + c >= 0.85 of the copy.
#include <algorithm>
#include <cstdio>
#include <reel/cuda.hpp>

#include "bench_timing.cuh"
#include <vector>

using namespace reel;


int main() {
  if (!gpu::is_available()) {
    std::printf("bench_elementwise: no CUDA device\n");
    return 1;
  }
  const int64_t n = int64_t(1) << 28;  // 1 GiB per float tensor
  const double gb = static_cast<double>(n) * sizeof(float) / 1e9;
  Generator g(1);
  auto a = rand<float, CUDA>({n}, g), b = rand<float, CUDA>({n}, g), c = rand<float, CUDA>({n}, g);
  auto out = empty<float, CUDA>({n});

  double copy_ms = median_ms([&] {
    REEL_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), a.data_ptr(), n * sizeof(float), cudaMemcpyDeviceToDevice,
                                    gpu::current_stream()));
  });
  double copy_bw = 2 * gb / (copy_ms * 1e-3);
  std::printf("elementwise copy_d2d        ms=%8.3f GB/s=%7.1f\n", copy_ms, copy_bw);

  auto report = [&](const char* name, double ms, double bytes_gb) {
    double bw = bytes_gb / (ms * 1e-3);
    std::printf("elementwise %-16s ms=%8.3f GB/s=%7.1f ratio_to_copy=%.3f\n", name, ms, bw, bw / copy_bw);
  };
  report("a*b+c", median_ms([&] { out.copy_(a * b + c); }), 4 * gb);
  report("a*b+c_rebind", median_ms([&] { Tensor<float, CUDA> y = a * b + c; }), 4 * gb);
  auto row = rand<float, CUDA>({1 << 14}, g);
  auto a2 = a.view({n >> 14, 1 << 14}), o2 = out.view({n >> 14, 1 << 14});
  report("a*row_bcast", median_ms([&] { o2.copy_(a2 * row); }), 2 * gb);
  auto at = a.view({1 << 14, n >> 14}).transpose(0, 1);  // [n >> 14, 1 << 14], strided
  report("transpose_copy", median_ms([&] { o2.copy_(at); }, 3, 5), 2 * gb);
  auto ah = a.to<reel::half>(), bh = b.to<reel::half>(), ch = c.to<reel::half>();
  auto oh = empty<reel::half, CUDA>({n});
  report("a*b+c_half", median_ms([&] { oh.copy_(ah * bh + ch); }), 2 * gb);
  return 0;
}
