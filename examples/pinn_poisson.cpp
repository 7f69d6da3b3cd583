// A physics-informed neural network (PINN) for the Poisson problem
//   -Laplace(u) = 2 pi^2 sin(pi x) sin(pi y)  on the unit square,  u = 0 on its boundary,
// whose solution is u = sin(pi x) sin(pi y). The network u(x, y) is an MLP 2-64-64-64-1 with
// tanh; its Laplacian at 1024 collocation points comes from nested reverse-mode
// differentiation (the gradient of u, then of each of its components), and each training step
// differentiates the mean squared residual (plus the boundary term) with respect to all the
// weights: third derivatives of the network, every step.
// Usage: example_pinn_poisson [steps] (default 2000). Prints the error against the exact
// solution and writes pinn_poisson.svg (solution, exact, error over the square) and
// pinn_loss.svg. Exit code 0 when the loss fell tenfold and, after 1000 steps or more, the
// relative L2 error is below 5%.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <reel/reel.hpp>

#include "pinn_model.hpp"
#include "svg_plot.hpp"

using namespace reel;
using pinn::T;
using pinn::Tf;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 2000;
  Generator gen(2026);
  pinn::Mlp net(gen);
  auto params = net.parameters();
  optim::Adam<T> opt(params, optim::AdamOptions(2e-3));
  Tf X = pinn::interior(1024, gen), Xb = pinn::boundary(256, gen);

  auto t0 = std::chrono::steady_clock::now();
  std::vector<double> it, losses;
  for (int s = 0; s < steps; ++s) {
    if (s % 500 == 0 && s > 0) {  // fresh collocation points now and then
      X = pinn::interior(1024, gen);
      Xb = pinn::boundary(256, gen);
    }
    opt.zero_grad();
    Tf loss = pinn::loss(net, X, Xb);
    loss.backward();
    opt.step();
    if (s % 10 == 0) {
      it.push_back(s);
      losses.push_back(loss.item());
    }
    if (s % 250 == 0) std::printf("step %5d  loss %.4e\n", s, loss.item());
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d steps in %.1f s (%.2f ms per step)\n", steps, secs, 1e3 * secs / std::max(steps, 1));

  // error against the exact solution on a 41 x 41 grid
  const int n = 41;
  std::vector<T> grid;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) grid.insert(grid.end(), {T(j) / (n - 1), T(i) / (n - 1)});
  Tf G = from_vector<T>(grid, {n * n, 2});
  std::vector<double> pred, exact, error;
  {
    autograd::no_grad ng;
    auto u = net(G).to_vector();
    double num = 0, den = 0;
    for (int k = 0; k < n * n; ++k) {
      double x = grid[2 * k], y = grid[2 * k + 1], e = std::sin(pinn::kPi * x) * std::sin(pinn::kPi * y);
      pred.push_back(u[k]);
      exact.push_back(e);
      error.push_back(u[k] - e);
      num += (u[k] - e) * (u[k] - e);
      den += e * e;
    }
    double rel = std::sqrt(num / den), mx = 0;
    for (double e : error) mx = std::max(mx, std::abs(e));
    std::printf("relative L2 error %.3e, max |error| %.3e over a %dx%d grid\n", rel, mx, n, n);
    svg_plot::heatmaps("pinn_poisson.svg", {{"PINN u(x, y)", pred}, {"exact sin(pi x) sin(pi y)", exact},
                                            {"error u - exact", error}}, n);
    svg_plot::line_plot("pinn_loss.svg", "PINN training loss", "step", "loss", it, losses, true);
    std::printf("wrote pinn_poisson.svg and pinn_loss.svg\n");
    if (steps >= 1000 && !(rel < 0.05)) {
      std::printf("FAILED: the relative error should be below 5%% after %d steps\n", steps);
      return 1;
    }
    if (losses.size() > 2 && !(losses.back() < 0.1 * losses.front())) {
      std::printf("FAILED: the loss should fall tenfold (from %.4g, now %.4g)\n", losses.front(), losses.back());
      return 1;
    }
  }
  return 0;
}
