// Optimizers against PyTorch: six-step trajectories of SGD / Adam / AdamW in every option
// combination (tests/reference/training_reference.py, torch 2.15, float64), param groups and
// their state, state_dict round trips, closed-form first steps, and misuse.
#include <doctest/doctest.h>

#include <reel/optim/optimizers.hpp>
#include <reel/reel.hpp>

#include "reference/training_reference.hpp"

using namespace reel;
using Td = Tensor<double>;
using Tf = Tensor<float>;

namespace {
// The reference problem: grad = 2 c p + cos(p), c = 0.5 for p0 and 1.5 for p1.
template <class T>
std::vector<Tensor<T>> reference_params() {
  return {tensor<T>({T(0.5), T(-1.2), T(2.0)}).requires_grad_(),
          tensor<T>({{T(0.3), T(-0.7)}, {T(1.5), T(-2.5)}}).requires_grad_()};
}
template <class T>
void set_reference_grads(const std::vector<Tensor<T>>& ps) {
  const double c[2] = {0.5, 1.5};
  for (size_t i = 0; i < 2; ++i) {
    autograd::no_grad ng;
    auto p = ps[i].detach();
    ps[i].set_grad(Tensor<T>(2 * c[i] * p + cos(p)));
  }
}
template <class T>
std::vector<double> flat(const std::vector<Tensor<T>>& ps) {
  std::vector<double> out;
  for (auto& p : ps)
    for (T v : p.to_vector()) out.push_back(static_cast<double>(v));
  return out;
}
template <class Opt, class T>
void run_steps(Opt& opt, const std::vector<Tensor<T>>& ps, int steps, std::vector<double>& traj) {
  for (int s = 0; s < steps; ++s) {
    set_reference_grads(ps);
    opt.step();
    auto f = flat(ps);
    traj.insert(traj.end(), f.begin(), f.end());
  }
}
void expect_traj(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol));
}
template <class T>
std::vector<double> run_case(const reel_ref::OptimCase& c, int steps) {
  auto ps = reference_params<T>();
  std::vector<double> traj;
  std::string name = c.optimizer;
  if (name == "SGD") {
    optim::SGD opt(ps, optim::SGDOptions()
                           .lr(c.lr)
                           .momentum(c.momentum)
                           .dampening(c.dampening)
                           .weight_decay(c.weight_decay)
                           .nesterov(c.nesterov)
                           .maximize(c.maximize));
    run_steps(opt, ps, steps, traj);
  } else if (name == "Adam") {
    optim::Adam opt(ps, optim::AdamOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(c.weight_decay)
                            .amsgrad(c.amsgrad).maximize(c.maximize));
    run_steps(opt, ps, steps, traj);
  } else {
    optim::AdamW opt(ps, optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(c.weight_decay)
                             .amsgrad(c.amsgrad).maximize(c.maximize));
    run_steps(opt, ps, steps, traj);
  }
  return traj;
}
}  // namespace

TEST_CASE("optim: trajectories equal PyTorch's (float64)") {
  for (const auto& c : reel_ref::optim_cases) {
    CAPTURE(c.name);
    expect_traj(run_case<double>(c, 6), c.trajectory, 1e-12);
  }
}

TEST_CASE("optim: strided parameters take the foreach composition, with the same trajectory") {
  for (const auto& c : reel_ref::optim_cases) {
    if (std::string(c.optimizer) == "SGD") continue;
    CAPTURE(c.name);
    // p1 as a transposed view of its storage: not contiguous, so Adam cannot take the fused pass
    auto ps = reference_params<double>();
    Td p1t = ps[1].detach().mT().contiguous().mT();
    REQUIRE(!p1t.is_contiguous());
    ps[1] = p1t.requires_grad_();
    std::vector<double> traj;
    if (std::string(c.optimizer) == "Adam") {
      optim::Adam opt(ps, optim::AdamOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(c.weight_decay)
                              .amsgrad(c.amsgrad).maximize(c.maximize));
      run_steps(opt, ps, 6, traj);
    } else {
      optim::AdamW opt(ps, optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(c.weight_decay)
                               .amsgrad(c.amsgrad).maximize(c.maximize));
      run_steps(opt, ps, 6, traj);
    }
    expect_traj(traj, c.trajectory, 1e-12);
  }
}

TEST_CASE("optim: float trajectories stay within float rounding of PyTorch's float64 ones") {
  for (const auto& c : reel_ref::optim_cases) {
    CAPTURE(c.name);
    auto got = run_case<float>(c, 6);
    REQUIRE(got.size() == c.trajectory.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(c.trajectory[i]).epsilon(2e-5).scale(1));
  }
}

