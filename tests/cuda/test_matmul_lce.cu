// matmul / mm / bmm through cuBLASLt and the fused linear_cross_entropy on CUDA, each against
// the CPU implementation on the same random values: every operand layout (contiguous,
// transposed view, padded rows, strided columns, unaligned start), broadcast batches, empty
// and large shapes, float / double / half / bfloat16; LCE over class-index and probability
// targets x none / mean / sum x bias x label smoothing x ignored rows, loss and gradients.
// (No main here: the CUDA test executable links tests/cuda/main.cpp.)
// Freshly allocated outputs are poisoned through the caching allocator (NaN-filled blocks
// freed just before), so a kernel that skips elements cannot pass on zeros.
#include "common.cuh"

using namespace rt;
namespace F = reel::nn::functional;

namespace {

// max |a - b| <= tol * max(max |b|, floor), NaN where b is NaN: a GEMM's rounding is relative
// to the magnitude of the whole product, not to each (possibly tiny) output element.
template <class T, class U>
void expect_close(const Tensor<T, CPU>& a, const Tensor<U, CPU>& b, double tol, double floor = 1e-3) {
  REQUIRE(a.sizes() == b.sizes());
  auto av = a.template to<double>().contiguous().to_vector();
  auto bv = b.template to<double>().contiguous().to_vector();
  double scale = 0, err = 0;
  int nan_mismatch = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    if (std::isnan(bv[i]) || std::isnan(av[i])) {
      nan_mismatch += std::isnan(bv[i]) != std::isnan(av[i]);
      continue;
    }
    scale = std::max(scale, std::abs(bv[i]));
    err = std::max(err, std::abs(av[i] - bv[i]));
  }
  CHECK(nan_mismatch == 0);
  CHECK(err <= tol * std::max(scale, floor));
}

// NaN-filled blocks of these sizes (in floats), freed again: the next allocations of those
// sizes come from them.
void poison_cache(std::initializer_list<int64_t> sizes) {
  std::vector<Tensor<float, CUDA>> blocks;
  for (int64_t n : sizes) blocks.push_back(full<float, CUDA>({std::max<int64_t>(n, 1)}, std::numeric_limits<float>::quiet_NaN()));
}

template <class T> double gemm_tol();
template <> double gemm_tol<float>() { return 2e-5; }
template <> double gemm_tol<double>() { return 1e-12; }
template <> double gemm_tol<reel::half>() { return 2e-3; }      // output rounded to 11 bits
template <> double gemm_tol<reel::bfloat16>() { return 1e-2; }  // output rounded to 8 bits

// How an operand [r, c] sits in device memory.
enum class Layout { Contiguous, Transposed, Padded, Strided, Unaligned };
constexpr Layout kLayouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Padded, Layout::Strided,
                               Layout::Unaligned};
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Transposed: return "transposed view";
    case Layout::Padded: return "padded rows";
    case Layout::Strided: return "every other column";
    case Layout::Unaligned: return "unaligned start";
  }
  return "";
}
template <class T>
Tensor<T, CUDA> place(const Tensor<T, CPU>& h, Layout l) {
  const int64_t r = h.size(0), c = h.size(1);
  switch (l) {
    case Layout::Contiguous: return dev(h);
    case Layout::Transposed: return dev(Tensor<T, CPU>(h.mT().contiguous())).mT();  // stored [c, r]
    case Layout::Padded: {
      auto big = host_randn<T>({r, c + 3});
      big.slice(1, 0, c).copy_(h);
      return dev(big).slice(1, 0, c);
    }
    case Layout::Strided: {
      auto big = host_randn<T>({r, 2 * c});
      big.slice(1, 0, 2 * c, 2).copy_(h);
      return dev(big).slice(1, 0, 2 * c, 2);
    }
    case Layout::Unaligned: {  // one element past a 256-byte boundary: alignment sizeof(T)
      auto flat = host_randn<T>({r * c + 1});
      flat.slice(0, 1, r * c + 1).copy_(h.reshape({r * c}));
      return dev(flat).slice(0, 1, r * c + 1).view({r, c});
    }
  }
  return {};
}

