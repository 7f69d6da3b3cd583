#pragma once
// matmul and friends through Eigen's GEMM kernel, or, for float and double where the build
// found an optimized BLAS (OpenBLAS or BLIS: REEL_WITH_BLAS, set by CMake), through the
// BLAS's sgemm / dgemm. Row-major operands and transposed ones (.mT() views) are used in
// place, others are copied to row-major first; reduced floats are multiplied in float and
// rounded once, as PyTorch does on the CPU.
#include "../core/config.hpp"
#include <climits>
#include <cstring>

#include "../core/op_report.hpp"
#include "cat.hpp"
#include "histc.hpp"
#include "reductions.hpp"
#include "sorting.hpp"

#ifdef REEL_WITH_BLAS
// The CBLAS entry points, declared under reel's own names (asm labels bind them to the
// library's symbols), so a user's <cblas.h>, whose enum-typed prototypes differ, never clashes.
namespace reel::inline REEL_ABI::detail::blas {
void sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
           float beta, float* c, int ldc) __asm__("cblas_sgemm");
void dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
           int ldb, double beta, double* c, int ldc) __asm__("cblas_dgemm");
inline constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;  // CBLAS_ORDER / CBLAS_TRANSPOSE

// Whether an OpenBLAS core name is one of the pre-AVX x86 kernel sets OpenBLAS falls back to
// on a CPU newer than itself, on a CPU that has AVX2 (Debian's OpenBLAS 0.3.21 runs its
// Prescott kernels on a 2023 Xeon: float GEMM 1024^3 40-57 ms where Eigen's AVX-512 kernel
// takes 9-11 ms, and OPENBLAS_CORETYPE=SkylakeX 10 ms).
inline bool fallback_core(const char* name, bool cpu_has_avx2) {
  if (!name || !cpu_has_avx2) return false;
  for (const char* old : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai", "Coppermine",
                          "Northwood", "Banias", "Opteron", "Athlon", "Barcelona"})
    if (std::strcmp(name, old) == 0) return true;
  return false;
}
}  // namespace reel::detail::blas
// OpenBLAS's own queries (weak: absent from other BLAS libraries); openblas_get_parallel:
// 0 sequential, 1 pthreads, 2 OpenMP.
extern "C" char* openblas_get_corename(void) __attribute__((weak));
extern "C" int openblas_get_parallel(void) __attribute__((weak));
#endif

