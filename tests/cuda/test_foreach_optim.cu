// CUDA foreach ops and fused optimizer steps (reel/cuda/multi_tensor.cuh) against the CPU
// implementation on the same random data. The lists mix sizes on purpose: empty tensors, odd
// sizes (vector tails), tensors larger than a chunk, misaligned and non-contiguous views (the
// general path), and more tensors than one launch holds.
#include <cmath>

#include "common.cuh"

using namespace rt;
namespace fe = reel::foreach;

namespace {

// How a list entry is made: a plain tensor, a transposed view (non-contiguous: the general
// path), or a contiguous slice starting one element in (not 16-byte aligned: the scalar loop).
enum class Make { Plain, Transposed, Offset };
struct Spec {
  Shape shape;
  Make make = Make::Plain;
};

std::vector<Spec> mixed_specs(bool views) {
  std::vector<Spec> s = {{{0}},    {{1}},      {{3}},          {{4}},    {{17}}, {{2, 3, 4}},
                         {{0, 5}}, {{1000}},   {{65536 + 4099}}, {{1024}}, {{9}},  {{2 * 65536 + 7}}};
  if (views) {
    s.push_back({{9, 6}, Make::Transposed});
    s.push_back({{1000}, Make::Offset});
    s.push_back({{33}});
  }
  return s;
}

// One entry on both devices, from the same values (f maps the CPU values first).
template <class T, class F>
std::pair<Tensor<T, CPU>, Tensor<T, CUDA>> make_entry(const Spec& s, F&& f) {
  switch (s.make) {
    case Make::Transposed: {
      Tensor<T, CPU> h = f(host_randn<T>({s.shape[1], s.shape[0]}));
      return {h.clone().transpose(0, 1), dev(h).transpose(0, 1)};
    }
    case Make::Offset: {
      Tensor<T, CPU> h = f(host_randn<T>({s.shape[0] + 1}));
      return {h.clone().slice(0, 1, s.shape[0] + 1), dev(h).slice(0, 1, s.shape[0] + 1)};
    }
    default: {
      Tensor<T, CPU> h = f(host_randn<T>(s.shape));
      return {h.clone(), dev(h)};
    }
  }
}

template <class T>
struct Lists {
  std::vector<Tensor<T, CPU>> h;
  std::vector<Tensor<T, CUDA>> d;
};
template <class T, class F>
Lists<T> make_lists(const std::vector<Spec>& specs, F&& f) {
  Lists<T> l;
  for (const auto& s : specs) {
    auto [a, b] = make_entry<T>(s, f);
    l.h.push_back(a);
    l.d.push_back(b);
  }
  return l;
}
auto ident = [](auto t) { return t; };
// strictly positive values (sqrt, division, reciprocal)
template <class T>
Tensor<T, CPU> positive(const Tensor<T, CPU>& t) {
  return Tensor<T, CPU>(abs(t) + 0.5);
}

template <class T>
void check_list(const std::vector<Tensor<T, CPU>>& want, const std::vector<Tensor<T, CUDA>>& got, double atol,
                double rtol) {
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got[i].sizes() == want[i].sizes());
    CHECK_CLOSE_T(host(got[i]), want[i], atol, rtol);
  }
}

// Fills the device cache with NaN blocks of the given shapes, so that an output the kernel
// fails to write shows up as NaN rather than as stale or zero memory.
template <class T>
void poison(const std::vector<Tensor<T, CPU>>& like) {
  std::vector<Tensor<T, CUDA>> keep;
  for (const auto& t : like) keep.push_back(full<T, CUDA>(t.sizes(), T(NAN)));
  reel::gpu::synchronize();
}

template <class T> struct Tol;
// The multi-tensor kernels round exactly as the CPU does (no FMA contraction): results agree to
// the last bit, up to exp's last-ulp differences. The allowance is for the general path (views),
// where CUDA's expression kernels may contract a * b + c into one FMA: half an ulp of a product,
// which after cancellation is an absolute, not a relative, error.
template <> struct Tol<float> {
  static constexpr double atol = 1e-5, rtol = 1e-6;
};
template <> struct Tol<double> {
  static constexpr double atol = 1e-14, rtol = 1e-14;
};
template <> struct Tol<reel::bfloat16> {  // one bf16 ulp (8 significant bits)
  static constexpr double atol = 1e-6, rtol = 1.0 / 128;
};
template <> struct Tol<reel::half> {
  static constexpr double atol = 1e-6, rtol = 1.0 / 1024;
};

