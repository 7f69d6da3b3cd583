#pragma once
// The bodies of geometry's non-template runtime functions (header-only mode: included by it;
// compiled mode: by src/runtime.cpp).
#include "geometry.hpp"

namespace reel::inline REEL_ABI::detail {
REEL_INLINE Geometry select_geometry(const TensorImpl& t, int64_t d, int64_t i) {
  int64_t nd = t.sizes.size();
  REEL_CHECK(nd > 0, index_error, "select: cannot select on a 0-d tensor");
  d = wrap_dim(d, nd, "select");
  int64_t n = t.sizes[d];
  REEL_CHECK(i >= -n && i < n, index_error, "select: index ", i, " is out of bounds for dimension ", d, " with size ", n);
  if (i < 0) i += n;
  Geometry g{t.sizes, t.strides, t.offset + i * t.strides[d]};
  g.sizes.erase(d);
  g.strides.erase(d);
  return g;
}

REEL_INLINE Geometry slice_geometry(const TensorImpl& t, int64_t d, int64_t start, int64_t end, int64_t step) {
  d = wrap_dim(d, t.sizes.size(), "slice");
  REEL_CHECK(step > 0, value_error, "slice: step must be positive, got ", step);
  int64_t n = t.sizes[d];
  auto clampi = [n](int64_t v) {
    if (v < 0) v += n;
    return std::clamp<int64_t>(v, 0, n);
  };
  start = clampi(start);
  end = clampi(end);
  int64_t len = end > start ? (end - start + step - 1) / step : 0;
  Geometry g{t.sizes, t.strides, t.offset + start * t.strides[d]};
  g.sizes[d] = len;
  g.strides[d] *= step;
  return g;
}

REEL_INLINE Geometry narrow_geometry(const TensorImpl& t, int64_t d, int64_t start, int64_t length) {
  d = wrap_dim(d, t.sizes.size(), "narrow");
  int64_t n = t.sizes[d];
  REEL_CHECK(start >= 0 && length >= 0 && start + length <= n, index_error, "narrow: range [", start, ", ",
             start + length, ") out of bounds for dimension ", d, " with size ", n);
  return slice_geometry(t, d, start, start + length, 1);
}

REEL_INLINE Shape infer_size(Shape shape, int64_t n, const char* fn) {
  int64_t infer = -1, prod = 1;
  for (int64_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      REEL_CHECK(infer < 0, value_error, fn, ": only one dimension can be inferred in ", shape);
      infer = i;
    } else {
      REEL_CHECK(shape[i] >= 0, value_error, fn, ": invalid shape dimension ", shape[i]);
      prod = checked_mul(prod, shape[i]);
    }
  }
  if (infer >= 0) {
    REEL_CHECK(prod != 0 && n % prod == 0, value_error, fn, ": shape ", shape, " is invalid for input of size ", n);
    shape[infer] = n / prod;
  } else {
    REEL_CHECK(prod == n, value_error, fn, ": shape ", shape, " is invalid for input of size ", n);
  }
  return shape;
}

