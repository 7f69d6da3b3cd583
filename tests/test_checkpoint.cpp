// PyTorch checkpoints (.pt): files written by PyTorch 2.15 (tests/reference/pt/, made by
// make_fixtures.py there) read exactly; what reel writes read back (and, by that script, by
// PyTorch); storage sharing on the CPU, memory-mapped and on Meta; optimizer state; and every
// class of bad input (zip, pickle, weights-only rules) raising unpickling_error.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <reel/io/pt.hpp>
#include <reel/reel.hpp>
#include <sstream>

#include "checkpoint_fixtures.hpp"

using namespace reel;
using namespace reel_test;

namespace {
#ifndef REEL_PT_FIXTURES
#define REEL_PT_FIXTURES "tests/reference/pt"
#endif
std::string fixture(const std::string& name) { return std::string(REEL_PT_FIXTURES) + "/" + name; }
std::string pt_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("reel_pt_" + std::to_string(::getpid()) + "_" + name)).string();
}
Value load_bytes(const std::string& bytes, const LoadOptions& o = {}) {
  std::istringstream is(bytes);
  return load(is, o);
}
// An archive of data.pkl = pkl and the given (relative name, bytes) records.
std::string archive(const std::string& pkl, const std::vector<std::pair<std::string, std::string>>& records = {},
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
std::string tensor_pickle(const std::string& key = "0", int64_t numel = 4, int64_t offset = 0, Shape size = {2},
                          Shape stride = {1}, const std::string& type = "FloatStorage", const std::string& metadata = "") {
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
std::string floats(int n) {
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
std::string P(const std::string& body) { return std::string("\x80\x02", 2) + body + "."; }
std::string U(const std::string& s) {  // BINUNICODE
  std::string o = "X";
  for (int i = 0; i < 4; ++i) o += static_cast<char>((s.size() >> (8 * i)) & 0xFF);
  return o + s;
}
void expect_refused(const std::string& bytes, const std::string& why, const LoadOptions& o = {}) {
  INFO("expected: " << why);
  CHECK_THROWS_WITH_AS(load_bytes(bytes, o), doctest::Contains(why.c_str()), unpickling_error);
}
void expect_pickle_refused(const std::string& pkl, const std::string& why) { expect_refused(archive(pkl), why); }
size_t find_last(const std::string& s, const std::string& sig) { return s.rfind(sig); }
void put32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}
template <class T>
T item_of(const AnyTensor& t) {
  return t.as<T>().item();
}
}  // namespace

TEST_CASE("zip CRC-32: the folded (PCLMULQDQ) and table forms agree with the bitwise definition") {
  auto bitwise = [](const unsigned char* p, size_t n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
  };
  std::mt19937 rng(11);
  std::vector<unsigned char> buf(9000);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t off = 0; off < 4; ++off)
    for (size_t n : {0, 1, 7, 15, 16, 63, 64, 65, 79, 80, 127, 128, 129, 200, 255, 256, 1000, 4096, 8191}) {
      CAPTURE(off);
      CAPTURE(n);
      CHECK(detail::zip::crc32(0, buf.data() + off, n) == bitwise(buf.data() + off, n));
      const size_t half = n / 3;  // continued
      CHECK(detail::zip::crc32(detail::zip::crc32(0, buf.data() + off, half), buf.data() + off + half, n - half) ==
            bitwise(buf.data() + off, n));
    }
  CHECK(detail::zip::crc32(0, "123456789", 9) == 0xCBF43926u);  // the standard check value
}

TEST_CASE("Value: kinds, accessors, Python's dict keys, reference semantics, state_dict flattening") {
  Value d = Value::dict();
  d.set(Value("a"), Value(1));
  d.set(Value(int64_t(2)), Value(2.5));
  d.set(Value(true), Value("one"));  // True == 1: a new key; 1.0 would be the same key as 1
  d.set(Value(1.0), Value("uno"));
  CHECK(d.size() == 3);
  CHECK(d.at(1).to_string() == "uno");
  CHECK(d.at("a").to_int() == 1);
  CHECK(d.at(2).to_double() == 2.5);
  CHECK(d.at("a").to_double() == 1.0);  // int -> float, as Python's float(int)
  CHECK_THROWS_WITH_AS(d.at("zz"), doctest::Contains("no key 'zz'"), index_error);
  CHECK_THROWS_WITH_AS(d.at("a").to_string(), doctest::Contains("is a int, not a str"), type_error);
  CHECK_THROWS_AS(d.set(Value::list(), Value()), type_error);  // unhashable
  Value l = Value::list({Value(1)});
  Value alias = l;
  alias.append(Value(2));
  CHECK(l.size() == 2);  // one list, two handles
  CHECK(l.at(-1).to_int() == 2);
  CHECK_THROWS_AS(l.at(2), index_error);
  Value t = Value::tuple({Value(1), Value::tuple({Value("x")})});
  d.set(t, Value(7));  // tuples are keys
  CHECK(d.at(Value::tuple({Value(1), Value::tuple({Value("x")})})).to_int() == 7);

  Value root = Value::dict();
  Value model = Value::dict(true);
  model.set(Value("w"), Value(ones<float>({2})));
  model.set(Value("n"), Value(3));  // not a tensor: left out
  root.set(Value("model"), model);
  root.set(Value("layers"), Value::list({Value(zeros<double>({1})), Value::dict()}));
  root.set(Value("step"), Value(5));
  StateDict sd = root.state_dict();
  CHECK(sd.keys() == std::vector<std::string>{"model.w", "layers.0"});
  CHECK_THROWS_WITH_AS(Value(3).state_dict(), doctest::Contains("is a int, not a dict"), value_error);
}

