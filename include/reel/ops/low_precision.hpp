#pragma once
// FP4 data: pack_fp4 rounds pairs of values to e2m1 and packs them into float4_e2m1fn_x2
// (the first of each pair in the low nibble, as PyTorch's NVFP4 / MXFP4 data is laid out);
// unpack_fp4 decodes them to float. The last dim halves / doubles.
#include "../core/config.hpp"

#include "factories.hpp"

namespace reel::inline REEL_ABI {

template <TensorLike X>
Tensor<float4_e2m1fn_x2, detail::device_t<X>> pack_fp4(const X& xe) {
  using T = detail::value_t<X>;
  using D = detail::device_t<X>;
  static_assert(is_floating_v<T> || is_integral_v<T>, "reel::pack_fp4: needs real numbers");
  detail::require_host_memory<D>("pack_fp4");
  auto x = Tensor<T, D>(detail::materialize(xe)).contiguous();
  REEL_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, value_error, "pack_fp4: the last dim must have an even size (two ",
             "FP4 values per byte), got shape ", x.sizes());
  Shape s = x.sizes();
  s.back() /= 2;
  auto out = empty<float4_e2m1fn_x2, D>(s);
  if constexpr (detail::Backend<D>::has_data) {
    const T* p = x.data_ptr();
    float4_e2m1fn_x2* o = out.mutable_data_ptr();
    for (int64_t i = 0, n = out.numel(); i < n; ++i)
      o[i] = float4_e2m1fn_x2(convert<float>(p[2 * i]), convert<float>(p[2 * i + 1]));
  }
  return out;
}

template <class D>
Tensor<float, D> unpack_fp4(const Tensor<float4_e2m1fn_x2, D>& x) {
  detail::require_host_memory<D>("unpack_fp4");
  REEL_CHECK(x.dim() >= 1, value_error, "unpack_fp4: needs at least one dim");
  auto xc = x.contiguous();
  Shape s = x.sizes();
  s.back() *= 2;
  auto out = empty<float, D>(s);
  if constexpr (detail::Backend<D>::has_data) {
    const float4_e2m1fn_x2* p = xc.data_ptr();
    float* o = out.mutable_data_ptr();
    for (int64_t i = 0, n = xc.numel(); i < n; ++i) {
      o[2 * i] = p[i].first();
      o[2 * i + 1] = p[i].second();
    }
  }
  return out;
}

}  // namespace reel
