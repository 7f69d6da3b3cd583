#pragma once
// AnyTensor: a tensor whose element type is known only at run time (loaded checkpoints,
// foreign buffers). It shares the representation of Tensor<T, D>, so converting between
// the two is a checked re-wrap, never a copy.
#include "../core/config.hpp"
#include "../ops/products.hpp"

namespace reel::inline REEL_ABI {

class AnyTensor {
 public:
  AnyTensor() = default;
  template <class T, class D>
  AnyTensor(const Tensor<T, D>& t) : impl_(t.impl_ptr()) {}
  explicit AnyTensor(std::shared_ptr<detail::TensorImpl> p) : impl_(std::move(p)) {}

  bool defined() const { return impl_ != nullptr; }
  ScalarType dtype() const { return impl().dtype; }
  DeviceType device() const { return impl().device; }
  const Shape& sizes() const { return impl().sizes; }
  const Shape& strides() const { return impl().strides; }
  int64_t dim() const { return impl().sizes.size(); }
  int64_t numel() const { return detail::numel_of(impl().sizes); }
  int64_t storage_offset() const { return impl().offset; }
  bool is_contiguous() const { return detail::is_contiguous(impl().sizes, impl().strides); }
  // Whether both are views of one storage (false when either is undefined).
  bool is_same_storage(const AnyTensor& o) const {
    return defined() && o.defined() && impl_->storage == o.impl_->storage;
  }
  template <class T>
  bool is() const {
    return defined() && dtype() == scalar_type_v<T>;
  }
  template <class T, class D = CPU>
  Tensor<T, D> as() const {
    REEL_CHECK(dtype() == scalar_type_v<T>, type_error, "AnyTensor::as: the tensor holds ", dtype_name(dtype()),
               " but ", scalar_type_of<T>::name, " was requested (convert with .to<T>() after as<",
               dtype_name(dtype()), ">())");
    REEL_CHECK(device() == device_type_v<D>, type_error, "AnyTensor::as: the tensor is on another device");
    return Tensor<T, D>(impl_);
  }
  const std::shared_ptr<detail::TensorImpl>& impl_ptr() const { return impl_; }

  // Calls f(Tensor<T, D>) with the tensor's static type (CPU tensors).
  template <class F>
  decltype(auto) visit(F&& f) const {
    REEL_CHECK(device() == DeviceType::CPU, not_implemented_error, "AnyTensor::visit: only CPU tensors");
    return visit_dtype(dtype(), [&](auto v) -> decltype(auto) { return f(as<decltype(v), CPU>()); });
  }

