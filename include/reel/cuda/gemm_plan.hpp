#pragma once
// The pure-host half of the cuBLASLt GEMM: how a row-major product maps onto the
// column-major call, how a strided operand is read in place, and the key under which the
// chosen algorithm is cached. No CUDA headers, so it is unit-tested on the CPU.
//
// The mapping. A row-major matrix M[r, c] with leading dimension ld (element (i, j) at
// i * ld + j) is, read column-major, the matrix Mᵀ [c, r] with the same ld. So the row-major
//   C[m, n] = op(A)[m, k] · op(B)[k, n]
// is the column-major
//   Cᵀ[n, m] = op(B)ᵀ[n, k] · op(A)ᵀ[k, m],
// and cuBLASLt gets B as its first matrix and A as its second, dimensions (n, m, k):
//   - B not transposed: stored row-major [k, n], i.e. column-major [n, k] = op(B)ᵀ: op N,
//     layout rows n, cols k, ld ldb.
//   - B transposed (op(B) = B_storedᵀ, B stored row-major [n, k]): column-major [k, n] =
//     op(B), whose transpose is wanted: op T, layout rows k, cols n, ld ldb.
//   - A likewise: not transposed (stored [m, k]): op N, layout rows k, cols m, ld lda;
//     transposed (stored [k, m]): op T, layout rows m, cols k, ld lda.
//   - C: layout rows n, cols m, ld ldc.
// cuBLASLt wants ld >= rows of each layout, which for a row-major matrix is ld >= its
// number of columns: exactly the row-major condition.
#include "../core/config.hpp"
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace reel::inline REEL_ABI::detail {

enum class GemmDtype : uint8_t { Float32, Float64, Float16, BFloat16 };
// Accumulation: fp32 for fp32 / fp16 / bf16 inputs (optionally TF32 tensor cores for fp32
// inputs), fp64 for fp64.
enum class GemmCompute : uint8_t { Float32, Float32FastTF32, Float64 };

constexpr int64_t gemm_dtype_size(GemmDtype t) {
  switch (t) {
    case GemmDtype::Float32: return 4;
    case GemmDtype::Float64: return 8;
    case GemmDtype::Float16:
    case GemmDtype::BFloat16: return 2;
  }
  return 0;
}

// The products we issue: A and B share a dtype; C (the output, also read when beta != 0)
// has it too, or is fp32 for fp16 / bf16 inputs (fp32 logits, fp32 weight-gradient
// accumulation).
constexpr bool gemm_types_supported(GemmDtype ab, GemmDtype c) {
  if (ab == c) return true;
  return c == GemmDtype::Float32 && (ab == GemmDtype::Float16 || ab == GemmDtype::BFloat16);
}
constexpr GemmCompute gemm_compute_for(GemmDtype ab, bool allow_tf32) {
  if (ab == GemmDtype::Float64) return GemmCompute::Float64;
  return ab == GemmDtype::Float32 && allow_tf32 ? GemmCompute::Float32FastTF32 : GemmCompute::Float32;
}

// A row-major product C[m, n] = op(A) op(B), batched with element strides between the
// matrices. trans_a: A is stored as [k, m] (op(A) = its transpose, read in place);
// trans_b: B is stored as [n, k].
struct RowMajorGemm {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

// One matrix as cuBLASLt sees it (column-major).
struct LtLayout {
  int64_t rows = 0, cols = 0, ld = 0, stride = 0;
  bool operator==(const LtLayout&) const = default;
};
// The column-major call: D = op(first) · op(second), D [m, n]. `first` is the row-major B
// and `second` the row-major A (see the mapping above).
struct ColMajorGemm {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool trans_first = false, trans_second = false;
  LtLayout first, second, c;
  bool operator==(const ColMajorGemm&) const = default;
};

constexpr ColMajorGemm to_col_major(const RowMajorGemm& r) {
  ColMajorGemm g;
  g.m = r.n;
  g.n = r.m;
  g.k = r.k;
  g.batch = r.batch;
  g.trans_first = r.trans_b;
  g.trans_second = r.trans_a;
  g.first = r.trans_b ? LtLayout{r.k, r.n, r.ldb, r.stride_b} : LtLayout{r.n, r.k, r.ldb, r.stride_b};
  g.second = r.trans_a ? LtLayout{r.m, r.k, r.lda, r.stride_a} : LtLayout{r.k, r.m, r.lda, r.stride_a};
  g.c = LtLayout{r.n, r.m, r.ldc, r.stride_c};
  return g;
}

// How a matrix view [rows, cols] with element strides (row_stride, col_stride) is read in
// place: row-major with leading dimension ld, or (trans) as the row-major transpose
// [cols, rows] with leading dimension ld. in_place is false when neither fits (overlapping
// rows of an expanded view, two non-unit strides): the caller copies it first. A dimension
// of size 1 places no condition on its stride.
struct GemmOperand {
  bool in_place = false, trans = false;
  int64_t ld = 0;
  bool operator==(const GemmOperand&) const = default;
};
constexpr GemmOperand gemm_operand(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  const int64_t c1 = std::max<int64_t>(cols, 1), r1 = std::max<int64_t>(rows, 1);
  if ((col_stride == 1 || cols <= 1) && (rows <= 1 || row_stride >= c1))
    return {true, false, rows <= 1 ? c1 : row_stride};
  if ((row_stride == 1 || rows <= 1) && (cols <= 1 || col_stride >= r1))
    return {true, true, cols <= 1 ? r1 : col_stride};
  return {};
}

// The largest power of two (at most 256, the most cuBLASLt asks about) dividing an address
// or byte offset: algorithms are chosen for the alignment the operands really have.
constexpr uint32_t alignment_class(uint64_t v) {
  if (v == 0) return 256;
  uint32_t a = 1;
  while (a < 256 && (v & a) == 0) a <<= 1;
  return a;
}

// Everything the heuristic's choice depends on. (No epilogue is ever set; alpha and beta
// are passed at call time and do not enter the choice.)
struct GemmKey {
  int device = 0;
  GemmDtype ab = GemmDtype::Float32, c = GemmDtype::Float32;
  GemmCompute compute = GemmCompute::Float32;
  ColMajorGemm shape;
  uint32_t align_first = 256, align_second = 256, align_c = 256;
  bool operator==(const GemmKey&) const = default;
};

// Alignment of a batched operand: its base pointer and, with more than one matrix, the
// byte offset between matrices (each matrix's pointer must meet what the algorithm assumes).
constexpr uint32_t operand_alignment(uint64_t address, int64_t batch, int64_t stride_elems, int64_t elem_size) {
  uint32_t a = alignment_class(address);
  if (batch > 1) a = std::min(a, alignment_class(static_cast<uint64_t>(stride_elems * elem_size)));
  return a;
}

inline GemmKey make_gemm_key(int device, GemmDtype ab, GemmDtype c, GemmCompute compute, const RowMajorGemm& r,
                             uint64_t a_ptr, uint64_t b_ptr, uint64_t c_ptr) {
  GemmKey key;
  key.device = device;
  key.ab = ab;
  key.c = c;
  key.compute = compute;
  key.shape = to_col_major(r);
  const int64_t sab = gemm_dtype_size(ab), sc = gemm_dtype_size(c);
  key.align_first = operand_alignment(b_ptr, r.batch, r.stride_b, sab);
  key.align_second = operand_alignment(a_ptr, r.batch, r.stride_a, sab);
  key.align_c = operand_alignment(c_ptr, r.batch, r.stride_c, sc);
  return key;
}

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    auto mix = [&h](uint64_t v) {  // splitmix64 finalizer over a running combination
      h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
      h ^= h >> 30;
      h *= 0xbf58476d1ce4e5b9ull;
      h ^= h >> 27;
      h *= 0x94d049bb133111ebull;
      h ^= h >> 31;
    };
    const auto& s = k.shape;
    mix(static_cast<uint64_t>(k.device));
    mix(static_cast<uint64_t>(k.ab) | static_cast<uint64_t>(k.c) << 8 | static_cast<uint64_t>(k.compute) << 16 |
        static_cast<uint64_t>(s.trans_first) << 24 | static_cast<uint64_t>(s.trans_second) << 25);
    for (int64_t v : {s.m, s.n, s.k, s.batch, s.first.rows, s.first.cols, s.first.ld, s.first.stride, s.second.rows,
                      s.second.cols, s.second.ld, s.second.stride, s.c.rows, s.c.cols, s.c.ld, s.c.stride})
      mix(static_cast<uint64_t>(v));
    mix(static_cast<uint64_t>(k.align_first) | static_cast<uint64_t>(k.align_second) << 16 |
        static_cast<uint64_t>(k.align_c) << 32);
    return static_cast<size_t>(h);
  }
};

}  // namespace reel::detail
