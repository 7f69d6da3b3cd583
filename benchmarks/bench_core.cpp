// Core benchmarks (issue 2): fused elementwise expressions, broadcasting, sum, matmul and
// per-op overhead, each against a baseline measured in the same process.
#include <reel/reel.hpp>

#include "ratio_reporter.hpp"

using namespace reel;
using ArrF = Eigen::Array<float, Eigen::Dynamic, 1>;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

static constexpr int64_t kN = 10'000'000;

// y.copy_(a * b + c) vs Eigen's one-core array expression y = a * b + c.
static void fma_copy_baseline(benchmark::State& st) {
  ArrF a = ArrF::Random(kN), b = ArrF::Random(kN), c = ArrF::Random(kN), y(kN);
  for (auto _ : st) {
    y = a * b + c;
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(st.iterations() * kN * 16);
}
static void fma_copy_reel(benchmark::State& st) {
  Generator g(0);
  auto a = rand<float>({kN}, g), b = rand<float>({kN}, g), c = rand<float>({kN}, g), y = empty<float>({kN});
  for (auto _ : st) {
    y.copy_(a * b + c);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  st.SetBytesProcessed(st.iterations() * kN * 16);
}
BENCHMARK(fma_copy_baseline)->Name("fma_1e7_copy/baseline")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(fma_copy_reel)->Name("fma_1e7_copy/reel")->Unit(benchmark::kMicrosecond)->UseRealTime();

// The rebinding form y = a * b + c (a fresh result each step, recycled by the allocator).
static void fma_rebind_reel(benchmark::State& st) {
  Generator g(0);
  auto a = rand<float>({kN}, g), b = rand<float>({kN}, g), c = rand<float>({kN}, g);
  Tensor<float> y;
  for (auto _ : st) {
    y = a * b + c;
    benchmark::DoNotOptimize(y.data_ptr());
  }
  st.SetBytesProcessed(st.iterations() * kN * 16);
}
BENCHMARK(fma_copy_baseline)->Name("fma_1e7_rebind/baseline")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(fma_rebind_reel)->Name("fma_1e7_rebind/reel")->Unit(benchmark::kMicrosecond)->UseRealTime();

// [4096, 4096] + [4096] broadcast.
static void bcast_baseline(benchmark::State& st) {
  MatF m = MatF::Random(4096, 4096), y(4096, 4096);
  Eigen::RowVectorXf v = Eigen::RowVectorXf::Random(4096);
  for (auto _ : st) {
    y = m.rowwise() + v;
    benchmark::DoNotOptimize(y.data());
  }
}
static void bcast_reel(benchmark::State& st) {
  Generator g(0);
  auto m = rand<float>({4096, 4096}, g), v = rand<float>({4096}, g), y = empty<float>({4096, 4096});
  for (auto _ : st) {
    y.copy_(m + v);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(bcast_baseline)->Name("broadcast_4096x4096+4096/baseline")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(bcast_reel)->Name("broadcast_4096x4096+4096/reel")->Unit(benchmark::kMicrosecond)->UseRealTime();

// sum of 1e7 floats.
static void sum_baseline(benchmark::State& st) {
  ArrF a = ArrF::Random(kN);
  for (auto _ : st) benchmark::DoNotOptimize(a.sum());
}
static void sum_reel(benchmark::State& st) {
  Generator g(0);
  auto a = rand<float>({kN}, g);
  for (auto _ : st) benchmark::DoNotOptimize(sum(a).item());
}
BENCHMARK(sum_baseline)->Name("sum_1e7/baseline")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(sum_reel)->Name("sum_1e7/reel")->Unit(benchmark::kMicrosecond)->UseRealTime();

// matmul 1024 x 1024 float.
static void mm_baseline(benchmark::State& st) {
  MatF a = MatF::Random(1024, 1024), b = MatF::Random(1024, 1024), c(1024, 1024);
  for (auto _ : st) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
}
static void mm_reel(benchmark::State& st) {
  Generator g(0);
  auto a = rand<float>({1024, 1024}, g), b = rand<float>({1024, 1024}, g);
  for (auto _ : st) {
    auto c = matmul(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
BENCHMARK(mm_baseline)->Name("matmul_1024/baseline")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(mm_reel)->Name("matmul_1024/reel")->Unit(benchmark::kMillisecond)->UseRealTime();

// Per-op overhead: elementwise ops on 8-element tensors (allocation + dispatch + eval).
static void small_ops(benchmark::State& st) {
  auto a = rand<float>({8}), b = rand<float>({8});
  Tensor<float> y;
  for (auto _ : st) {
    y = a * b;
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
static void small_ops_fused(benchmark::State& st) {
  auto a = rand<float>({8}), b = rand<float>({8});
  Tensor<float> y;
  for (auto _ : st) {
    y = exp(a) * b + 1;
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(small_ops)->Name("8_elements/per_op_mul")->Unit(benchmark::kNanosecond)->UseRealTime();
BENCHMARK(small_ops_fused)->Name("8_elements/per_op_exp_mul_add")->Unit(benchmark::kNanosecond)->UseRealTime();

int main(int argc, char** argv) { return reel_bench::run(argc, argv); }
