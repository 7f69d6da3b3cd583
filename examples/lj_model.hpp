#pragma once
// The Lennard-Jones cluster energy in reduced units (epsilon = sigma = 1), written with
// tensors, and the same energy and forces written by hand (shared by the example and the
// physics benchmark).
#include <vector>

#include <reel/reel.hpp>

namespace lj {
using Td = reel::Tensor<double>;

// E = sum over pairs i < j of 4 (r^-12 - r^-6), from positions P [n, 3]: all pairs at once.
inline Td energy(const Td& P) {
  using namespace reel;
  const int64_t n = P.size(0);
  Td d = P.unsqueeze(1) - P.unsqueeze(0);            // [n, n, 3] pair differences
  Td eye_n = eye<double>(n);
  Td r2 = sum(d * d, Shape{2}) + eye_n;               // the diagonal gets 1 (no self-pair)
  Td inv6 = pow(r2, -3.0);                            // r^-6
  return 2.0 * sum((inv6 * inv6 - inv6) * (1.0 - eye_n));  // 4 * (1/2) * sum over i != j
}

// The same energy as a loop over pairs (x: n * 3 coordinates).
inline double energy_by_hand(const double* x, int n) {
  double e = 0;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      double r2 = 0;
      for (int k = 0; k < 3; ++k) r2 += (x[3 * i + k] - x[3 * j + k]) * (x[3 * i + k] - x[3 * j + k]);
      double ir6 = 1 / (r2 * r2 * r2);
      e += 4 * (ir6 * ir6 - ir6);
    }
  return e;
}

// Analytic gradient dE/dx_i = sum_j (24 r^-8 - 48 r^-14) (x_i - x_j), into g (n * 3).
inline void gradient_by_hand(const double* x, int n, double* g) {
  for (int q = 0; q < 3 * n; ++q) g[q] = 0;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      double d[3], r2 = 0;
      for (int k = 0; k < 3; ++k) {
        d[k] = x[3 * i + k] - x[3 * j + k];
        r2 += d[k] * d[k];
      }
      double ir2 = 1 / r2, ir6 = ir2 * ir2 * ir2;
      double c = (24 * ir6 - 48 * ir6 * ir6) * ir2;
      for (int k = 0; k < 3; ++k) {
        g[3 * i + k] += c * d[k];
        g[3 * j + k] -= c * d[k];
      }
    }
}

// Forces -dE/dP by reverse mode.
inline Td forces(const Td& P) {
  Td x = P.detach();
  x.requires_grad_();
  return -reel::autograd::grad({energy(x)}, {x})[0];
}

// An n-atom cluster near equilibrium spacing: the first n points of a cubic grid of spacing
// 1.1, each moved by up to 0.1 at random (from a seed).
inline Td random_cluster(int64_t n, uint64_t seed) {
  reel::Generator gen(seed);
  int64_t side = 1;
  while (side * side * side < n) ++side;
  std::vector<double> p;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c : {i % side, (i / side) % side, i / (side * side)}) p.push_back(1.1 * static_cast<double>(c));
  return reel::from_vector<double>(p, {n, 3}) + 0.2 * (reel::rand<double>({n, 3}, gen) - 0.5);
}
}  // namespace lj
