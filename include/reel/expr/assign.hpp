#pragma once
// Writing expressions into existing storage, and the Tensor members that need the engine
// and the op definitions.
#include "../core/config.hpp"
#include "../core/op_report.hpp"
#include "functions.hpp"

namespace reel::inline REEL_ABI {
namespace detail {

// Writes `e` into existing storage `out` (broadcasting e to out's shape). A checkpoint's
// replay does not write again into storages older than it (op_report.hpp).
template <class T, class D, class E>
void assign_expr(const Tensor<T, D>& out, const E& e) {
  if (replay_skips_write(out.impl())) [[unlikely]]
    return;
  if constexpr (is_cpp_scalar_v<E>) {
    assign_expr(out, Scalar<T>(convert<T>(e)));
  } else if constexpr (is_tensor_v<E> && !std::is_same_v<value_t<E>, T>) {
    assign_expr(out, make_expr(CastOp<T>{}, e));
  } else if constexpr (is_expr_v<E> && !std::is_same_v<value_t<E>, T>) {
    assign_expr(out, make_expr(CastOp<T>{}, e));
  } else if constexpr (std::is_same_v<std::decay_t<E>, Scalar<T>>) {
    Recorder<T, D>::check_inplace(out, false);
    if constexpr (Backend<D>::has_data) {
      if (out.is_contiguous() && Backend<D>::host_memory) {
        kernel_step({out.impl().storage.get()}, [out, v = convert<T>(e.value)] {
          std::fill(out.mutable_data_ptr(), out.mutable_data_ptr() + out.numel(), v);
        });
      } else {
        eval_into(out, make_expr(SecondOp{}, out, e));
      }
      out.bump_version();
    }
  } else {
    Shape es = shape_of(e);
    Shape bs = broadcast_shapes(out.sizes(), es);
    REEL_CHECK(bs == out.sizes(), value_error, "copy_: source of shape ", es,
               " cannot be broadcast to the destination's shape ", out.sizes());
    auto rec = Recorder<T, D>::begin(e);
    Recorder<T, D>::check_inplace(out, rec.active);
    if (Backend<D>::has_data && leaf_aliases(out, e)) {
      // Partial overlap (a tensor or an expression reading part of `out`): evaluate into a
      // temporary first, then copy.
      auto tmp = make_tensor<T, D>(es);
      eval_into(tmp, e);
      eval_into(out, tmp);
    } else {
      eval_into(out, e);
    }
    if constexpr (Backend<D>::has_data) out.bump_version();
    Recorder<T, D>::finish(rec, out, e);
  }
}

}  // namespace detail
}  // namespace reel

namespace reel::inline REEL_ABI {
// ------------------------------------------------------------------ Tensor members needing the engine
template <class T, class D>
std::vector<T> Tensor<T, D>::to_vector() const {
  check_data("to_vector");
  detail::capture_refuse("the function reads tensor values on the host (to_vector)");
  if constexpr (detail::device_memory_v<D>) {
    return to_device<CPU>().to_vector();
  } else {
    auto c = contiguous();
    return std::vector<T>(c.data_ptr(), c.data_ptr() + c.numel());
  }
}
template <class T, class D>
Tensor<T, D> Tensor<T, D>::clone() const {
  auto out = detail::make_tensor<T, D>(sizes());
  detail::eval_into(out, *this);
  if (impl().autograd) return detail::Recorder<T, D>::clone(*this, std::move(out));
  return out;
}
template <class T, class D>
template <class U>
Tensor<U, D> Tensor<T, D>::to() const {
  if constexpr (std::is_same_v<U, T>)
    return *this;
  else
    return detail::materialize(make_expr(CastOp<U>{}, *this));
}
template <class T, class D>
template <class D2>
Tensor<T, D2> Tensor<T, D>::to_device() const {
  if constexpr (std::is_same_v<D, D2>) {
    return *this;
  } else if constexpr (!detail::Backend<D2>::has_data) {
    return detail::make_tensor<T, D2>(sizes());
  } else if constexpr (detail::Backend<D>::has_data) {
    // host <-> device (a contiguous copy; the source is made contiguous on its own device
    // first), by the backend of the side whose memory is not the host's
    using Dev = std::conditional_t<detail::Backend<D>::host_memory, D2, D>;
    return detail::Backend<Dev>::template copy_between<T, D2>(contiguous());
  } else {
    static_assert(!detail::Backend<D2>::has_data,
                  "reel: to_device: meta tensors have no data to copy");
    return {};
  }
}
template <class T, class D>
template <class E>
Tensor<T, D>& Tensor<T, D>::copy_(const E& src) {
  detail::assign_expr(*this, src);
  return *this;
}
template <class T, class D>
Tensor<T, D>& Tensor<T, D>::fill_(T v) {
  detail::assign_expr(*this, Scalar<T>(v));
  return *this;
}
namespace detail {
// x = x op (o * alpha), for add_ and sub_.
template <class Op, class T, class D, class E>
void axpy_(const Tensor<T, D>& x, const E& o, T alpha) {
  if constexpr (is_cpp_scalar_v<E>)
    assign_expr(x, make_expr(Op{}, x, Scalar<T>(convert<T>(o) * alpha)));
  else if (alpha == T(1))
    assign_expr(x, make_expr(Op{}, x, o));
  else
    assign_expr(x, make_expr(Op{}, x, make_expr(MulOp{}, o, Scalar<T>(alpha))));
}
}  // namespace detail
template <class T, class D>
template <class E>
Tensor<T, D>& Tensor<T, D>::add_(const E& o, T alpha) {
  detail::axpy_<AddOp>(*this, o, alpha);
  return *this;
}
template <class T, class D>
template <class E>
Tensor<T, D>& Tensor<T, D>::sub_(const E& o, T alpha) {
  detail::axpy_<SubOp>(*this, o, alpha);
  return *this;
}
template <class T, class D>
template <class E>
Tensor<T, D>& Tensor<T, D>::mul_(const E& o) {
  detail::assign_expr(*this, make_expr(MulOp{}, *this, o));
  return *this;
}
template <class T, class D>
template <class E>
Tensor<T, D>& Tensor<T, D>::div_(const E& o) {
  detail::assign_expr(*this, make_expr(DivOp{}, *this, o));
  return *this;
}
}  // namespace reel
