#pragma once
// Tensor<T, Device>: a cheap, aliasing handle to a strided view of shared storage.
#include "config.hpp"
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend.hpp"
#include "geometry.hpp"
#include "recorder.hpp"

namespace reel::inline REEL_ABI {

template <class T, class D = CPU>
class Tensor;

// Marker base of every expression node, so the tensor class can accept expressions
// before the expression engine is declared.
struct ExprBase {};
template <class E> inline constexpr bool is_expr_v = std::is_base_of_v<ExprBase, std::decay_t<E>>;

template <class E> struct is_tensor : std::false_type {};
template <class T, class D> struct is_tensor<Tensor<T, D>> : std::true_type {};
template <class E> inline constexpr bool is_tensor_v = is_tensor<std::decay_t<E>>::value;

// Anything that evaluates to a tensor: a Tensor or an expression of tensors.
template <class E> concept TensorLike = is_tensor_v<E> || is_expr_v<E>;
// A call whose operands are all the same Tensor<T, D> (a function's typed overload takes it;
// its TensorLike overload takes the rest: expressions, evaluated once, and mismatched types,
// stopped by a static_assert that says why).
template <class... X> inline constexpr bool same_tensors_v = false;
template <class X, class... Y>
inline constexpr bool same_tensors_v<X, Y...> = is_tensor_v<X> && (std::is_same_v<std::decay_t<X>, std::decay_t<Y>> && ...);

namespace detail {
template <class T, class D, class E> void assign_expr(const Tensor<T, D>& out, const E& e);
template <class E> Tensor<typename E::value_type, typename E::device_type> materialize(const E& e);
template <class T, class D> Tensor<T, D> make_tensor(Shape sizes);
// Ops whose only implementation is a loop over host memory call this first: on CUDA they
// raise not_implemented_error instead of reading device memory from the host.
template <class D>
void require_host_memory(const char* fn) {
  if constexpr (device_memory_v<D>)
    raise<not_implemented_error>(fn, ": not implemented for CUDA tensors yet (move the tensor with to_device<CPU>())");
}
}  // namespace detail

// Returned by register_hook (defined by autograd).
class RemovableHandle;

// Where the members are defined: each by the layer it needs (DESIGN.md §1), so this class
// compiles without the layers above it:
//   here               metadata, data pointers, views, detach
//   expr/assign.hpp    to_vector, clone, to<U>, to_device, copy_, fill_, add_, sub_, mul_, div_
//   autograd/tensor_members.hpp   requires_grad_, grad, backward, hooks, retain_grad, ...
//   ops/reductions.hpp sum, mean
template <class T, class D>
class Tensor {
  static_assert(Element<T>, "reel::Tensor: unsupported element type");

 public:
  using value_type = T;
  using device_type = D;

  Tensor() = default;
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}
  // An expression converts to a fresh tensor holding its value (PyTorch's rebinding
  // assignment: `y = a * b + c;` never writes into storage `y` shared with anyone).
  template <class E>
    requires(is_expr_v<E> && std::is_same_v<typename E::value_type, T> && std::is_same_v<typename E::device_type, D>)
  Tensor(const E& e) : Tensor(detail::materialize(e)) {}

