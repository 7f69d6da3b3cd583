#pragma once
// Exceptions and warnings. Categories mirror the Python ones PyTorch users know, so a
// `catch (const reel::value_error&)` reads like `except ValueError`.
#include "config.hpp"
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

namespace reel::inline REEL_ABI {

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
// Message pieces are appended by a few non-template overloads, so the many distinct
// argument lists of error sites cost little code each.
inline void append_arg(std::string& s, std::string_view v) { s += v; }
inline void append_arg(std::string& s, const char* v) { s += v; }
inline void append_arg(std::string& s, char c) { s += c; }
REEL_INLINE void append_arg(std::string& s, long long v);
REEL_INLINE void append_arg(std::string& s, unsigned long long v);
REEL_INLINE void append_arg(std::string& s, double v);
template <class T>
void append_arg(std::string& s, const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    s += v ? "true" : "false";
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    append_arg(s, static_cast<long long>(v));
  } else if constexpr (std::is_integral_v<T>) {
    append_arg(s, static_cast<unsigned long long>(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    append_arg(s, static_cast<double>(v));
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    append_arg(s, std::string_view(v));
  } else {
    std::ostringstream os;
    os << v;
    s += os.str();
  }
}
// A message piece by reference plus its formatter: error sites pass these to one
// non-template function, so each site costs a few instructions, not a formatting routine.
struct MsgArg {
  const void* p;
  void (*fmt)(std::string&, const void*);
  template <class T>
  static void fmt_impl(std::string& s, const void* p) {
    append_arg(s, *static_cast<const T*>(p));
  }
  template <class T>
  MsgArg(const T& v) : p(&v), fmt(&fmt_impl<T>) {}
  // string literals point at their characters (not the array), so one formatter serves all lengths
  MsgArg(const char* v) : p(v), fmt([](std::string& s, const void* q) { append_arg(s, static_cast<const char*>(q)); }) {}
};
template <class E>
[[noreturn]] void throw_as(std::string m) {
  throw E(std::move(m));
}
[[noreturn, gnu::cold, gnu::noinline]] inline void raise_impl(void (*thrower)(std::string),
                                                              std::initializer_list<MsgArg> args) {
  std::string s;
  for (const auto& a : args) a.fmt(s, a.p);
  thrower(std::move(s));
  std::abort();  // unreachable: thrower throws
}
}  // namespace detail

template <class E = error, class... Args>
[[noreturn, gnu::cold]] inline void raise(const Args&... args) {
  detail::raise_impl(&detail::throw_as<E>, {detail::MsgArg(args)...});
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
REEL_INLINE WarningState& warning_state();
}  // namespace detail

// Python semantics: `default` prints a given warning once per message, `once` once per
// message text regardless of category, `ignore` drops, `error` raises warning_error.
REEL_INLINE void set_warning_action(WarningAction a);
REEL_INLINE WarningAction warning_action();
// Where warnings go (stderr when unset). Returns the previous sink.
inline std::function<void(const Warning&)> set_warning_sink(std::function<void(const Warning&)> f) {
  auto& s = detail::warning_state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::swap(s.sink, f);
  return f;
}

REEL_INLINE void warn(const std::string& message, const std::string& category = "UserWarning");

}  // namespace reel

#ifndef REEL_COMPILED_LIB
#include "errors-inl.hpp"
#endif
