// reel::distributed on MPI (issue 20), run under mpirun (e.g. `mpirun -np 2
// build/bench/benchmarks/bench_distributed`, OMP_NUM_THREADS=1 when ranks share the cores):
//  1. all_reduce (float, SUM) against MPI_Allreduce on a plain buffer in the same process
//     (the baseline), per message size: median time, the bus bandwidth 2 (n - 1) / n * bytes / t
//     (nccl-tests' and osu's convention) and the ratio;
//  2. DistributedDataParallel on an MLP (8 layers, width 512, batch 64 per rank, float; 2 MiB
//     buckets): the step time with DDP, without communication (the same model, local), and the
//     time of one synchronous all-reduce of every gradient; hidden = the part of that
//     all-reduce time the DDP step does not add to the local step (overlap with backward).
#include <cstdio>
#include <reel/distributed.hpp>
#include <reel/reel.hpp>
#include <vector>

#include "median_timer.hpp"

using namespace reel;
namespace dist = reel::distributed;
using TF = Tensor<float>;

int main() {
  dist::init_process_group(dist::Backend::MPI);
  const int n = dist::world_size(), r = dist::rank();
  if (r == 0) std::printf("reel::distributed on MPI, %d ranks\n\n", n);
  // 1. all_reduce against MPI_Allreduce
  if (r == 0)
    std::printf("%10s %12s %12s %12s %12s %8s\n", "bytes", "MPI us", "reel us", "MPI GB/s", "reel GB/s", "x MPI");
  for (int64_t bytes = 1024; bytes <= (int64_t(64) << 20); bytes *= 8) {
    const int64_t count = bytes / 4;
    TF t = ones<float>({count});
    std::vector<float> raw(static_cast<size_t>(count), 1.0f);
    const int reps = bytes >= (int64_t(8) << 20) ? 5 : 21, inner = bytes >= (int64_t(1) << 20) ? 1 : 20;
    auto mpi = [&] {
      MPI_Allreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    };
    auto ours = [&] { dist::all_reduce(t); };
    dist::barrier();
    auto p = reel_bench::paired_seconds(mpi, ours, reps, inner);
    const double bus = 2.0 * (n - 1) / n * static_cast<double>(bytes);
    if (r == 0)
      std::printf("%10lld %12.1f %12.1f %12.2f %12.2f %8.2f\n", static_cast<long long>(bytes), p.base * 1e6, p.cand * 1e6,
                  bus / p.base / 1e9, bus / p.cand / 1e9, p.cand / p.base);
  }
  // 2. DistributedDataParallel
  const int64_t layers = 8, width = 512, batch = 64;
  Generator g(1);
  std::vector<TF> params, local;
  for (int64_t l = 0; l < layers; ++l) {
    TF w = randn<float>({width, width}, g) * (1.0f / 24), b = zeros<float>({width});
    params.push_back(w.clone().requires_grad_());
    params.push_back(b.clone().requires_grad_());
    local.push_back(w.clone().requires_grad_());
    local.push_back(b.clone().requires_grad_());
  }
  nn::parallel::DistributedDataParallel<float> ddp(params, {.bucket_cap_mb = 2});
  TF x = randn<float>({batch, width}, g);
  auto step = [&](std::vector<TF>& p) {
    TF h = x;
    for (int64_t l = 0; l < layers; ++l) h = TF(tanh(matmul(h, p[2 * l]) + p[2 * l + 1]));
    mean(TF(h * h)).backward();
    for (auto& q : p) q.set_grad(TF());
  };
  int64_t total = 0;
  for (auto& p : params) total += p.numel();
  TF all = ones<float>({total});
  auto with_ddp = [&] { step(params); };
  auto without = [&] { step(local); };
  auto comm = [&] { dist::all_reduce(all); };
  for (int w = 0; w < 3; ++w) {
    with_ddp();
    without();
  }
  dist::barrier();
  std::vector<double> td, tl, tc;
  for (int k = 0; k < 9; ++k) {
    td.push_back(reel_bench::batch_seconds(with_ddp, 1));
    tl.push_back(reel_bench::batch_seconds(without, 1));
    tc.push_back(reel_bench::batch_seconds(comm, 1));
  }
  const double d = reel_bench::median(td), l = reel_bench::median(tl), c = reel_bench::median(tc);
  const double hidden = n > 1 && c > 0 ? std::max(0.0, std::min(1.0, (l + c - d) / c)) : 0.0;
  if (r == 0) {
    std::printf("\nDDP: %lld layers, width %lld, batch %lld per rank, float, %d bucket(s), %.1f MiB of gradients\n",
                static_cast<long long>(layers), static_cast<long long>(width), static_cast<long long>(batch),
                static_cast<int>(ddp.bucket_count()), static_cast<double>(total) * 4 / (1 << 20));
    std::printf("step with DDP %.2f ms, local step %.2f ms, one all-reduce of every gradient %.2f ms, hidden %.0f%%\n",
                d * 1e3, l * 1e3, c * 1e3, hidden * 100);
  }
  dist::destroy_process_group();
  return 0;
}
