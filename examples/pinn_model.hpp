#pragma once
// The PINN of examples/pinn_poisson.cpp (shared with the physics benchmark): an MLP
// 2-64-64-64-1 with tanh, and the loss of one training step for
//   -Laplace(u) = 2 pi^2 sin(pi x) sin(pi y) on the unit square, u = 0 on its boundary.
#include <numbers>
#include <vector>

#include <reel/reel.hpp>

namespace pinn {
using T = float;
using Tf = reel::Tensor<T>;
inline constexpr double kPi = std::numbers::pi;
// The boundary term's weight: the residual is O(2 pi^2) at the start, so an unweighted
// boundary term leaves u = 0 on the boundary poorly enforced.
inline constexpr double kBoundaryWeight = 100;

struct Mlp {
  std::vector<reel::nn::Linear<T>> layers;
  explicit Mlp(reel::Generator& gen) {
    int sizes[] = {2, 64, 64, 64, 1};
    for (int i = 0; i < 4; ++i) layers.emplace_back(sizes[i], sizes[i + 1], gen);
  }
  Tf operator()(Tf h) const {
    for (size_t i = 0; i < layers.size(); ++i) {
      h = layers[i](h);
      if (i + 1 < layers.size()) h = reel::tanh(h);
    }
    return h;
  }
  std::vector<Tf> parameters() {
    std::vector<Tf> p;
    for (auto& l : layers)
      for (auto& t : l.parameters()) p.push_back(t);
    return p;
  }
};

// Points of the unit square's interior (uniform) and of its boundary (on the four sides).
inline Tf interior(int64_t n, reel::Generator& gen) { return reel::rand<T>({n, 2}, gen); }
inline Tf boundary(int64_t n, reel::Generator& gen) {
  auto s = reel::rand<T>({n}, gen).to_vector();
  std::vector<T> p;
  for (int64_t i = 0; i < n; ++i) {
    switch (i % 4) {
      case 0: p.insert(p.end(), {s[i], 0}); break;
      case 1: p.insert(p.end(), {s[i], 1}); break;
      case 2: p.insert(p.end(), {0, s[i]}); break;
      default: p.insert(p.end(), {1, s[i]}); break;
    }
  }
  return reel::from_vector<T>(p, {n, 2});
}

// Mean squared PDE residual at X (the Laplacian by nested reverse mode: the gradient of u,
// then the gradient of each of its components) plus kBoundaryWeight times the mean squared
// boundary values at Xb.
inline Tf loss(const Mlp& net, const Tf& X, const Tf& Xb) {
  using namespace reel;
  namespace ag = reel::autograd;
  Tf x = X.detach();
  x.requires_grad_();
  Tf u = net(x);
  Tf g = ag::grad({sum(u)}, {x}, {}, {.create_graph = true})[0];  // [n, 2]: u_x, u_y
  Tf uxx = ag::grad({sum(g.select(1, 0))}, {x}, {}, {.create_graph = true})[0].select(1, 0);
  Tf uyy = ag::grad({sum(g.select(1, 1))}, {x}, {}, {.create_graph = true})[0].select(1, 1);
  Tf f = T(2 * kPi * kPi) * sin(T(kPi) * X.select(1, 0)) * sin(T(kPi) * X.select(1, 1));
  Tf residual = -(uxx + uyy) - f;
  Tf ub = net(Xb);
  return mean(residual * residual) + T(kBoundaryWeight) * mean(ub * ub);
}
}  // namespace pinn