// The data of one foreach test: a, b, c are random, p positive; every op runs on both devices
// and then all lists (and the result, if any) are compared.
template <class T>
struct Data {
  Lists<T> a, b, c, p;
  explicit Data(const std::vector<Spec>& specs)
      : a(make_lists<T>(specs, ident)), b(make_lists<T>(specs, ident)), c(make_lists<T>(specs, ident)),
        p(make_lists<T>(specs, [](auto t) { return positive(t); })) {}
  template <class F>
  void both(F&& f, double atol = Tol<T>::atol, double rtol = Tol<T>::rtol) {
    using R = decltype(f(a.h, b.h, c.h, p.h));
    if constexpr (std::is_void_v<R>) {
      f(a.h, b.h, c.h, p.h);
      f(a.d, b.d, c.d, p.d);
    } else {
      auto want = f(a.h, b.h, c.h, p.h);
      poison(want);
      auto got = f(a.d, b.d, c.d, p.d);
      check_list(want, got, atol, rtol);
    }
    check_list(a.h, a.d, atol, rtol);
    check_list(b.h, b.d, atol, rtol);
    check_list(c.h, c.d, atol, rtol);
    check_list(p.h, p.d, atol, rtol);
  }
};

template <class T>
void foreach_suite(bool views) {
  Data<T> d(mixed_specs(views));
  // the first comparison also checks the two sides start equal
  d.both([](auto&, auto&, auto&, auto&) {});
  SUBCASE("add_ sub_ mul_ div_") {
    d.both([](auto& a, auto& b, auto&, auto&) { fe::add_(a, b, 0.5); });
    d.both([](auto& a, auto& b, auto&, auto&) { fe::add_(a, b); });
    d.both([](auto& a, auto&, auto&, auto&) { fe::add_(a, 0.25); });
    d.both([](auto& a, auto& b, auto&, auto&) { fe::sub_(a, b, 3.0); });
    d.both([](auto& a, auto&, auto&, auto&) { fe::mul_(a, 0.999); });
    d.both([](auto& a, auto& b, auto&, auto&) { fe::mul_(a, b); });
    d.both([](auto& a, auto&, auto&, auto& p) { fe::div_(a, p); });
    d.both([](auto& a, auto&, auto&, auto&) {
      std::vector<double> s;
      for (size_t i = 0; i < a.size(); ++i) s.push_back(1.0 + 0.1 * double(i));
      fe::div_(a, fe::ScalarList<double>(s));
    });
  }
  SUBCASE("maximum_ minimum_ clamp_min_ clamp_max_ (NaN propagates)") {
    d.both([](auto& a, auto&, auto&, auto&) {
      for (auto& t : a)
        if (t.numel() > 2 && t.is_contiguous()) t.view({-1}).slice(0, 0, 2).fill_(typename std::decay_t<decltype(t)>::value_type(NAN));
    });
    d.both([](auto& a, auto& b, auto&, auto&) { fe::maximum_(a, b); });
    d.both([](auto& a, auto&, auto& c, auto&) { fe::minimum_(c, a); });
    d.both([](auto& a, auto&, auto&, auto&) { fe::clamp_min_(a, -0.5); });
    d.both([](auto&, auto& b, auto&, auto&) { fe::clamp_max_(b, 0.5); });
  }
  SUBCASE("unary") {
    d.both([](auto&, auto&, auto&, auto& p) { fe::sqrt_(p); });
    d.both([](auto& a, auto&, auto&, auto&) { fe::abs_(a); });
    d.both([](auto&, auto& b, auto&, auto&) { fe::neg_(b); });
    d.both([](auto&, auto&, auto&, auto& p) { fe::reciprocal_(p); });
    d.both([](auto&, auto&, auto& c, auto&) { fe::exp_(c); });  // (Eigen's and CUDA's exp differ by an ulp or two)
  }
  SUBCASE("addcmul_ addcdiv_") {
    d.both([](auto& a, auto& b, auto& c, auto&) { fe::addcmul_(a, b, c, 0.3); });
    d.both([](auto& a, auto& b, auto&, auto& p) { fe::addcdiv_(a, b, p, -0.7); });
    d.both([](auto& a, auto& b, auto&, auto& p) {
      std::vector<double> s;
      for (size_t i = 0; i < a.size(); ++i) s.push_back(-0.01 * double(i + 1));
      fe::addcdiv_(a, b, p, fe::ScalarList<double>(s));
    });
  }
  SUBCASE("lerp_ (both formulas, scalar and tensor weights)") {
    d.both([](auto& a, auto& b, auto&, auto&) { fe::lerp_(a, b, 0.1); });
    d.both([](auto& a, auto& b, auto&, auto&) { fe::lerp_(a, b, 0.75); });
    d.both([](auto& a, auto& b, auto& c, auto&) { fe::lerp_(a, b, c); });
    d.both([](auto& a, auto& b, auto&, auto&) { fe::lerp_(a, b, fe::ScalarList<double>(std::vector<double>(a.size(), 0.9))); });
  }
  SUBCASE("out-of-place forms leave their inputs alone") {
    d.both([](auto& a, auto& b, auto&, auto&) { return fe::add(a, b, -2.0); });
    d.both([](auto& a, auto&, auto&, auto&) { return fe::mul(a, 1.5); });
    d.both([](auto&, auto&, auto&, auto& p) { return fe::sqrt(p); });
    d.both([](auto& a, auto& b, auto& c, auto&) { return fe::addcmul(a, b, c, 2.0); });
    d.both([](auto& a, auto& b, auto&, auto& p) { return fe::addcdiv(a, b, p, 0.5); });
    d.both([](auto& a, auto& b, auto&, auto&) { return fe::lerp(a, b, 0.6); });
    d.both([](auto& a, auto&, auto&, auto&) { return fe::neg(a); });
  }
  SUBCASE("copy_ and zero_ (zero_ clears NaN too)") {
    d.both([](auto& a, auto& b, auto&, auto&) { fe::copy_(a, b); });
    d.both([](auto&, auto&, auto& c, auto&) {
      for (auto& t : c) t.fill_(typename std::decay_t<decltype(t)>::value_type(NAN));
    });
    d.both([](auto&, auto&, auto& c, auto&) { fe::zero_(c); });
    for (const auto& t : d.c.d) CHECK(rel_err(host(t), zeros<T>(t.sizes()), 0, 0) == 0);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("cuda foreach: every op vs the CPU, mixed sizes", T, float, reel::bfloat16) {
  REQUIRE_GPU();
  foreach_suite<T>(false);
}

TEST_CASE_TEMPLATE("cuda foreach: lists with a non-contiguous and a misaligned tensor", T, float, reel::bfloat16) {
  REQUIRE_GPU();
  foreach_suite<T>(true);
}

TEST_CASE("cuda foreach: double and half") {
  REQUIRE_GPU();
  {
    Data<double> d(mixed_specs(true));
    d.both([](auto& a, auto& b, auto& c, auto&) { fe::addcmul_(a, b, c, 0.3); });
    d.both([](auto& a, auto& b, auto&, auto&) { fe::lerp_(a, b, 0.7); });
    d.both([](auto& a, auto&, auto&, auto& p) { return fe::addcdiv(a, a, p, -1.0); });
  }
  {
    Data<reel::half> d(mixed_specs(true));
    d.both([](auto& a, auto& b, auto& c, auto&) { fe::addcmul_(a, b, c, 0.3); });
    d.both([](auto& a, auto& b, auto&, auto&) { fe::lerp_(a, b, 0.2); });
    d.both([](auto&, auto&, auto&, auto& p) { return fe::sqrt(p); });
  }
}

TEST_CASE("cuda foreach: more tensors than one launch holds, and more chunks than one launch has blocks") {
  REQUIRE_GPU();
  std::vector<Spec> many;
  for (int i = 0; i < 300; ++i) many.push_back({{int64_t(1 + (i * 37) % 301)}});
  many[150] = {{0}};
  many[151] = {{3 * 65536 + 1}};
  Data<float> d(many);
  d.both([](auto& a, auto& b, auto&, auto&) { fe::add_(a, b, -0.5); });
  d.both([](auto& a, auto& b, auto&, auto& p) {
    std::vector<double> s;
    for (size_t i = 0; i < a.size(); ++i) s.push_back(0.5 + 0.001 * double(i));
    fe::addcdiv_(a, b, p, fe::ScalarList<double>(s));
  });
  d.both([](auto& a, auto& b, auto& c, auto&) { return fe::lerp(a, b, c); });
  d.both([](auto&, auto&, auto& c, auto&) { fe::zero_(c); });

  // one tensor of 330 chunks (a launch has 320 blocks) between small ones
  Data<float> big(std::vector<Spec>{{{5}}, {{330 * 65536 + 3}}, {{7}}});
  big.both([](auto& a, auto& b, auto&, auto&) { fe::add_(a, b, 2.0); });
  big.both([](auto& a, auto& b, auto& c, auto&) { fe::addcmul_(a, b, c, 0.5); });
}

TEST_CASE("cuda foreach: in-place ops bump versions; autograd keeps the general path") {
  REQUIRE_GPU();
  Data<float> d(mixed_specs(false));
  std::vector<uint64_t> v0;
  for (const auto& t : d.a.d) v0.push_back(t.version());
  fe::add_(d.a.d, d.b.d, 1.0);
  for (size_t i = 0; i < v0.size(); ++i) CHECK(d.a.d[i].version() > v0[i]);

  // a tensor that requires grad: its result must record history (not the kernel path)
  auto xh = host_randn({100});
  auto x = dev(xh).requires_grad_();
  std::vector<Tensor<float, CUDA>> l{x, dev(host_randn({50}))};
  auto r = fe::mul(l, 3.0);
  CHECK(r[0].requires_grad());
  CHECK(!r[1].requires_grad());
  CHECK_CLOSE_T(host(r[0].detach()), Tensor<float>(xh * 3.0), 1e-6, 1e-6);
  CHECK_CLOSE_T(host(r[1]), Tensor<float>(host(l[1]) * 3.0), 1e-6, 1e-6);
}

TEST_CASE("cuda foreach: update_ema") {
  REQUIRE_GPU();
  Data<float> d(mixed_specs(true));
  for (int k = 0; k < 3; ++k)
    d.both([](auto& a, auto& b, auto&, auto&) { reel::update_ema(a, b, 0.99); });
}

// ------------------------------------------------------------------ optimizers
namespace {

std::vector<Shape> param_shapes() {
  std::vector<Shape> s;
  for (int i = 0; i < 70; ++i) s.push_back({int64_t(1 + (i * 53) % 517)});  // more than a launch's slots
  s[3] = {0};
  s[10] = {65536 + 77};  // more than a chunk
  s[11] = {16, 33};
  return s;
}

// Runs `steps` steps of Opt on the CPU and on CUDA from the same parameters and gradients and
// compares parameters and state. With `skip`, some parameters get no gradient on some steps,
// so step counts (Adam) and momentum buffers (SGD) start at different steps; with
// `noncontig`, one parameter is a non-contiguous view (the foreach composition runs instead).
// A parameter: requires grad where autograd records T on D (not half / bfloat16, which are
// storage types to autograd; an optimizer steps them all the same, from the grads set here).
template <class T, class D>
Tensor<T, D> param(Tensor<T, D> t) {
  if constexpr (reel::detail::autograd_type_v<T, D>) t.requires_grad_();
  return t;
}

template <class T, template <class, class> class Opt, class Options>
void optim_case(const Options& opts, double atol, double rtol, bool skip, bool noncontig = false, int steps = 5) {
  const auto shapes = param_shapes();
  std::vector<Tensor<T, CPU>> pc;
  std::vector<Tensor<T, CUDA>> pd;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (noncontig && i == 11) {
      auto h = host_randn<T>({33, 16});
      pc.push_back(param(h.clone().transpose(0, 1).detach()));
      pd.push_back(param(dev(h).transpose(0, 1).detach()));
      REQUIRE(!pd.back().is_contiguous());
      continue;
    }
    auto h = host_randn<T>(shapes[i]);
    pc.push_back(param(h.clone()));
    pd.push_back(param(dev(h)));
  }
  Opt<T, CPU> oc(pc, opts);
  Opt<T, CUDA> od(pd, opts);
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < pc.size(); ++i) {
      if (skip && (step + 3 * i) % 4 == 0) {
        pc[i].set_grad({});
        pd[i].set_grad({});
      } else {
        auto g = host_randn<T>(shapes[i]);
        pc[i].set_grad(g);
        pd[i].set_grad(dev(g));
      }
    }
    oc.step();
    od.step();
  }
  check_list(pc, pd, atol, rtol);
  const auto& sc = oc.param_groups()[0].state;
  const auto& sd = od.param_groups()[0].state;
  for (size_t i = 0; i < sc.size(); ++i) {
    CAPTURE(i);
    CHECK(sc[i].step == sd[i].step);
    for (size_t j = 0; j < std::decay_t<decltype(sc[i])>::names.size(); ++j) {
      CAPTURE(j);
      REQUIRE(sc[i].buffer(j).defined() == sd[i].buffer(j).defined());
      if (sc[i].buffer(j).defined()) CHECK_CLOSE_T(host(sd[i].buffer(j)), sc[i].buffer(j), atol, rtol);
    }
  }
}