namespace reel::inline REEL_ABI {

namespace detail {
// How a GEMM reads t's last two dims in place: row-major (trans false) or a transposed
// row-major matrix (trans true, e.g. a .mT() view), with leading dimension ld. False: neither
// (the operand is copied first).
template <class T, class D>
bool gemm_layout(const Tensor<T, D>& t, bool& trans, int64_t& ld) {
  const int64_t r = t.size(-2), c = t.size(-1), s0 = t.stride(-2), s1 = t.stride(-1);
  trans = !((s1 == 1 || c <= 1) && (s0 >= c || r <= 1));
  if (!trans) {
    ld = std::max<int64_t>({s0, c, 1});
    return true;
  }
  ld = std::max<int64_t>({s1, r, 1});
  return (s0 == 1 || r <= 1) && (s1 >= r || c <= 1);
}

#ifdef REEL_WITH_BLAS
// Whether the BLAS's GEMM is the faster one here: not when OpenBLAS runs fallback kernels
// (blas::fallback_core) and Eigen's kernel in this build has AVX2 or better: Eigen is then
// 3-5x faster. (Setting OPENBLAS_CORETYPE to the
// CPU's family, SkylakeX or Haswell, before the program starts makes OpenBLAS fast again.)
inline bool blas_preferred() {
#if defined(EIGEN_VECTORIZE_AVX2) && (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  static const bool ok =
      !blas::fallback_core(openblas_get_corename ? openblas_get_corename() : nullptr, __builtin_cpu_supports("avx2"));
  return ok;
#else
  return true;
#endif
}
// Whether the BLAS may be called from inside one of reel's parallel regions, each thread on
// its own block: OpenBLAS built on OpenMP (Debian's libopenblas0-openmp), which runs a call
// made inside an OpenMP region on the calling thread. Not OpenBLAS on pthreads or BLIS, whose
// own threads would nest in reel's, nor a sequential OpenBLAS, safe to call from several
// threads at once only when built with USE_LOCKING, which it cannot be asked. (Both must use
// the same OpenMP runtime, as any two OpenMP libraries in one program must.)
inline bool blas_in_regions() {
  static const bool ok = openblas_get_parallel && openblas_get_parallel() == 2;
  return ok;
}
// Whether blas_gemm takes this product: float or double, sizes within int, a BLAS with fast
// kernels, and outside reel's parallel regions unless blas_in_regions().
template <class T>
bool blas_takes(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (std::max({m, n, k, lda, ldb, ldc}) > INT_MAX || !blas_preferred()) return false;
#ifdef _OPENMP
    if (omp_in_parallel() && !blas_in_regions()) return false;
#endif
    return true;
  } else {
    return false;
  }
}
// C = op(A) op(B), or C += op(A) op(B), by the BLAS's sgemm / dgemm (where blas_takes).
template <class T>
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* A, int64_t lda, const T* B, int64_t ldb,
               T* C, int64_t ldc, bool accumulate) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    auto call = [&](auto f) {
      f(blas::kRowMajor, ta ? blas::kTrans : blas::kNoTrans, tb ? blas::kTrans : blas::kNoTrans, int(m), int(n), int(k),
        T(1), A, int(lda), B, int(ldb), T(accumulate ? 1 : 0), C, int(ldc));
    };
    if constexpr (std::is_same_v<T, float>)
      call(&blas::sgemm);
    else
      call(&blas::dgemm);
  }
}
// Products up to this many multiply-adds are split between reel's threads, one BLAS call on
// each block, where blas_in_regions(); larger ones are threaded by the BLAS itself (as all
// are with another BLAS). OpenBLAS splits a small product such as an MLP layer's
// [1024, 64] x [64, 64] poorly: 67-110 us on two threads where two halves of one thread
// each take 60-68 us together (AMD EPYC VM).
inline constexpr int64_t kBlasSplitMax = int64_t(1) << 24;
#endif

template <class T, class D>
void check_matmul_types() {
  static_assert(!std::is_same_v<T, bool>, "reel::matmul: not implemented for bool tensors");
  static_assert(!is_fp8_v<T>, "reel::matmul: float8 tensors multiply through nn::functional::scaled_mm");
}

// Scratch memory for n T's from the caching allocator (not counted as tensor memory), or none
// (data null) up to stack_limit bytes, which Eigen's stack allocation takes.
template <class T>
struct ScratchBuffer {
  T* data = nullptr;
  std::size_t bytes;
  explicit ScratchBuffer(std::size_t n, std::size_t stack_limit = EIGEN_STACK_ALLOCATION_LIMIT) : bytes(n * sizeof(T)) {
    if (bytes > stack_limit) data = static_cast<T*>(CachingHostAllocator::instance().allocate(bytes, false));
  }
  ~ScratchBuffer() {
    if (data) CachingHostAllocator::instance().deallocate(data, bytes, false);
  }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
};

