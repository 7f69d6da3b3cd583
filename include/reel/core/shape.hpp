#pragma once
// Shape: a small vector of int64_t with inline room for the common ranks, so creating a
// tensor does not pay two extra heap allocations for its sizes and strides.
#include "config.hpp"
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <span>
#include <vector>

#include "errors.hpp"

namespace reel::inline REEL_ABI {

class Shape {
 public:
  static constexpr int64_t kInline = 6;
  using value_type = int64_t;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  Shape() = default;
  explicit Shape(int64_t n, int64_t fill = 0) { resize(n, fill); }
  Shape(std::initializer_list<int64_t> l) { assign(l.begin(), l.end()); }
  Shape(const std::vector<int64_t>& v) { assign(v.data(), v.data() + v.size()); }
  Shape(std::span<const int64_t> s) { assign(s.data(), s.data() + s.size()); }
  template <class It>
    requires(!std::is_integral_v<It>)  // Shape(3, 1) is (count, fill)
  Shape(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  Shape(const Shape& o) {
    if (o.heap_) {
      assign(o.begin(), o.end());
    } else {
      std::memcpy(inline_, o.inline_, sizeof inline_);
      size_ = o.size_;
    }
  }
  Shape(Shape&& o) noexcept { steal(o); }
  Shape& operator=(const Shape& o) {
    if (this != &o) {
      size_ = 0;
      assign(o.begin(), o.end());
    }
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      release();
      steal(o);
    }
    return *this;
  }
  ~Shape() { release(); }

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return heap_ ? heap_ : inline_; }
  const int64_t* data() const { return heap_ ? heap_ : inline_; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  int64_t& operator[](int64_t i) { return data()[i]; }
  int64_t operator[](int64_t i) const { return data()[i]; }
  int64_t& back() { return data()[size_ - 1]; }
  int64_t back() const { return data()[size_ - 1]; }

  void reserve(int64_t n) {
    if (n <= capacity()) return;
    auto* p = new int64_t[n];
    std::memcpy(p, data(), sizeof(int64_t) * size_);
    delete[] heap_;
    heap_ = p;
    cap_ = n;
  }
  void push_back(int64_t v) {
    if (size_ == capacity()) reserve(std::max<int64_t>(2 * capacity(), 8));
    data()[size_++] = v;
  }
  void pop_back() { --size_; }
  void resize(int64_t n, int64_t fill = 0) {
    reserve(n);
    for (int64_t i = size_; i < n; ++i) data()[i] = fill;
    size_ = n;
  }
  void insert(int64_t pos, int64_t v) {
    push_back(0);
    for (int64_t i = size_ - 1; i > pos; --i) data()[i] = data()[i - 1];
    data()[pos] = v;
  }
  void erase(int64_t pos) {
    for (int64_t i = pos; i + 1 < size_; ++i) data()[i] = data()[i + 1];
    --size_;
  }
  operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }
  operator std::span<const int64_t>() const { return {data(), static_cast<size_t>(size_)}; }

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator==(const Shape& a, const std::vector<int64_t>& b) { return a == Shape(b); }
  friend std::ostream& operator<<(std::ostream& os, const Shape& s) {
    os << '[';
    for (int64_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
    return os << ']';
  }

 private:
  int64_t capacity() const { return heap_ ? cap_ : kInline; }
  template <class P>
  void assign(P first, P last) {
    reserve(static_cast<int64_t>(last - first));
    int64_t i = 0;
    for (; first != last; ++first) data()[i++] = static_cast<int64_t>(*first);
    size_ = i;
  }
  void steal(Shape& o) {
    size_ = o.size_;
    if (o.heap_) {
      heap_ = o.heap_;
      cap_ = o.cap_;
      o.heap_ = nullptr;
    } else {
      std::memcpy(inline_, o.inline_, sizeof inline_);  // (a constant size: two vector moves, no call)
    }
    o.size_ = 0;
  }
  void release() {
    if (heap_) delete[] heap_;
    heap_ = nullptr;
    cap_ = 0;
  }

  int64_t inline_[kInline];  // only the first size_ are set (no zero fill: a Shape is made for every view and op)
  int64_t* heap_ = nullptr;
  int64_t size_ = 0;
  int64_t cap_ = 0;
};

REEL_INLINE std::string to_string(const Shape& s);

namespace detail {

// Overflow-checked 64-bit arithmetic for sizes: a shape whose element count does not fit
// in int64 is rejected instead of wrapping.
inline int64_t checked_mul(int64_t a, int64_t b, const char* what = "numel") {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) raise<value_error>(what, ": size overflows int64");
  return r;
}

inline int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n = checked_mul(n, v);
  return n;
}

inline void check_sizes(const Shape& s, const char* fn) {
  for (int64_t v : s)
    REEL_CHECK(v >= 0, value_error, fn, ": negative dimension ", v, " in shape ", s);
  (void)numel_of(s);
}

inline Shape contiguous_strides(const Shape& sizes) {
  Shape st(sizes.size());
  int64_t acc = 1;
  for (int64_t i = sizes.size() - 1; i >= 0; --i) {
    st[i] = acc;
    acc = checked_mul(acc, std::max<int64_t>(sizes[i], 1));
  }
  return st;
}

inline bool is_contiguous(const Shape& sizes, const Shape& strides) {
  int64_t expected = 1;
  for (int64_t i = sizes.size() - 1; i >= 0; --i) {
    if (sizes[i] == 1) continue;
    if (sizes[i] == 0) return true;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

// Wraps a possibly negative dim into [0, ndim). `ndim` of a scalar is treated as 1 so
// dim 0 / -1 work on 0-d tensors as in PyTorch.
inline int64_t wrap_dim(int64_t d, int64_t ndim, const char* fn = "dim") {
  int64_t n = std::max<int64_t>(ndim, 1);
  REEL_CHECK(d >= -n && d < n, index_error, fn, ": dimension out of range (expected to be in range of [", -n,
             ", ", n - 1, "], but got ", d, ")");
  return d < 0 ? d + n : d;
}

REEL_INLINE Shape broadcast_shapes(const Shape& a, const Shape& b);

// Element offset of the idx-th element (row-major order) of a strided tensor. All 64-bit.
inline int64_t linear_to_offset(int64_t idx, const Shape& sizes, const Shape& strides) {
  int64_t off = 0;
  for (int64_t d = sizes.size() - 1; d >= 0; --d) {
    int64_t s = sizes[d];
    if (s == 0) return 0;
    off += (idx % s) * strides[d];
    idx /= s;
  }
  return off;
}

}  // namespace detail
}  // namespace reel

#ifndef REEL_COMPILED_LIB
#include "shape-inl.hpp"
#endif
