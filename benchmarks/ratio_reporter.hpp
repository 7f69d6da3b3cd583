#pragma once
// Runs the registered Google Benchmarks, then prints for each "<case>/baseline" and
// "<case>/reel" pair the ratio baseline_time / reel_time (above 1: reel is faster).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>

namespace reel_bench {

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    // With --benchmark_repetitions the median is used, otherwise the single run.
    for (const auto& r : runs) {
      if (r.error_occurred) continue;
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median")
        medians_[r.run_name.str()] = r.GetAdjustedRealTime();
      else if (r.run_type == Run::RT_Iteration)
        times_[r.run_name.str()] = r.GetAdjustedRealTime();
    }
    for (const auto& [k, v] : medians_) times_[k] = v;
    ConsoleReporter::ReportRuns(runs);
  }
  void print_ratios() const {
    std::printf("\n%-44s %14s %14s %8s\n", "case", "baseline", "reel", "ratio");
    for (const auto& [name, t] : times_) {
      auto pos = name.find("/baseline");
      if (pos == std::string::npos) continue;
      std::string stem = name.substr(0, pos), rest = name.substr(pos + 9);
      auto it = times_.find(stem + "/reel" + rest);
      if (it == times_.end()) continue;
      std::printf("%-44s %14.1f %14.1f %7.2fx\n", (stem + rest).c_str(), t, it->second, t / it->second);
    }
    for (const auto& [name, t] : times_)
      if (name.find("/per_op") != std::string::npos) std::printf("%-44s %14s %14.1f ns/op\n", name.c_str(), "", t);
  }

 private:
  std::map<std::string, double> times_, medians_;
};

inline int run(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  RatioReporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  rep.print_ratios();
  benchmark::Shutdown();
  return 0;
}

}  // namespace reel_bench
