#pragma once
// GPU timing for the CUDA benchmarks: cudaEvents recorded on reel's current stream around
// each run of f, after untimed warm-up runs (which also fill the caching allocator).
#include <algorithm>
#include <vector>

#include <reel/cuda.hpp>

// Median milliseconds of `reps` runs of f after `warm` untimed ones.
template <class F>
double median_ms(F&& f, int warm = 3, int reps = 15) {
  cudaStream_t s = reel::gpu::current_stream();
  for (int i = 0; i < warm; ++i) f();
  cudaEvent_t a, b;
  REEL_CUDA_CHECK(cudaEventCreate(&a));
  REEL_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    REEL_CUDA_CHECK(cudaEventRecord(a, s));
    f();
    REEL_CUDA_CHECK(cudaEventRecord(b, s));
    REEL_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    REEL_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  REEL_CUDA_CHECK(cudaEventDestroy(a));
  REEL_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
