#pragma once
// Exceptions and warnings. Categories mirror the Python ones PyTorch users know, so a
// `catch (const reel::value_error&)` reads like `except ValueError`.
#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

namespace reel {

struct error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct type_error : error {
  using error::error;
};
struct value_error : error {
  using error::error;
};
struct index_error : error {
  using error::error;
};
struct not_implemented_error : error {
  using error::error;
};
struct unpickling_error : error {
  using error::error;
};

namespace detail {
template <class... Args>
std::string cat_str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

template <class E = error, class... Args>
[[noreturn]] void raise(const Args&... args) {
  throw E(detail::cat_str(args...));
}

#define REEL_CHECK(cond, E, ...)                 \
  do {                                           \
    if (!(cond)) ::reel::raise<E>(__VA_ARGS__);  \
  } while (0)

// ---------------------------------------------------------------- warnings
enum class WarningAction { Default, Once, Ignore, Error };

struct Warning {
  std::string category;  // "UserWarning", "FutureWarning", ...
  std::string message;
};

struct warning_error : error {
  using error::error;
};

namespace detail {
struct WarningState {
  std::mutex mu;
  WarningAction action = WarningAction::Default;
  std::set<std::string> seen;  // for Default (per message+category) and Once (per message)
  std::function<void(const Warning&)> sink;
};
inline WarningState& warning_state() {
  static WarningState s;
  return s;
}
}  // namespace detail

// Python semantics: `default` prints a given warning once per message, `once` once per
// message text regardless of category, `ignore` drops, `error` raises warning_error.
inline void set_warning_action(WarningAction a) {
  auto& s = detail::warning_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.action = a;
  s.seen.clear();
}
inline WarningAction warning_action() {
  auto& s = detail::warning_state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.action;
}
// Where warnings go (stderr when unset). Returns the previous sink.
inline std::function<void(const Warning&)> set_warning_sink(std::function<void(const Warning&)> f) {
  auto& s = detail::warning_state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::swap(s.sink, f);
  return f;
}

inline void warn(const std::string& message, const std::string& category = "UserWarning") {
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

}  // namespace reel
