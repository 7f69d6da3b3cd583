#pragma once
#include "config.hpp"
#include <memory>

#include "dtype.hpp"
#include "shape.hpp"
#include "storage.hpp"

namespace reel::inline REEL_ABI::detail {

// Autograd attaches its per-tensor state here (next layer up); the core only carries it.
struct AutogradMetaBase {
  virtual ~AutogradMetaBase() = default;
};

// Untyped so that Tensor<T, D> and AnyTensor share one representation: converting between
// them is a checked re-wrap, never a copy.
struct TensorImpl {
  TensorImpl() {}  // (user-provided: make_pooled's value-initialization then does not zero the whole object first)
  std::shared_ptr<Storage> storage;
  Shape sizes, strides;
  int64_t offset = 0;  // in elements
  ScalarType dtype = ScalarType::Float;
  DeviceType device = DeviceType::CPU;
  std::shared_ptr<AutogradMetaBase> autograd;
};

}  // namespace reel::detail
