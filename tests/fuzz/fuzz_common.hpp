// What every checkpoint harness checks of a loaded tensor: its whole extent lies inside its
// storage, and those bytes are readable (a sanitizer sees any that are not).
#pragma once
#include <reel/io/value.hpp>

namespace reel_fuzz {
inline void touch(const reel::AnyTensor& t) {
  if (!t.defined() || t.numel() == 0) return;
  uint64_t last = static_cast<uint64_t>(t.storage_offset());
  for (int64_t d = 0; d < t.dim(); ++d) last += static_cast<uint64_t>((t.sizes()[d] - 1) * t.strides()[d]);
  const uint64_t es = static_cast<uint64_t>(reel::element_size(t.dtype()));
  const auto& s = t.impl_ptr()->storage;
  if ((last + 1) * es > s->nbytes) __builtin_trap();
  if (!s->data) return;  // Meta
  const auto* p = static_cast<const unsigned char*>(s->data);
  volatile unsigned char a = p[t.storage_offset() * es], b = p[(last + 1) * es - 1];
  (void)a;
  (void)b;
}
// Every tensor in a loaded value (depth-limited like the loader).
inline void walk(const reel::Value& v, int depth = 0) {
  if (depth > 300) __builtin_trap();  // the loader bounds nesting at 200
  if (v.is_tensor()) touch(v.tensor());
  if (v.is_list() || v.is_tuple())
    for (const auto& x : v.items()) walk(x, depth + 1);
  if (v.is_dict())
    for (size_t i = 0; i < v.size(); ++i) {
      walk(v.keys()[i], depth + 1);
      walk(v.values()[i], depth + 1);
    }
  if (v.is_object()) {
    walk(v.args(), depth + 1);
    walk(v.state(), depth + 1);
  }
}
}  // namespace reel_fuzz