  // ---- metadata
  bool defined() const { return impl_ != nullptr; }
  int64_t dim() const { return impl().sizes.size(); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : impl().sizes) n *= s;
    return n;
  }
  int64_t size(int64_t d) const { return impl().sizes[detail::wrap_dim(d, dim(), "size")]; }
  int64_t stride(int64_t d) const { return impl().strides[detail::wrap_dim(d, dim(), "stride")]; }
  const Shape& sizes() const { return impl().sizes; }
  const Shape& strides() const { return impl().strides; }
  int64_t storage_offset() const { return impl().offset; }
  bool is_contiguous() const { return detail::is_contiguous(impl().sizes, impl().strides); }
  static constexpr ScalarType dtype() { return scalar_type_v<T>; }
  static constexpr bool is_meta() { return !detail::Backend<D>::has_data; }
  bool is_same_storage(const Tensor& o) const { return impl().storage == o.impl().storage; }
  template <class U, class D2>
  bool is_same_storage(const Tensor<U, D2>& o) const { return impl().storage == o.impl().storage; }
  // Bumped by in-place writes to this tensor's storage (shared by all its views).
  uint64_t version() const { return impl().storage->version.load(std::memory_order_relaxed); }
  void bump_version() const {
    if (detail::CaptureTrace* c = detail::capturing()) c->note_bump(impl().storage.get());
    impl().storage->version.fetch_add(1, std::memory_order_relaxed);
  }

  // ---- data
  T* data_ptr() {
    check_data("data_ptr");
    return static_cast<T*>(impl().storage->data) + impl().offset;
  }
  const T* data_ptr() const {
    check_data("data_ptr");
    return static_cast<const T*>(impl().storage->data) + impl().offset;
  }
  // Writable pointer from a const handle: a handle's constness does not protect the shared
  // storage (as in PyTorch); the engine writes through this.
  T* mutable_data_ptr() const {
    check_data("data_ptr");
    return static_cast<T*>(impl().storage->data) + impl().offset;
  }
  T item() const {
    REEL_CHECK(numel() == 1, value_error, "item: a Tensor with ", numel(),
               " elements cannot be converted to a scalar");
    check_data("item");
    detail::capture_refuse("the function reads a tensor's value on the host (item)");
    if constexpr (detail::device_memory_v<D>)
      return to_vector()[0];
    else
      return *data_ptr();
  }
  std::vector<T> to_vector() const;

  // ---- views (share storage). The shape arithmetic lives in non-template functions
  // (detail::geometry), shared by every element type.
  Tensor as_strided(Shape sizes, Shape strides, std::optional<int64_t> offset = {}) const {
    Tensor r = with(detail::Geometry{std::move(sizes), std::move(strides), offset ? *offset : impl().offset});
    if (impl().autograd) return detail::Recorder<T, D>::as_strided(*this, std::move(r));
    return r;
  }
  Tensor select(int64_t d, int64_t i) const {
    return view_of(detail::select_geometry(impl(), d, i), {detail::ViewSpec::Select, d, i, 0, 0, {}});
  }
  Tensor operator[](int64_t i) const { return select(0, i); }
  Tensor slice(int64_t d, int64_t start, int64_t end, int64_t step = 1) const {
    return view_of(detail::slice_geometry(impl(), d, start, end, step), {detail::ViewSpec::Slice, d, start, end, step, {}});
  }
  Tensor narrow(int64_t d, int64_t start, int64_t length) const {
    auto g = detail::narrow_geometry(impl(), d, start, length);
    int64_t s = start < 0 ? start + size(d) : start;
    return view_of(std::move(g), {detail::ViewSpec::Slice, d, s, s + length, 1, {}});
  }
  Tensor view(Shape shape) const { return reshaped(detail::view_geometry(impl(), std::move(shape), "view", true)); }
  Tensor reshape(Shape shape) const {
    auto g = detail::view_geometry(impl(), std::move(shape), "reshape", false);
    if (g.viewable) return reshaped(std::move(g));
    return contiguous().view(std::move(g.sizes));
  }
  Tensor flatten(int64_t start = 0, int64_t end = -1) const {
    return reshape(detail::flatten_sizes(impl(), start, end));
  }
  Tensor unsqueeze(int64_t d) const { return reshaped(detail::unsqueeze_geometry(impl(), d)); }
  Tensor squeeze(int64_t d) const { return reshaped(detail::squeeze_geometry(impl(), d)); }
  Tensor squeeze() const { return reshaped(detail::squeeze_all_geometry(impl())); }
  Tensor transpose(int64_t a, int64_t b) const {
    auto g = detail::transpose_geometry(impl(), a, b);
    Shape order;
    for (int64_t i = 0; i < dim(); ++i) order.push_back(i);
    if (dim() > 0) std::swap(order[detail::wrap_dim(a, dim(), "transpose")], order[detail::wrap_dim(b, dim(), "transpose")]);
    return view_of(std::move(g), {detail::ViewSpec::Permute, 0, 0, 0, 0, std::move(order)});
  }
  Tensor t() const {
    REEL_CHECK(dim() <= 2, value_error, "t: expects a tensor with <= 2 dimensions, but self is ", dim(), "D");
    return dim() < 2 ? *this : transpose(0, 1);
  }
  Tensor mT() const {
    REEL_CHECK(dim() >= 2, value_error, "mT: tensor must have at least 2 dimensions, got ", dim());
    return transpose(-2, -1);
  }
  Tensor permute(Shape order) const {
    auto g = detail::permute_geometry(impl(), order);
    for (auto& o : order) o = detail::wrap_dim(o, dim(), "permute");
    return view_of(std::move(g), {detail::ViewSpec::Permute, 0, 0, 0, 0, std::move(order)});
  }
  Tensor expand(Shape shape) const {
    auto g = detail::expand_geometry(impl(), std::move(shape));
    Shape s = g.sizes;
    return view_of(std::move(g), {detail::ViewSpec::Expand, 0, 0, 0, 0, std::move(s)});
  }
  template <class U, class D2>
  Tensor expand_as(const Tensor<U, D2>& o) const { return expand(o.sizes()); }

  Tensor contiguous() const { return is_contiguous() ? *this : clone(); }
  Tensor clone() const;
  // Same storage, no autograd history (and no forward-mode tangents).
  Tensor detach() const { return with(detail::Geometry{impl().sizes, impl().strides, impl().offset}); }
  template <class U> Tensor<U, D> to() const;
  template <class D2> Tensor<T, D2> to_device() const;

  // ---- autograd (defined in reel/autograd/tensor_members.hpp)
  Tensor& requires_grad_(bool on = true);
  bool requires_grad() const;
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  void backward(const Tensor& grad = {}, bool retain_graph = false, bool create_graph = false) const;
  void retain_grad() const;
  bool retains_grad() const;
  // f(grad) -> Tensor (a replacement gradient) or void; runs when this tensor's gradient is computed.
  template <class F> RemovableHandle register_hook(F&& f) const;
  // f(const Tensor& leaf) after backward() has accumulated into this leaf's .grad.
  template <class F> RemovableHandle register_post_accumulate_grad_hook(F&& f) const;

  // ---- in place (each bumps the version counter; expr/assign.hpp)
  template <class E> Tensor& copy_(const E& src);
  Tensor& fill_(T v);
  Tensor& zero_() { return fill_(T(0)); }
  template <class E> Tensor& add_(const E& other, T alpha = T(1));
  template <class E> Tensor& sub_(const E& other, T alpha = T(1));
  template <class E> Tensor& mul_(const E& other);
  template <class E> Tensor& div_(const E& other);

  // Reductions as members, so `(x * x).sum()` reads naturally (ops/reductions.hpp).
  auto sum() const;
  // (a template: an explicit instantiation of Tensor<int64_t> leaves it out; mean of an
  // integer tensor is a compile error, as reel::mean says)
  template <class U = T> auto mean() const;

  // Exposed for the engine and for AnyTensor; not part of the user-facing API.
  detail::TensorImpl& impl() const {
    REEL_CHECK(impl_, error, "operation on an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<detail::TensorImpl>& impl_ptr() const { return impl_; }

 private:
  void check_data(const char* fn) const {
    if constexpr (!detail::Backend<D>::has_data)
      raise<error>(fn, ": a meta tensor has no data (shape, strides and dtype only)");
    (void)fn;
    impl();
  }
  Tensor view_of(detail::Geometry g, detail::ViewSpec spec) const {
    Tensor r = with(std::move(g));
    if (impl().autograd) return detail::Recorder<T, D>::view(*this, std::move(r), spec);
    return r;
  }
  Tensor reshaped(detail::Geometry g) const {
    if (!impl().autograd) return with(std::move(g));
    Shape s = g.sizes;
    return view_of(std::move(g), {detail::ViewSpec::Reshape, 0, 0, 0, 0, std::move(s)});
  }
  Tensor with(detail::Geometry g) const {
    auto p = detail::make_pooled<detail::TensorImpl>();
    p->storage = impl().storage;
    p->sizes = std::move(g.sizes);
    p->strides = std::move(g.strides);
    p->offset = g.offset;
    p->dtype = impl().dtype;
    p->device = impl().device;
    return Tensor(std::move(p));
  }

  std::shared_ptr<detail::TensorImpl> impl_;
};

namespace detail {
template <class T, class D>
Tensor<T, D> make_tensor(Shape sizes) {
  return Tensor<T, D>(make_contiguous_impl(std::move(sizes), sizeof(T), scalar_type_v<T>, device_type_v<D>,
                                           &Backend<D>::make_storage));
}
}  // namespace detail

}  // namespace reel

#include "../expr/assign.hpp"
#include "print.hpp"