// C[m, n] (+)= op(A) op(B) for one thread's block of C, by Eigen's packing routines and
// micro kernel in the loop order of Eigen's own driver (general_matrix_matrix_product), which
// sees C column-major: C^T = op(B)^T op(A)^T. That driver only adds into C, so C had to be
// zeroed first, a pass of its own over all of C (4% of a large double product: the zeros
// went to memory and were read back); here each strip of C is zeroed right before the
// kernel first adds into it, while the strip is in cache. A strip starts at a multiple of
// the kernel's panel height mr, where the packed panels of op(B)^T are all mr rows high.
template <class T, bool TA, bool TB>
void gemm_block(int64_t m, int64_t n, int64_t k, const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc,
                bool accumulate) {
  using namespace Eigen::internal;
  namespace internal = Eigen::internal;  // (named so by Eigen's stack-allocation macro)
  using Index = Eigen::Index;
  using Traits = gebp_traits<T, T>;
  constexpr int LO = TB ? Eigen::RowMajor : Eigen::ColMajor, RO = TA ? Eigen::RowMajor : Eigen::ColMajor;
  using LhsMap = const_blas_data_mapper<T, Index, LO>;  // op(B)^T, [n, k]
  using RhsMap = const_blas_data_mapper<T, Index, RO>;  // op(A)^T, [k, m]
  using ResMap = blas_data_mapper<T, Index, Eigen::ColMajor, Eigen::Unaligned, 1>;
  const LhsMap lhs(B, ldb);
  const RhsMap rhs(A, lda);
  const ResMap res(C, ldc);
  gemm_blocking_space<Eigen::ColMajor, T, T, Eigen::Dynamic, Eigen::Dynamic, Eigen::Dynamic> blocking(n, m, k, 1, true);
  const Index kc = blocking.kc(), mc = std::min<Index>(n, blocking.mc()), nc = std::min<Index>(m, blocking.nc());
  // The packed operands: on the stack up to Eigen's limit of 128 KB, as Eigen's driver does;
  // larger ones from reel's caching allocator (a fresh 32 MB block each call, as Eigen's
  // driver takes, costs its page faults every time: 4% of a 4096x512x8192 double product)
  const std::size_t lhs_size = std::size_t(kc * mc), rhs_size = std::size_t(kc * nc);
  ScratchBuffer<T> lhs_buffer(lhs_size), rhs_buffer(rhs_size);
  ei_declare_aligned_stack_constructed_variable(T, packed_lhs, lhs_size, lhs_buffer.data);
  ei_declare_aligned_stack_constructed_variable(T, packed_rhs, rhs_size, rhs_buffer.data);
  gemm_pack_lhs<T, Index, LhsMap, Traits::mr, Traits::LhsProgress, typename Traits::LhsPacket4Packing, LO> pack_lhs;
  gemm_pack_rhs<T, Index, RhsMap, Traits::nr, RO> pack_rhs;
  gebp_kernel<T, T, Index, ResMap, Traits::mr, Traits::nr, false, false> kernel;
  constexpr Index strip = Traits::mr * std::max<Index>(1, 96 / Traits::mr);  // rows of C^T
  const bool rhs_packed_once = mc != n && kc == k && nc == m;
  for (Index i2 = 0; i2 < n; i2 += mc) {
    const Index rows = std::min(i2 + mc, Index(n)) - i2;
    for (Index k2 = 0; k2 < k; k2 += kc) {
      const Index depth = std::min(k2 + kc, Index(k)) - k2;
      pack_lhs(packed_lhs, lhs.getSubMapper(i2, k2), depth, rows);
      for (Index j2 = 0; j2 < m; j2 += nc) {
        const Index cols = std::min(j2 + nc, Index(m)) - j2;
        if (!rhs_packed_once || i2 == 0) pack_rhs(packed_rhs, rhs.getSubMapper(k2, j2), depth, cols);
        if (accumulate || k2 > 0) {
          kernel(res.getSubMapper(i2, j2), packed_lhs, packed_rhs, rows, depth, cols, T(1));
          continue;
        }
        for (Index i = 0; i < rows; i += strip) {
          const Index h = std::min(i + strip, rows) - i;
          for (Index j = j2; j < j2 + cols; ++j) std::fill_n(C + j * ldc + i2 + i, h, T(0));
          kernel(res.getSubMapper(i2 + i, j2), packed_lhs + i * depth, packed_rhs, h, depth, cols, T(1));
        }
      }
    }
  }
}

