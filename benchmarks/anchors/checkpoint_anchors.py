"""The reference implementation on the file bench_checkpoint writes (issue 18's benchmark rows).

    build/bench/benchmarks/bench_checkpoint --keep     # leaves /tmp/reel_bench_checkpoint.{safetensors,pt}
    python benchmarks/anchors/checkpoint_anchors.py [file]

Needs torch (2.15.0) and safetensors (0.8.0) from PyPI; never run in CI. Page cache warm,
median of 5 runs, like bench_checkpoint.
"""
import os
import resource
import statistics
import sys
import time

import torch
import safetensors
import safetensors.torch as st


def median_time(f, reps=5):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/reel_bench_checkpoint.safetensors"
    size = os.path.getsize(path)
    gb = size / 1e9
    t_load = median_time(lambda: st.load_file(path))
    sd = st.load_file(path)
    out = path + ".torch"
    t_save = median_time(lambda: st.save_file(sd, out))
    os.remove(out)
    grow = []

    def lazy():
        before = rss_mib()
        with st.safe_open(path, framework="pt") as f:
            x = f.get_slice("layers.7.weight")[0:1]
        grow.append(rss_mib() - before)
    t_lazy = median_time(lazy)
    t_torch_save = median_time(lambda: torch.save(sd, path + ".pt"))
    t_torch_load = median_time(lambda: torch.load(path + ".pt", weights_only=True))
    t_torch_mmap = median_time(lambda: torch.load(path + ".pt", weights_only=True, mmap=True))
    t_torch_meta = median_time(lambda: torch.load(path + ".pt", weights_only=True, map_location="meta"))
    os.remove(path + ".pt")
    reel_pt = os.path.splitext(path)[0] + ".pt"  # the .pt file reel wrote, read by torch.load
    t_reel_pt = median_time(lambda: torch.load(reel_pt, weights_only=True)) if os.path.exists(reel_pt) else float("nan")
    print(f"safetensors {safetensors.__version__}, torch {torch.__version__}, {size / 2**30:.2f} GiB, page cache warm")
    print(f"safetensors.torch.load_file      {t_load * 1e3:8.1f} ms  {gb / t_load:6.2f} GB/s")
    print(f"safetensors.torch.save_file      {t_save * 1e3:8.1f} ms  {gb / t_save:6.2f} GB/s")
    print(f"safe_open + one row (lazy)       {t_lazy * 1e3:8.2f} ms  RSS +{statistics.median(grow):.1f} MiB")
    print(f"torch.save (.pt, same tensors)   {t_torch_save * 1e3:8.1f} ms  {gb / t_torch_save:6.2f} GB/s")
    print(f"torch.load (.pt, weights_only)   {t_torch_load * 1e3:8.1f} ms  {gb / t_torch_load:6.2f} GB/s")
    print(f"torch.load (.pt, mmap=True)      {t_torch_mmap * 1e3:8.2f} ms")
    print(f"torch.load (.pt, map_location=meta) {t_torch_meta * 1e3:5.2f} ms")
    print(f"torch.load of reel's .pt file    {t_reel_pt * 1e3:8.1f} ms  {gb / t_reel_pt:6.2f} GB/s")


if __name__ == "__main__":
    main()
