// Checkpoint I/O (issue 18): a state dict of 64 float32 tensors of 4M elements (1 GiB) saved to
// and loaded from a safetensors file and a .pt file (PyTorch's format), against reading the same file with plain read() calls in
// the same process (what `cat file > /dev/null` does: the baseline). The file stays in the
// page cache (warm), as after any recent save; every figure is the median of 5 runs.
//   bench_checkpoint [dir]    (the file goes to dir, default /tmp; removed at the end)
// The same files through the reference implementations (safetensors, torch.load/torch.save):
// benchmarks/anchors/checkpoint_anchors.py (bench_checkpoint --keep leaves the files for it).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <reel/io/pt.hpp>
#include <reel/io/safetensors.hpp>
#include <reel/reel.hpp>
#include <string>

#include "median_timer.hpp"

using namespace reel;

namespace {
// Resident set size of this process, in MiB (/proc/self/statm: pages).
double rss_mib() {
  std::ifstream f("/proc/self/statm");
  long size = 0, resident = 0;
  f >> size >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1 << 20);
}
// Reads the whole file with 8 MiB read() calls (the baseline: cat).
size_t read_all(const std::string& path) {
  static std::vector<char> buf(8 << 20);
  int fd = ::open(path.c_str(), O_RDONLY);
  size_t n = 0;
  for (ssize_t r; (r = ::read(fd, buf.data(), buf.size())) > 0;) n += static_cast<size_t>(r);
  ::close(fd);
  return n;
}
}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp";
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--keep") == 0)
      keep = true;
    else
      dir = argv[i];
  }
  const std::string path = dir + "/reel_bench_checkpoint.safetensors";
  const int64_t kTensors = 64, kNumel = int64_t(4) << 20;
  StateDict sd;
  Generator gen(1);
  for (int64_t i = 0; i < kTensors; ++i)
    sd["layers." + std::to_string(i) + ".weight"] = AnyTensor(rand<float>({kNumel / 1024, 1024}, gen));
  const double gib = static_cast<double>(kTensors * kNumel * 4) / (1 << 30);
  double sink = 0;

  const double t_save = reel_bench::median_seconds([&] { save_safetensors(path, sd); }, 5);
  const double t_cat = reel_bench::median_seconds([&] { sink += static_cast<double>(read_all(path)); }, 5);
  const double t_load = reel_bench::median_seconds([&] {
    StateDict back = load_safetensors(path);
    sink += static_cast<double>(back.size());
  }, 5);
  double rss_grow = 0, rss_touch = 0;
  const double t_map = reel_bench::median_seconds([&] {
    const double before = rss_mib();
    StateDict back = load_safetensors(path, {.mmap = true});
    rss_grow = rss_mib() - before;
    sink += static_cast<double>(back.at("layers.7.weight").as<float>().data_ptr()[12345]);  // touches one page
    rss_touch = rss_mib() - before;
  }, 5);
  std::printf("%-58s %10s %10s\n", "case (1 GiB: 64 x 4M float32, page cache warm)", "time", "GB/s");
  std::printf("%-58s %8.1f ms %10.2f\n", "baseline: read() of the whole file (cat)", t_cat * 1e3, gib / t_cat * 1.073741824);
  std::printf("%-58s %8.1f ms %10.2f  (%.2fx the baseline's time)\n", "load_safetensors (read)", t_load * 1e3,
              gib / t_load * 1.073741824, t_load / t_cat);
  std::printf("%-58s %8.2f ms %10s  RSS +%.1f MiB, +%.1f MiB after reading one element\n",
              "load_safetensors (mmap)", t_map * 1e3, "-", rss_grow, rss_touch);
  std::printf("%-58s %8.1f ms %10.2f\n", "save_safetensors", t_save * 1e3, gib / t_save * 1.073741824);

  // the same state dict as a .pt file
  const std::string pt = dir + "/reel_bench_checkpoint.pt";
  const double p_save = reel_bench::median_seconds([&] { save(pt, sd); }, 5);
  const double p_cat = reel_bench::median_seconds([&] { sink += static_cast<double>(read_all(pt)); }, 5);
  const double p_load = reel_bench::median_seconds([&] { sink += static_cast<double>(load(pt).size()); }, 5);
  double p_grow = 0, p_touch = 0, m_grow = 0;
  const double p_map = reel_bench::median_seconds([&] {
    const double before = rss_mib();
    Value back = load(pt, {.mmap = true});
    p_grow = rss_mib() - before;
    sink += static_cast<double>(back.at("layers.7.weight").tensor().as<float>().data_ptr()[12345]);
    p_touch = rss_mib() - before;
  }, 5);
  const double p_meta = reel_bench::median_seconds([&] {
    const double before = rss_mib();
    Value back = load(pt, {.map_location = DeviceType::Meta});
    m_grow = rss_mib() - before;
    sink += static_cast<double>(back.size());
  }, 5);
  std::printf("%-58s %8.1f ms %10.2f\n", "baseline: read() of the whole .pt file (cat)", p_cat * 1e3, gib / p_cat * 1.073741824);
  std::printf("%-58s %8.1f ms %10.2f  (%.2fx the baseline's time)\n", "load .pt (read)", p_load * 1e3,
              gib / p_load * 1.073741824, p_load / p_cat);
  std::printf("%-58s %8.2f ms %10s  RSS +%.1f MiB, +%.1f MiB after reading one element\n", "load .pt (mmap)",
              p_map * 1e3, "-", p_grow, p_touch);
  std::printf("%-58s %8.2f ms %10s  RSS +%.1f MiB\n", "load .pt (map_location Meta)", p_meta * 1e3, "-", m_grow);
  std::printf("%-58s %8.1f ms %10.2f\n", "save .pt", p_save * 1e3, gib / p_save * 1.073741824);
  if (!keep) {
    std::remove(path.c_str());
    std::remove(pt.c_str());
  }
  return sink == 12345.678 ? 1 : 0;
}