template <class T>
void mm_all_layouts() {
  const int64_t m = 37, k = 70, n = 29;
  auto a = host_randn<T>({m, k}), b = host_randn<T>({k, n});
  auto ref = mm(a.template to<double>(), b.template to<double>());
  for (Layout la : kLayouts)
    for (Layout lb : kLayouts) {
      INFO((std::string("a: ") + layout_name(la) + ", b: " + layout_name(lb)));
      auto da = place(a, la), db = place(b, lb);
      poison_cache({m * n});
      auto c = mm(da, db);
      CHECK(c.sizes() == Shape{m, n});
      expect_close(host(c), ref, gemm_tol<T>());
    }
}

}  // namespace

TEST_CASE("cuda matmul: mm matches the CPU for every operand layout and dtype") {
  REQUIRE_GPU();
  SUBCASE("float") { mm_all_layouts<float>(); }
  SUBCASE("double") { mm_all_layouts<double>(); }
  SUBCASE("half") { mm_all_layouts<reel::half>(); }
  SUBCASE("bfloat16") { mm_all_layouts<reel::bfloat16>(); }
}

TEST_CASE("cuda matmul: bmm and broadcasting matmul match the CPU") {
  REQUIRE_GPU();
  auto check = [](const Tensor<float, CPU>& a, const Tensor<float, CPU>& b, const Tensor<float, CUDA>& da,
                  const Tensor<float, CUDA>& db) {
    auto ref = matmul(a.to<double>(), b.to<double>());
    poison_cache({ref.numel()});
    auto c = matmul(da, db);
    CHECK(c.sizes() == ref.sizes());
    expect_close(host(c), ref, 2e-5);
  };
  SUBCASE("bmm, contiguous and with transposed / batch-permuted operands") {
    auto a = host_randn({5, 17, 33}), b = host_randn({5, 33, 21});
    auto ref = bmm(a.to<double>(), b.to<double>());
    expect_close(host(bmm(dev(a), dev(b))), ref, 2e-5);
    auto bt = dev(Tensor<float, CPU>(b.transpose(1, 2).contiguous())).transpose(1, 2);  // matrices stored transposed
    expect_close(host(bmm(dev(a), bt)), ref, 2e-5);
    auto ap = dev(Tensor<float, CPU>(a.permute({1, 0, 2}).contiguous())).permute({1, 0, 2});  // batch stride 33, rows 5*33
    expect_close(host(bmm(ap, bt)), ref, 2e-5);
  }
  SUBCASE("[B, n, k] @ [k, m]: the broadcast right operand folds into one product") {
    auto a = host_randn({4, 3, 19, 24}), b = host_randn({24, 11});
    check(a, b, dev(a), dev(b));
    check(a, b, dev(a), dev(Tensor<float, CPU>(b.mT().contiguous())).mT());  // transposed right operand
  }
  SUBCASE("[n, k] @ [B, k, m]: small broadcast left operand (copied out)") {
    auto a = host_randn({19, 24}), b = host_randn({6, 24, 11});
    check(a, b, dev(a), dev(b));
  }
  SUBCASE("[n, k] @ [B, k, m]: large broadcast left operand (matrix by matrix)") {
    auto a = host_randn({128, 160}), b = host_randn({3, 160, 136});  // 128 * 160 * 136 > 2^21
    check(a, b, dev(a), dev(b));
  }
  SUBCASE("batch dims broadcast against each other") {
    auto a = host_randn({2, 1, 7, 9}), b = host_randn({1, 3, 9, 5});
    check(a, b, dev(a), dev(b));
    auto c = host_randn({3, 1, 9, 5});
    check(a.reshape({2, 1, 1, 7, 9}), c, dev(a).reshape({2, 1, 1, 7, 9}), dev(c));
  }
  SUBCASE("vectors: dot, matrix-vector, vector-matrix, batched") {
    auto v = host_randn({24}), w = host_randn({24}), M = host_randn({13, 24}), B = host_randn({5, 24, 7});
    check(v, w, dev(v), dev(w));
    check(M, v, dev(M), dev(v));
    check(v, M.mT(), dev(v), dev(M).mT());
    check(v, B, dev(v), dev(B));
    check(B.mT(), v, dev(B).mT(), dev(v));
  }
}

