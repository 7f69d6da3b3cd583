#pragma once
// cross_entropy (the unfused reference, composed of differentiable reel ops) with PyTorch's
// exact semantics: class-index or probability targets, class weights, ignore_index,
// label smoothing, reductions none / mean / sum, and [N, C, d1, ...] inputs.
#include "../core/config.hpp"
#include "functional.hpp"
#include "../interop/any_tensor.hpp"

namespace reel::inline REEL_ABI::nn::functional {

enum class Reduction { None, Mean, Sum };

// The element type of an options struct declared without one (`CrossEntropyOptions o;`): its
// tensors are AnyTensor, and take the call's element type and device, checked at the call
// (a type_error names both types where they differ).
struct AnyElement {};
template <class T, class D>
using option_tensor_t = std::conditional_t<std::is_same_v<T, AnyElement>, AnyTensor, Tensor<T, D>>;
namespace detail_opt {
template <class T, class D>
Tensor<T, D> typed(const AnyTensor& t, const char* what) {
  if (!t.defined()) return {};
  REEL_CHECK(t.dtype() == scalar_type_v<T>, type_error, what, " holds ", dtype_name(t.dtype()),
             " but the call's tensors hold ", scalar_type_of<T>::name);
  REEL_CHECK(t.device() == device_type_v<D>, type_error, what, " is on another device than the call's tensors");
  return t.as<T, D>();
}
}  // namespace detail_opt

template <class T = AnyElement, class D = CPU>
struct CrossEntropyOptions {
  option_tensor_t<T, D> weight{};  // [C] class weights (constants: no gradient flows into them)
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0;
};

namespace detail_ce {
using reel::detail::gather_along;

// [N, C, d1, ...] (or [C]) -> [M, C] with the classes last.
template <class T, class D>
Tensor<T, D> classes_last(const Tensor<T, D>& x) {
  if (x.dim() == 1) return x.unsqueeze(0);
  if (x.dim() == 2) return x;
  Shape order{0};
  for (int64_t d = 2; d < x.dim(); ++d) order.push_back(d);
  order.push_back(1);
  return x.permute(order).reshape({-1, x.size(1)});
}
// The target shape for class-index targets: the input's shape without the class dim.
inline Shape hard_target_shape(const Shape& in) {
  Shape s;
  for (int64_t d = 0; d < in.size(); ++d)
    if (d != (in.size() == 1 ? 0 : 1)) s.push_back(in[d]);
  return s;
}
template <class T, class D>
void check_common(const Tensor<T, D>& input, const CrossEntropyOptions<T, D>& o) {
  REEL_CHECK(input.dim() >= 1, value_error, "cross_entropy: input must have at least one dimension (the classes), got a scalar");
  REEL_CHECK(o.label_smoothing >= 0 && o.label_smoothing <= 1, value_error,
             "cross_entropy: label_smoothing must be between 0.0 and 1.0, got ", o.label_smoothing);
  int64_t C = input.size(input.dim() == 1 ? 0 : 1);
  REEL_CHECK(!o.weight.defined() || (o.weight.dim() == 1 && o.weight.size(0) == C), value_error,
             "cross_entropy: weight should be a 1-D tensor of size ", C, " (the number of classes), got shape ",
             o.weight.defined() ? o.weight.sizes() : Shape{});
}
// mean = s / w, where w = 0 (every target ignored) gives NaN as in PyTorch while the
// gradient stays 0 (PyTorch's backward divides by the total weight only where it is > 0).
template <class T, class D>
Tensor<T, D> guarded_mean(const Tensor<T, D>& s, double w) {
  if (w != 0) return Tensor<T, D>(s / w);
  return Tensor<T, D>(s + std::numeric_limits<double>::quiet_NaN());
}
}  // namespace detail_ce

// Options declared without an element type, for a call with T, D tensors.
template <class T, class D, class D2>
CrossEntropyOptions<T, D> typed_options(const CrossEntropyOptions<AnyElement, D2>& o) {
  return {detail_opt::typed<T, D>(o.weight, "CrossEntropyOptions::weight"), o.ignore_index, o.reduction, o.label_smoothing};
}
template <class T, class D, class U, class D2>
Tensor<T, D> cross_entropy(const Tensor<T, D>& input, const Tensor<U, D>& target, const CrossEntropyOptions<AnyElement, D2>& o) {
  return cross_entropy(input, target, typed_options<T, D>(o));
}

// Expressions (evaluated first) and a target of neither kind.
template <TensorLike X, TensorLike Y>
  requires(!(is_tensor_v<X> && is_tensor_v<Y> && (std::is_integral_v<detail::value_t<Y>> || std::is_same_v<std::decay_t<X>, std::decay_t<Y>>)))
auto cross_entropy(const X& input, const Y& target, const CrossEntropyOptions<detail::value_t<X>, detail::device_t<X>>& o = {}) {
  static_assert(std::is_integral_v<detail::value_t<Y>> || std::is_same_v<detail::value_t<X>, detail::value_t<Y>>,
                "reel::cross_entropy: the target holds class indices (an integer tensor) or probabilities (a tensor of "
                "the input's element type)");
  return cross_entropy(detail::materialize(input), detail::materialize(target), o);
}

// Class-index targets (integral tensor of the input's shape without the class dim).
template <class T, class D, class I>
  requires std::is_integral_v<I>
Tensor<T, D> cross_entropy(const Tensor<T, D>& input, const Tensor<I, D>& target, const CrossEntropyOptions<T, D>& o = {}) {
  static_assert(is_floating_v<T> && !is_fp8_v<T>, "reel::cross_entropy: needs a floating point input");
  static_assert(!std::is_same_v<I, bool>, "reel::cross_entropy: class-index targets must be integers, not bool");
  detail_ce::check_common(input, o);
  Shape ts = detail_ce::hard_target_shape(input.sizes());
  REEL_CHECK(target.sizes() == ts, value_error, "cross_entropy: expected target of shape ", ts, " for input of shape ",
             input.sizes(), ", got ", target.sizes());
  auto x = detail_ce::classes_last(input);
  int64_t M = x.size(0), C = x.size(1);
  // Per row: the (in-range) class to pick, its weight where kept, and whether it is kept.
  auto tv = target.template to<int64_t>().contiguous().to_vector();
  std::vector<int64_t> safe(M, 0);
  std::vector<T> row_w(M, T(0)), kept(M, T(0));
  std::vector<T> wv = o.weight.defined() ? o.weight.contiguous().to_vector() : std::vector<T>();
  double total_w = 0;
  for (int64_t n = 0; n < M; ++n) {
    if (tv[n] == o.ignore_index) continue;
    REEL_CHECK(tv[n] >= 0 && tv[n] < C, index_error, "cross_entropy: Target ", tv[n], " is out of bounds (", C,
               " classes)");
    safe[n] = tv[n];
    row_w[n] = wv.empty() ? T(1) : wv[tv[n]];
    kept[n] = T(1);
    total_w += static_cast<double>(row_w[n]);
  }
  auto logp = log_softmax(x, 1);
  auto picked = reel::detail::gather_along(logp, from_vector<int64_t, D>(safe, {M, 1}), 1).reshape({M});
  Tensor<T, D> rows = -(picked * from_vector<T, D>(row_w, {M}));
  if (o.label_smoothing > 0) {
    // smooth_n = -sum_c w_c logp_nc over kept rows; loss = (1 - e) nll + (e / C) smooth
    Tensor<T, D> lw = o.weight.defined() ? Tensor<T, D>(logp * o.weight.detach().reshape({1, C})) : logp;
    Tensor<T, D> smooth = -(sum(lw, {1}) * from_vector<T, D>(kept, {M}));
    rows = (1 - o.label_smoothing) * rows + (o.label_smoothing / C) * smooth;
  }
  switch (o.reduction) {
    case Reduction::None: return rows.reshape(ts);
    case Reduction::Sum: return sum(rows);
    case Reduction::Mean: break;
  }
  return detail_ce::guarded_mean(sum(rows), total_w);
}

// Probability targets (the input's shape): loss_n = -sum_c w_c q_nc log p_nc with
// q = target (1 - e) + e / C; mean divides by the number of rows (not by the weights).
template <class T, class D>
Tensor<T, D> cross_entropy(const Tensor<T, D>& input, const Tensor<T, D>& target, const CrossEntropyOptions<T, D>& o = {}) {
  static_assert(is_floating_v<T> && !is_fp8_v<T>, "reel::cross_entropy: needs a floating point input");
  detail_ce::check_common(input, o);
  REEL_CHECK(target.sizes() == input.sizes(), value_error,
             "cross_entropy: probability targets must have the input's shape ", input.sizes(), ", got ", target.sizes());
  auto x = detail_ce::classes_last(input);
  auto q0 = detail_ce::classes_last(target);
  int64_t M = x.size(0), C = x.size(1);
  Tensor<T, D> q = o.label_smoothing > 0 ? Tensor<T, D>(q0 * (1 - o.label_smoothing) + o.label_smoothing / C) : q0;
  Tensor<T, D> prod = log_softmax(x, 1) * q;
  if (o.weight.defined()) prod = prod * o.weight.detach().reshape({1, C});
  Tensor<T, D> rows = -sum(prod, {1});
  switch (o.reduction) {
    case Reduction::None: return rows.reshape(detail_ce::hard_target_shape(input.sizes()));
    case Reduction::Sum: return sum(rows);
    case Reduction::Mean: break;
  }
  return Tensor<T, D>(sum(rows) / static_cast<double>(M));
}

}  // namespace reel::nn::functional