 private:
  detail::TensorImpl& impl() const {
    REEL_CHECK(impl_, error, "operation on an undefined AnyTensor");
    return *impl_;
  }
  std::shared_ptr<detail::TensorImpl> impl_;
};

// A template so that printing code for all 17 dtypes is only compiled where it is used.
template <std::same_as<AnyTensor> A>
std::ostream& operator<<(std::ostream& os, const A& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  if (t.device() != DeviceType::CPU) return os << "AnyTensor(" << dtype_name(t.dtype()) << ", size=" << t.sizes() << ")";
  t.visit([&](const auto& x) { os << x; });
  return os;
}

namespace detail {
// Runtime counterpart of the compile-time "complex numbers have no order" checks.
inline void require_ordered_any(const AnyTensor& x, const char* fn) {
  if (x.dtype() == ScalarType::ComplexFloat || x.dtype() == ScalarType::ComplexDouble)
    raise<type_error>(fn, ": complex numbers have no order, so ", fn, " is not defined for ", dtype_name(x.dtype()),
                      " tensors");
  if (x.dtype() == ScalarType::Float8_e4m3fn || x.dtype() == ScalarType::Float8_e5m2 ||
      x.dtype() == ScalarType::Float8_e8m0fnu)
    raise<type_error>(fn, ": not implemented for ", dtype_name(x.dtype()), " tensors (convert with .to<float>())");
  if (x.dtype() == ScalarType::Float4_e2m1fn_x2)
    raise<type_error>(fn, ": not implemented for ", dtype_name(x.dtype()), " tensors (two FP4 values per element: ",
                      "unpack_fp4() them first)");
}
template <class F>
AnyTensor visit_ordered(const AnyTensor& x, const char* fn, F&& f) {
  require_ordered_any(x, fn);
  return visit_dtype(x.dtype(), [&](auto v) -> AnyTensor {
    using T = decltype(v);
    if constexpr (is_complex_v<T> || is_fp8_v<T> || is_fp4_v<T>)
      return {};  // unreachable: rejected above
    else
      return AnyTensor(f(x.as<T>()));
  });
}
}  // namespace detail

// Ordering ops on type-erased tensors: type_error for complex input. (Function templates so
// that their per-dtype instantiations are only compiled by programs that call them.)
#define REEL_ANY_UNARY(NAME, CALL)                                                               \
  template <std::same_as<AnyTensor> A>                                                           \
  AnyTensor NAME(const A& x) {                                                                   \
    return detail::visit_ordered(x, #NAME, [](const auto& t) { return CALL; });                  \
  }
REEL_ANY_UNARY(amax, reel::amax(t))
REEL_ANY_UNARY(amin, reel::amin(t))
REEL_ANY_UNARY(max, reel::amax(t))
REEL_ANY_UNARY(min, reel::amin(t))
REEL_ANY_UNARY(argmax, reel::argmax(t))
REEL_ANY_UNARY(argmin, reel::argmin(t))
#undef REEL_ANY_UNARY
template <std::same_as<AnyTensor> A>
AnyTensor sort(const A& x, int64_t dim = -1, bool descending = false) {
  return detail::visit_ordered(x, "sort", [&](const auto& t) { return reel::sort(t, dim, descending).values; });
}
template <std::same_as<AnyTensor> A>
AnyTensor topk(const A& x, int64_t k, int64_t dim = -1) {
  return detail::visit_ordered(x, "topk", [&](const auto& t) { return reel::topk(t, k, dim).values; });
}
template <std::same_as<AnyTensor> A>
AnyTensor clamp(const A& x, Bound lo, Bound hi) {
  return detail::visit_ordered(x, "clamp", [&](const auto& t) { return decltype(t)(reel::clamp(t, lo, hi)); });
}
#define REEL_ANY_BINARY(NAME)                                                                         \
  template <std::same_as<AnyTensor> A>                                                                \
  AnyTensor NAME(const A& x, const A& y) {                                                            \
    detail::require_ordered_any(y, #NAME);                                                            \
    REEL_CHECK(x.dtype() == y.dtype(), type_error, #NAME ": dtypes differ (", dtype_name(x.dtype()), \
               " and ", dtype_name(y.dtype()), "); convert one first");                              \
    return detail::visit_ordered(x, #NAME, [&](const auto& t) {                                       \
      using TT = std::decay_t<decltype(t)>;                                                           \
      return TT(reel::NAME(t, y.template as<typename TT::value_type>()));                             \
    });                                                                                               \
  }
REEL_ANY_BINARY(maximum)
REEL_ANY_BINARY(minimum)
REEL_ANY_BINARY(fmax)
REEL_ANY_BINARY(fmin)
#undef REEL_ANY_BINARY

// histc with an AnyTensor `out`: the dtypes must match (type_error naming both).
template <class T, class D>
void histc(const Tensor<T, D>& x, int64_t bins, double min, double max, AnyTensor& out) {
  REEL_CHECK(out.dtype() == scalar_type_v<T>, type_error, "histc: input dtype and out dtype must match, got ",
             scalar_type_of<T>::name, " and ", dtype_name(out.dtype()));
  auto o = out.as<T, D>();
  histc(x, bins, min, max, o);
}

}  // namespace reel