// C (+)= op(A) op(B) for small products and thin ones (a side of 4 or less: the first and
// last layers of an MLP, [1024, 2] x [2, 64] or [1024, 64] x [64, 1], and their input
// gradients), where GEMM kernels spend their time packing and zeroing (10-66 us for
// 16K-131K multiply-adds) and a loop of rank-1 updates multiplied a row of one element at
// a time.
// Rows of C of 8 or more: each is a sum of rows of op(B) (copied to rows first if B is
// stored transposed). Shorter rows: each element is a dot product of a row of op(A) with a
// column of op(B) (copied to a row first), or, A stored transposed, the columns of C are
// sums of rows of A, 256 rows of C at a time.
template <class T, bool TA, bool TB>
void gemm_thin(int64_t m, int64_t n, int64_t k, const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc,
               bool accumulate) {
  const bool wide = n >= 8;
  // op(B) as wide rows need it (Bp[p * ldp + j]) or as short rows need it (Bp[j * ldp + p])
  const bool in_place = wide ? !TB : TB;
  // (the copy on the stack up to Eigen's limit of 128 KB, as gemm_block's packed operands)
  namespace internal = Eigen::internal;  // (named so by Eigen's stack-allocation macro)
  const std::size_t packed_size = in_place ? 0 : std::size_t(n * k);
  ScratchBuffer<T> packed_buffer(packed_size);
  ei_declare_aligned_stack_constructed_variable(T, packed, packed_size, packed_buffer.data);
  const T* Bp = in_place ? B : packed;
  const int64_t ldp = in_place ? ldb : wide ? n : k;
  if (!in_place)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) packed[wide ? p * n + j : j * k + p] = TB ? B[j * ldb + p] : B[p * ldb + j];
  // the block [i0, i1) x [j0, j1) of C (wide rows), or the rows [i0, i1)
  auto block = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    if (wide) {
      for (int64_t i = i0; i < i1; ++i) {
        T* __restrict c = C + i * ldc;
        if (!accumulate) std::fill(c + j0, c + j1, T(0));
        for (int64_t p = 0; p < k; ++p) {
          const T s = TA ? A[p * lda + i] : A[i * lda + p];
          const T* __restrict b = Bp + p * ldp;
          for (int64_t j = j0; j < j1; ++j) c[j] += s * b[j];
        }
      }
    } else if constexpr (TA) {
      constexpr int64_t kRows = 256;
      T acc[8][kRows];
      for (int64_t r0 = i0; r0 < i1; r0 += kRows) {
        const int64_t h = std::min(kRows, i1 - r0);
        for (int64_t j = 0; j < n; ++j) std::fill_n(acc[j], h, T(0));
        for (int64_t p = 0; p < k; ++p) {
          const T* __restrict a = A + p * lda + r0;
          for (int64_t j = 0; j < n; ++j) {
            const T s = Bp[j * ldp + p];
            T* __restrict cj = acc[j];
            for (int64_t i = 0; i < h; ++i) cj[i] += s * a[i];
          }
        }
        for (int64_t i = 0; i < h; ++i)
          for (int64_t j = 0; j < n; ++j) C[(r0 + i) * ldc + j] = (accumulate ? C[(r0 + i) * ldc + j] : T(0)) + acc[j][i];
      }
    } else {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const T* __restrict a = A + i * lda;
          const T* __restrict b = Bp + j * ldp;
          T s(0);
          if constexpr (std::is_arithmetic_v<T>) {
#ifdef _OPENMP
#pragma omp simd reduction(+ : s)
#endif
            for (int64_t p = 0; p < k; ++p) s += a[p] * b[p];
          } else {
            for (int64_t p = 0; p < k; ++p) s += a[p] * b[p];
          }
          C[i * ldc + j] = (accumulate ? C[i * ldc + j] : T(0)) + s;
        }
    }
  };
  // threads take rows, or, few rows of many columns (a [2, 64] weight gradient), columns
  const int64_t row_grain = std::max<int64_t>(8, (int64_t(1) << 15) / std::max<int64_t>(n * k, 1));
  if (wide && m < 2 * row_grain)
    parallel_range(n, [&](int64_t j0, int64_t j1) { block(0, m, j0, j1); },
                   std::max<int64_t>(8, (int64_t(1) << 15) / std::max<int64_t>(m * k, 1)));
  else
    parallel_range(m, [&](int64_t i0, int64_t i1) { block(i0, i1, 0, n); }, row_grain);
}

