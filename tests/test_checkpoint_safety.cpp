// PyTorch checkpoints (.pt), loading safely: jagged tensors and classes only when their
// globals are allowed, every forbidden global and opcode of the weights-only unpickler refused
// by name, malformed archives, and saves refused before anything is written.
// (test_checkpoint.cpp: PyTorch's files read exactly, round trips, sharing, Meta, mmap.)
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
