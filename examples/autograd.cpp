// Exact derivatives of a small physics model, in every autograd mode.
//
// The energy of a chain of N particles joined by anharmonic springs,
//   E(x) = sum_i  k/2 (x[i+1] - x[i] - L)^2 + a/4 (x[i+1] - x[i] - L)^4,
// gives forces F = -dE/dx (reverse mode), the Hessian-vector products a Newton solver needs
// (reverse over reverse, or forward over reverse), and, because backward formulas are reel
// ops, derivatives of any order. The program relaxes the chain with Newton-CG and checks
// the gradient against finite differences with gradcheck.
#include <cstdio>
#include <reel/reel.hpp>

using namespace reel;
using Td = Tensor<double>;
namespace F = autograd::functional;

static Td energy(const Td& x) {
  const double k = 1.0, L = 1.0, a = 0.5;
  Td stretch = x.slice(0, 1, x.size(0)) - x.slice(0, 0, x.size(0) - 1) - L;
  return sum(Td(0.5 * k * square(stretch) + 0.25 * a * square(square(stretch))));
}

int main() {
  const int64_t n = 8;
  Generator gen(3);
  Td x = arange<double>(n) * 1.3 + randn<double>({n}, gen) * 0.1;  // stretched chain
  x.select(0, 0).fill_(0.0);

  // Newton iterations; the Hessian is only used through products with vectors (CG)
  for (int it = 0; it < 6; ++it) {
    Td xr = x.detach();
    xr.requires_grad_();
    Td e = energy(xr);
    Td g = autograd::grad({e}, {xr}, {}, {.create_graph = true})[0];
    // conjugate gradient on H p = -g with Hessian-vector products by double backward
    auto hvp = [&](const Td& v) { return autograd::grad({g}, {xr}, {v}, {.retain_graph = true})[0].detach(); };
    Td b = -g.detach();
    b.select(0, 0).fill_(0.0);  // particle 0 is pinned
    Td p = zeros<double>({n}), r = b.clone(), d = b.clone();
    double rr = sum(Td(r * r)).item();
    for (int k = 0; k < 2 * n && rr > 1e-28; ++k) {
      Td hd = hvp(d);
      hd.select(0, 0).fill_(0.0);
      double alpha = rr / sum(Td(d * hd)).item();
      p.add_(d, alpha);
      r.sub_(hd, alpha);
      double rr2 = sum(Td(r * r)).item();
      d = r + (rr2 / rr) * d;
      rr = rr2;
    }
    x = x + p;
    std::printf("Newton step %d: energy %.3e, |gradient| %.3e\n", it, e.item(), norm(g.detach()).item());
  }
  std::printf("relaxed spacing: %s\n", [&] {
    Td s = x.slice(0, 1, n) - x.slice(0, 0, n - 1);
    return std::to_string(s.mean().item());
  }().c_str());

  // The same Hessian-vector product by forward over reverse (jvp of the gradient)
  Td v = randn<double>({n}, gen);
  Td hv_rr = F::hvp(energy, {x}, {v}).grads[0];
  Td hv_fr;
  {
    autograd::forward_ad::dual_level level;
    Td xp = x.detach();
    xp.requires_grad_();
    Td xd = autograd::forward_ad::make_dual(xp, v);
    Td g = autograd::grad({energy(xd)}, {xd}, {}, {.create_graph = true})[0];
    hv_fr = autograd::forward_ad::unpack_dual(g).tangent;
  }
  std::printf("Hv by reverse-over-reverse and by forward-over-reverse differ by %.2e\n",
              amax(abs(Td(hv_rr - hv_fr))).item());

  // The gradient (forces) against central finite differences, and second derivatives too
  bool ok = autograd::gradcheck(energy, {x}) && autograd::gradgradcheck(energy, {x});
  std::printf("gradcheck and gradgradcheck: %s\n", ok ? "passed" : "FAILED");
  return ok ? 0 : 1;
}
