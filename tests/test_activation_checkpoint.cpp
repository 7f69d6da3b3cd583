// Activation checkpointing (reel::checkpoint, with and without a policy): gradients, higher
// orders, forward mode and nesting equal the unchecked computation's; replays keep dropout
// masks, never rerun side effects or external in-place writes, and serve kept results; stale
// inputs and parameters are detected; memory drops.
#include <doctest/doctest.h>

#include <reel/reel.hpp>

#include "check_close.hpp"

using namespace reel;
using TD = Tensor<double>;
using Ts = std::vector<TD>;

namespace {
const char* grad_fn_name(const TD& t) {
  auto* m = reel::detail::meta_of(t.impl());
  return m && m->grad_fn ? m->grad_fn->name() : "";
}
void check_same(const TD& a, const TD& b, double tol = 1e-12) {
  REQUIRE(a.defined());
  REQUIRE(b.defined());
  REQUIRE(a.sizes() == b.sizes());
  check_close(a, b.contiguous().to_vector(), tol);
}
// A custom op's result type without a default constructor.
struct Reading {
  explicit Reading(double x) : v(x) {}
  double v;
};
// A small MLP block with captured parameters: x -> tanh(x W1 + b) W2.
struct Block {
  TD w1, b, w2;
  explicit Block(int64_t n, uint64_t seed) {
    Generator g(seed);
    w1 = TD(randn<double>({n, n}, g) * 0.5).requires_grad_();
    b = TD(randn<double>({n}, g) * 0.1).requires_grad_();
    w2 = TD(randn<double>({n, n}, g) * 0.5).requires_grad_();
  }
  TD operator()(const TD& x) const { return matmul(TD(tanh(matmul(x, w1) + b)), w2); }
  Ts params() const { return {w1, b, w2}; }
};
}  // namespace

TEST_CASE("checkpoint: gradients of inputs and captured parameters equal the unchecked ones") {
  Block blk(5, 1);
  Generator g(7);
  TD x0 = randn<double>({3, 5}, g).requires_grad_();
  auto fn = [&](const Ts& in) { return blk(in[0]); };
  for (int mode = 0; mode < 2; ++mode) {
    TD x = TD(x0 * 1.5);  // a non-leaf input: its history continues past the region
    TD y = mode ? checkpoint(fn, {x}) : fn({x});
    TD loss = sum(y * y);
    auto gr = autograd::grad({loss}, {x0, blk.w1, blk.b, blk.w2});
    static Ts want;
    if (!mode) {
      want = gr;
      CHECK(grad_fn_name(y) != std::string("CheckpointBackward"));
    } else {
      CHECK(grad_fn_name(y) == std::string("CheckpointBackward"));
      for (size_t k = 0; k < gr.size(); ++k) check_same(gr[k], want[k]);
    }
  }
  // backward() accumulates into the captured parameters' .grad
  TD y = checkpoint(fn, {x0});
  sum(y).backward();
  TD w1g = blk.w1.grad();
  for (auto p : blk.params()) p.set_grad(TD());
  sum(fn({x0})).backward();
  check_same(w1g, blk.w1.grad());
  // without grad mode the function just runs
  {
    autograd::no_grad ng;
    TD z = checkpoint(fn, {x0});
    CHECK_FALSE(z.requires_grad());
  }
}