// C[m, n] (+)= op(A) op(B), C row-major; op(A) = A[m, k] row-major, or A stored as [k, m]
// row-major when TA (a transposed operand is read in place, never copied); likewise B.
// Small and thin products use gemm_thin. Large float / double ones go to the BLAS where the
// build has one (REEL_WITH_BLAS), which threads them; the others, and those up to
// kBlasSplitMax multiply-adds where the BLAS may run inside reel's threads, are split
// between reel's threads, each block of C by the BLAS or else by Eigen's GEMM kernel called
// directly (gemm_block: the dispatch in front of it, lazy and matrix-vector products, costs
// a second per translation unit to compile and is not needed here).
template <class T, bool TA = false, bool TB = false>
void gemm_ex(int64_t m, int64_t n, int64_t k, const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc,
             bool accumulate) {
  // (a deep thin product, a [2, 64] weight gradient over 1024 points, streams its operands
  // faster through the BLAS, split by depth: 13-15 us in a training step, 26-30 by gemm_thin)
  const bool thin =
      m * n * k <= 32 * 32 * 32 || (std::min({m, n, k}) <= 4 && k <= 256 && m * n * k <= (int64_t(1) << 21));
#ifdef REEL_WITH_BLAS
  const bool blas = !thin && blas_takes<T>(m, n, k, lda, ldb, ldc);
  if (blas && !(m * n * k <= kBlasSplitMax && blas_in_regions())) {
    blas_gemm(TA, TB, m, n, k, A, lda, B, ldb, C, ldc, accumulate);
    return;
  }
#else
  constexpr bool blas = false;
#endif
  if (m == 0 || n == 0) return;
  if (thin) return gemm_thin<T, TA, TB>(m, n, k, A, lda, B, ldb, C, ldc, accumulate);
  // the block [r0, r1) x [c0, c1) of C, over the depth [p0, p1), into Cb (leading dim ldcb)
  auto block = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t p0, int64_t p1, T* Cb, int64_t ldcb,
                   bool acc) {
    const T* Ab = A + (TA ? p0 * lda + r0 : r0 * lda + p0);
    const T* Bb = B + (TB ? c0 * ldb + p0 : p0 * ldb + c0);
#ifdef REEL_WITH_BLAS
    if (blas) return blas_gemm(TA, TB, r1 - r0, c1 - c0, p1 - p0, Ab, lda, Bb, ldb, Cb, ldcb, acc);
#endif
    gemm_block<T, TA, TB>(r1 - r0, c1 - c0, p1 - p0, Ab, lda, Bb, ldb, Cb, ldcb, acc);
  };
  // Threads take rows of C, enough each to keep Eigen's kernel's panels full (256 of a
  // 64-wide product); a C of few rows and many columns is split by columns instead. With
  // the BLAS, every thread takes a block (16 rows or columns fill its kernel's panels): a
  // product the BLAS threads itself right after ones it ran inside reel's threads pays
  // 80 us or more for the switch. A product deep for its C (a weight gradient G^T X:
  // [64, 64] over 1024 points) is split by depth: each thread takes a share of the 1024
  // points into its own partial C, the partials are added at the end, and each thread reads
  // half the operands instead of all of one (60 us where splitting by rows takes 66).
  const int64_t row_grain = blas ? 16 : std::max<int64_t>(64, (int64_t(1) << 20) / std::max<int64_t>(n * k, 1));
  const int64_t col_grain = blas ? 16 : std::max<int64_t>(16, (int64_t(1) << 20) / std::max<int64_t>(m * k, 1));
  const bool by_columns = blas ? n > m : m < 2 * row_grain && n >= 2 * col_grain;
  const int64_t depth_grain = std::max<int64_t>(256, 2 * std::max(m, n));
  const int64_t parts = blas ? std::min<int64_t>(num_threads_for(m * n * k), k / depth_grain) : 1;
  if (parts > 1) {
    ScratchBuffer<T> partial(std::size_t((parts - 1) * m * n), 0);
    parallel_range(parts, [&](int64_t s, int64_t e) {
      for (int64_t t = s; t < e; ++t)
        block(0, m, 0, n, k * t / parts, k * (t + 1) / parts, t ? partial.data + (t - 1) * m * n : C, t ? n : ldc,
              t ? false : accumulate);
    }, 1);
    for (int64_t t = 1; t < parts; ++t)
      for (int64_t i = 0; i < m; ++i) {
        const T* pt = partial.data + ((t - 1) * m + i) * n;
        for (int64_t j = 0; j < n; ++j) C[i * ldc + j] += pt[j];
      }
  } else if (by_columns) {
    parallel_range(n, [&](int64_t c0, int64_t c1) { block(0, m, c0, c1, 0, k, C + c0, ldc, accumulate); }, col_grain);
  } else {
    parallel_range(m, [&](int64_t r0, int64_t r1) { block(r0, r1, 0, n, 0, k, C + r0 * ldc, ldc, accumulate); },
                   row_grain);
  }
}
template <class T>
void gemm(int64_t m, int64_t n, int64_t k, const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc) {
  gemm_ex<T>(m, n, k, A, lda, B, ldb, C, ldc, false);
}

