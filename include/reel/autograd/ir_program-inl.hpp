#pragma once
// The bodies of ir_program's non-template runtime functions (header-only mode: included by it;
// compiled mode: by src/runtime.cpp).
#include "ir_program.hpp"

namespace reel::inline REEL_ABI::detail::ir {
REEL_INLINE bool program_eval_from_env() {
  static const bool on = [] {
    const char* e = std::getenv("REEL_IR_EVAL");
    return e && std::string_view(e) == "program";
  }();
  return on;
}

REEL_INLINE void evaluate_host(const Graph& g, std::span<const TensorImpl* const> leaves, std::span<const int> roots,
                          std::span<TensorImpl* const> outs, const std::vector<char>& live) {
  if (!program_eval_flag()) return evaluate_cpu(g, leaves, roots, outs, live);
  thread_local std::vector<ProgNode> prog;
  ProgLaunch a;
  if (!prepare_program(g, leaves, roots, outs, live, [](const OpInfo* op) { return op->elem; }, prog, a)) return;
  for (int64_t i = 0; i < a.numel; ++i) run_program_at(prog.data(), a, i);
}

}  // namespace
