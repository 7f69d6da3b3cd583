#pragma once
// histc: counts in equal-width bins, in the input's dtype (PyTorch's rule).
#include "../core/config.hpp"

#include "factories.hpp"

namespace reel::inline REEL_ABI {

// ------------------------------------------------------------------ histc
// `bins` equal bins over [min, max]; when min == max the data's own range is used (widened
// by 1 on each side if all values are equal). Values outside the range and NaNs are ignored;
// a value equal to max falls in the last bin. Same dtype in and out, as in PyTorch.
template <class T, class D>
void histc(const Tensor<T, D>& x, int64_t bins, double min, double max, Tensor<T, D>& out) {
  static_assert(is_floating_v<T>, "reel::histc: needs a floating point tensor (as torch.histc on the CPU)");
  REEL_CHECK(bins > 0, value_error, "histc: bins must be > 0, got ", bins);
  REEL_CHECK(std::isfinite(min) && std::isfinite(max), value_error, "histc: range of [", min, ", ", max, "] is not finite");
  REEL_CHECK(min <= max, value_error, "histc: max must be larger than min, got min=", min, ", max=", max);
  REEL_CHECK(out.dim() == 1 && out.size(0) == bins, value_error, "histc: out must have shape [", bins, "], got ", out.sizes());
  detail::require_host_memory<D>("histc");
  if constexpr (detail::Backend<D>::has_data) {
    auto xc = x.contiguous();
    const T* p = xc.data_ptr();
    int64_t n = xc.numel();
    if (min == max && n > 0) {
      double lo = std::numeric_limits<double>::infinity(), hi = -lo;
      for (int64_t i = 0; i < n; ++i) {
        double v = static_cast<double>(p[i]);
        if (std::isnan(v)) continue;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      if (lo <= hi) {
        min = lo;
        max = hi;
      }
    }
    if (min == max) {
      min -= 1;
      max += 1;
    }
    std::vector<int64_t> counts(bins, 0);
    for (int64_t i = 0; i < n; ++i) {
      double v = static_cast<double>(p[i]);
      if (!(v >= min && v <= max)) continue;
      int64_t b = static_cast<int64_t>((v - min) * static_cast<double>(bins) / (max - min));
      if (b >= bins) b = bins - 1;
      ++counts[b];
    }
    auto oc = out.contiguous();
    for (int64_t b = 0; b < bins; ++b) oc.data_ptr()[b] = convert<T>(counts[b]);
    if (!oc.is_same_storage(out)) out.copy_(oc);
    out.bump_version();
  }
}
template <class T, class U, class D>
  requires(!std::is_same_v<T, U>)
void histc(const Tensor<T, D>&, int64_t, double, double, Tensor<U, D>&) {
  static_assert(std::is_same_v<T, U>, "reel::histc: `out` must have the same dtype as the input");
}
template <TensorLike X>
auto histc(const X& xe, int64_t bins = 100, double min = 0, double max = 0) {
  auto x = detail::materialize(xe);
  using T = detail::value_t<X>;
  auto out = empty<T, detail::device_t<X>>({bins});
  histc(x, bins, min, max, out);
  return out;
}

}  // namespace reel
