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
#include "pt_helpers.hpp"

using namespace reel;
using namespace reel_test;
using namespace pt_helpers;

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