REEL_INLINE std::optional<Shape> view_strides(const Shape& os, const Shape& ot, const Shape& target) {
  int64_t n = numel_of(os);
  if (n == 0 || os.size() == 0) return contiguous_strides(target);
  Shape nst(target.size());
  int64_t view_d = target.size() - 1;
  int64_t chunk_base_stride = ot.back();
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

REEL_INLINE Geometry view_geometry(const TensorImpl& t, Shape shape, const char* fn, bool must) {
  Shape sz = infer_size(std::move(shape), numel_of(t.sizes), fn);
  auto st = view_strides(t.sizes, t.strides, sz);
  if (!st) {
    REEL_CHECK(!must, error, "view size is not compatible with input tensor's size and stride (sizes ", t.sizes,
               ", strides ", t.strides,
               "; at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead.");
    return Geometry{std::move(sz), {}, t.offset, false};
  }
  return Geometry{std::move(sz), std::move(*st), t.offset};
}

REEL_INLINE Shape flatten_sizes(const TensorImpl& t, int64_t start, int64_t end) {
  int64_t nd = t.sizes.size();
  if (nd == 0) return Shape{1};
  start = wrap_dim(start, nd, "flatten");
  end = wrap_dim(end, nd, "flatten");
  REEL_CHECK(start <= end, value_error, "flatten: start_dim ", start, " cannot come after end_dim ", end);
  Shape sz;
  for (int64_t i = 0; i < start; ++i) sz.push_back(t.sizes[i]);
  int64_t m = 1;
  for (int64_t i = start; i <= end; ++i) m *= t.sizes[i];
  sz.push_back(m);
  for (int64_t i = end + 1; i < nd; ++i) sz.push_back(t.sizes[i]);
  return sz;
}

REEL_INLINE Geometry unsqueeze_geometry(const TensorImpl& t, int64_t d) {
  int64_t nd = t.sizes.size();
  d = wrap_dim(d, nd + 1, "unsqueeze");
  Geometry g{t.sizes, t.strides, t.offset};
  int64_t s = d < nd ? g.strides[d] * g.sizes[d] : 1;
  g.sizes.insert(d, 1);
  g.strides.insert(d, s);
  return g;
}

REEL_INLINE Geometry squeeze_geometry(const TensorImpl& t, int64_t d) {
  Geometry g{t.sizes, t.strides, t.offset};
  if (t.sizes.size() == 0) return g;
  d = wrap_dim(d, t.sizes.size(), "squeeze");
  if (t.sizes[d] != 1) return g;
  g.sizes.erase(d);
  g.strides.erase(d);
  return g;
}

REEL_INLINE Geometry squeeze_all_geometry(const TensorImpl& t) {
  Geometry g{{}, {}, t.offset};
  for (int64_t i = 0; i < t.sizes.size(); ++i)
    if (t.sizes[i] != 1) {
      g.sizes.push_back(t.sizes[i]);
      g.strides.push_back(t.strides[i]);
    }
  return g;
}

REEL_INLINE Geometry transpose_geometry(const TensorImpl& t, int64_t a, int64_t b) {
  Geometry g{t.sizes, t.strides, t.offset};
  int64_t nd = t.sizes.size();
  if (nd == 0) return g;
  a = wrap_dim(a, nd, "transpose");
  b = wrap_dim(b, nd, "transpose");
  std::swap(g.sizes[a], g.sizes[b]);
  std::swap(g.strides[a], g.strides[b]);
  return g;
}

REEL_INLINE Geometry permute_geometry(const TensorImpl& t, const Shape& order) {
  int64_t nd = t.sizes.size();
  REEL_CHECK(order.size() == nd, value_error, "permute: number of dims don't match (got ", order,
             " for a tensor of shape ", t.sizes, ")");
  Geometry g{Shape(nd), Shape(nd), t.offset};
  std::vector<bool> seen(nd, false);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t d = wrap_dim(order[i], nd, "permute");
    REEL_CHECK(!seen[d], value_error, "permute: repeated dim ", order[i], " in ", order);
    seen[d] = true;
    g.sizes[i] = t.sizes[d];
    g.strides[i] = t.strides[d];
  }
  return g;
}

REEL_INLINE Geometry expand_geometry(const TensorImpl& t, Shape shape) {
  int64_t nd = t.sizes.size();
  REEL_CHECK(shape.size() >= nd, value_error, "expand: the number of sizes provided (", shape.size(),
             ") must be greater or equal to the number of dimensions in the tensor (", nd, ")");
  int64_t off = shape.size() - nd;
  Shape st(shape.size(), 0);
  for (int64_t i = 0; i < shape.size(); ++i) {
    int64_t j = i - off;
    if (j < 0) {
      REEL_CHECK(shape[i] >= 0, value_error, "expand: -1 not allowed in a new leading dimension");
      continue;
    }
    if (shape[i] == -1) shape[i] = t.sizes[j];
    if (t.sizes[j] == shape[i]) {
      st[i] = t.strides[j];
    } else {
      REEL_CHECK(t.sizes[j] == 1, value_error, "expand: the expanded size of the tensor (", shape[i],
                 ") must match the existing size (", t.sizes[j], ") at non-singleton dimension ", i,
                 ". Target sizes: ", shape, ". Tensor sizes: ", t.sizes);
    }
  }
  return Geometry{std::move(shape), std::move(st), t.offset};
}

REEL_INLINE std::shared_ptr<TensorImpl> make_contiguous_impl(Shape sizes, size_t elem, ScalarType dtype,
                                                             DeviceType device,
                                                             std::shared_ptr<Storage> (*make)(size_t)) {
  check_sizes(sizes, "empty");
  auto p = make_pooled<TensorImpl>();
  const int64_t n = numel_of(sizes);
  p->strides = contiguous_strides(sizes);
  p->sizes = std::move(sizes);
  p->storage = make(static_cast<size_t>(checked_mul(n, static_cast<int64_t>(elem), "nbytes")));
  p->dtype = dtype;
  p->device = device;
  return p;
}

}  // namespace
