#pragma once
// The bodies of errors's non-template runtime functions (header-only mode: included by it;
// compiled mode: by src/runtime.cpp).
#include "errors.hpp"

namespace reel::inline REEL_ABI {
namespace detail {
REEL_INLINE void append_arg(std::string& s, long long v) { s += std::to_string(v); }
REEL_INLINE void append_arg(std::string& s, unsigned long long v) { s += std::to_string(v); }
REEL_INLINE void append_arg(std::string& s, double v) {
  std::ostringstream os;
  os << v;
  s += os.str();
}
REEL_INLINE WarningState& warning_state() {
  static WarningState s;
  return s;
}

}  // namespace
}  // namespace

namespace reel::inline REEL_ABI {
REEL_INLINE void set_warning_action(WarningAction a) {
  auto& s = detail::warning_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.action = a;
  s.seen.clear();
}

REEL_INLINE WarningAction warning_action() {
  auto& s = detail::warning_state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.action;
}

REEL_INLINE void warn(const std::string& message, const std::string& category) {
  auto& s = detail::warning_state();
  std::function<void(const Warning&)> sink;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    switch (s.action) {
      case WarningAction::Ignore: return;
      case WarningAction::Error: throw warning_error(category + ": " + message);
      case WarningAction::Default:
        if (!s.seen.insert(category + "\x1f" + message).second) return;
        break;
      case WarningAction::Once:
        if (!s.seen.insert(message).second) return;
        break;
    }
    sink = s.sink;
  }
  Warning w{category, message};
  if (sink)
    sink(w);
  else
    std::fprintf(stderr, "%s: %s\n", w.category.c_str(), w.message.c_str());
}

}  // namespace
