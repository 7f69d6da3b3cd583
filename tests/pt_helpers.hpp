#pragma once
// Byte-level helpers of the .pt suites (test_checkpoint*.cpp): archives, pickles and the
// refusals the weights-only loader must raise.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <reel/io/pt.hpp>
#include <reel/reel.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace pt_helpers {
using namespace reel;
#ifndef REEL_PT_FIXTURES
#define REEL_PT_FIXTURES "tests/reference/pt"
#endif
inline std::string fixture(const std::string& name) { return std::string(REEL_PT_FIXTURES) + "/" + name; }
inline std::string pt_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("reel_pt_" + std::to_string(::getpid()) + "_" + name)).string();
}
inline Value load_bytes(const std::string& bytes, const LoadOptions& o = {}) {
  std::istringstream is(bytes);
  return load(is, o);
}
// An archive of data.pkl = pkl and the given (relative name, bytes) records.
inline std::string archive(const std::string& pkl, const std::vector<std::pair<std::string, std::string>>& records = {},
                           bool zip64 = false, const std::string& folder = "a") {
  std::ostringstream os;
  detail::zip::Writer w(os, zip64);
  w.add(folder + "/data.pkl", pkl.data(), pkl.size());
  for (const auto& [n, b] : records) w.add(n.find('/') == 0 ? n.substr(1) : folder + "/" + n, b.data(), b.size());
  w.finish();
  return os.str();
}
// A pickle of _rebuild_tensor_v2 over storage `key` (numel elements of `type`), viewed as
// (offset, size, stride); `metadata`, when given, is the raw pickle of a 7th argument.
inline std::string tensor_pickle(const std::string& key = "0", int64_t numel = 4, int64_t offset = 0,
                                 Shape size = {2}, Shape stride = {1}, const std::string& type = "FloatStorage",
                                 const std::string& metadata = "") {
  detail::pickle::Emitter e;
  e.proto();
  e.global("torch._utils", "_rebuild_tensor_v2");
  e.mark();
  e.mark();
  e.str("storage");
  e.global("torch", type);
  e.str(key);
  e.str("cpu");
  e.integer(numel);
  e.op('t');
  e.op('Q');
  e.integer(offset);
  e.mark();
  for (int64_t s : size) e.integer(s);
  e.op('t');
  e.mark();
  for (int64_t s : stride) e.integer(s);
  e.op('t');
  e.boolean(false);
  e.global("collections", "OrderedDict");
  e.tuple(0);
  e.op('R');
  e.out += metadata;
  e.op('t');
  e.op('R');
  e.stop();
  return e.out;
}
inline std::string floats(int n) {
  std::string b(static_cast<size_t>(n) * 4, '\0');
  for (int i = 0; i < n; ++i) {
    const float f = static_cast<float>(i) + 0.5f;
    std::memcpy(b.data() + 4 * i, &f, 4);
  }
  return b;
}
// The pickle protocol 2 frame around raw opcodes.
// (from a literal with its NUL bytes)
template <size_t N>
std::string B(const char (&s)[N]) {
  return std::string(s, N - 1);
}
inline std::string P(const std::string& body) { return std::string("\x80\x02", 2) + body + "."; }
inline std::string U(const std::string& s) {  // BINUNICODE
  std::string o = "X";
  for (int i = 0; i < 4; ++i) o += static_cast<char>((s.size() >> (8 * i)) & 0xFF);
  return o + s;
}
inline void expect_refused(const std::string& bytes, const std::string& why, const LoadOptions& o = {}) {
  INFO("expected: " << why);
  CHECK_THROWS_WITH_AS(load_bytes(bytes, o), doctest::Contains(why.c_str()), unpickling_error);
}
inline void expect_pickle_refused(const std::string& pkl, const std::string& why) { expect_refused(archive(pkl), why); }
inline size_t find_last(const std::string& s, const std::string& sig) { return s.rfind(sig); }
inline void put32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}
template <class T>
T item_of(const AnyTensor& t) {
  return t.as<T>().item();
}
}  // namespace pt_helpers