TEST_CASE("checkpoint: Hessian-vector products and forward mode through a checkpointed region") {
  Block blk(4, 2);
  Generator g(3);
  TD x = randn<double>({2, 4}, g);
  TD v = randn<double>({2, 4}, g);
  auto f_plain = [&](const Ts& in) { return sum(pow(blk(in[0]), 2.0)); };
  auto f_ckpt = [&](const Ts& in) {
    return sum(pow(checkpoint([&](const Ts& a) { return blk(a[0]); }, {in[0]}), 2.0));
  };
  // reverse over reverse: grad with create_graph, then the gradient of <grad, v>
  auto rr = [&](auto& f) {
    TD xr = x.detach().requires_grad_();
    TD gx = autograd::grad({f(Ts{xr})}, {xr}, {}, {.create_graph = true})[0];
    return autograd::grad({sum(gx * v)}, {xr})[0];
  };
  check_same(rr(f_ckpt), rr(f_plain));
  // forward over reverse (functional::hvp) and forward mode (functional::jvp)
  check_same(autograd::functional::hvp(f_ckpt, Ts{x}, Ts{v}).grads[0],
             autograd::functional::hvp(f_plain, Ts{x}, Ts{v}).grads[0]);
  check_same(autograd::functional::jvp(f_ckpt, Ts{x}, Ts{v}).second, autograd::functional::jvp(f_plain, Ts{x}, Ts{v}).second);
  // nested checkpoints, second order
  auto f_nested = [&](const Ts& in) {
    return sum(pow(checkpoint([&](const Ts& a) {
      TD h = checkpoint([&](const Ts& b) { return TD(tanh(matmul(b[0], blk.w1) + blk.b)); }, {a[0]});
      return matmul(h, blk.w2);
    }, {in[0]}), 2.0));
  };
  check_same(rr(f_nested), rr(f_plain));
  check_same(autograd::functional::hessian(f_nested, x.reshape({-1}).detach().reshape({2, 4})).reshape({8, 8}),
             autograd::functional::hessian(f_plain, x).reshape({8, 8}), 1e-10);
}

TEST_CASE("checkpoint: dropout inside gives the same mask on recompute, and the generator is left as without it") {
  Generator g(5);
  TD x = randn<double>({64}, g).requires_grad_();
  auto fn = [](const Ts& in) { return TD(nn::functional::dropout(in[0], 0.5, true, default_generator()) * in[0]); };
  manual_seed(11);
  TD y1 = checkpoint(fn, {x});
  auto g1 = autograd::grad({sum(y1)}, {x})[0];
  TD after1 = rand<double>({4});
  manual_seed(11);
  TD y2 = fn({x});
  auto g2 = autograd::grad({sum(y2)}, {x})[0];
  TD after2 = rand<double>({4});
  check_same(y1, y2);
  check_same(g1, g2);  // (d/dx of m x^2 / (1-p) = 2 m x / (1-p): a different mask would differ)
  check_same(after1, after2);
}

