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
  std::fill(std::begin(s.has_category_action), std::end(s.has_category_action), false);
  s.seen.clear();
}
REEL_INLINE void set_warning_action(WarningCategory c, WarningAction a) {
  auto& s = detail::warning_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.has_category_action[static_cast<int>(c)] = true;
  s.category_action[static_cast<int>(c)] = a;
  s.seen.clear();
}

REEL_INLINE WarningAction warning_action(WarningCategory c) {
  auto& s = detail::warning_state();
  std::lock_guard<std::mutex> lock(s.mu);
  const int k = static_cast<int>(c);
  return s.has_category_action[k] ? s.category_action[k] : s.action;
}

REEL_INLINE std::function<void(const Warning&)> set_warning_sink(std::function<void(const Warning&)> f) {
  auto& s = detail::warning_state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::swap(s.sink, f);
  return f;
}

REEL_INLINE void warn(std::string message, WarningCategory category, SourceLocation where) {
  if (const char* op = detail::current_op_name()) message = std::string(op) + ": " + message;
  Warning w{category, std::move(message), where.file_name(), static_cast<int>(where.line())};
  auto& s = detail::warning_state();
  std::function<void(const Warning&)> sink;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    const int k = static_cast<int>(category);
    const std::string key = std::string(category_name(category)) + '\x1f' + w.message;
    switch (s.has_category_action[k] ? s.category_action[k] : s.action) {
      case WarningAction::Ignore: return;
      case WarningAction::Error: throw warning_error(std::string(category_name(category)) + ": " + w.message);
      case WarningAction::Default:
        if (!s.seen.insert(key + '\x1f' + w.file + ':' + std::to_string(w.line)).second) return;
        break;
      case WarningAction::Once:
        if (!s.seen.insert(key).second) return;
        break;
      case WarningAction::Always: break;
    }
    if (s.record) {
      s.record->push_back(std::move(w));
      return;
    }
    sink = s.sink;
  }
  if (sink)
    sink(w);
  else
    std::fprintf(stderr, "%s:%d: %s: %s\n", w.file.c_str(), w.line, category_name(w.category), w.message.c_str());
}

}  // namespace