TEST_CASE("cuda matmul: empty operands") {
  REQUIRE_GPU();
  SUBCASE("k = 0: a product of zeros (in a block that held NaNs)") {
    poison_cache({6 * 5});
    auto c = host(mm(dev(empty<float>({6, 0})), dev(empty<float>({0, 5}))));
    CHECK(c.sizes() == Shape{6, 5});
    for (float x : c.to_vector()) CHECK(x == 0.0f);
    poison_cache({3 * 4 * 2});
    auto h = host(bmm(dev(empty<reel::half>({3, 4, 0})), dev(empty<reel::half>({3, 0, 2}))));
    CHECK(h.sizes() == Shape{3, 4, 2});
    for (reel::half x : h.to_vector()) CHECK(static_cast<float>(x) == 0.0f);
  }
  SUBCASE("m = 0, n = 0, batch = 0") {
    CHECK(mm(dev(empty<float>({0, 7})), dev(host_randn({7, 5}))).sizes() == Shape{0, 5});
    CHECK(mm(dev(host_randn({4, 7})), dev(empty<float>({7, 0}))).sizes() == Shape{4, 0});
    CHECK(bmm(dev(empty<float>({0, 3, 7})), dev(empty<float>({0, 7, 2}))).sizes() == Shape{0, 3, 2});
    CHECK(matmul(dev(empty<reel::bfloat16>({2, 0, 3})), dev(empty<reel::bfloat16>({3, 4}))).sizes() == Shape{2, 0, 4});
  }
}

TEST_CASE("cuda matmul: large products, and TF32 only when allowed") {
  REQUIRE_GPU();
  auto a = host_randn({1000, 1536}), b = host_randn({1536, 777});
  auto ref = mm(a.to<double>(), b.to<double>());
  auto da = dev(a), db = dev(b);
  CHECK(!reel::gpu::allow_tf32());
  poison_cache({1000 * 777});
  expect_close(host(mm(da, db)), ref, 2e-5);  // fp32 products: TF32 rounding would miss this
  reel::gpu::set_allow_tf32(true);
  auto c32 = host(mm(da, db));
  reel::gpu::set_allow_tf32(false);
  expect_close(c32, ref, 5e-3);  // TF32: 10-bit mantissa inputs, fp32 accumulation
  SUBCASE("bfloat16 and half, through a transposed operand") {
    auto dbt = dev(Tensor<float, CPU>(b.mT().contiguous())).mT();
    auto refb = mm(a.to<reel::bfloat16>().to<double>(), b.to<reel::bfloat16>().to<double>());
    expect_close(host(mm(da.to<reel::bfloat16>(), dbt.to<reel::bfloat16>())), refb, 1e-2);
    auto refh = mm(a.to<reel::half>().to<double>(), b.to<reel::half>().to<double>());
    expect_close(host(mm(da.to<reel::half>(), dbt.to<reel::half>())), refh, 2e-3);
  }
}

TEST_CASE("cuda matmul: gradients through autograd match the CPU") {
  REQUIRE_GPU();
  if constexpr (!reel::detail::autograd_type_v<float, CUDA>) {
    MESSAGE("CUDA tensors do not record autograd in this build: skipped");
    return;
  }
  auto a = host_randn({3, 9, 12}), b = host_randn({12, 5}), g = host_randn({3, 9, 5});
  auto ha = a.clone().requires_grad_(), hb = b.clone().requires_grad_();
  matmul(ha, hb).backward(g);
  auto da = dev(a).requires_grad_(), db = dev(b).requires_grad_();
  matmul(da, db).backward(dev(g));
  expect_close(host(da.grad()), ha.grad(), 2e-5);
  expect_close(host(db.grad()), hb.grad(), 2e-5);
}

TEST_CASE("cuda matmul: unsupported dtypes raise not_implemented_error") {
  REQUIRE_GPU();
  auto a = dev(Tensor<int32_t, CPU>(ones<int32_t>({2, 2})));
  CHECK_THROWS_AS(mm(a, a), reel::not_implemented_error);
}

