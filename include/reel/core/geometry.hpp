#pragma once
// Sizes/strides/offset arithmetic of every view, independent of the element type.
#include "config.hpp"
#include <optional>

#include "tensor_impl.hpp"

namespace reel::inline REEL_ABI::detail {

struct Geometry {
  Shape sizes, strides;
  int64_t offset = 0;
  bool viewable = true;  // false: reshape must copy
};

REEL_INLINE Geometry select_geometry(const TensorImpl& t, int64_t d, int64_t i);

REEL_INLINE Geometry slice_geometry(const TensorImpl& t, int64_t d, int64_t start, int64_t end, int64_t step);

REEL_INLINE Geometry narrow_geometry(const TensorImpl& t, int64_t d, int64_t start, int64_t length);

REEL_INLINE Shape infer_size(Shape shape, int64_t n, const char* fn);

// Strides for viewing (sizes, strides) with `target` sizes without copying, if possible
// (the chunk-matching rule PyTorch documents for view()).
REEL_INLINE std::optional<Shape> view_strides(const Shape& os, const Shape& ot, const Shape& target);

// The view's geometry; when no view exists: an error (view) or empty strides (reshape,
// which then copies).
REEL_INLINE Geometry view_geometry(const TensorImpl& t, Shape shape, const char* fn, bool must);

REEL_INLINE Shape flatten_sizes(const TensorImpl& t, int64_t start, int64_t end);

REEL_INLINE Geometry unsqueeze_geometry(const TensorImpl& t, int64_t d);

REEL_INLINE Geometry squeeze_geometry(const TensorImpl& t, int64_t d);

REEL_INLINE Geometry squeeze_all_geometry(const TensorImpl& t);

REEL_INLINE Geometry transpose_geometry(const TensorImpl& t, int64_t a, int64_t b);

REEL_INLINE Geometry permute_geometry(const TensorImpl& t, const Shape& order);

REEL_INLINE Geometry expand_geometry(const TensorImpl& t, Shape shape);

// A new contiguous tensor of `sizes` with elements of `elem` bytes, its storage from
// make(nbytes) (make_tensor's body, the same for every element type).
REEL_INLINE std::shared_ptr<TensorImpl> make_contiguous_impl(Shape sizes, size_t elem, ScalarType dtype,
                                                             DeviceType device,
                                                             std::shared_ptr<Storage> (*make)(size_t));

}  // namespace reel::detail

#ifndef REEL_COMPILED_LIB
#include "geometry-inl.hpp"
#endif