TEST_CASE("checkpoint: a side-effect op runs once per forward; policies keep or recompute reported ops") {
  static int tallies = 0, heavies = 0;
  auto lib = library("ckpt_test");
  lib.def("tally(Tensor x) -> Tensor", [](const TD& x) { ++tallies; return TD(x.detach() * 2.0); }, {OpTag::side_effect});
  lib.def("heavy(Tensor x) -> Tensor", [](const TD& x) { ++heavies; return TD(x.detach() + 1.0); });
  lib.def("tally_grad(Tensor x) -> Tensor", [](const TD& x) { ++tallies; return TD(x * 2.0); }, {OpTag::side_effect});
  Generator g(9);
  TD x = randn<double>({6}, g).requires_grad_();
  auto fn = [](const Ts& in) {
    TD t = ops::call<TD>("ckpt_test::tally", in[0]);
    TD h = ops::call<TD>("ckpt_test::heavy", in[0]);
    return TD(exp(in[0]) * t * h);
  };
  auto run = [&](auto&&... policy) {
    tallies = heavies = 0;
    TD y = checkpoint(fn, {x}, policy...);
    auto gx = autograd::grad({sum(y)}, {x})[0];
    return std::pair<TD, TD>{y, gx};
  };
  auto want_y = TD(exp(x) * (x * 2.0) * (x + 1.0)).detach();
  auto want_g = TD(exp(x) * (x * 2.0) * (x + 1.0)).detach();  // t and h are constants to autograd
  auto [y0, g0] = run();
  CHECK(tallies == 1);  // full checkpointing: the side effect is kept, not replayed
  CHECK(heavies == 2);  // the rest is recomputed
  check_same(y0, want_y);
  check_same(g0, want_g);
  std::vector<std::string> seen;
  auto [y1, g1] = run([&](const OpCall& op) {
    seen.emplace_back(op.name());
    return CheckpointPolicy::PREFER_RECOMPUTE;
  });
  CHECK(tallies == 1);
  CHECK(heavies == 2);
  CHECK(seen == std::vector<std::string>{"ckpt_test::tally", "ckpt_test::heavy"});
  auto [y2, g2] = run([](const OpCall& op) {
    return op.name() == "ckpt_test::heavy" ? CheckpointPolicy::MUST_SAVE : CheckpointPolicy::PREFER_RECOMPUTE;
  });
  CHECK(tallies == 1);
  CHECK(heavies == 1);  // kept: not computed again
  check_same(g2, want_g);
  CHECK_THROWS_WITH_AS(run([](const OpCall&) { return CheckpointPolicy::MUST_RECOMPUTE; }),
                       doctest::Contains("MUST_RECOMPUTE for ckpt_test::tally"), error);
  // a side-effect op that records its own history cannot be kept with it
  auto fn2 = [](const Ts& in) { return TD(ops::call<TD>("ckpt_test::tally_grad", in[0]) * in[0]); };
  CHECK_THROWS_WITH_AS(checkpoint(fn2, {x}), doctest::Contains("register_autograd"), error);
  // with its backward registered, a kept side-effect op still passes gradients on
  lib.def("logged(Tensor x) -> Tensor", [](const TD& x) { ++tallies; return TD(x * 3.0); }, {OpTag::side_effect});
  lib.register_autograd("logged", [](const TD& gr, const TD&, const TD&) { return std::vector<TD>{TD(gr * 3.0)}; },
                        [](const Ts& t, const TD&, const TD&) { return TD(t[0] * 3.0); });
  auto fn3 = [](const Ts& in) { return TD(sin(ops::call<TD>("ckpt_test::logged", TD(in[0] * in[0])))); };
  for (int pass = 0; pass < 2; ++pass) {  // full checkpointing, then a policy that recomputes everything it may
    tallies = 0;
    TD y3 = pass ? checkpoint(fn3, {x}, [](const OpCall&) { return CheckpointPolicy::PREFER_RECOMPUTE; })
                 : checkpoint(fn3, {x});
    auto g3 = autograd::grad({sum(y3)}, {x}, {}, {.create_graph = true})[0];
    CHECK(tallies == 1);
    check_same(g3.detach(), TD(cos(x * x * 3.0) * 6.0 * x).detach());
    auto h3 = autograd::grad({sum(g3)}, {x})[0];  // second order through the kept result's history
    TD xd = x.detach();
    check_same(h3, TD(cos(xd * xd * 3.0) * 6.0 - sin(xd * xd * 3.0) * 36.0 * xd * xd));
    CHECK(tallies == 1);
  }
  // a side-effect op returning another type (no default constructor): kept, served on replay
  lib.def("read_sensor(float x) -> Reading", [](double v) { ++tallies; return Reading(2 * v); }, {OpTag::side_effect});
  tallies = 0;
  TD ys = checkpoint([](const Ts& in) { return TD(in[0] * ops::call<Reading>("ckpt_test::read_sensor", 1.5).v); }, {x});
  auto gs = autograd::grad({sum(ys)}, {x})[0];
  CHECK(tallies == 1);
  check_same(gs, TD(ones<double>({6}) * 3.0));
  // the policy sees the matrix products
  TD w = randn<double>({6, 6}, g).requires_grad_();
  seen.clear();
  TD z = checkpoint([&](const Ts& in) { return TD(relu(matmul(in[0].reshape({1, 6}), w))); }, {x},
                    [&](const OpCall& op) {
                      seen.emplace_back(op.name());
                      return CheckpointPolicy::MUST_SAVE;
                    });
  auto gz = autograd::grad({sum(z)}, {x, w});
  CHECK(seen == std::vector<std::string>{"matmul"});
  TD zp = relu(matmul(x.reshape({1, 6}), w));
  auto gp = autograd::grad({sum(zp)}, {x, w});
  check_same(gz[0], gp[0]);
  check_same(gz[1], gp[1]);
}

TEST_CASE("checkpoint: in-place updates of buffers outside the function happen once") {
  TD running = zeros<double>({3});
  TD x = ones<double>({3}).requires_grad_();
  auto fn = [&](const Ts& in) {
    {
      autograd::no_grad ng;
      running.add_(TD(in[0].detach() * 0.5));
    }
    TD tmp = TD(in[0] * 3.0);
    tmp.mul_(2.0);  // a fresh tensor: written again in the replay
    return TD(tmp * running);
  };
  TD y = checkpoint(fn, {x});
  auto gx = autograd::grad({sum(y)}, {x})[0];
  check_close(running, {0.5, 0.5, 0.5});
  check_close(gx, {3.0, 3.0, 3.0});  // d/dx (6 x * 0.5) with running a constant
}