// ------------------------------------------------------------------ linear_cross_entropy
namespace {
struct LceCase {
  bool soft, bias;
  int ignore;  // 0: none, 1: every third row, 2: all rows
  F::Reduction red;
  double eps;
  int64_t chunk;
};
const char* red_name(F::Reduction r) {
  return r == F::Reduction::None ? "none" : r == F::Reduction::Mean ? "mean" : "sum";
}

// The CUDA op (inputs in T) against the CPU op in R (float, or double for double) on the same
// values: loss, and dX / dW / db for an incoming gradient g, through the direct entry and,
// where CUDA tensors record autograd, through backward().
template <class T>
void lce_compare(const LceCase& c, Shape lead, int64_t D, int64_t V, double tol) {
  using R = std::conditional_t<std::is_same_v<T, double>, double, float>;
  CAPTURE(c.soft);
  CAPTURE(c.bias);
  CAPTURE(c.ignore);
  INFO((std::string("reduction: ") + red_name(c.red)));
  CAPTURE(c.eps);
  CAPTURE(c.chunk);
  const int64_t N = reel::detail::numel_of(lead);
  Shape hs = lead, ts = lead;
  hs.push_back(D);
  ts.push_back(V);
  // values representable in T, used by both sides
  auto H = host_randn<T>(hs).template to<R>();
  auto W = Tensor<R, CPU>(host_randn<R>({V, D}) * R(0.5)).template to<T>().template to<R>();
  auto b = host_randn<T>({V}).template to<R>();
  const int64_t ignore = -100;
  auto y = randint<int64_t>(0, V, lead, gen());
  for (int64_t n = 0; n < N; ++n)
    if (c.ignore == 2 || (c.ignore == 1 && n % 3 == 1)) y.reshape({N}).data_ptr()[n] = ignore;
  auto P = Tensor<R, CPU>(F::softmax(host_randn<R>(ts), -1)).template to<T>().template to<R>();
  auto g = c.red == F::Reduction::None ? Tensor<R, CPU>(rand<R>(lead, gen()) + R(0.5)) : full<R>({}, R(1.7));

  // CPU reference
  auto Hr = H.clone().requires_grad_(), Wr = W.clone().requires_grad_(), br = b.clone().requires_grad_();
  F::LinearCrossEntropyOptions<R> ro{.ignore_index = ignore, .reduction = c.red, .label_smoothing = c.eps};
  if (c.bias) ro.bias = br;
  Tensor<R, CPU> loss = c.soft ? F::linear_cross_entropy(Hr, Wr, P, ro) : F::linear_cross_entropy(Hr, Wr, y, ro);
  loss.backward(g);

  // CUDA
  auto dH = dev(H.template to<T>()), dW = dev(W.template to<T>()), dbias = dev(b.template to<T>());
  auto dP = dev(P.template to<T>());
  auto dy = dev(y);
  auto dg = dev(g.template to<T>());
  F::LinearCrossEntropyOptions<T, CUDA> o{.ignore_index = ignore, .reduction = c.red, .label_smoothing = c.eps,
                                         .chunk_size = c.chunk};
  if (c.bias) o.bias = dbias;
  const double gtol = tol * (std::is_same_v<T, double> ? 1 : 2);
  for (bool one_pass : {true, false}) {  // loss and gradients in one pass / forward then backward
    CAPTURE(one_pass);
    poison_cache({N, N * D, V * D, V, N * V});
    auto vg = c.soft ? reel::detail::cuda::lce::value_and_grads(dH, dW, dP, o, dg, one_pass)
                     : reel::detail::cuda::lce::value_and_grads(dH, dW, dy, o, dg, one_pass);
    expect_close(host(vg.loss), loss, tol);
    expect_close(host(vg.dX), Hr.grad(), gtol);
    expect_close(host(vg.dW), Wr.grad(), gtol);
    if (c.bias) expect_close(host(vg.db), br.grad(), gtol);
  }

  // the op itself (forward through linear_cross_entropy's dispatch)
  auto l2 = c.soft ? F::linear_cross_entropy(dH, dW, dP, o) : F::linear_cross_entropy(dH, dW, dy, o);
  expect_close(host(l2), loss, tol);
  if constexpr (reel::detail::autograd_type_v<T, CUDA>) {
    auto h2 = dH.clone().requires_grad_(), w2 = dW.clone().requires_grad_(), b2 = dbias.clone().requires_grad_();
    if (c.bias) o.bias = b2;
    auto l3 = c.soft ? F::linear_cross_entropy(h2, w2, dP, o) : F::linear_cross_entropy(h2, w2, dy, o);
    l3.backward(dg);
    expect_close(host(h2.grad()), Hr.grad(), gtol);
    expect_close(host(w2.grad()), Wr.grad(), gtol);
    if (c.bias) expect_close(host(b2.grad()), br.grad(), gtol);
  }
}

template <class T>
void lce_sweep(double tol) {
  for (bool soft : {false, true})
    for (F::Reduction red : {F::Reduction::None, F::Reduction::Mean, F::Reduction::Sum})
      for (bool bias : {false, true})
        for (double eps : {0.0, 0.1})
          for (int ignore : {0, 1}) {
            if (soft && ignore) continue;  // (probability targets have no ignored rows)
            lce_compare<T>({soft, bias, ignore, red, eps, 0}, {3, 5}, 16, 37, tol);
          }
  // several chunks, the last one short; every row ignored (mean: NaN loss, zero gradients)
  lce_compare<T>({false, true, 1, F::Reduction::Mean, 0.1, 4}, {13}, 24, 50, tol);
  lce_compare<T>({true, true, 0, F::Reduction::None, 0.2, 5}, {13}, 24, 50, tol);
  lce_compare<T>({false, false, 2, F::Reduction::Mean, 0.0, 0}, {6}, 8, 11, tol);
  lce_compare<T>({false, true, 2, F::Reduction::Sum, 0.1, 0}, {6}, 8, 11, tol);
}
}  // namespace

