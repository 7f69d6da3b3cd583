#pragma once
// The bodies of storage's non-template runtime functions (header-only mode: included by it;
// compiled mode: by src/runtime.cpp).
#include "storage.hpp"

namespace reel::inline REEL_ABI {
namespace detail {
REEL_INLINE std::shared_ptr<Storage> make_storage(size_t nbytes, DeviceType dev) {
  auto s = make_pooled<Storage>();
  s->nbytes = nbytes;
  s->device = dev;
  if (dev == DeviceType::CPU && nbytes <= Storage::kInlineBytes) {
    s->data = s->inline_bytes;
  } else if (dev == DeviceType::CPU) {
    s->data = CachingHostAllocator::instance().allocate(nbytes);
    s->free_fn = [](void* p, size_t n) { CachingHostAllocator::instance().deallocate(p, n); };
  } else if (dev == DeviceType::CUDA) {
    raise<not_implemented_error>("CUDA storage needs reel compiled with CUDA support (include <cuda.hpp> from a .cu file)");
  }
  if (CaptureTrace* c = capturing()) c->note_fresh(s);
  return s;
}

REEL_INLINE size_t CaptureTrace::share_buffers(const std::vector<const Storage*>& keep) {
  struct Buf {
    std::shared_ptr<Storage> s;
    size_t first, last, size, off = 0;
  };
  std::vector<Buf> bufs;
  for (auto& [w, p] : fresh_) {
    auto s = w.lock();
    if (!s || s->device != DeviceType::CPU || s->data == s->inline_bytes || !s->free_fn || s->owner ||
        std::find(keep.begin(), keep.end(), p) != keep.end())
      continue;
    size_t first = SIZE_MAX, last = 0;
    for (size_t i = 0; i < uses_.size(); ++i)
      if (std::find(uses_[i].begin(), uses_[i].end(), p) != uses_[i].end()) {
        first = std::min(first, i);
        last = i;
      }
    if (first == SIZE_MAX) continue;
    const size_t size = (s->nbytes + 63) / 64 * 64;
    bufs.push_back({std::move(s), first, last, size});
  }
  if (bufs.empty()) return 0;
  // first fit, in order of first use, among the places of buffers still live then
  std::sort(bufs.begin(), bufs.end(), [](const Buf& a, const Buf& b) { return a.first < b.first; });
  std::vector<const Buf*> live;
  size_t total = 0;
  for (Buf& b : bufs) {
    std::erase_if(live, [&](const Buf* o) { return o->last < b.first; });
    std::sort(live.begin(), live.end(), [](const Buf* x, const Buf* y) { return x->off < y->off; });
    size_t off = 0;
    for (const Buf* o : live) {
      if (off + b.size <= o->off) break;
      off = std::max(off, o->off + o->size);
    }
    b.off = off;
    total = std::max(total, off + b.size);
    live.push_back(&b);
  }
  auto* block = static_cast<unsigned char*>(std::aligned_alloc(64, total));
  if (!block) return 0;  // keep the separate buffers
  std::shared_ptr<void> arena(block, [](void* q) { std::free(q); });
  for (Buf& b : bufs) {
    b.s->free_fn(b.s->data, b.s->nbytes);
    b.s->data = block + b.off;
    b.s->free_fn = nullptr;
    b.s->owner = arena;
  }
  return total;
}

}  // namespace
}  // namespace