TEST_CASE("load: a checkpoint written by PyTorch 2.15: every dtype, views, parameters, Python values") {
  for (const char* file : {"torch_checkpoint.pt", "torch_zip64.pt"})
    for (bool mmap : {false, true}) {
      CAPTURE(file);
      CAPTURE(mmap);
      const Value v = load(fixture(file), {.mmap = mmap});
      REQUIRE(v.is_dict());
      const Value& dt = v.at("dtypes");
      CHECK(dt.ordered());
      for (std::string n : kFixtureNames) {
        CAPTURE(n);
        const AnyTensor got = dt.at(n).tensor();
        const AnyTensor want = fixture_tensor(n);
        CHECK(got.dtype() == want.dtype());
        CHECK(got.sizes() == want.sizes());
        CHECK(logical_bytes(got) == logical_bytes(want));
      }
      CHECK(logical_bytes(dt.at("complex128").tensor()) == logical_bytes(fixture_tensor("complex128")));
      // views of one storage: one storage again, offsets and strides kept
      const Value& vw = v.at("views");
      const AnyTensor base = vw.at("base").tensor();
      for (const char* k : {"row", "col", "t", "slice"}) CHECK(vw.at(k).tensor().is_same_storage(base));
      CHECK(vw.at("row").tensor().storage_offset() == 6);
      CHECK(vw.at("col").tensor().strides() == Shape{6});
      CHECK(vw.at("col").tensor().storage_offset() == 2);
      CHECK(vw.at("t").tensor().strides() == Shape{1, 6});
      CHECK(vw.at("slice").tensor().sizes() == Shape{2, 3});
      CHECK(vw.at("slice").tensor().strides() == Shape{6, 2});
      CHECK(vw.at("slice").tensor().storage_offset() == 6);
      CHECK(item_of<float>(AnyTensor(vw.at("slice").tensor().as<float>().select(0, 1).select(0, 2))) == 16.0f);
      CHECK(!dt.at("float32").tensor().is_same_storage(base));
      // parameters and requires_grad
      CHECK(v.at("param").is_parameter());
      CHECK(v.at("param").requires_grad());
      CHECK(v.at("frozen").is_parameter());
      CHECK_FALSE(v.at("frozen").requires_grad());
      CHECK_FALSE(v.at("grad_tensor").is_parameter());
      CHECK(v.at("grad_tensor").requires_grad());
      // Python values
      const Value& s = v.at("scalars");
      REQUIRE(s.size() == 22);
      CHECK(s.at(0).is_none());
      CHECK(s.at(1).to_bool());
      CHECK_FALSE(s.at(2).to_bool());
      const std::vector<int64_t> ints = {0, 255, 256, 65535, 65536, -1, 2147483647, -2147483648LL, 2147483648LL,
                                         int64_t(1) << 62, INT64_MIN, INT64_MAX};
      for (size_t i = 0; i < ints.size(); ++i) CHECK(s.at(3 + i).to_int() == ints[i]);
      CHECK(s.at(15).to_double() == 0.1);
      CHECK(std::signbit(s.at(16).to_double()));
      CHECK(std::isinf(s.at(17).to_double()));
      CHECK(s.at(18).to_complex() == std::complex<double>(1, 2));
      CHECK(s.at(19).to_string() == "h\u00e9llo \u2211");
      CHECK(s.at(20).is_bytes());
      CHECK(s.at(20).to_string() == std::string("\x00\xff" "ab", 4));
      CHECK(s.at(21).to_string() == "xy");
      CHECK(v.at("tuple").is_tuple());
      CHECK(v.at("tuple").at(1).at(1).to_int() == 3);
      CHECK(v.at("tuple").at(2).is_list());
      CHECK(v.at("size").is_tuple());
      CHECK(v.at("size").at(1).to_int() == 3);
      CHECK(v.at("device").to_string() == "cpu");
      CHECK(v.at("set").at(0).to_int() == 7);
      CHECK(v.at("int_keys").at(1).to_string() == "b");
      CHECK(v.at("empty").tensor().sizes() == Shape{0, 3});
      CHECK(v.at("scalar0d").tensor().dim() == 0);
      CHECK(item_of<double>(v.at("scalar0d").tensor()) == 3.5);
      CHECK(v.at("meta").tensor().device() == DeviceType::Meta);
      CHECK(v.at("meta").tensor().sizes() == Shape{2, 3});
      CHECK(v.at("model").ordered());  // its _metadata attribute (BUILD) is dropped
      CHECK(v.at("model").keys().size() == 2);
      const StateDict flat = v.state_dict();
      CHECK(flat.contains("model.weight"));
      CHECK(flat.contains("optim.state.0.exp_avg"));
      CHECK(flat.contains("views.slice"));
    }
}