TEST_CASE("cuda linear_cross_entropy: every option matches the CPU op") {
  REQUIRE_GPU();
  SUBCASE("float") { lce_sweep<float>(1e-5); }
  SUBCASE("double") { lce_sweep<double>(1e-11); }
  SUBCASE("bfloat16") { lce_sweep<reel::bfloat16>(2e-2); }
  SUBCASE("half") { lce_sweep<reel::half>(4e-3); }
}

TEST_CASE("cuda linear_cross_entropy: a wide vocabulary, several passes per thread, bf16") {
  REQUIRE_GPU();
  lce_compare<reel::bfloat16>({false, true, 1, F::Reduction::Mean, 0.1, 48}, {2, 64}, 128, 5003, 2e-2);
  lce_compare<float>({true, false, 0, F::Reduction::Sum, 0.0, 0}, {100}, 64, 4099, 1e-5);
}

TEST_CASE("cuda linear_cross_entropy: out-of-range targets raise index_error at the next synchronization") {
  REQUIRE_GPU();
  auto H = dev(host_randn({4, 8})), W = dev(host_randn({10, 8}));
  auto y = dev(Tensor<int64_t, CPU>(from_vector<int64_t>({1, 2, 10, 3}, {4})));
  CHECK_THROWS_WITH_AS(host(F::linear_cross_entropy(H, W, y)), doctest::Contains("index 10 is out of range for size 10"),
                       reel::index_error);
  auto yn = dev(Tensor<int64_t, CPU>(from_vector<int64_t>({1, -5, 0, 3}, {4})));
  CHECK_THROWS_WITH_AS((F::linear_cross_entropy(H, W, yn), reel::gpu::synchronize()), doctest::Contains("index -5"),
                       reel::index_error);
  CHECK_NOTHROW(reel::gpu::synchronize());  // reported once; the next call works
  auto ok = dev(Tensor<int64_t, CPU>(from_vector<int64_t>({1, 2, 0, 3}, {4})));
  CHECK(std::isfinite(host(F::linear_cross_entropy(H, W, ok)).item()));
}