TEST_CASE("optim: closed-form first steps") {
  Td p = tensor<double>({1.0, -2.0}).requires_grad_();
  p.set_grad(tensor<double>({0.5, -4.0}));
  optim::SGD sgd({p}, optim::SGDOptions().lr(0.1));
  sgd.step();
  CHECK(p.to_vector() == std::vector<double>{1.0 - 0.05, -2.0 + 0.4});
  // Adam's first step: m^ = g, v^ = g^2, so p -= lr g / (|g| + eps)
  Td q = tensor<double>({1.0, -2.0}).requires_grad_();
  q.set_grad(tensor<double>({0.5, -4.0}));
  optim::Adam adam({q}, optim::AdamOptions(0.01).eps(1e-3));
  adam.step();
  CHECK(q.to_vector()[0] == doctest::Approx(1.0 - 0.01 * 0.5 / (0.5 + 1e-3)).epsilon(1e-14));
  CHECK(q.to_vector()[1] == doctest::Approx(-2.0 + 0.01 * 4 / (4 + 1e-3)).epsilon(1e-14));
  // AdamW with zero gradient only decays: p *= 1 - lr wd
  Td r = tensor<double>({3.0}).requires_grad_();
  r.set_grad(zeros<double>({1}));
  optim::AdamW adamw({r}, optim::AdamWOptions(0.1).weight_decay(0.5));
  adamw.step();
  CHECK(r.item() == doctest::Approx(3.0 * (1 - 0.05)));
  // parameters without a gradient are skipped
  Td s = tensor<double>({1.0}).requires_grad_();
  optim::Adam skip({s});
  skip.step();
  CHECK(s.item() == 1.0);
  CHECK(skip.state_dict().state.empty());
}

TEST_CASE("optim: param groups and their state equal PyTorch's") {
  auto ps = reference_params<double>();
  using G = optim::ParamGroup<double, CPU, optim::AdamOptions>;
  optim::Adam<double> opt(std::vector<G>{G{{ps[0]}, std::nullopt}, G{{ps[1]}, optim::AdamOptions(0.05).weight_decay(0.1)}},
                          optim::AdamOptions(0.01));
  std::vector<double> traj;
  run_steps(opt, ps, 6, traj);
  expect_traj(traj, reel_ref::adam_groups_trajectory, 1e-12);
  auto sd = opt.state_dict();
  REQUIRE(sd.param_groups.size() == 2);
  CHECK(sd.param_groups[1].params == std::vector<int64_t>{1});
  CHECK(std::get<double>(sd.param_groups[1].options.at("lr")) == 0.05);
  CHECK(std::get<double>(sd.param_groups[0].options.at("lr")) == 0.01);
  const auto& st = sd.state.at(1);
  CHECK(st.at("step").as<float>().item() == reel_ref::adam_groups_step);
  expect_traj(st.at("exp_avg").as<double>().to_vector(), reel_ref::adam_groups_p1_exp_avg, 1e-12);
  expect_traj(st.at("exp_avg_sq").as<double>().to_vector(), reel_ref::adam_groups_p1_exp_avg_sq, 1e-12);
  CHECK(st.count("max_exp_avg_sq") == 0);  // amsgrad off: no buffer
}

TEST_CASE("optim: state_dict round trip continues the same trajectory") {
  for (const auto& c : reel_ref::optim_cases) {
    if (std::string(c.name).find("momentum=0.9") == std::string::npos && std::string(c.optimizer) == "SGD") continue;
    CAPTURE(c.name);
    auto ps = reference_params<double>();
    std::vector<double> traj;
    auto finish = [&](auto& first, auto make) {
      run_steps(first, ps, 3, traj);
      auto sd = first.state_dict();
      auto second = make();  // a fresh optimizer over the same parameters, state loaded
      second.load_state_dict(sd);
      run_steps(second, ps, 3, traj);
      expect_traj(traj, c.trajectory, 1e-12);
    };
    std::string name = c.optimizer;
    if (name == "SGD") {
      auto o = optim::SGDOptions().lr(c.lr).momentum(c.momentum).dampening(c.dampening).nesterov(c.nesterov);
      optim::SGD first(ps, o);
      finish(first, [&] { return optim::SGD(ps, optim::SGDOptions()); });
    } else if (name == "Adam") {
      auto o = optim::AdamOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(c.weight_decay)
                   .amsgrad(c.amsgrad).maximize(c.maximize);
      optim::Adam first(ps, o);
      finish(first, [&] { return optim::Adam(ps); });  // options come back from the state dict
    } else {
      auto o = optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(c.weight_decay)
                   .amsgrad(c.amsgrad).maximize(c.maximize);
      optim::AdamW first(ps, o);
      finish(first, [&] { return optim::AdamW(ps); });
    }
  }
}