TEST_CASE("load: one tensor; a PyTorch optimizer's state resumes in reel and continues as PyTorch does") {
  const Value t = load(fixture("torch_tensor.pt"));
  REQUIRE(t.is_tensor());
  CHECK(t.tensor().sizes() == Shape{3, 2});
  CHECK(t.tensor().strides() == Shape{6, 3});
  CHECK(t.tensor().storage_offset() == 6);

  // make_fixtures.py: a Linear(3, 2) and Adam(lr 0.01, betas (0.8, 0.9)) after two steps, then
  // two more (adam_expected.pt). reel loads the first state, takes the two steps, and compares.
  const Value ck = load(fixture("torch_checkpoint.pt"));
  Generator g(1);
  nn::Linear<float> m(3, 2, g);
  m.load_state_dict(ck.at("model").state_dict());
  optim::Adam opt(m.parameters(), optim::AdamOptions(0.5));
  opt.load_state_dict(optim::from_value(ck.at("optim")));
  for (int k = 2; k < 4; ++k) {
    auto x = Tensor<float>(full<float>({2, 3}, 0.0f));
    const float xs[6] = {1.0f, 2.0f, -1.0f, 0.5f, -1.5f, 2.0f};
    for (int i = 0; i < 6; ++i) x.mutable_data_ptr()[i] = xs[i] * static_cast<float>(k + 1);
    auto y = m(x);
    Tensor<float> loss = (y * y).sum();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  const Value want = load(fixture("adam_expected.pt"));
  const StateDict wm = want.at("model").state_dict();
  for (const auto& [n, p] : m.state_dict()) {
    CAPTURE(n);
    auto a = p.as<float>(), b = wm.at(n).as<float>();
    for (int64_t i = 0; i < a.numel(); ++i) CHECK(a.contiguous().data_ptr()[i] == doctest::Approx(b.contiguous().data_ptr()[i]).epsilon(1e-6));
  }
  const optim::StateDict mine = opt.state_dict(), theirs = optim::from_value(want.at("optim"));
  CHECK(mine.param_groups.at(0).options.at("lr") == optim::OptionValue(0.01));  // from the file, not 0.5
  for (const auto& [k, st] : theirs.state)
    for (const auto& [name, tt] : st) {
      CAPTURE(name);
      auto a = mine.state.at(k).at(name).as<float>().contiguous(), b = tt.as<float>().contiguous();
      for (int64_t i = 0; i < a.numel(); ++i) CHECK(a.data_ptr()[i] == doctest::Approx(b.data_ptr()[i]).epsilon(1e-5));
    }
}

TEST_CASE("save/load: every dtype, views, parameters, containers and Meta tensors round-trip (path, stream, mmap)") {
  StateDict dtypes;
  for (const std::string& n : kFixtureNames) dtypes[n] = fixture_tensor(n);
  dtypes["complex128"] = fixture_tensor("complex128");
  auto b = arange<float>(0, 24).reshape({4, 6});
  Value views = Value::dict();
  views.set(Value("base"), Value(b));
  views.set(Value("t"), Value(AnyTensor(Tensor<float>(b.transpose(0, 1)))));
  views.set(Value("slice"), Value(AnyTensor(Tensor<float>(b.slice(0, 1, 3).slice(1, 0, 6, 2)))));
  Value ordered = Value::dict(true);
  ordered.set(Value("z"), Value(1));
  ordered.set(Value("a"), Value(2));
  Value int_keys = Value::dict();
  int_keys.set(Value(0), Value("a"));
  int_keys.set(Value(5), Value("b"));
  auto meta = empty<float, Meta>({2, 5});
  Value root = Value::dict();
  root.set(Value("dtypes"), Value(dtypes));
  root.set(Value("views"), views);
  root.set(Value("param"), Value::parameter(AnyTensor(ones<float>({2}))));
  root.set(Value("scalars"), Value::list({Value(), Value(true), Value(7), Value(-(int64_t(1) << 40)), Value(0.5),
                                          Value(std::complex<double>(1, 2)), Value("h\u00e9llo"),
                                          Value::bytes(std::string("\x00\xff", 2))}));
  root.set(Value("tuple"), Value::tuple({Value(1), Value::tuple({Value(2.5)}), Value::list()}));
  root.set(Value("int_keys"), int_keys);
  root.set(Value("ordered"), ordered);
  root.set(Value("meta"), Value(AnyTensor(meta)));

  const std::string path = pt_path("roundtrip.pt");
  save(path, root);
  if (const char* keep = std::getenv("REEL_PT_OUT")) std::filesystem::copy_file(path, keep, std::filesystem::copy_options::overwrite_existing);
  std::ostringstream os;
  save(os, root);
  for (int how = 0; how < 3; ++how) {
    CAPTURE(how);
    const Value v = how == 0 ? load(path) : how == 1 ? load(path, {.mmap = true}) : load_bytes(os.str());
    for (const auto& [n, t] : dtypes) {
      CAPTURE(n);
      const AnyTensor got = v.at("dtypes").at(n).tensor();
      CHECK(got.dtype() == t.dtype());
      CHECK(logical_bytes(got) == logical_bytes(t));
    }
    const Value& vw = v.at("views");
    CHECK(vw.at("t").tensor().is_same_storage(vw.at("base").tensor()));
    CHECK(vw.at("slice").tensor().is_same_storage(vw.at("base").tensor()));
    CHECK(vw.at("slice").tensor().strides() == Shape{6, 2});
    CHECK(vw.at("slice").tensor().storage_offset() == 6);
    CHECK(logical_bytes(vw.at("t").tensor()) == logical_bytes(AnyTensor(Tensor<float>(b.transpose(0, 1)))));
    CHECK(v.at("param").is_parameter());
    const Value& s = v.at("scalars");
    CHECK(s.at(0).is_none());
    CHECK(s.at(3).to_int() == -(int64_t(1) << 40));
    CHECK(s.at(5).to_complex() == std::complex<double>(1, 2));
    CHECK(s.at(6).to_string() == "h\u00e9llo");
    CHECK(s.at(7).to_string() == std::string("\x00\xff", 2));
    CHECK(v.at("tuple").at(1).at(0).to_double() == 2.5);
    CHECK(v.at("int_keys").at(5).to_string() == "b");
    CHECK(v.at("ordered").ordered());
    CHECK(v.at("ordered").keys().at(0).to_string() == "z");
    CHECK(v.at("meta").tensor().device() == DeviceType::Meta);
    CHECK(v.at("meta").tensor().sizes() == Shape{2, 5});
  }
  // a loaded checkpoint saves again to the same object
  const std::string again = pt_path("again.pt");
  save(again, load(path));
  CHECK(logical_bytes(load(again).at("views").at("slice").tensor()) == logical_bytes(AnyTensor(Tensor<float>(b.slice(0, 1, 3).slice(1, 0, 6, 2)))));
  std::remove(path.c_str());
  std::remove(again.c_str());
}

TEST_CASE("load onto Meta and memory-mapped: storage sharing kept, no data read or copied") {
  // 64 views of one 100 MB storage
  const int64_t n = 25'000'000;
  auto big = empty<float>({n});
  big.mutable_data_ptr()[0] = 1.5f;
  big.mutable_data_ptr()[n - 1] = -2.5f;
  Value views = Value::list();
  for (int64_t k = 0; k < 64; ++k)
    views.append(Value(AnyTensor(Tensor<float>(big.slice(0, k * 390'000, k * 390'000 + 1000)))));
  const std::string path = pt_path("views64.pt");
  save(path, views);
  big = Tensor<float>();
  views = Value();
  empty_cache();
  {
    const int64_t before = memory_allocated();
    const Value v = load(path, {.map_location = DeviceType::Meta});
    CHECK(memory_allocated() == before);  // not a byte allocated
    REQUIRE(v.size() == 64);
    for (int64_t k = 0; k < 64; ++k) {
      const AnyTensor& t = v.at(k).tensor();
      CHECK(t.device() == DeviceType::Meta);
      CHECK(t.is_same_storage(v.at(0).tensor()));
      CHECK(t.storage_offset() == k * 390'000);
      CHECK(t.sizes() == Shape{1000});
      CHECK(t.impl_ptr()->storage->nbytes == size_t(n) * 4);
      CHECK(t.impl_ptr()->storage->data == nullptr);
    }
  }
  {
    const int64_t before = memory_allocated();
    const Value v = load(path, {.mmap = true});
    CHECK(memory_allocated() == before);  // the tensors alias the mapping
    for (int64_t k = 1; k < 64; ++k) CHECK(v.at(k).tensor().is_same_storage(v.at(0).tensor()));
    auto first = v.at(0).tensor().as<float>();
    CHECK(first.contiguous().data_ptr()[0] == 1.5f);
    first.fill_(9.0f);  // copy-on-write: the file keeps its bytes
  }
  const Value v = load(path);
  CHECK(v.at(0).tensor().as<float>().contiguous().data_ptr()[0] == 1.5f);
  CHECK(v.at(63).tensor().is_same_storage(v.at(0).tensor()));
  CHECK(v.at(0).tensor().impl_ptr()->storage->nbytes == size_t(n) * 4);
  std::remove(path.c_str());
}

TEST_CASE("load: nested jagged tensors only when their globals are allowed, then as values and offsets") {
  const std::string f = fixture("torch_njt.pt");
  CHECK_THROWS_WITH_AS(load(f), doctest::Contains("_rebuild_njt is not an allowed global by default"), unpickling_error);
  CHECK_THROWS_WITH_AS(load(f, {.safe_globals = {"torch.nested._internal.nested_tensor._rebuild_njt"}}),
                       doctest::Contains("NestedTensor is not an allowed global"), unpickling_error);
  const Value v = load(f, {.safe_globals = {"torch.nested._internal.nested_tensor._rebuild_njt",
                                            "torch.nested._internal.nested_tensor.NestedTensor"}});
  REQUIRE(v.is_object());
  CHECK(v.type_name() == "reel.jagged");
  const AnyTensor values = v.state().at("values").tensor(), offsets = v.state().at("offsets").tensor();
  CHECK(values.sizes() == Shape{5});
  CHECK(logical_bytes(values) == logical_bytes(AnyTensor(Tensor<float>(cat({arange<float>(0, 3), arange<float>(10, 12)})))));
  REQUIRE(offsets.sizes() == Shape{3});
  auto off = offsets.as<int64_t>().contiguous();
  CHECK(off.data_ptr()[0] == 0);
  CHECK(off.data_ptr()[1] == 3);
  CHECK(off.data_ptr()[2] == 5);
  CHECK(v.state().at("ragged_idx").to_int() == 1);
}

TEST_CASE("load: a class allowed through safe_globals loads as a Value object; nothing is called") {
  detail::pickle::Emitter e;
  e.proto();
  e.global("argparse", "Namespace");
  e.tuple(0);
  e.op('\x81');  // NEWOBJ
  e.op('}');
  e.mark();
  e.str("lr");
  e.real(0.1);
  e.op('u');
  e.op('b');  // BUILD
  e.stop();
  expect_pickle_refused(e.out, "GLOBAL argparse.Namespace is not an allowed global by default");
  const Value v = load_bytes(archive(e.out), {.safe_globals = {"argparse.Namespace"}});
  REQUIRE(v.is_object());
  CHECK(v.type_name() == "argparse.Namespace");
  CHECK(v.state().at("lr").to_double() == 0.1);
  // and it saves back as itself
  std::ostringstream os;
  save(os, v);
  CHECK(load_bytes(os.str(), {.safe_globals = {"argparse.Namespace"}}).state().at("lr").to_double() == 0.1);
}

TEST_CASE("load: the weights-only unpickler refuses every forbidden global and opcode, naming it and where") {
  const std::string rebuild = "ctorch._utils\n_rebuild_tensor_v2\n";
  // forbidden globals
  expect_pickle_refused(P("cos\nsystem\n"), "GLOBAL os.system is refused: its module os is blocked");
  expect_pickle_refused(P("cposix\nsystem\n"), "module posix is blocked");
  expect_pickle_refused(P("csys\nexit\n"), "module sys is blocked");
  expect_pickle_refused(P("c__builtin__\neval\n"), "GLOBAL builtins.eval is not an allowed global by default");
  expect_pickle_refused(P("cbuiltins\ngetattr\n"), "GLOBAL builtins.getattr is not an allowed global");
  expect_pickle_refused(P("csubprocess\nPopen\n"), "GLOBAL subprocess.Popen is not an allowed global");
  expect_pickle_refused(P("ctorch._utils\n_rebuild_qtensor\n"), "reel has no quantized tensors");
  expect_pickle_refused(P("ctorch\ncomplex32\n"), "reel has no the dtype torch.complex32");
  expect_pickle_refused(P("cos\nsystem\n"), "there is no unsafe mode");
  expect_pickle_refused(P("cos\nsys"), "GLOBAL runs past the end");
  // opcodes outside the allowlist, with their byte offsets
  expect_pickle_refused(P("I1\n"), "data.pkl byte 2: the opcode INT (0x49) is not allowed");
  expect_pickle_refused(P("N\x93"), "byte 3: the opcode STACK_GLOBAL (0x93)");
  expect_pickle_refused(P(B("\x95\x01\x00\x00\x00\x00\x00\x00\x00N")), "FRAME (0x95)");
  expect_pickle_refused(P("(cbuiltins\nlist\ni"), "GLOBAL builtins.list is not an allowed global");
  expect_pickle_refused(P("(o"), "OBJ (0x6f)");
  expect_pickle_refused(P("P0\n"), "PERSID (0x50)");
  expect_pickle_refused(P("(d"), "DICT (0x64)");
  expect_pickle_refused(P("N\x94"), "MEMOIZE (0x94)");
  expect_pickle_refused(P("\xff"), "0xff (unknown)");
  expect_pickle_refused(std::string("\x80\x06N.", 4), "unsupported pickle protocol 6");
  // calls and builds
  expect_pickle_refused(P(U("f") + ")R"), "REDUCE calls a str, not an allowed global");
  expect_pickle_refused(P("ctorch\nTensor\n)R"), "REDUCE calls torch.Tensor, which the weights-only unpickler does not call");
  expect_pickle_refused(P("ccollections\nOrderedDict\n)\x81"), "NEWOBJ of collections.OrderedDict");
  expect_pickle_refused(P("]}b"), "BUILD on a list");
  expect_pickle_refused(P("]KaK\x01s"), "SETITEM on a list");
  expect_pickle_refused(P(")(K\x01K\x02u"), "SETITEMS on a tuple");
  expect_pickle_refused(P("}K\x01" "a"), "APPEND on a dict");
  expect_pickle_refused(P("}]K\x01s"), "cannot be a dict key");
  // persistent ids and storages
  expect_pickle_refused(P("K\x01Q"), "a persistent id that is not ('storage'");
  expect_pickle_refused(P("(" + U("storage") + U("x") + "tQ"), "a persistent id that is not");
  expect_pickle_refused(P("(" + U("storage") + U("FloatStorage") + U("0") + U("cpu") + "K\x04tQ"),
                        "storage type is not a storage class");
  expect_refused(archive(tensor_pickle("../0"), {{"data/0", floats(4)}}), "a storage key that is not a decimal number");
  expect_refused(archive(tensor_pickle("00000000000000000000001"), {}), "not a decimal number");
  expect_refused(archive(tensor_pickle("7"), {{"data/0", floats(4)}}), "names the missing record data/7");
  expect_refused(archive(tensor_pickle("0", 4), {{"data/0", floats(3)}}), "holds 4 elements of 4 bytes, more than its record's 12 bytes");
  expect_refused(archive(tensor_pickle("0", INT64_MAX), {{"data/0", floats(3)}}), "more than its record");
  expect_refused(archive(tensor_pickle("0", 2, 0, {2}, {1}, "BoolStorage"), {{"data/0", std::string("\x01\x02", 2)}}),
                 "the bool storage 0 holds the byte 2");
  {  // _rebuild_tensor_v3: a dtype over untyped bytes (the form for uint16/32/64, fp8, ...)
    auto v3 = [](const char* dtype, int64_t nbytes, int64_t numel) {
      detail::pickle::Emitter e;
      e.proto();
      e.global("torch._utils", "_rebuild_tensor_v3");
      e.mark();
      e.mark();
      e.str("storage");
      e.global("torch.storage", "UntypedStorage");
      e.str("0");
      e.str("cpu");
      e.integer(nbytes);
      e.op('t');
      e.op('Q');
      e.integer(0);
      e.integer(numel);
      e.tuple(1);
      e.integer(1);
      e.tuple(1);
      e.boolean(false);
      e.global("collections", "OrderedDict");
      e.tuple(0);
      e.op('R');
      e.global("torch", dtype);
      e.op('t');
      e.op('R');
      e.stop();
      return e.out;
    };
    const Value u = load_bytes(archive(v3("uint16", 4, 2), {{"data/0", B("\x01\x00\xff\xff")}}));
    CHECK(u.tensor().dtype() == ScalarType::UInt16);
    CHECK(u.tensor().as<uint16_t>().contiguous().data_ptr()[1] == 65535);
    expect_refused(archive(v3("bool", 2, 2), {{"data/0", B("\x01\x02")}}), "a bool tensor over a storage holding the byte 2");
    expect_refused(archive(v3("uint16", 4, 3), {{"data/0", B("\x01\x00\xff\xff")}}), "reaches element 2 of a storage of 2");
    expect_refused(archive(v3("float", 4, 1), {{"data/0", floats(1)}}), "GLOBAL torch.float is not an allowed global");
  }
  // views out of bounds, negative or overflowing
  expect_refused(archive(tensor_pickle("0", 4, 0, {5}, {1}), {{"data/0", floats(4)}}), "reaches element 4 of a storage of 4");
  expect_refused(archive(tensor_pickle("0", 4, 3, {2}, {1}), {{"data/0", floats(4)}}), "reaches element 4");
  expect_refused(archive(tensor_pickle("0", 4, 0, {2, 2}, {2, 2}), {{"data/0", floats(4)}}), "reaches element 4");
  expect_refused(archive(tensor_pickle("0", 4, 0, {-1}, {1}), {{"data/0", floats(4)}}), "the negative size -1");
  expect_refused(archive(tensor_pickle("0", 4, 0, {2}, {-1}), {{"data/0", floats(4)}}), "the negative stride -1");
  expect_refused(archive(tensor_pickle("0", 4, -1, {2}, {1}), {{"data/0", floats(4)}}), "the negative storage offset -1");
  expect_refused(archive(tensor_pickle("0", 4, 0, {3, 2}, {int64_t(1) << 62, 1}), {{"data/0", floats(4)}}),
                 "reaches element");
  expect_refused(archive(tensor_pickle("0", 4, 0, {int64_t(1) << 40, int64_t(1) << 40}, {1, 1}), {{"data/0", floats(4)}}),
                 "element count overflows");
  expect_refused(archive(tensor_pickle("0", 4, INT64_MAX, {3}, {INT64_MAX}), {{"data/0", floats(4)}}), "extent overflows");
  expect_refused(archive(tensor_pickle("0", 4, 9, {0}, {1}), {{"data/0", floats(4)}}), "storage offset 9 is past its storage");
  expect_refused(archive(tensor_pickle("0", 4, 0, {2}, {1, 1}), {{"data/0", floats(4)}}), "1 sizes and 2 strides");
  expect_refused(archive(tensor_pickle("0", 4, 0, {2}, {1}, "FloatStorage", "}" + U("conj") + "\x88s"), {{"data/0", floats(4)}}),
                 "its conj bit set");
  // strings, memo, stack, nesting, cycles, STOP
  expect_pickle_refused(P(B("X\xe8\x03\x00\x00" "ab")), "an argument of 1000 bytes runs past the end of the pickle");
  expect_pickle_refused(P(U("\xff\xfe")), "not valid UTF-8");
  expect_pickle_refused(P("j\xff\xff\xff\xff"), "memo entry 4294967295 was never set");
  expect_pickle_refused(P("h\x05"), "memo entry 5 was never set");
  expect_pickle_refused(P(""), "STOP on an empty stack (stack underflow)");
  expect_pickle_refused(P("a"), "APPEND on an empty stack");
  expect_pickle_refused(P("]N(a"), "APPEND on an empty stack");  // the mark hides what is below it
  expect_pickle_refused(P("t"), "TUPLE without a MARK");
  expect_pickle_refused(P("(N"), "STOP with an open MARK");
  expect_pickle_refused(P("\x8a\x09\x01\x01\x01\x01\x01\x01\x01\x01\x01"), "an integer of 9 bytes does not fit");
  expect_pickle_refused(P(B("]q\x00h\x00" "a")), "a container put inside itself");
  expect_pickle_refused(P(B("]q\x00]q\x01" "ah\x01h\x00" "a")), "APPEND on a list already inside another container");
  std::string deep(300, ']');
  deep += std::string(299, 'a');
  expect_pickle_refused(P(deep), "containers nested more than 200 deep");
  expect_pickle_refused(std::string("\x80\x02N", 3), "the pickle ends without STOP");
  // what is allowed works: a tensor through the same helpers
  const Value ok = load_bytes(archive(tensor_pickle("0", 4, 1, {2}, {2}), {{"data/0", floats(4)}}));
  CHECK(ok.tensor().as<float>().contiguous().data_ptr()[1] == 3.5f);
  expect_pickle_refused(P(rebuild + ")R"), "_rebuild_tensor_v2 with 0 arguments");
}

TEST_CASE("load: malformed archives: truncated, duplicate, overlapping, zip slip, zip64, foreign formats") {
  const std::string good = archive(tensor_pickle(), {{"data/0", floats(4)}, {"byteorder", "little"}});
  CHECK(load_bytes(good).tensor().numel() == 2);
  expect_refused(good.substr(0, good.size() / 2), "no end-of-central-directory record");
  expect_refused(good.substr(0, good.size() - 1), "no end-of-central-directory record");
  expect_refused("", "not a torch.save archive (no zip header)");
  expect_refused("hello world, not a zip", "not a torch.save archive");
  expect_refused(std::string("\x80\x02\x8a\x0a", 4) + "junk", "the legacy torch.save format");
  expect_refused(std::string("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":1}", 15), "a safetensors file");
  CHECK_THROWS_WITH_AS(load(fixture("torch_script.pt")), doctest::Contains("a TorchScript archive"), unpickling_error);
  CHECK_THROWS_WITH_AS(load(fixture("torch_legacy.pt")), doctest::Contains("legacy torch.save format"), unpickling_error);
  expect_refused(archive(tensor_pickle(), {{"data/0", floats(4)}, {"data/0", floats(4)}}), "the entry 'a/data/0' appears twice");
  expect_refused(archive(tensor_pickle(), {{"data/../../etc/0", floats(4)}}), "is not a plain relative path");
  expect_refused(archive(tensor_pickle(), {{"/../x", floats(4)}}), "is not a plain relative path");
  expect_refused(archive(tensor_pickle(), {{"/b/data/0", floats(4)}}), "are in different top-level folders");
  expect_refused(archive(tensor_pickle(), {{"/toplevel", floats(4)}}), "are in different top-level folders");
  expect_refused(archive(tensor_pickle(), {{"byteorder", "big"}}), "a big-endian checkpoint");
  expect_refused(archive(tensor_pickle(), {{"byteorder", "middle"}}), "unknown byte order 'middle'");
  {
    std::ostringstream os;
    detail::zip::Writer w(os);
    w.add("a/byteorder", "little", 6);
    w.finish();
    expect_refused(os.str(), "no a/data.pkl");
  }
  {  // an archive whose directory lists nothing
    std::string b = good;
    const size_t end = find_last(b, std::string("PK\x05\x06", 4));
    b[end + 8] = b[end + 9] = b[end + 10] = b[end + 11] = 0;
    put32(b, end + 12, 0);
    expect_refused(b, "the archive has no entries");
  }
  const size_t cd = good.find(std::string("PK\x01\x02", 4));
  {  // compressed
    std::string b = good;
    b[cd + 10] = 8;
    expect_refused(b, "is compressed (zip method 8)");
  }
  {  // encrypted
    std::string b = good;
    b[cd + 8] = 1;
    expect_refused(b, "is encrypted");
  }
  {  // data.pkl's size grown into the next entry: overlap
    std::string b = good;
    const uint32_t sz = static_cast<uint32_t>(detail::zip::get_le(reinterpret_cast<const unsigned char*>(b.data()) + cd + 20, 4));
    put32(b, cd + 20, sz + 64);
    put32(b, cd + 24, sz + 64);
    expect_refused(b, "overlap");
  }
  {  // a local header offset pointing at another entry's header
    std::string b = good;
    const size_t cd2 = b.find(std::string("PK\x01\x02", 4), cd + 4);
    put32(b, cd2 + 42, 0);
    expect_refused(b, "the local header names another entry");
  }
  {  // data.pkl corrupted: its CRC
    std::string b = good;
    b[64 + 5] ^= 0x40;
    expect_refused(b, "data.pkl fails its CRC check");
  }
  {  // the end record's directory offset past the file
    std::string b = good;
    const size_t end = find_last(b, std::string("PK\x05\x06", 4));
    put32(b, end + 16, static_cast<uint32_t>(b.size() + 100));
    expect_refused(b, "the central directory");
    b = good;
    b[end + 10] = static_cast<char>(0xFF);  // an entry count the directory cannot hold
    b[end + 8] = static_cast<char>(0xFF);
    expect_refused(b, "entries cannot fit");
  }
  // zip64: every size in zip64 records; then each inconsistency
  const std::string z64 = archive(tensor_pickle(), {{"data/0", floats(4)}}, true);
  CHECK(load_bytes(z64).tensor().numel() == 2);
  const size_t e64 = find_last(z64, std::string("PK\x06\x06", 4)), loc = find_last(z64, std::string("PK\x06\x07", 4));
  REQUIRE(e64 != std::string::npos);
  {
    std::string b = z64;
    b[e64 + 32] = 7;  // total entries
    expect_refused(b, "entry counts disagree");
    b = z64;
    b[e64 + 24] = 7;
    b[e64 + 32] = 7;
    expect_refused(b, "entries cannot fit");
    b = z64;
    put32(b, loc + 8, static_cast<uint32_t>(b.size()));
    expect_refused(b, "the zip64 locator points outside the file");
    b = z64;
    b[loc] = 'X';
    expect_refused(b, "zip64 sizes without a zip64 locator");
    b = z64;
    put32(b, e64 + 48, 0);  // directory offset: disagrees with nothing, but no directory there
    expect_refused(b, "central directory entry 0 is malformed");
    b = z64;
    const size_t c = b.find(std::string("PK\x01\x02", 4));
    b[c + 46 + 10 + 2] = 8;  // the zip64 extra field: too short for its saturated fields
    expect_refused(b, "the zip64 extra field is too short");
  }
}

TEST_CASE("save: refused inputs raise before anything is written; modules and optimizers round-trip") {
  const std::string path = pt_path("refused.pt");
  Value l = Value::list();
  CHECK_THROWS_WITH_AS(l.append(l), doctest::Contains("cannot be put inside itself"), value_error);
  Value d = Value::dict();
  CHECK_THROWS_AS(d.set(Value("me"), d), value_error);
  Value deep = Value::list();
  for (int i = 0; i < 250; ++i) deep = Value::list({deep});
  CHECK_THROWS_WITH_AS(save(path, deep), doctest::Contains("nested more than 200 deep"), value_error);
  CHECK_THROWS_AS(save(path, Value(AnyTensor())), value_error);
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  CHECK_THROWS_WITH_AS(save("/nonexistent_reel_dir/x.pt", Value(1)), doctest::Contains("save: cannot create"), error);
  {  // a failed save leaves an existing file as it was
    save(path, Value(7));
    CHECK_THROWS_AS(save(path, deep), value_error);
    CHECK(load(path).to_int() == 7);
    std::remove(path.c_str());
  }
  CHECK_THROWS_AS(l.values(), type_error);  // (values() is for dicts)
  CHECK_THROWS_WITH_AS(load(fixture("torch_tensor.pt"), {.map_location = DeviceType::CUDA}),
                       doctest::Contains("needs a program built with <reel/cuda.hpp>"), not_implemented_error);

  Generator g(3);
  nn::Linear<float> m(4, 3, g), fresh(4, 3, g);
  const std::string mp = pt_path("module.pt");
  save(mp, m.state_dict());
  const Value v = load(mp);
  CHECK(v.ordered());
  fresh.load_state_dict(v.state_dict());
  CHECK(logical_bytes(AnyTensor(fresh.weight.detach())) == logical_bytes(AnyTensor(m.weight.detach())));

  optim::Adam opt(m.parameters(), optim::AdamOptions(0.01).betas({0.8, 0.95}));
  auto loss = (m(full<float>({2, 4}, 1.0f)) * 2.0f).sum();
  loss.backward();
  opt.step();
  save(mp, optim::to_value(opt.state_dict()));
  optim::Adam other(fresh.parameters());
  other.load_state_dict(optim::from_value(load(mp)));
  const optim::StateDict a = opt.state_dict(), b = other.state_dict();
  CHECK(b.param_groups.at(0).options.at("betas") == optim::OptionValue(std::vector<double>{0.8, 0.95}));
  CHECK(logical_bytes(b.state.at(0).at("exp_avg")) == logical_bytes(a.state.at(0).at("exp_avg")));
  CHECK(item_of<float>(b.state.at(1).at("step")) == 1.0f);
  CHECK_THROWS_WITH_AS(optim::from_value(Value(3)), doctest::Contains("not an optimizer state_dict"), value_error);
  std::remove(mp.c_str());
}
