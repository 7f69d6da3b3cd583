// Custom ops (reel::library, ops::call, ops::handle): registration, typed calls, refused
// double registration, concurrent first use, warnings that name the op, autograd through ops.
#include <doctest/doctest.h>

#include <atomic>
#include <reel/reel.hpp>
#include <thread>

#include "check_close.hpp"

using namespace reel;

TEST_CASE("custom ops: def, call, handle, tags, schema checks and typed errors") {
  auto lib = library("lib_basic");
  lib.def("scale(Tensor x, float alpha) -> Tensor",
          [](const Tensor<double>& x, double a) { return Tensor<double>(x * a); }, {OpTag::pointwise})
      .def("count", [](int64_t n) { return n + 1; });
  auto x = arange<double>(0, 4);
  auto y = ops::call<Tensor<double>>("lib_basic::scale", x, 2.5);
  for (int64_t i = 0; i < 4; ++i) CHECK(y.data_ptr()[i] == 2.5 * static_cast<double>(i));
  CHECK(ops::call<int64_t>("lib_basic::count", int64_t(41)) == 42);
  auto h = ops::handle<Tensor<double>(Tensor<double>, double)>("lib_basic::scale");
  CHECK(h(x, 1.0).data_ptr()[3] == 3.0);
  CHECK(h.name() == "lib_basic::scale");
  CHECK(h.has_tag(OpTag::pointwise));
  CHECK_FALSE(h.has_tag(OpTag::side_effect));
  CHECK(ops::has_op("lib_basic::count"));
  // another kernel (signature) for the same op: picked by the arguments' types
  lib.impl("scale", [](const Tensor<float>& x, double a) { return Tensor<float>(x * static_cast<float>(a)); });
  CHECK(ops::call<Tensor<float>>("lib_basic::scale", arange<float>(0, 2), 3.0).data_ptr()[1] == 3.0f);
  CHECK(h(x, 2.0).data_ptr()[1] == 2.0);  // a handle taken before still works
  lib.impl("scale", [](const Tensor<double, Meta>& m, double) { return empty<double, Meta>(m.sizes()); });  // shapes only
  auto shape = ops::call<Tensor<double, Meta>>("lib_basic::scale", empty<double, Meta>({5, 7}), 2.0);
  CHECK(shape.sizes() == Shape{5, 7});
  CHECK_THROWS_WITH_AS(lib.impl("scale", [](const Tensor<double>& t, double) { return t; }),
                       doctest::Contains("has a kernel for (reel::"), error);
  CHECK_THROWS_WITH_AS(lib.impl("nothing", [](double v) { return v; }), doctest::Contains("def the op lib_basic::nothing first"),
                       index_error);
  CHECK_THROWS_WITH_AS(ops::call<int64_t>("lib_basic::scale", int64_t(1)), doctest::Contains(" or "), type_error);
  CHECK_FALSE(ops::has_op("lib_basic::nope"));
  // types are checked, both signatures named; no conversions
  CHECK_THROWS_WITH_AS(ops::call<Tensor<double>>("lib_basic::scale", x, 2), doctest::Contains("takes (reel::"),
                       type_error);
  CHECK_THROWS_WITH_AS(ops::call<Tensor<double>>("lib_basic::scale", x, 2), doctest::Contains("called as"), type_error);
  CHECK_THROWS_WITH_AS(ops::call<int64_t>("lib_basic::count", 1), doctest::Contains("(long) -> long"), type_error);
  CHECK_THROWS_WITH_AS(ops::call<int64_t>("lib_basic::missing", 1), doctest::Contains("no op named lib_basic::missing"),
                       index_error);
  CHECK_THROWS_WITH_AS(lib.def("bad(Tensor x) -> Tensor", [](int64_t a, int64_t b) { return a + b; }),
                       doctest::Contains("names 1 parameters, but the callable takes 2"), value_error);
  CHECK_THROWS_AS(lib.def("", [] { return 0; }), value_error);
  CHECK_THROWS_AS(lib.def("a::b", [] { return 0; }), value_error);
  CHECK_THROWS_AS(library("has space"), value_error);
}

TEST_CASE("custom ops: a namespace or an op registered twice is refused, naming where it was first") {
  auto lib = library("lib_twice");
  const int first_line = __LINE__ + 1;
  lib.def("f", [](double v) { return v; });
  try {
    lib.def("f", [](double v) { return 2 * v; });
    FAIL("registered twice");
  } catch (const error& e) {
    const std::string m = e.what();
    CHECK(m.find("lib_twice::f is registered already (at ") != std::string::npos);
    CHECK(m.find("test_library.cpp:" + std::to_string(first_line)) != std::string::npos);
    CHECK(m.find("loaded twice") != std::string::npos);
  }
  CHECK(ops::call<double>("lib_twice::f", 3.0) == 3.0);  // the first one stays
  CHECK_THROWS_WITH_AS(library("lib_twice"), doctest::Contains("namespace lib_twice is registered already"), error);
}

TEST_CASE("custom ops: concurrent first use and racing registrations") {
  constexpr int kThreads = 16;
  std::atomic<int> ready{0}, won{0}, refused{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      ++ready;
      while (ready.load() < kThreads) {
      }
      auto lib = library("lib_thread" + std::to_string(t));  // distinct namespaces: all succeed
      lib.def("id", [t](int64_t v) { return v + t; });
      CHECK(ops::call<int64_t>("lib_thread" + std::to_string(t) + "::id", int64_t(100)) == 100 + t);
      try {  // one namespace and op, many registrants: exactly one wins
        library("lib_race").def("op", [](int64_t v) { return v; });
        ++won;
      } catch (const error&) {
        ++refused;
      }
    });
  for (auto& t : ts) t.join();
  CHECK(won == 1);
  CHECK(refused == kThreads - 1);
  CHECK(ops::call<int64_t>("lib_race::op", int64_t(7)) == 7);
}

