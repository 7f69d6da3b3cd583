#pragma once
// Gathering the operands of blocks of short rows (xyz) into dense runs, and the fixed-length
// runs of a repeated (broadcast) row: the pieces of the CPU row walker (engine.hpp) that do
// not depend on the expression.
#include "../core/config.hpp"
#include <cstdint>
#include <cstring>

#include <Eigen/Core>

namespace reel::inline REEL_ABI {
namespace detail {

// The fixed run length of blocks with a repeated (broadcast) row: a multiple of 2, 3, 4, 6
// and of the vector width in elements.
inline constexpr int kPatternRun = 24;

// One run of kPatternRun elements of a row expression x, packet by packet through its Eigen
// evaluator: the dynamic rows' expression types (no other instantiation of the expression
// tree, as a fixed-size Eigen assignment would make: +0.7 s of compile time for 7 kernels),
// without the dynamic loop's alignment prologue and epilogue. Only for expressions Eigen
// vectorizes (runs_vectorize).
#if defined(__GNUC__) && !defined(__clang__)  // (a packet type as a template argument, as Eigen's own code does)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
#endif
template <class X>
inline constexpr bool runs_vectorize = (Eigen::internal::evaluator<X>::Flags & Eigen::PacketAccessBit) != 0;
template <class R, class X>
void eval_run(R* o, const X& x) {
  const Eigen::internal::evaluator<X> ev(x);
  using P = typename Eigen::internal::packet_traits<R>::type;
  constexpr int ps = Eigen::internal::packet_traits<R>::size;
  int q = 0;
  for (; q + ps <= kPatternRun; q += ps) Eigen::internal::pstoreu(o + q, ev.template packet<Eigen::Unaligned, P>(q));
  for (; q < kPatternRun; ++q) o[q] = ev.coeff(q);  // (none where the packet size divides the run)
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

constexpr size_t gcd_of(size_t a, size_t b) { return b == 0 ? a : gcd_of(b, a % b); }

// Short rows (xyz) gathered into a dense tile: the row length fixed, so the loop unrolls.
template <class W, int N>
void gather_short_rows(unsigned char* d, const unsigned char* s, int64_t si, int64_t sob, int64_t rows) {
  if (sob == 0) {  // one row repeated (a broadcast): a pattern of whole 32-byte vectors
    // (std::lcm is not a constant expression to nvcc's front end)
    constexpr size_t row = N * sizeof(W), pb = row / gcd_of(row, 32) * 32;
    unsigned char pat[pb];
    for (size_t r = 0; r < pb / row; ++r)
      for (int i = 0; i < N; ++i) std::memcpy(pat + r * row + i * sizeof(W), s + i * si * sizeof(W), sizeof(W));
    const size_t total = static_cast<size_t>(rows) * row;
    size_t b = 0;
#if defined(__GNUC__)  // GCC and Clang: the pattern held in vector registers, stored 32 bytes at a time
    typedef unsigned char V __attribute__((vector_size(32), aligned(1), may_alias));
    if constexpr (pb == 32) {
      const V v0 = *reinterpret_cast<const V*>(pat);
      for (; b + pb <= total; b += pb) *reinterpret_cast<V*>(d + b) = v0;
    } else if constexpr (pb == 64) {
      const V v0 = *reinterpret_cast<const V*>(pat), v1 = *reinterpret_cast<const V*>(pat + 32);
      for (; b + pb <= total; b += pb) {
        *reinterpret_cast<V*>(d + b) = v0;
        *reinterpret_cast<V*>(d + b + 32) = v1;
      }
    } else if constexpr (pb == 96) {
      const V v0 = *reinterpret_cast<const V*>(pat), v1 = *reinterpret_cast<const V*>(pat + 32),
              v2 = *reinterpret_cast<const V*>(pat + 64);
      for (; b + pb <= total; b += pb) {
        *reinterpret_cast<V*>(d + b) = v0;
        *reinterpret_cast<V*>(d + b + 32) = v1;
        *reinterpret_cast<V*>(d + b + 64) = v2;
      }
    }
#endif
    for (; b + pb <= total; b += pb) std::memcpy(d + b, pat, pb);
    // the rest element by element (constant-size copies: a libc memmove call per plane cost
    // a third of a [38, 38, 3] broadcast op in this VM's slow phases)
    for (size_t q = 0; b + q < total; q += sizeof(W)) std::memcpy(d + b + q, pat + q, sizeof(W));
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int i = 0; i < N; ++i)
      std::memcpy(d + (r * N + i) * sizeof(W), s + (r * sob + i * si) * sizeof(W), sizeof(W));
}
// For each of `planes` rows of N elements (stride si; plane p's row sp elements after plane
// p - 1's), that row repeated to kPatternRun elements (eval_row_block's fixed-length runs).
template <class W, int N>
void fill_patterns_as(unsigned char* d, const unsigned char* s, int64_t si, int64_t sp, int64_t planes) {
  for (int64_t p = 0; p < planes; ++p)
    gather_short_rows<W, N>(d + p * kPatternRun * sizeof(W), s + p * sp * sizeof(W), si, 0, kPatternRun / N);
}
template <class W>
void fill_patterns_n(unsigned char* d, const unsigned char* s, int64_t si, int64_t sp, int64_t n, int64_t planes) {
  switch (n) {
    case 1: return fill_patterns_as<W, 1>(d, s, si, sp, planes);
    case 2: return fill_patterns_as<W, 2>(d, s, si, sp, planes);
    case 3: return fill_patterns_as<W, 3>(d, s, si, sp, planes);
    case 4: return fill_patterns_as<W, 4>(d, s, si, sp, planes);
    default: return fill_patterns_as<W, 6>(d, s, si, sp, planes);
  }
}
// (n divides kPatternRun; an element has 4 or 8 bytes)
REEL_INLINE void fill_patterns(unsigned char* d, const unsigned char* s, int64_t si, int64_t sp, int64_t n,
                               int64_t planes, int size);
template <class W>  // W: an element's bytes (memcpy of a constant size: one load, one store)
void copy2d_as(unsigned char* d, int64_t di, int64_t dob, const unsigned char* s, int64_t si, int64_t sob, int64_t n,
               int64_t rows) {
  if (di == 1 && dob == n) {
    switch (n) {
      case 2: return gather_short_rows<W, 2>(d, s, si, sob, rows);
      case 3: return gather_short_rows<W, 3>(d, s, si, sob, rows);
      case 4: return gather_short_rows<W, 4>(d, s, si, sob, rows);
      default: break;
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(d + (r * dob + i * di) * sizeof(W), s + (r * sob + i * si) * sizeof(W), sizeof(W));
}
struct Bytes16 {
  unsigned char b[16];
};
// rows x n elements of `size` bytes, element (r, i) at r * outer + i * inner (in elements).
REEL_INLINE void copy2d(void* dst, int64_t di, int64_t dob, const void* src, int64_t si, int64_t sob, int64_t n, int64_t rows,
                   int size);

}  // namespace detail
}  // namespace reel