using reel::optim::AdamOptions;
using reel::optim::AdamWOptions;
using reel::optim::SGDOptions;

}  // namespace

TEST_CASE("cuda optim: SGD fused step vs the CPU") {
  REQUIRE_GPU();
  // (float: the same operations in the same order; a 1-ulp allowance for FMA on the CPU side)
  const double at = 1e-6, rt = 1e-5;
  SUBCASE("plain") { optim_case<float, reel::optim::SGD>(SGDOptions().lr(0.1), at, rt, false); }
  SUBCASE("momentum, dampening, weight decay, late buffers") {
    optim_case<float, reel::optim::SGD>(SGDOptions().lr(0.05).momentum(0.9).dampening(0.1).weight_decay(0.01), at, rt,
                                        true);
  }
  SUBCASE("nesterov, maximize, weight decay") {
    optim_case<float, reel::optim::SGD>(
        SGDOptions().lr(0.05).momentum(0.9).nesterov(true).weight_decay(0.1).maximize(true), at, rt, true);
  }
  SUBCASE("non-contiguous parameter: foreach composition") {
    optim_case<float, reel::optim::SGD>(SGDOptions().lr(0.05).momentum(0.8).weight_decay(0.1), at, rt, true, true);
  }
  SUBCASE("bfloat16 (the CPU composition rounds between ops, the fused step once)") {
    // (an intermediate rounding moves the momentum buffer by an ulp at its own scale, which
    // cancellation can leave next to a small result: an absolute allowance of a few ulps at 1)
    optim_case<reel::bfloat16, reel::optim::SGD>(SGDOptions().lr(0.05).momentum(0.9).nesterov(true).weight_decay(0.01),
                                                 0.05, 1.0 / 32, true);
  }
}