TEST_CASE("custom ops: warnings raised inside an op name it; the error action throws at the call site") {
  library("lib_warn").def("noisy", [](double v) {
    warn("input was clamped");
    return v;
  });
  {
    warnings::catch_warnings rec(true);
    set_warning_action(WarningAction::Always);
    ops::call<double>("lib_warn::noisy", 1.0);
    warn("outside");  // no op running: no name
    const auto log = rec.log();
    REQUIRE(log.size() == 2);
    CHECK(log[0].message == "lib_warn::noisy: input was clamped");
    CHECK(log[1].message == "outside");
  }
  {
    warnings::catch_warnings scope;
    set_warning_action(WarningAction::Error);
    CHECK_THROWS_WITH_AS(ops::call<double>("lib_warn::noisy", 1.0), "UserWarning: lib_warn::noisy: input was clamped",
                         warning_error);
  }
}

TEST_CASE("custom ops: an op built from reel's ops is differentiable (first and second order)") {
  library("lib_ad").def("cube(Tensor x) -> Tensor", [](const Tensor<double>& x) { return Tensor<double>(x * x * x); });
  auto x = from_vector<double>({0.5, -1.0, 2.0}, {3}).requires_grad_();
  auto y = ops::call<Tensor<double>>("lib_ad::cube", x);
  auto g = autograd::grad({Tensor<double>(y.sum())}, {x}, {}, {.create_graph = true})[0];
  for (int64_t i = 0; i < 3; ++i) {
    const double v = x.detach().data_ptr()[i];
    CHECK(g.detach().data_ptr()[i] == doctest::Approx(3 * v * v));
  }
  auto h = autograd::grad({Tensor<double>(g.sum())}, {x})[0];  // d/dx sum(3x^2) = 6x
  for (int64_t i = 0; i < 3; ++i) CHECK(h.data_ptr()[i] == doctest::Approx(6 * x.detach().data_ptr()[i]));
}

TEST_CASE("custom ops: register_autograd records the op around its kernel (both modes, second order)") {
  using TD = Tensor<double>;
  static int kernel_saw_history = 0;
  auto lib = library("lib_rad");
  lib.def("mysin(Tensor x, float k) -> Tensor", [](const TD& x, double k) {
    kernel_saw_history += x.requires_grad();
    return TD(sin(x * k));
  });
  // backward in terms of the arguments: differentiable again
  lib.register_autograd(
      "mysin", [](const TD& g, const TD&, const TD& x, double k) { return std::vector<TD>{TD(g * cos(x * k) * k)}; },
      [](const std::vector<TD>& t, const TD&, const TD& x, double k) { return TD(t[0] * cos(x * k) * k); });
  Generator gen(3);
  TD x = randn<double>({5}, gen).requires_grad_();
  TD y = ops::call<TD>("lib_rad::mysin", x, 1.5);
  CHECK(kernel_saw_history == 0);
  auto g = autograd::grad({TD(y.sum())}, {x}, {}, {.create_graph = true})[0];
  auto h = autograd::grad({TD(g.sum())}, {x})[0];
  TD xd = x.detach();
  check_close(g.detach(), TD(cos(xd * 1.5) * 1.5).to_vector(), 1e-14);
  check_close(h, TD(-sin(xd * 1.5) * 2.25).to_vector(), 1e-14);
  TD v = randn<double>({5}, gen);
  auto jv = autograd::functional::jvp([](const std::vector<TD>& in) { return ops::call<TD>("lib_rad::mysin", in[0], 1.5); },
                                      std::vector<TD>{xd}, std::vector<TD>{v});
  check_close(jv.second, TD(v * cos(xd * 1.5) * 1.5).to_vector(), 1e-14);
  // without a forward rule forward mode raises; errors name the op
  lib.def("twice(Tensor x) -> Tensor", [](const TD& x) { return TD(x * 2.0); });
  lib.register_autograd("twice", [](const TD& g, const TD&, const TD&) { return std::vector<TD>{TD(g * 2.0)}; });
  CHECK_THROWS_WITH_AS(autograd::functional::jvp([](const std::vector<TD>& in) { return ops::call<TD>("lib_rad::twice", in[0]); },
                                                 std::vector<TD>{xd}, std::vector<TD>{v}),
                       doctest::Contains("lib_rad::twice: no forward rule"), not_implemented_error);
  CHECK_THROWS_WITH_AS(lib.register_autograd("twice", [](const TD& g, const TD&, const TD&) { return std::vector<TD>{g}; }),
                       doctest::Contains("has its autograd already"), error);
  CHECK_THROWS_WITH_AS(
      lib.register_autograd("twice", [](const TD& g, const TD&, const TD&, double) { return std::vector<TD>{g}; }),
      doctest::Contains("but its kernels are (reel::"), type_error);
  lib.def("bad(Tensor x) -> Tensor", [](const TD& x) { return TD(x * 2.0); });
  lib.register_autograd("bad", [](const TD& g, const TD&, const TD&) { return std::vector<TD>{g, g}; });
  CHECK_THROWS_WITH_AS(TD(ops::call<TD>("lib_rad::bad", x).sum()).backward(),
                       doctest::Contains("returned 2 gradients for 1 tensor arguments"), error);
}