// out[b] = a[b] @ c[b] for 3-d operands whose batch dims already agree.
template <class T, class D>
Tensor<T, D> bmm_impl(const Tensor<T, D>& a0, const Tensor<T, D>& b0) {
  const int64_t B = a0.size(0), n = a0.size(1), m = b0.size(2);
  auto out = empty<T, D>({B, n, m});
  if constexpr (device_memory_v<D>) {
    Backend<D>::bmm(a0, b0, out);  // (CUDA: cuBLASLt; fp16 / bf16 accumulate in fp32)
  } else if constexpr (Backend<D>::has_data) {
    if (out.numel() == 0) return out;
    auto kernel = [](const Tensor<T, D>& a0, const Tensor<T, D>& b0, const Tensor<T, D>& out) {
      const int64_t B = a0.size(0), n = a0.size(1), k = a0.size(2), m = b0.size(2);
      using C = compute_t<T>;  // reduced floats multiply in float
      // Row-major and transposed operands (a backward's .mT() views) are read in place, by
      // the BLAS or by Eigen's kernel; others are copied to row-major first (and one of two
      // transposed operands, which saves a fourth instantiation of the kernel).
      auto a = a0.template to<C>(), b = b0.template to<C>();
      bool ta, tb;
      int64_t lda, ldb;
      if (!gemm_layout(a, ta, lda)) a = a.contiguous(), ta = false, lda = std::max<int64_t>(k, 1);
      if (!gemm_layout(b, tb, ldb) || (ta && tb)) b = b.contiguous(), tb = false, ldb = std::max<int64_t>(m, 1);
      auto o = std::is_same_v<C, T> ? Tensor<C, D>(out.impl_ptr()) : empty<C, D>({B, n, m});
      auto run = [&](int64_t i) {
        const C* pa = a.data_ptr() + i * a.stride(0);
        const C* pb = b.data_ptr() + i * b.stride(0);
        C* po = o.mutable_data_ptr() + i * n * m;
        if (ta)
          gemm_ex<C, true, false>(n, m, k, pa, lda, pb, ldb, po, m, false);
        else if (tb)
          gemm_ex<C, false, true>(n, m, k, pa, lda, pb, ldb, po, m, false);
        else
          gemm_ex<C>(n, m, k, pa, lda, pb, ldb, po, m, false);
      };
      // Many small products: one per thread; few large ones: threads inside each.
      if (B > 1 && n * m * k < (int64_t(1) << 18))
        parallel_range(B, [&](int64_t s, int64_t e) { for (int64_t i = s; i < e; ++i) run(i); }, 1);
      else
        for (int64_t i = 0; i < B; ++i) run(i);
      if constexpr (!std::is_same_v<C, T>) assign_expr(out, o);
    };
    if (CaptureTrace* t = capturing())
      t->record({out.impl().storage.get()}, {a0.impl().storage.get(), b0.impl().storage.get()},
                [=] { kernel(a0, b0, out); });
    else
      kernel(a0, b0, out);
  }
  return out;
}
// bmm with autograd: d(A B) = dA B + A dB; the adjoints are G B^H and A^H G.
template <class T, class D>
Tensor<T, D> bmm_rec(const Tensor<T, D>& a, const Tensor<T, D>& b) {
  // (reported to checkpoint policies as "matmul")
  if (!a.impl().autograd && !b.impl().autograd)
    return report_op<Tensor<T, D>>(OpCall("matmul", {}), [&] { return bmm_impl(a, b); });
  auto adj = [](const Tensor<T, D>& m) {
    if constexpr (is_complex_v<T>)
      return Tensor<T, D>(conj(m.mT()));
    else
      return m.mT();
  };
  auto product = report_op<Tensor<T, D>>(OpCall("matmul", {}), [&] { return bmm_impl(a.detach(), b.detach()); });
  return record_fn(
      std::move(product), "BmmBackward", {a, b}, {a, b},
      [a, b, adj](const Tensor<T, D>& g) {
        return std::vector<Tensor<T, D>>{a.requires_grad() ? bmm_rec(g, adj(b)) : Tensor<T, D>(),
                                         b.requires_grad() ? bmm_rec(adj(a), g) : Tensor<T, D>()};
      },
      [a, b](const std::vector<Tensor<T, D>>& t) {
        if (!t[0].defined()) return bmm_rec(a, t[1]);
        if (!t[1].defined()) return bmm_rec(t[0], b);
        return Tensor<T, D>(bmm_rec(t[0], b) + bmm_rec(a, t[1]));
      });
}
}  // namespace detail