TEST_CASE("cuda optim: Adam fused step vs the CPU") {
  REQUIRE_GPU();
  const double at = 1e-6, rt = 1e-5;
  SUBCASE("plain") { optim_case<float, reel::optim::Adam>(AdamOptions(1e-2), at, rt, false); }
  SUBCASE("amsgrad, L2 weight decay, uneven step counts") {
    optim_case<float, reel::optim::Adam>(AdamOptions(1e-2).amsgrad(true).weight_decay(0.1), at, rt, true);
  }
  SUBCASE("maximize, amsgrad") {
    optim_case<float, reel::optim::Adam>(AdamOptions(1e-2).maximize(true).amsgrad(true).betas({0.8, 0.99}), at, rt,
                                         true);
  }
  SUBCASE("non-contiguous parameter: foreach composition") {
    optim_case<float, reel::optim::Adam>(AdamOptions(1e-2).amsgrad(true).weight_decay(0.1), at, rt, true, true);
  }
  SUBCASE("double") {
    optim_case<double, reel::optim::Adam>(AdamOptions(1e-2).amsgrad(true).weight_decay(0.1), 1e-13, 1e-12, true);
  }
}

TEST_CASE("cuda optim: AdamW fused step vs the CPU") {
  REQUIRE_GPU();
  const double at = 1e-6, rt = 1e-5;
  SUBCASE("weight decay") { optim_case<float, reel::optim::AdamW>(AdamWOptions(1e-2).weight_decay(0.05), at, rt, false); }
  SUBCASE("amsgrad, maximize, uneven step counts") {
    optim_case<float, reel::optim::AdamW>(AdamWOptions(1e-2).amsgrad(true).maximize(true).weight_decay(0.1), at, rt,
                                          true);
  }
  SUBCASE("bfloat16 (both sides compute in float and round once per state)") {
    optim_case<reel::bfloat16, reel::optim::AdamW>(AdamWOptions(1e-2).amsgrad(true).weight_decay(0.1), 1e-6, 1.0 / 128,
                                                   true);
  }
}
