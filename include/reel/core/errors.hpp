#pragma once
// Exceptions and warnings. Categories mirror the Python ones PyTorch users know, so a
// `catch (const reel::value_error&)` reads like `except ValueError`.
#include "config.hpp"
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <iterator>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

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
// Python's warnings module, for C++. A warning has a category; what happens to it is the
// action set for its category (set_warning_action(category, action)), else the one set for
// all (set_warning_action(action)):
//   Default  shown once per call site (the warn() call's file and line) and message
//   Once     shown once per message and category, wherever it comes from
//   Always   shown every time
//   Ignore   dropped
//   Error    thrown as warning_error ("Category: message") from the warn() call
// "Shown" means passed to the sink (set_warning_sink), or printed to stderr as Python does
// ("file:line: Category: message"); warnings::catch_warnings records them instead. Changing
// an action forgets which warnings were shown (as Python's filters do). Every function here is
// thread-safe; the state is process-wide, as Python's is. (Python ignores DeprecationWarning
// outside __main__ by default; a C++ program has no __main__, so reel shows it.)
// Where a call was made (what SourceLocation gives; this one also works with compilers
// whose standard library lacks it, e.g. clang 14 with libstdc++ 12).
struct SourceLocation {
  const char* file = "";
  unsigned line_number = 0;
  static constexpr SourceLocation current(const char* f = __builtin_FILE(), unsigned l = __builtin_LINE()) noexcept {
    return {f, l};
  }
  constexpr const char* file_name() const noexcept { return file; }
  constexpr unsigned line() const noexcept { return line_number; }
};

enum class WarningCategory { UserWarning, DeprecationWarning, FutureWarning, RuntimeWarning };
enum class WarningAction { Default, Once, Always, Ignore, Error };
inline const char* category_name(WarningCategory c) {
  static constexpr const char* names[] = {"UserWarning", "DeprecationWarning", "FutureWarning", "RuntimeWarning"};
  return names[static_cast<int>(c)];
}

struct Warning {
  WarningCategory category;
  std::string message;
  std::string file;  // where warn() was called
  int line = 0;
};

struct warning_error : error {
  using error::error;
};

namespace detail {
inline constexpr int kWarningCategories = 4;
struct WarningState {
  std::mutex mu;
  WarningAction action = WarningAction::Default;
  bool has_category_action[kWarningCategories] = {};
  WarningAction category_action[kWarningCategories] = {};
  std::set<std::string> seen;  // Default: category, message, site; Once: category, message
  std::function<void(const Warning&)> sink;
  std::vector<Warning>* record = nullptr;  // catch_warnings(true)
};
REEL_INLINE WarningState& warning_state();
// The op whose kernel is running on this thread (ops::call sets it): its warnings name it.
inline const char*& current_op_name() {
  thread_local const char* name = nullptr;
  return name;
}
}  // namespace detail

// The action for every category (replacing per-category ones, as warnings.simplefilter(action)
// does), or for one.
REEL_INLINE void set_warning_action(WarningAction a);
REEL_INLINE void set_warning_action(WarningCategory c, WarningAction a);
// The action that applies to category c.
REEL_INLINE WarningAction warning_action(WarningCategory c = WarningCategory::UserWarning);
// Where shown warnings go (stderr when unset). Returns the previous sink.
REEL_INLINE std::function<void(const Warning&)> set_warning_sink(std::function<void(const Warning&)> f);

REEL_INLINE void warn(std::string message, WarningCategory category = WarningCategory::UserWarning,
                      SourceLocation where = SourceLocation::current());

namespace warnings {
// Python's warnings.catch_warnings: the actions, the sink and the record of shown warnings are
// restored when it ends. With record = true, shown warnings are collected in log() instead of
// going to the sink (set an action such as Always inside to see repeats).
class catch_warnings {
 public:
  explicit catch_warnings(bool record = false) {
    auto& s = detail::warning_state();
    std::lock_guard<std::mutex> lock(s.mu);
    action_ = s.action;
    std::copy(std::begin(s.has_category_action), std::end(s.has_category_action), has_);
    std::copy(std::begin(s.category_action), std::end(s.category_action), cat_);
    seen_ = s.seen;
    sink_ = s.sink;
    record_ = s.record;
    if (record) s.record = &log_;
  }
  ~catch_warnings() {
    auto& s = detail::warning_state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.action = action_;
    std::copy(std::begin(has_), std::end(has_), s.has_category_action);
    std::copy(std::begin(cat_), std::end(cat_), s.category_action);
    s.seen = std::move(seen_);
    s.sink = std::move(sink_);
    s.record = record_;
  }
  catch_warnings(const catch_warnings&) = delete;
  catch_warnings& operator=(const catch_warnings&) = delete;
  // The warnings recorded so far (record = true).
  std::vector<Warning> log() const {
    std::lock_guard<std::mutex> lock(detail::warning_state().mu);
    return log_;
  }

 private:
  WarningAction action_;
  bool has_[detail::kWarningCategories];
  WarningAction cat_[detail::kWarningCategories];
  std::set<std::string> seen_;
  std::function<void(const Warning&)> sink_;
  std::vector<Warning>* record_;
  std::vector<Warning> log_;
};
}  // namespace warnings

}  // namespace reel

#ifndef REEL_COMPILED_LIB
#include "errors-inl.hpp"
#endif
