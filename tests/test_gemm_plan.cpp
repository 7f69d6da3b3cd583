// The row-major -> column-major mapping of the cuBLASLt GEMM, checked on the CPU: a naive
// column-major GEMM (BLAS semantics, written here from the definition) run on the mapped
// arguments must reproduce a naive row-major product, for every transpose combination with
// padded leading dimensions and batch strides. Plus the in-place operand rules, the
// alignment classes and the cache key.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <reel/cuda/gemm_plan.hpp>
#include <vector>

using namespace reel::detail;

namespace {
// BLAS: D[m, n] = op(F) op(S); a column-major matrix M (rows r) has M(i, j) at i + j * ld.
void col_major_gemm(const ColMajorGemm& g, const double* F, const double* S, double* D) {
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < g.k; ++p) {
          const double* f = F + b * g.first.stride;
          const double* q = S + b * g.second.stride;
          double fv = g.trans_first ? f[p + i * g.first.ld] : f[i + p * g.first.ld];
          double sv = g.trans_second ? q[j + p * g.second.ld] : q[p + j * g.second.ld];
          s += fv * sv;
        }
        D[b * g.c.stride + i + j * g.c.ld] = s;
      }
}
// Row-major: C(i, j) at i * ld + j; op(A)(i, p) = A(p, i) when A is stored transposed.
void row_major_gemm(const RowMajorGemm& r, const double* A, const double* B, double* C) {
  for (int64_t b = 0; b < r.batch; ++b)
    for (int64_t i = 0; i < r.m; ++i)
      for (int64_t j = 0; j < r.n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < r.k; ++p) {
          const double* a = A + b * r.stride_a;
          const double* q = B + b * r.stride_b;
          s += (r.trans_a ? a[p * r.lda + i] : a[i * r.lda + p]) * (r.trans_b ? q[j * r.ldb + p] : q[p * r.ldb + j]);
        }
        C[b * r.stride_c + i * r.ldc + j] = s;
      }
}
}  // namespace

TEST_CASE("to_col_major: a plain 2x4 by 4x3 product, worked by hand") {
  RowMajorGemm r{.m = 2, .n = 3, .k = 4, .lda = 4, .ldb = 3, .ldc = 3};
  ColMajorGemm g = to_col_major(r);
  // Cᵀ[3, 2] = Bᵀ[3, 4] Aᵀ[4, 2]: B row-major [4, 3] is column-major [3, 4] with ld 3.
  CHECK(g.m == 3);
  CHECK(g.n == 2);
  CHECK(g.k == 4);
  CHECK(!g.trans_first);
  CHECK(!g.trans_second);
  CHECK(g.first == LtLayout{3, 4, 3, 0});
  CHECK(g.second == LtLayout{4, 2, 4, 0});
  CHECK(g.c == LtLayout{3, 2, 3, 0});
}

TEST_CASE("to_col_major: transposed operands swap their layouts' rows and columns") {
  // A stored [k=4, m=2] (ld 5), B stored [n=3, k=4] (ld 6).
  RowMajorGemm r{.m = 2, .n = 3, .k = 4, .trans_a = true, .trans_b = true, .lda = 5, .ldb = 6, .ldc = 7};
  ColMajorGemm g = to_col_major(r);
  CHECK(g.trans_first);
  CHECK(g.trans_second);
  CHECK(g.first == LtLayout{4, 3, 6, 0});   // B stored [3, 4] row-major = column-major [4, 3]
  CHECK(g.second == LtLayout{2, 4, 5, 0});  // A stored [4, 2] row-major = column-major [2, 4]
  CHECK(g.c == LtLayout{3, 2, 7, 0});
}

TEST_CASE("to_col_major reproduces the row-major product for every transpose, padding and batch") {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t m = 3, n = 5, k = 4, batch = 3;
      RowMajorGemm r;
      r.m = m;
      r.n = n;
      r.k = k;
      r.trans_a = ta;
      r.trans_b = tb;
      r.lda = (ta ? m : k) + 2;  // padded rows
      r.ldb = (tb ? k : n) + 1;
      r.ldc = n + 3;
      r.batch = batch;
      r.stride_a = (ta ? k : m) * r.lda + 5;
      r.stride_b = (tb ? n : k) * r.ldb + 2;
      r.stride_c = m * r.ldc + 1;
      std::vector<double> A(batch * r.stride_a), B(batch * r.stride_b);
      for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<double>((i * 7) % 11) - 5;
      for (size_t i = 0; i < B.size(); ++i) B[i] = static_cast<double>((i * 5) % 13) - 6;
      std::vector<double> C1(batch * r.stride_c, -99), C2(batch * r.stride_c, -99);
      row_major_gemm(r, A.data(), B.data(), C1.data());
      ColMajorGemm g = to_col_major(r);
      // cuBLASLt's own consistency rules: op(first) is [m, k], op(second) is [k, n], C is
      // [m, n], every ld >= its layout's rows.
      CHECK((g.trans_first ? g.first.cols : g.first.rows) == g.m);
      CHECK((g.trans_first ? g.first.rows : g.first.cols) == g.k);
      CHECK((g.trans_second ? g.second.cols : g.second.rows) == g.k);
      CHECK((g.trans_second ? g.second.rows : g.second.cols) == g.n);
      CHECK(g.c.rows == g.m);
      CHECK(g.c.cols == g.n);
      CHECK(g.first.ld >= g.first.rows);
      CHECK(g.second.ld >= g.second.rows);
      CHECK(g.c.ld >= g.c.rows);
      col_major_gemm(g, B.data(), A.data(), C2.data());  // first = B, second = A
      CHECK(C1 == C2);
    }
}

