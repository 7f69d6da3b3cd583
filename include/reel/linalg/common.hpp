#pragma once
// What the linalg op families share: result types, type and shape checks, the batch loop,
// Eigen views of a batch's matrices.
#include "../core/config.hpp"
#include <Eigen/Core>

#include "../ops/products.hpp"

namespace reel::inline REEL_ABI {
namespace linalg {
template <class T, class D = CPU>
struct SlogdetResult {
  Tensor<T, D> sign;
  Tensor<real_t<T>, D> logabsdet;
};
template <class T, class D = CPU>
struct EighResult {
  Tensor<real_t<T>, D> eigenvalues;
  Tensor<T, D> eigenvectors;
};
}  // namespace linalg

namespace detail::la {

template <class T> using CMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T> using RowMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

template <class T, class D>
constexpr void check_types(const char*) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::complex<float>> ||
                    std::is_same_v<T, std::complex<double>>,
                "reel::linalg: supports float, double, complex<float> and complex<double> tensors");
  static_assert(!detail::device_memory_v<D>, "reel::linalg: not implemented for CUDA tensors yet");
}

inline void check_square(const Shape& s, const char* fn, const char* arg = "A") {
  auto d = s.size();
  REEL_CHECK(d >= 2, value_error, fn, ": ", arg, " must have at least 2 dimensions, got shape ", s);
  REEL_CHECK(s[d - 1] == s[d - 2], value_error, fn, ": ", arg, " must be batches of square matrices, but they are ",
             s[d - 2], " by ", s[d - 1], " matrices (shape ", s, ")");
}
inline Shape batch_of(const Shape& s, size_t tail = 2) { return Shape(s.begin(), s.end() - tail); }
inline Shape with_tail(Shape s, std::initializer_list<int64_t> tail) {
  for (auto t : tail) s.push_back(t);
  return s;
}

// Is anything recorded by an op over these tensors (a history for reverse mode, or a tangent
// of an active, unmasked level)?
template <class T, class D, class... Ts>
bool records(const Ts&... ts) {
  if constexpr (!autograd_type_v<T, D>) {
    return false;
  } else {
    const TensorImpl* ins[] = {(ts.defined() ? &ts.impl() : nullptr)...};
    return autograd_needed(ins, sizeof...(Ts));
  }
}

// An op's output as its backward rule sees it: the value alone for first order; for higher
// orders the value with its history (pointing back at the op's node) and tangents, rebuilt
// on demand so the node does not keep itself alive.
struct SavedOutput {
  GradPtr value;
  std::weak_ptr<Node> node;
  std::vector<Tangent> tangents;
  explicit SavedOutput(GradPtr v) : value(std::move(v)) {}
  void bind(const TensorImpl& recorded) {
    if (auto* m = meta_of(recorded)) {
      node = m->grad_fn;
      tangents = m->tangents;
    }
  }
  // null once the node is gone (nothing used this output): recompute instead
  GradPtr get() const {
    auto n = node.lock();
    if (!n) return nullptr;
    GradPtr p = plain_alias(*value);
    set_history(*p, n, 0);
    for (auto& t : tangents)
      if (level_live(t.level)) set_tangent(*p, t);
    return p;
  }
};

template <class T, class D>
Tensor<T, D> mH(const Tensor<T, D>& m) {
  if constexpr (is_complex_v<T>)
    return Tensor<T, D>(conj(m.mT()));
  else
    return m.mT();
}
// Differentiable helpers on [..., n, n] built from elementwise ops with constants.
template <class T, class D>
Tensor<T, D> eye_like(const Tensor<T, D>& m) {
  return eye<T, D>(m.size(-1));
}
template <class T, class D>
Tensor<T, D> trace(const Tensor<T, D>& m) {
  return sum(Tensor<T, D>(m * eye_like(m)), Shape{-2, -1});
}
template <class T, class D>
Tensor<T, D> diagonal(const Tensor<T, D>& m) {
  return sum(Tensor<T, D>(m * eye_like(m)), Shape{-1});
}
template <class T, class D>
Tensor<T, D> diag_embed(const Tensor<T, D>& v) {
  return Tensor<T, D>(v.unsqueeze(-1) * eye<T, D>(v.size(-1)));
}
// weights w(i, j) = below if i > j, on if i == j, above if i < j
template <class T, class D>
Tensor<T, D> tri_weights(int64_t n, double below, double on, double above) {
  auto w = empty<T, D>({n, n});
  T* p = w.mutable_data_ptr();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) p[i * n + j] = T(i > j ? below : i == j ? on : above);
  return w;
}
template <class T, class D>
Tensor<T, D> scale_rows(const Tensor<T, D>& m, const Tensor<T, D>& s) {  // s[b] * m[b]
  return Tensor<T, D>(m * s.unsqueeze(-1).unsqueeze(-1));
}

// A contiguous plain copy, [nb, r, c].
template <class T, class D>
Tensor<T, D> plain3(const Tensor<T, D>& m) {
  return m.detach().contiguous();
}

template <class T>
CMat<T> load(const T* p, int64_t r, int64_t c) {
  return RowMap<T>(const_cast<T*>(p), r, c);
}
template <class T, class M>
void store(T* p, const M& m) {
  RowMap<T>(p, m.rows(), m.cols()) = m;
}

template <class F>
void for_batch(int64_t nb, int64_t n, F&& f) {
  if (nb > 1 && n <= 128)
    parallel_range(nb, [&](int64_t s, int64_t e) { for (int64_t i = s; i < e; ++i) f(i); }, 1);
  else
    for (int64_t i = 0; i < nb; ++i) f(i);
}

// Throws for the first batch element flagged (flags filled in parallel).
template <class... M>
void raise_flagged(const std::vector<int64_t>& flags, const char* fn, const M&... msg) {
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i] >= 0) {
      std::ostringstream s;
      s << fn << ": ";
      if (flags.size() > 1) s << "(Batch element " << i << "): ";
      ((s << msg), ...);
      raise<error>(s.str());
    }
}

// Runs op3 on A [..., n, n] as [nb, n, n] and gives the result the batch shape back.
template <class T, class D, class F>
auto batched(const Tensor<T, D>& A, const char* fn, F&& op3) {
  check_types<T, D>(fn);
  check_square(A.sizes(), fn);
  int64_t n = A.size(-1);
  Shape batch = batch_of(A.sizes());
  int64_t nb = numel_of(batch);
  return std::pair{op3(A.reshape({nb, n, n})), batch};
}
template <class T, class D>
Tensor<T, D> unbatch(const Tensor<T, D>& r, const Shape& batch) {
  Shape s = batch;
  for (int64_t d = 1; d < r.dim(); ++d) s.push_back(r.size(d));
  return r.reshape(s);
}
template <class T, class D>
Tensor<real_t<T>, D> real_part(const Tensor<T, D>& t) {
  if constexpr (is_complex_v<T>)
    return Tensor<real_t<T>, D>(real(t));
  else
    return t;
}

}  // namespace detail::la
}  // namespace reel
