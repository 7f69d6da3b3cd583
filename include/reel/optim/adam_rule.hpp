#pragma once
// Adam / AdamW's update, written once for every backend that fuses it: the CPU's fused step
// (optimizers.hpp's adam_fused, on blocks of Eigen arrays) and CUDA's multi-tensor kernel
// (cuda/multi_tensor.cuh's AdamOp, on one element in registers). Both perform PyTorch's
// _multi_tensor_adam sequence, the operations of adam_update's foreach fallback in the same
// order, so the three give the same bits.
#include "../core/hd.hpp"

namespace reel::inline REEL_ABI::optim::detail {

// The step's constants in the compute type, rounded once from the options.
template <class C>
struct AdamCoeffs {
  C w1, b2, w2, wd, decay, eps;  // 1 - beta1, beta2, 1 - beta2, weight_decay, 1 - lr weight_decay, eps
  bool maximize, l2, decoupled;  // l2: weight decay added to the gradient (Adam); decoupled: AdamW's
};
template <class C, class Options>
AdamCoeffs<C> adam_coeffs(const Options& o, bool decoupled) {
  auto [beta1, beta2] = o.betas();
  AdamCoeffs<C> k;
  k.w1 = static_cast<C>(1 - beta1);
  k.b2 = static_cast<C>(beta2);
  k.w2 = static_cast<C>(1 - beta2);
  k.wd = static_cast<C>(o.weight_decay());
  k.decay = static_cast<C>(1 - o.lr() * o.weight_decay());
  k.eps = static_cast<C>(o.eps());
  k.maximize = o.maximize();
  k.l2 = !decoupled && o.weight_decay() != 0;
  k.decoupled = decoupled && o.weight_decay() != 0;
  return k;
}

// One update of p (parameter), m and v (the moments) and, with amsgrad, *vmax, from the
// gradient g (overwritten). step_size: -lr / bias_correction1; bc2_sqrt:
// sqrt(bias_correction2). X is the value type (an element, or a block of them), den scratch
// of that type; Ops supplies lerp_(m, e, w) (m = torch.lerp(m, e, w)), maximum (NaN wins) and
// sqrt for X.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable  // (the CPU's Ops are host functions; a kernel's are device ones)
#endif
template <class Ops, class X, class C>
REEL_HD inline void adam_rule(const AdamCoeffs<C>& k, C step_size, C bc2_sqrt, X& p, X& g, X& m, X& v, X* vmax,
                              X& den) {
  if (k.maximize) g = -g;
  if (k.l2) g = g + p * k.wd;  // grads + weight_decay * params
  if (k.decoupled) p = p * k.decay;
  Ops::lerp_(m, g, k.w1);
  v = v * k.b2;
  v = v + k.w2 * g * g;  // addcmul_
  if (vmax) {
    *vmax = Ops::maximum(*vmax, v);
    den = Ops::sqrt(*vmax);
  } else {
    den = Ops::sqrt(v);
  }
  den = den / bc2_sqrt + k.eps;
  p = p + step_size * m / den;  // addcdiv_
}

}  // namespace reel::optim::detail