TEST_CASE("gemm_operand: which strided views are read in place") {
  // contiguous [3, 4]: row-major, ld 4
  CHECK(gemm_operand(3, 4, 4, 1) == GemmOperand{true, false, 4});
  // a column slice of a [3, 10] matrix: row-major with ld 10
  CHECK(gemm_operand(3, 4, 10, 1) == GemmOperand{true, false, 10});
  // the transpose of a contiguous [4, 3]: strides (1, 3): stored transposed, ld 3
  CHECK(gemm_operand(3, 4, 1, 3) == GemmOperand{true, true, 3});
  // ... of a padded [4, 8] buffer's first 3 columns
  CHECK(gemm_operand(3, 4, 1, 8) == GemmOperand{true, true, 8});
  // rows repeated by expand (row stride 0) overlap: copy
  CHECK(!gemm_operand(3, 4, 0, 1).in_place);
  // every other column: copy
  CHECK(!gemm_operand(3, 4, 8, 2).in_place);
  // a single row with a non-unit stride is a column of the transposed storage
  CHECK(gemm_operand(1, 4, 0, 3) == GemmOperand{true, true, 3});
  // a single column [5, 1] with any column stride: row-major, ld = row stride
  CHECK(gemm_operand(5, 1, 2, 9) == GemmOperand{true, false, 2});
  // a single element: row-major, ld 1 regardless of strides
  CHECK(gemm_operand(1, 1, 0, 0) == GemmOperand{true, false, 1});
  // a row whose row stride is meaningless: ld becomes the row length
  CHECK(gemm_operand(1, 4, 0, 1) == GemmOperand{true, false, 4});
}

TEST_CASE("alignment_class: the largest power of two dividing, capped at 256") {
  CHECK(alignment_class(0) == 256);
  CHECK(alignment_class(1) == 1);
  CHECK(alignment_class(6) == 2);
  CHECK(alignment_class(48) == 16);
  CHECK(alignment_class(512) == 256);
  CHECK(alignment_class(0x7f0000001180ull) == 128);
  // a batch stride of 3 floats (12 bytes) leaves every other matrix 4-byte aligned
  CHECK(operand_alignment(0x1000, 2, 3, 4) == 4);
  CHECK(operand_alignment(0x1000, 1, 3, 4) == 256);  // one matrix: the stride never applies
}

TEST_CASE("types and compute type") {
  CHECK(gemm_types_supported(GemmDtype::BFloat16, GemmDtype::Float32));
  CHECK(gemm_types_supported(GemmDtype::Float16, GemmDtype::Float16));
  CHECK(!gemm_types_supported(GemmDtype::Float32, GemmDtype::BFloat16));
  CHECK(!gemm_types_supported(GemmDtype::Float64, GemmDtype::Float32));
  CHECK(gemm_compute_for(GemmDtype::Float32, false) == GemmCompute::Float32);
  CHECK(gemm_compute_for(GemmDtype::Float32, true) == GemmCompute::Float32FastTF32);
  CHECK(gemm_compute_for(GemmDtype::BFloat16, true) == GemmCompute::Float32);  // TF32 is for fp32 inputs only
  CHECK(gemm_compute_for(GemmDtype::Float64, true) == GemmCompute::Float64);
  CHECK(gemm_dtype_size(GemmDtype::BFloat16) == 2);
  CHECK(gemm_dtype_size(GemmDtype::Float64) == 8);
}

TEST_CASE("make_gemm_key: same problem and alignment share a key, anything else does not") {
  RowMajorGemm r{.m = 64, .n = 32, .k = 16, .lda = 16, .ldb = 32, .ldc = 32};
  auto key = [&](uint64_t a, uint64_t b, uint64_t c, const RowMajorGemm& p, GemmDtype ab = GemmDtype::BFloat16) {
    return make_gemm_key(0, ab, GemmDtype::Float32, GemmCompute::Float32, p, a, b, c);
  };
  GemmKey k0 = key(0x10000, 0x20000, 0x30000, r);
  GemmKey k1 = key(0x40000, 0x50000, 0x60000, r);  // other buffers, same alignment
  CHECK(k0 == k1);
  CHECK(GemmKeyHash{}(k0) == GemmKeyHash{}(k1));
  // B (cuBLASLt's first matrix) only 2-byte aligned
  GemmKey k2 = key(0x10000, 0x20002, 0x30000, r);
  CHECK(!(k0 == k2));
  CHECK(k2.align_first == 2);
  CHECK(k2.align_second == 256);
  CHECK(!(k0 == key(0x10000, 0x20000, 0x30000, r, GemmDtype::Float16)));
  RowMajorGemm r2 = r;
  r2.trans_a = true;
  r2.lda = 64;
  CHECK(!(k0 == key(0x10000, 0x20000, 0x30000, r2)));
  RowMajorGemm r3 = r;
  r3.ldc = 40;
  CHECK(!(k0 == key(0x10000, 0x20000, 0x30000, r3)));
  RowMajorGemm r4 = r;
  r4.batch = 2;
  r4.stride_a = 64 * 16;
  r4.stride_b = 16 * 32;
  r4.stride_c = 64 * 32;
  CHECK(!(k0 == key(0x10000, 0x20000, 0x30000, r4)));
  CHECK(!(k0 == make_gemm_key(1, GemmDtype::BFloat16, GemmDtype::Float32, GemmCompute::Float32, r, 0x10000, 0x20000, 0x30000)));
}
