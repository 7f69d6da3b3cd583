#pragma once
// Tensor<T, Device>: a cheap, aliasing handle to a strided view of shared storage.
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "detail/tensor_impl.hpp"

namespace reel {

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

namespace detail {
template <class T, class D, class E> void assign_expr(const Tensor<T, D>& out, const E& e);
template <class E> auto materialize(const E& e);
template <class T, class D> Tensor<T, D> make_tensor(Shape sizes);
}  // namespace detail

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
  static constexpr bool is_meta() { return std::is_same_v<D, Meta>; }
  bool is_same_storage(const Tensor& o) const { return impl().storage == o.impl().storage; }
  template <class U, class D2>
  bool is_same_storage(const Tensor<U, D2>& o) const { return impl().storage == o.impl().storage; }
  // Bumped by in-place writes to this tensor's storage (shared by all its views).
  uint64_t version() const { return impl().storage->version.load(std::memory_order_relaxed); }
  void bump_version() const { impl().storage->version.fetch_add(1, std::memory_order_relaxed); }

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
    return *data_ptr();
  }
  std::vector<T> to_vector() const;

  // ---- views (share storage)
  Tensor as_strided(Shape sizes, Shape strides, std::optional<int64_t> offset = {}) const {
    check_data_or_meta();
    auto p = std::make_shared<detail::TensorImpl>();
    p->storage = impl().storage;
    p->sizes = std::move(sizes);
    p->strides = std::move(strides);
    p->offset = offset ? *offset : impl().offset;
    p->dtype = impl().dtype;
    p->device = impl().device;
    return Tensor(std::move(p));
  }
  Tensor select(int64_t d, int64_t i) const {
    REEL_CHECK(dim() > 0, index_error, "select: cannot select on a 0-d tensor");
    d = detail::wrap_dim(d, dim(), "select");
    int64_t n = impl().sizes[d];
    REEL_CHECK(i >= -n && i < n, index_error, "select: index ", i, " is out of bounds for dimension ", d,
               " with size ", n);
    if (i < 0) i += n;
    Shape sz = sizes(), st = strides();
    int64_t off = impl().offset + i * st[d];
    sz.erase(d);
    st.erase(d);
    return as_strided(std::move(sz), std::move(st), off);
  }
  Tensor operator[](int64_t i) const { return select(0, i); }
  Tensor slice(int64_t d, int64_t start, int64_t end, int64_t step = 1) const {
    d = detail::wrap_dim(d, dim(), "slice");
    REEL_CHECK(step > 0, value_error, "slice: step must be positive, got ", step);
    int64_t n = impl().sizes[d];
    auto clampi = [n](int64_t v) {
      if (v < 0) v += n;
      return std::clamp<int64_t>(v, 0, n);
    };
    start = clampi(start);
    end = clampi(end);
    int64_t len = end > start ? (end - start + step - 1) / step : 0;
    Shape sz = sizes(), st = strides();
    int64_t off = impl().offset + start * st[d];
    sz[d] = len;
    st[d] *= step;
    return as_strided(std::move(sz), std::move(st), off);
  }
  Tensor narrow(int64_t d, int64_t start, int64_t length) const {
    d = detail::wrap_dim(d, dim(), "narrow");
    REEL_CHECK(start >= 0 && length >= 0 && start + length <= size(d), index_error, "narrow: range [", start, ", ",
               start + length, ") out of bounds for dimension ", d, " with size ", size(d));
    return slice(d, start, start + length);
  }
  Tensor view(Shape shape) const {
    Shape sz = infer_size(std::move(shape), "view");
    auto st = view_strides(sz);
    REEL_CHECK(st.has_value(), error, "view size is not compatible with input tensor's size and stride (sizes ",
               sizes(), ", strides ", strides(),
               "; at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead.");
    return as_strided(std::move(sz), std::move(*st));
  }
  Tensor reshape(Shape shape) const {
    Shape sz = infer_size(std::move(shape), "reshape");
    if (auto st = view_strides(sz)) return as_strided(std::move(sz), std::move(*st));
    return contiguous().view(std::move(sz));
  }
  Tensor flatten(int64_t start = 0, int64_t end = -1) const {
    if (dim() == 0) return reshape({1});
    start = detail::wrap_dim(start, dim(), "flatten");
    end = detail::wrap_dim(end, dim(), "flatten");
    REEL_CHECK(start <= end, value_error, "flatten: start_dim ", start, " cannot come after end_dim ", end);
    Shape sz;
    for (int64_t i = 0; i < start; ++i) sz.push_back(size(i));
    int64_t m = 1;
    for (int64_t i = start; i <= end; ++i) m *= size(i);
    sz.push_back(m);
    for (int64_t i = end + 1; i < dim(); ++i) sz.push_back(size(i));
    return reshape(std::move(sz));
  }
  Tensor unsqueeze(int64_t d) const {
    d = detail::wrap_dim(d, dim() + 1, "unsqueeze");
    Shape sz = sizes(), st = strides();
    int64_t s = d < dim() ? st[d] * sz[d] : 1;
    sz.insert(d, 1);
    st.insert(d, s);
    return as_strided(std::move(sz), std::move(st));
  }
  Tensor squeeze(int64_t d) const {
    if (dim() == 0) return *this;
    d = detail::wrap_dim(d, dim(), "squeeze");
    if (size(d) != 1) return *this;
    Shape sz = sizes(), st = strides();
    sz.erase(d);
    st.erase(d);
    return as_strided(std::move(sz), std::move(st));
  }
  Tensor squeeze() const {
    Shape sz, st;
    for (int64_t i = 0; i < dim(); ++i)
      if (size(i) != 1) {
        sz.push_back(size(i));
        st.push_back(stride(i));
      }
    return as_strided(std::move(sz), std::move(st));
  }
  Tensor transpose(int64_t a, int64_t b) const {
    if (dim() == 0) return *this;
    a = detail::wrap_dim(a, dim(), "transpose");
    b = detail::wrap_dim(b, dim(), "transpose");
    Shape sz = sizes(), st = strides();
    std::swap(sz[a], sz[b]);
    std::swap(st[a], st[b]);
    return as_strided(std::move(sz), std::move(st));
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
    REEL_CHECK(order.size() == dim(), value_error, "permute: number of dims don't match (got ", order,
               " for a tensor of shape ", sizes(), ")");
    Shape sz(dim()), st(dim());
    std::vector<bool> seen(dim(), false);
    for (int64_t i = 0; i < dim(); ++i) {
      int64_t d = detail::wrap_dim(order[i], dim(), "permute");
      REEL_CHECK(!seen[d], value_error, "permute: repeated dim ", order[i], " in ", order);
      seen[d] = true;
      sz[i] = size(d);
      st[i] = stride(d);
    }
    return as_strided(std::move(sz), std::move(st));
  }
  Tensor expand(Shape shape) const {
    REEL_CHECK(shape.size() >= dim(), value_error, "expand: the number of sizes provided (", shape.size(),
               ") must be greater or equal to the number of dimensions in the tensor (", dim(), ")");
    int64_t off = shape.size() - dim();
    Shape st(shape.size(), 0);
    for (int64_t i = 0; i < shape.size(); ++i) {
      int64_t j = i - off;
      if (j < 0) {
        REEL_CHECK(shape[i] >= 0, value_error, "expand: -1 not allowed in a new leading dimension");
        continue;
      }
      if (shape[i] == -1) shape[i] = size(j);
      if (size(j) == shape[i]) {
        st[i] = stride(j);
      } else {
        REEL_CHECK(size(j) == 1, value_error, "expand: the expanded size of the tensor (", shape[i],
                   ") must match the existing size (", size(j), ") at non-singleton dimension ", i,
                   ". Target sizes: ", shape, ". Tensor sizes: ", sizes());
      }
    }
    return as_strided(std::move(shape), std::move(st));
  }
  template <class U, class D2>
  Tensor expand_as(const Tensor<U, D2>& o) const { return expand(o.sizes()); }

  Tensor contiguous() const { return is_contiguous() ? *this : clone(); }
  Tensor clone() const;
  // Same storage, no autograd history.
  Tensor detach() const { return as_strided(sizes(), strides()); }
  template <class U> Tensor<U, D> to() const;
  template <class D2> Tensor<T, D2> to_device() const;

  // ---- in place (each bumps the version counter)
  template <class E> Tensor& copy_(const E& src);
  Tensor& fill_(T v);
  Tensor& zero_() { return fill_(T(0)); }
  template <class E> Tensor& add_(const E& other, T alpha = T(1));
  template <class E> Tensor& sub_(const E& other, T alpha = T(1));
  template <class E> Tensor& mul_(const E& other);
  template <class E> Tensor& div_(const E& other);

  // Reductions as members, so `(x * x).sum()` reads naturally.
  auto sum() const;
  auto mean() const;

  // Exposed for the engine and for AnyTensor; not part of the user-facing API.
  detail::TensorImpl& impl() const {
    REEL_CHECK(impl_, error, "operation on an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<detail::TensorImpl>& impl_ptr() const { return impl_; }

 private:
  void check_data(const char* fn) const {
    if constexpr (std::is_same_v<D, Meta>)
      raise<error>(fn, ": a meta tensor has no data (shape, strides and dtype only)");
    (void)fn;
    impl();
  }
  void check_data_or_meta() const { impl(); }
  Shape infer_size(Shape shape, const char* fn) const {
    int64_t infer = -1, prod = 1;
    for (int64_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == -1) {
        REEL_CHECK(infer < 0, value_error, fn, ": only one dimension can be inferred in ", shape);
        infer = i;
      } else {
        REEL_CHECK(shape[i] >= 0, value_error, fn, ": invalid shape dimension ", shape[i]);
        prod = detail::checked_mul(prod, shape[i]);
      }
    }
    int64_t n = numel();
    if (infer >= 0) {
      REEL_CHECK(prod != 0 && n % prod == 0, value_error, fn, ": shape ", shape, " is invalid for input of size ", n);
      shape[infer] = n / prod;
    } else {
      REEL_CHECK(prod == n, value_error, fn, ": shape ", shape, " is invalid for input of size ", n);
    }
    return shape;
  }
  // Strides for viewing this tensor with `target` sizes without copying, if possible
  // (the chunk-matching rule PyTorch documents for view()).
  std::optional<Shape> view_strides(const Shape& target) const {
    const Shape& os = sizes();
    const Shape& ot = strides();
    Shape nst(target.size());
    if (numel() == 0 || os.size() == 0) return detail::contiguous_strides(target);
    int64_t view_d = target.size() - 1;
    int64_t chunk_base_stride = ot.size() ? ot.back() : 1;
    int64_t tensor_numel = 1, view_numel = 1;
    for (int64_t td = os.size() - 1; td >= 0; --td) {
      tensor_numel *= os[td];
      if (td == 0 || (os[td - 1] != 1 && ot[td - 1] != tensor_numel * chunk_base_stride)) {
        while (view_d >= 0 && (view_numel < tensor_numel || target[view_d] == 1)) {
          nst[view_d] = view_numel * chunk_base_stride;
          view_numel *= target[view_d];
          --view_d;
        }
        if (view_numel != tensor_numel) return std::nullopt;
        if (td > 0) {
          chunk_base_stride = ot[td - 1];
          tensor_numel = 1;
          view_numel = 1;
        }
      }
    }
    if (view_d != -1) return std::nullopt;
    return nst;
  }

  std::shared_ptr<detail::TensorImpl> impl_;
};

namespace detail {
template <class T, class D>
Tensor<T, D> make_tensor(Shape sizes) {
  check_sizes(sizes, "empty");
  auto p = std::make_shared<TensorImpl>();
  int64_t n = numel_of(sizes);
  p->strides = contiguous_strides(sizes);
  p->sizes = std::move(sizes);
  p->storage = make_storage(static_cast<size_t>(checked_mul(n, sizeof(T), "nbytes")), device_type_v<D>);
  p->dtype = scalar_type_v<T>;
  p->device = device_type_v<D>;
  return Tensor<T, D>(std::move(p));
}
}  // namespace detail

}  // namespace reel

#include "detail/expr/assign.hpp"
#include "detail/print.hpp"