TEST_CASE("optim: load_state_dict refuses a state that does not fit, and changes nothing then") {
  auto ps = reference_params<double>();
  optim::Adam opt(ps, optim::AdamOptions(0.01));
  set_reference_grads(ps);
  opt.step();
  auto sd = opt.state_dict();
  optim::Adam one({ps[0]});
  CHECK_THROWS_WITH_AS(one.load_state_dict(sd), doctest::Contains("doesn't match the size"), value_error);
  auto bad = sd;
  bad.state[1]["exp_avg"] = AnyTensor(zeros<double>({3}));
  optim::Adam two(ps, optim::AdamOptions(0.5));
  CHECK_THROWS_WITH_AS(two.load_state_dict(bad), doctest::Contains("exp_avg of parameter 1 has shape [3]"), value_error);
  CHECK(two.param_groups()[0].options.lr() == 0.5);
  bad.param_groups.push_back({});
  CHECK_THROWS_AS(two.load_state_dict(bad), value_error);
  auto wrong = sd;
  wrong.param_groups[0].options["lr"] = true;  // a bool where a number belongs
  CHECK_THROWS_AS(two.load_state_dict(wrong), type_error);
  CHECK(two.param_groups()[0].options.lr() == 0.5);
  auto partial = sd;
  partial.state[0].erase("exp_avg_sq");  // a missing buffer starts at zero
  two.load_state_dict(partial);
  set_reference_grads(ps);
  two.step();
  CHECK(two.state_dict().state.at(0).at("exp_avg_sq").as<double>().numel() == 3);
  // float state loads into double parameters (converted, as PyTorch casts to the parameter's dtype)
  auto fsd = sd;
  fsd.state[0]["exp_avg"] = AnyTensor(zeros<float>({3}));
  two.load_state_dict(fsd);
  CHECK(two.state_dict().state.at(0).at("exp_avg").dtype() == ScalarType::Double);
}

TEST_CASE("optim: zero_grad, closures, bad options and bad parameter lists") {
  auto ps = reference_params<double>();
  optim::SGD opt(ps, optim::SGDOptions().lr(0.1));
  set_reference_grads(ps);
  opt.zero_grad(false);
  CHECK(ps[0].grad().to_vector() == std::vector<double>{0, 0, 0});
  opt.zero_grad();
  CHECK(!ps[0].grad().defined());
  auto loss = opt.step([&] {
    opt.zero_grad();
    auto l = Td(sum(ps[0] * ps[0]));
    l.backward();
    return l;
  });
  CHECK(loss.item() == doctest::Approx(0.25 + 1.44 + 4));
  CHECK(ps[0].to_vector()[0] == doctest::Approx(0.5 - 0.1 * 1.0));

  CHECK_THROWS_WITH_AS(optim::SGD(ps, optim::SGDOptions().nesterov(true)), doctest::Contains("Nesterov"), value_error);
  CHECK_THROWS_WITH_AS(optim::SGD(ps, optim::SGDOptions().lr(-1)), doctest::Contains("learning rate"), value_error);
  CHECK_THROWS_WITH_AS(optim::Adam(ps, optim::AdamOptions().betas({1.0, 0.9})), doctest::Contains("beta"), value_error);
  CHECK_THROWS_WITH_AS(optim::Adam(std::vector<Td>{}), doctest::Contains("empty parameter list"), value_error);
  CHECK_THROWS_WITH_AS(optim::Adam(std::vector<Td>{ps[0], ps[0]}), doctest::Contains("more than once"), value_error);
  using G = optim::ParamGroup<double, CPU, optim::AdamOptions>;
  CHECK_THROWS_WITH_AS(optim::Adam<double>(std::vector<G>{G{{ps[0]}, {}}, G{{ps[1], ps[0]}, {}}}),
                       doctest::Contains("more than one parameter group"), value_error);
  Td nonleaf = Td(ps[0] * 2);
  CHECK_THROWS_WITH_AS(optim::Adam(std::vector<Td>{nonleaf}), doctest::Contains("non-leaf"), value_error);
}

namespace {
// A container reel knows nothing about: its order cannot be checked.
struct Bag {
  std::vector<Td> v;
  auto begin() const { return v.begin(); }
  auto end() const { return v.end(); }
};
}  // namespace

TEST_CASE("optim: a parameter source of unknown order warns (FutureWarning)") {
  std::vector<Warning> seen;
  auto prev = set_warning_sink([&](const Warning& w) { seen.push_back(w); });
  set_warning_action(WarningAction::Default);
  auto ps = reference_params<double>();
  optim::AdamW opt(Bag{ps}, optim::AdamWOptions(0.1));
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].category == WarningCategory::FutureWarning);
  CHECK(seen[0].message.find("will become an error") != std::string::npos);
  CHECK(seen[0].message.find("Bag") != std::string::npos);
  optim::AdamW ok(ps);  // a vector: no warning
  std::deque<Td> dq(ps.begin(), ps.end());
  optim::SGD ok2(dq, optim::SGDOptions());
  CHECK(seen.size() == 1);
  set_warning_action(WarningAction::Error);
  CHECK_THROWS_AS(optim::AdamW(Bag{ps}, optim::AdamWOptions(0.1)), warning_error);
  set_warning_action(WarningAction::Default);
  set_warning_sink(prev);
  CHECK(opt.param_groups()[0].params.size() == 2);
}