template <class T, class D>
Tensor<T, D> mm(const Tensor<T, D>& a, const Tensor<T, D>& b) {
  detail::check_matmul_types<T, D>();
  REEL_CHECK(a.dim() == 2 && b.dim() == 2, value_error, "mm: expected 2-D tensors, got shapes ", a.sizes(), " and ", b.sizes());
  REEL_CHECK(a.size(1) == b.size(0), value_error, "mm: shapes ", a.sizes(), " and ", b.sizes(),
             " cannot be multiplied (", a.size(0), "x", a.size(1), " and ", b.size(0), "x", b.size(1), ")");
  return detail::bmm_rec(a.unsqueeze(0), b.unsqueeze(0)).squeeze(0);
}
template <class T, class D>
Tensor<T, D> bmm(const Tensor<T, D>& a, const Tensor<T, D>& b) {
  detail::check_matmul_types<T, D>();
  REEL_CHECK(a.dim() == 3 && b.dim() == 3, value_error, "bmm: expected 3-D tensors, got shapes ", a.sizes(), " and ", b.sizes());
  REEL_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), value_error, "bmm: shapes ", a.sizes(), " and ", b.sizes(),
             " cannot be multiplied");
  return detail::bmm_rec(a, b);
}
template <class T, class D>
Tensor<T, D> dot(const Tensor<T, D>& a, const Tensor<T, D>& b) {
  REEL_CHECK(a.dim() == 1 && b.dim() == 1, value_error, "dot: expected 1-D tensors, got shapes ", a.sizes(), " and ", b.sizes());
  REEL_CHECK(a.size(0) == b.size(0), value_error, "dot: inconsistent tensor sizes ", a.sizes(), " and ", b.sizes());
  return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
}
template <class T, class D>
Tensor<T, D> outer(const Tensor<T, D>& a, const Tensor<T, D>& b) {
  REEL_CHECK(a.dim() == 1 && b.dim() == 1, value_error, "outer: expected 1-D tensors, got shapes ", a.sizes(), " and ", b.sizes());
  return Tensor<T, D>(a.unsqueeze(1) * b.unsqueeze(0));
}
template <class T, class D>
Tensor<T, D> mv(const Tensor<T, D>& a, const Tensor<T, D>& v) {
  REEL_CHECK(a.dim() == 2 && v.dim() == 1, value_error, "mv: expected a 2-D and a 1-D tensor, got shapes ", a.sizes(), " and ", v.sizes());
  return mm(a, v.unsqueeze(1)).squeeze(1);
}

