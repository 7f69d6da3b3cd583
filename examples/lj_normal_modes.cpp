// Lennard-Jones clusters, in reduced units (epsilon = sigma = mass = 1):
//   1. the energy written with tensors (all pairs at once), forces by reverse mode, checked
//      against the analytic forces;
//   2. LJ13 relaxed from a distorted icosahedron to the global minimum (E = -44.326801) by
//      FIRE (Bitzek et al., PRL 97, 170201, 2006), written with reel tensors;
//   3. the Hessian at the minimum (all 39 directions in one forward-over-reverse pass) and
//      the normal modes from linalg::eigh: six zero modes (translations and rotations) and
//      33 vibrations in the icosahedron's degenerate groups.
// Writes lj13_relaxation.svg (energy during relaxation) and lj13_spectrum.svg (vibrational
// frequencies). Exit code 0 when every check passes.
#include <cmath>
#include <cstdio>
#include <vector>

#include <reel/linalg.hpp>
#include <reel/reel.hpp>

#include "lj_model.hpp"
#include "svg_plot.hpp"

using namespace reel;
using Td = Tensor<double>;

// The 13-atom icosahedron: a centre and 12 vertices (0, +-1, +-phi) and cyclic shifts.
Td icosahedron(double radius) {
  const double phi = (1 + std::sqrt(5.0)) / 2, s = radius / std::sqrt(1 + phi * phi);
  std::vector<double> p = {0, 0, 0};
  for (int a : {-1, 1})
    for (int b : {-1, 1}) {
      double v[3][3] = {{0, double(a), b * phi}, {double(a), b * phi, 0}, {b * phi, 0, double(a)}};
      for (auto& q : v)
        for (double c : q) p.push_back(c * s);
    }
  return from_vector<double>(p, {13, 3});
}

int main() {
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", what);
    failures += !ok;
  };

  // 1. forces by reverse mode against the analytic ones, on a random LJ38 configuration
  Generator gen(7);  // the distortion of the starting icosahedron
  Td P38 = lj::random_cluster(38, 7);
  std::vector<double> ga(38 * 3);
  lj::gradient_by_hand(P38.to_vector().data(), 38, ga.data());
  auto fr = lj::forces(P38).to_vector();
  double err = 0, scale = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    err = std::max(err, std::abs(-ga[i] - fr[i]));
    scale = std::max(scale, std::abs(ga[i]));
  }
  std::printf("LJ38 forces: reverse mode vs analytic, max |difference| %.3g (largest force %.3g)\n", err, scale);
  check(err <= 1e-12 * scale, "forces agree with the analytic forces to 1e-12 relative");

  // 2. FIRE relaxation of a distorted icosahedron. The forces are evaluated thousands of
  // times at one shape: compiled, the first call records their kernels (the energy's and
  // its backward pass's) and the others replay them, with the same results as lj::forces.
  auto forces = autograd::compile(lj::forces);
  Td x = icosahedron(1.12) + 0.04 * (rand<double>({13, 3}, gen) - 0.5);
  Td v = zeros<double>({13, 3});
  double dt = 0.005, alpha = 0.1;
  int since_negative = 0;
  std::vector<double> steps, energies;
  double fmax = 1;
  int it = 0;
  for (; it < 20000 && fmax > 1e-9; ++it) {
    Td F = forces(x);
    fmax = amax(abs(F)).item();
    if (it % 10 == 0) {
      steps.push_back(it);
      energies.push_back(lj::energy(x).item());
    }
    v = v + dt * F;                                   // semi-implicit Euler, unit mass
    double power = sum(F * v).item();
    if (power > 0) {                                  // FIRE: steer v towards F, speed up
      double vn = std::sqrt(sum(v * v).item()), fn = std::sqrt(sum(F * F).item());
      v = (1 - alpha) * v + alpha * vn / fn * F;
      if (++since_negative > 5) {
        dt = std::min(dt * 1.1, 0.02);
        alpha *= 0.99;
      }
    } else {                                          // uphill: stop, slow down
      v = zeros<double>({13, 3});
      dt *= 0.5;
      alpha = 0.1;
      since_negative = 0;
    }
    x = x + dt * v;
  }
  double e_min = lj::energy(x).item();
  std::printf("LJ13 relaxed by FIRE in %d steps: E = %.6f (global minimum -44.326801), max |F| = %.2g\n", it, e_min,
              fmax);
  check(std::abs(e_min - (-44.326801)) < 1e-6, "LJ13 reaches the icosahedral global minimum");
  check(forces.replays() == it - 1 && forces(x).to_vector() == lj::forces(x).to_vector(),
        "the compiled forces replayed at every step after the first, equal to the eager ones");
  svg_plot::line_plot("lj13_relaxation.svg", "LJ13: FIRE relaxation", "FIRE step", "E - E_min", steps,
                      [&] {
                        std::vector<double> d;
                        for (double e : energies) d.push_back(e - e_min + 1e-12);
                        return d;
                      }(),
                      true);

  // 3. Hessian and normal modes
  Td H = autograd::functional::hessian(lj::energy, x).reshape({39, 39});
  double asym = amax(abs(H - H.mT())).item();
  auto [lambda, modes] = linalg::eigh(H);
  auto ev = lambda.to_vector();
  std::vector<double> freq;
  int zero_modes = 0;
  for (double l : ev) {
    if (std::abs(l) < 1e-6) ++zero_modes;
    freq.push_back(std::sqrt(std::max(l, 0.0)));
  }
  std::printf("Hessian 39x39 (asymmetry %.2g); eigenvalues: %d near zero, smallest vibration %.4f, largest %.4f\n",
              asym, zero_modes, ev[6], ev.back());
  std::printf("frequencies (reduced units):");
  for (size_t i = 6; i < freq.size(); ++i) std::printf("%s%.4f", (i - 6) % 8 ? " " : "\n  ", freq[i]);
  std::printf("\n");
  check(zero_modes == 6, "six zero modes (three translations, three rotations)");
  check(ev[6] > 1, "the other 33 modes are stable vibrations (positive curvature)");
  // icosahedral symmetry: the vibrations fall into degenerate groups (sizes 1, 3, 4, 5)
  int groups = 1;
  for (size_t i = 7; i < ev.size(); ++i) groups += std::abs(ev[i] - ev[i - 1]) > 1e-6 * ev.back();
  std::printf("distinct vibrational frequencies: %d\n", groups);
  check(groups < 33, "frequencies come in degenerate groups (icosahedral symmetry)");
  svg_plot::stick_plot("lj13_spectrum.svg", "LJ13 icosahedron: vibrational spectrum (grey: the 6 zero modes)",
                       "frequency (reduced units)", freq, 1e-3, 1e-4 * freq.back());
  std::printf("wrote lj13_relaxation.svg and lj13_spectrum.svg\n");
  return failures == 0 ? 0 : 1;
}