TEST_CASE("checkpoint: inputs and captured tensors modified after the forward are detected") {
  TD a = ones<double>({4}).requires_grad_();
  TD w = full<double>({4}, 2.0).requires_grad_();
  auto fn = [&](const Ts& in) { return TD(sin(in[0]) * w); };
  {
    TD x = TD(a * 1.0);
    TD y = checkpoint(fn, {x});
    {
      autograd::no_grad ng;
      x.add_(1.0);
    }
    CHECK_THROWS_WITH_AS(sum(y).backward(), doctest::Contains("modified by an inplace operation"), error);
  }
  {
    TD y = checkpoint(fn, {TD(a * 1.0)});
    {
      autograd::no_grad ng;
      w.add_(1.0);
    }
    CHECK_THROWS_WITH_AS(sum(y).backward(), doctest::Contains("outside the checkpointed function"), error);
  }
  {  // a function that uses other tensors when run again
    int calls = 0;
    TD w2 = full<double>({4}, 3.0).requires_grad_();
    TD y = checkpoint([&](const Ts& in) { return TD(in[0] * (calls++ ? w2 : w)); }, {TD(a * 1.0)});
    CHECK_THROWS_WITH_AS(sum(y).backward(), doctest::Contains("other tensors from outside it"), error);
  }
}

TEST_CASE("checkpoint: retain_graph backward twice, and a region that records nothing") {
  TD x = arange<double>(1, 4).requires_grad_();
  TD y = checkpoint([](const Ts& in) { return TD(in[0] * in[0]); }, {x});
  auto g1 = autograd::grad({sum(y)}, {x}, {}, {.retain_graph = true})[0];
  auto g2 = autograd::grad({sum(y)}, {x})[0];
  check_close(g1, {2, 4, 6});
  check_close(g2, {2, 4, 6});
  TD same = checkpoint([](const Ts& in) { return in[0]; }, {x});
  CHECK(same.is_same_storage(x));
}

TEST_CASE("checkpoint: peak memory drops to the layer inputs plus one layer") {
  const int64_t n = 256, batch = 64, layers = 8;
  Generator g(4);
  std::vector<TD> ws;
  for (int64_t l = 0; l < layers; ++l) ws.push_back(TD(randn<double>({n, n}, g) * (1.0 / 16)).requires_grad_());
  TD x = randn<double>({batch, n}, g);
  auto layer = [&](int64_t l) {
    return [&, l](const Ts& in) { return TD(tanh(TD(tanh(matmul(in[0], ws[l]))) * 1.5)); };
  };
  auto peak = [&](bool ckpt) {
    // the parameters' .grad exist already and are zeroed in place (set_to_none = false)
    for (auto& w : ws) {
      autograd::no_grad ng;
      if (w.grad().defined()) w.grad().zero_();
    }
    empty_cache();
    const int64_t base = memory_allocated();
    reset_peak_memory_stats();
    TD h = x;
    for (int64_t l = 0; l < layers; ++l) h = ckpt ? checkpoint(layer(l), {h}) : layer(l)({h});
    const int64_t after_forward = memory_allocated() - base;
    sum(h).backward();
    return std::pair<int64_t, int64_t>{after_forward, max_memory_allocated() - base};
  };
  sum(layer(0)({x})).backward();
  for (int64_t l = 1; l < layers; ++l) ws[l].set_grad(zeros<double>({n, n}));
  auto [plain_fwd, plain_peak] = peak(false);
  auto [ckpt_fwd, ckpt_peak] = peak(true);
  const int64_t act = batch * n * 8;  // one activation (a weight's gradient is 4)
  MESSAGE("after forward: ", plain_fwd / act, " activations unchecked, ", ckpt_fwd / act, " checkpointed; peaks ",
          plain_peak / act, " and ", ckpt_peak / act);
  CHECK(plain_fwd >= 2 * layers * act);  // each layer keeps two of its tensors for backward
  CHECK(ckpt_fwd <= (layers + 1) * act);  // only each layer's output (the next one's input)
  // backward() adds each weight's gradient into its .grad as soon as it is complete, so the
  // peak is the saved tensors, one layer's replay and a gradient or two (holding all eight
  // weights' gradients to the end of the pass would be 32 activations more)
  CHECK(ckpt_peak < ckpt_fwd + 16 * act);
  CHECK(ckpt_peak < plain_peak);
}