template <class T, class D> Tensor<T, D> matmul(const Tensor<T, D>& a, const Tensor<T, D>& b);
// Expressions (evaluated first) and operands of different types.
template <TensorLike A, TensorLike B>
  requires(!same_tensors_v<A, B>)
auto matmul(const A& a, const B& b) {
  static_assert(std::is_same_v<detail::value_t<A>, detail::value_t<B>>,
                "reel::matmul: the operands have different element types: convert one (.to<T>() on a tensor, "
                "cast<T>(e) on an expression)");
  static_assert(std::is_same_v<detail::device_t<A>, detail::device_t<B>>,
                "reel::matmul: the operands are on different devices: move one with .to_device<D>()");
  return matmul(detail::materialize(a), detail::materialize(b));
}

// torch.matmul: 1-d operands are promoted to matrices and the added dim removed after;
// batch dims broadcast.
template <class T, class D>
Tensor<T, D> matmul(const Tensor<T, D>& a, const Tensor<T, D>& b) {
  detail::check_matmul_types<T, D>();
  REEL_CHECK(a.dim() >= 1 && b.dim() >= 1, value_error, "matmul: both arguments need at least 1 dimension, got shapes ",
             a.sizes(), " and ", b.sizes());
  if (a.dim() == 1 && b.dim() == 1) return dot(a, b);
  if (a.dim() == 2 && b.dim() == 2) return mm(a, b);
  if (a.dim() == 2 && b.dim() == 1) return mv(a, b);
  auto A = a.dim() == 1 ? a.unsqueeze(0) : a;
  auto B = b.dim() == 1 ? b.unsqueeze(1) : b;
  int64_t n = A.size(-2), k = A.size(-1), k2 = B.size(-2), m = B.size(-1);
  REEL_CHECK(k == k2, value_error, "matmul: shapes ", a.sizes(), " and ", b.sizes(), " cannot be multiplied (", n, "x", k,
             " and ", k2, "x", m, ")");
  Shape ba(A.sizes().begin(), A.sizes().end() - 2), bb(B.sizes().begin(), B.sizes().end() - 2);
  Shape batch = detail::broadcast_shapes(ba, bb);
  int64_t nb = detail::numel_of(batch);
  Shape ea = batch, eb = batch;
  ea.push_back(n);
  ea.push_back(k);
  eb.push_back(k);
  eb.push_back(m);
  auto A3 = A.expand(ea).reshape({nb, n, k});
  auto B3 = B.expand(eb).reshape({nb, k, m});
  auto out = detail::bmm_rec(A3, B3);
  Shape os = batch;
  if (a.dim() > 1) os.push_back(n);
  if (b.dim() > 1) os.push_back(m);
  return out.reshape(os);
}

}  // namespace reel
