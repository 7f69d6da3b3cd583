// Core CUDA backend vs the CPU: memory, copies, elementwise kernels (broadcast, strided,
// empty, large), reductions, factories (incl. 2^32 + 2^20 elements), errors.
#include "common.cuh"

#include <thread>

using namespace rt;

TEST_CASE("cuda: round trip copies keep every value, incl. strided sources") {
  REQUIRE_GPU();
  auto a = host_randn({37, 53});
  auto d = dev(a);
  CHECK(d.sizes() == a.sizes());
  CHECK(rel_err(host(d), a, 0, 0) <= 1.0);
  auto t = dev(a).transpose(0, 1);  // non-contiguous on the device
  CHECK(rel_err(host(t), a.transpose(0, 1).contiguous(), 0, 0) <= 1.0);
  auto e = dev(empty<float>({0, 4}));
  CHECK(host(e).numel() == 0);
  CHECK(dev(scalar_tensor<double>(2.5)).item() == 2.5);
}

TEST_CASE("cuda: caching allocator reuses freed blocks and counts bytes") {
  REQUIRE_GPU();
  gpu::synchronize();
  int64_t before = gpu::memory_allocated();
  const void* p1;
  {
    auto t = empty<float, CUDA>({1 << 20});
    p1 = t.data_ptr();
    CHECK(gpu::memory_allocated() - before >= int64_t(4) << 20);
  }
  CHECK(gpu::memory_allocated() == before);
  auto allocs = gpu::memory_stats().backend_allocs;
  auto t2 = empty<float, CUDA>({1 << 20});
  CHECK(t2.data_ptr() == p1);  // same block from the free list
  CHECK(gpu::memory_stats().backend_allocs == allocs);
  gpu::reset_peak_memory_stats();
  CHECK(gpu::max_memory_allocated() == gpu::memory_allocated());
}

TEST_CASE("cuda: a user stream through StreamGuard") {
  REQUIRE_GPU();
  gpu::Stream s;
  auto a = host_randn({1000});
  Tensor<float, CPU> r;
  {
    gpu::StreamGuard g(s);
    CHECK(gpu::current_stream() == s.get());
    auto d = dev(a);
    Tensor<float, CUDA> y = d * d + 1.0f;
    r = host(y);
  }
  CHECK(gpu::current_stream() == nullptr);
  CHECK_CLOSE_T(r, Tensor<float>(a * a + 1.0f), 1e-6, 1e-6);
}

namespace {
// Keeps a stream busy for about `ns` nanoseconds.
__global__ void spin_kernel(long long ns) {
  const long long until = clock64() + ns * 2;  // (clock64 counts SM cycles: ~2 GHz on an H200)
  while (clock64() < until) __nanosleep(1000);
}
}  // namespace

TEST_CASE("cuda: record_stream keeps a freed block from its stream until the other stream's work is done") {
  REQUIRE_GPU();
  gpu::Stream a, b;
  const void* p = nullptr;
  {
    gpu::StreamGuard on_a(a);
    auto t = empty<float, CUDA>({1 << 20});
    p = t.data_ptr();
    spin_kernel<<<1, 1, 0, b.get()>>>(200'000'000);  // b "reads t" for 0.2 s
    gpu::record_stream(t, b.get());
  }  // t freed: its block waits for b
  CHECK(gpu::memory_stats().pending >= int64_t(4) << 20);
  {
    gpu::StreamGuard on_a(a);
    auto u = empty<float, CUDA>({1 << 20});
    CHECK(u.data_ptr() != p);  // not handed out while b may still use it
  }
  b.synchronize();
  {
    gpu::StreamGuard on_a(a);
    CHECK(empty<float, CUDA>({1 << 20}).numel() == 1 << 20);  // (an allocation polls the events)
  }
  CHECK(gpu::memory_stats().pending == 0);
}

TEST_CASE("cuda: each thread's per-thread default stream is a stream of its own for the allocator and cuBLASLt") {
  REQUIRE_GPU();
  namespace dc = reel::detail::cuda;
  // What keys the caching allocator's free lists and the cuBLASLt workspaces: the stream's id,
  // which tells the two threads' per-thread default streams apart though their handle is one.
  reel::detail::StreamId ids[2] = {0, 0};
  auto work = [&](int k) {
    gpu::StreamGuard g(cudaStreamPerThread);
    ids[k] = dc::current_stream_id();
    auto a = dev(host_randn({64, 64}));
    Tensor<float, CUDA> c = matmul(a, a);  // a workspace for this thread's stream
    (void)host(c);
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  CHECK(ids[0] != ids[1]);
  CHECK(ids[0] != dc::stream_id(cudaStreamLegacy));
  CHECK(dc::stream_id(nullptr) == dc::stream_id(cudaStreamLegacy));  // (this file: the legacy default stream)
}

TEST_CASE("cuda: elementwise expressions match the CPU") {
  REQUIRE_GPU();
  auto a = host_randn({64, 33}), b = host_randn({64, 33}), c = host_randn({33});
  auto da = dev(a), db = dev(b), dc = dev(c);
  SUBCASE("fused a * b + c with broadcasting") {
    Tensor<float, CUDA> y = da * db + dc;
    CHECK_CLOSE_T(host(y), Tensor<float>(a * b + c), 1e-6, 1e-6);
  }
  SUBCASE("unary math") {
    Tensor<float, CUDA> y = exp(da) * sin(db) + tanh(dc) - sqrt(abs(da)) + erf(db);
    CHECK_CLOSE_T(host(y), Tensor<float>(exp(a) * sin(b) + tanh(c) - sqrt(abs(a)) + erf(b)), 1e-5, 1e-5);
  }
  SUBCASE("non-contiguous operands and output") {
    auto out = full<float, CUDA>({33, 64}, NAN);
    out.copy_(da.transpose(0, 1) * 2.0f + db.transpose(0, 1).slice(1, 0, 64));
    CHECK_CLOSE_T(host(out), Tensor<float>(a.transpose(0, 1) * 2.0f + b.transpose(0, 1)), 1e-6, 1e-6);
    auto half_rows = full<float, CUDA>({32, 33}, NAN);
    half_rows.copy_(da.slice(0, 0, 64, 2) - dc);
    CHECK_CLOSE_T(host(half_rows), Tensor<float>(a.slice(0, 0, 64, 2) - c), 1e-6, 1e-6);
  }
  SUBCASE("comparisons, where, casts, integer wrap-around") {
    Tensor<bool, CUDA> m = da > db;
    CHECK(host(m).to_vector() == Tensor<bool>(a > b).to_vector());
    Tensor<float, CUDA> w = where(da > db, da, db);
    CHECK_CLOSE_T(host(w), Tensor<float>(where(a > b, a, b)), 0, 0);
    auto i = arange<int32_t>(-5, 5);
    Tensor<int32_t, CUDA> wrap = dev(i) * 2147483647;
    CHECK(host(wrap).to_vector() == Tensor<int32_t>(i * 2147483647).to_vector());
    auto h = dev(a).to<reel::half>();
    CHECK_CLOSE_T(host(h).to<float>(), a.to<reel::half>().to<float>(), 0, 0);
  }
  SUBCASE("empty and 0-d") {
    auto e = dev(empty<float>({0, 33}));
    Tensor<float, CUDA> y = e * 2.0f + dc;
    CHECK(y.sizes() == Shape{0, 33});
    Tensor<float, CUDA> s = dev(scalar_tensor<float>(3.0f)) * 2.0f;
    CHECK(s.item() == 6.0f);
  }
  SUBCASE("in place") {
    auto x = dev(a);
    x.mul_(2.0f).add_(db, 0.5f);
    CHECK_CLOSE_T(host(x), Tensor<float>(a * 2.0f + b * 0.5f), 1e-6, 1e-6);
  }
}

TEST_CASE("cuda: large elementwise (more blocks than the grid, several passes per thread)") {
  REQUIRE_GPU();
  const int64_t n = (int64_t(1) << 27) + 12345;
  auto a = dev(host_randn({n})), b = dev(host_randn({n}));
  auto out = full<float, CUDA>({n}, NAN);
  out.copy_(a * b + 1.0f);
  auto h = host(out).to_vector();
  auto ha = host(a).to_vector(), hb = host(b).to_vector();
  // The contract for arithmetic (README, "CUDA numerics"): nvcc may contract a * b + 1 into one
  // FMA (its default --fmad=true, as in PyTorch's CUDA kernels), so each element is either the
  // product and the sum rounded separately or the fused result, rounded once.
  int64_t bad = 0, fused = 0;
  for (int64_t i = 0; i < n; ++i) {
    volatile float p = ha[i] * hb[i];
    const float twice = p + 1.0f, once = std::fma(ha[i], hb[i], 1.0f);
    bad += h[i] != twice && h[i] != once;
    fused += h[i] == once && once != twice;
  }
  CHECK(bad == 0);
  MESSAGE("elements where the GPU's result was the fused one (and differs): ", fused);
}

TEST_CASE("cuda: reductions match the CPU") {
  REQUIRE_GPU();
  auto a = host_randn({17, 300, 5});
  auto d = dev(a);
  CHECK_CLOSE_T(host(sum(d)), sum(a), 1e-4, 1e-5);
  CHECK_CLOSE_T(host(sum(d, {1})), sum(a, {1}), 1e-4, 1e-5);
  CHECK_CLOSE_T(host(sum(d, {0, 2}, true)), sum(a, {0, 2}, true), 1e-4, 1e-5);
  CHECK_CLOSE_T(host(mean(d, {2})), mean(a, {2}), 1e-5, 1e-5);
  CHECK_CLOSE_T(host(amax(d, {1})), amax(a, {1}), 0, 0);
  CHECK_CLOSE_T(host(amin(d)), amin(a), 0, 0);
  auto small = host_randn({6, 7}) * 0.5f + 1.0f;
  CHECK_CLOSE_T(host(prod(dev(Tensor<float>(small)), {1})), prod(Tensor<float>(small), {1}), 1e-5, 1e-5);
  auto big = host_randn({(int64_t(1) << 22) + 7});  // one long run (Thrust)
  CHECK_CLOSE_T(host(sum(dev(big))), sum(big), 1e-2, 1e-4);
  CHECK_CLOSE_T(host(amax(dev(big))), amax(big), 0, 0);
  auto ints = arange<int32_t>(0, 1000);
  CHECK(sum(dev(ints)).item() == 499500);
  auto withnan = a.clone();
  withnan.select(0, 3).select(0, 7).select(0, 2).fill_(NAN);
  CHECK_CLOSE_T(host(amax(dev(withnan), {1})), amax(withnan, {1}), 0, 0);
  CHECK(std::isnan(mean(dev(empty<float>({0}))).item()));
  CHECK_THROWS_AS(amax(dev(empty<float>({3, 0})), {1}), index_error);
}

namespace {
// The PyTorch CUDA kernel's values, run on the host (reel::detail::*_at<T, true>).
template <class T, class F>
std::vector<T> on_host(int64_t n, F f) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = f(i);
  return v;
}
template <class T>
void check_linspace_rules(double s, double e, int64_t n) {
  CHECK(host(linspace<T, CUDA>(s, e, n)).to_vector() ==
        on_host<T>(n, [&](int64_t i) { return reel::detail::linspace_at<T, true>(s, e, n, i); }));
}
template <class T, class S>
void check_arange_rules(S s, S e, S st) {
  using A = reel::detail::arange_acc_t<T, true>;
  const int64_t n = reel::detail::arange_size(s, e, st);
  const A as = reel::detail::range_cast<A>(static_cast<double>(s)), ast = reel::detail::range_cast<A>(static_cast<double>(st));
  CHECK(host(arange<T, CUDA>(s, e, st)).to_vector() ==
        on_host<T>(n, [&](int64_t i) { return reel::detail::arange_at<T, true>(as, ast, n, i); }));
}
// logspace: CUDA's pow and glibc's differ by a few ulps of the exponent's type, so the values
// may be 1 ulp of T apart (in float), 2 for half and bfloat16 computed through float.
template <class T>
void check_logspace_rules(double s, double e, int64_t n, double base) {
  auto g = host(logspace<T, CUDA>(s, e, n, base)).to_vector();
  auto c = on_host<T>(n, [&](int64_t i) { return reel::detail::logspace_at<T, true>(s, e, n, base, i); });
  REQUIRE(g.size() == c.size());
  int64_t apart = 0, over = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if constexpr (std::is_integral_v<T>) {
      over += g[i] != c[i] && std::abs(static_cast<double>(g[i]) - static_cast<double>(c[i])) > 1;
    } else {
      double a = static_cast<double>(static_cast<float>(g[i])), b = static_cast<double>(static_cast<float>(c[i]));
      apart += a != b;
      over += a != b && std::abs(a - b) > 2 * std::abs(b) * static_cast<double>(std::numeric_limits<T>::epsilon());
    }
  }
  CHECK(over == 0);
  MESSAGE("logspace<", scalar_type_of<T>::name, ">: elements apart from the host's pow: ", apart, " of ", g.size());
}
}  // namespace

TEST_CASE("cuda: range factories follow PyTorch's CUDA kernels (run on the host to compare)") {
  REQUIRE_GPU();
  check_linspace_rules<float>(-3.7, 11.1, 100003);
  check_linspace_rules<double>(-3.7, 11.1, 1001);
  check_linspace_rules<reel::half>(-3, 5, 1001);
  check_linspace_rules<reel::half>(0.1, 0.7, 3);
  check_linspace_rules<reel::bfloat16>(0, 1, 777);
  check_linspace_rules<int32_t>(-100, 1000, 333);
  check_linspace_rules<int64_t>(0, 10, 4);
  check_arange_rules<int64_t>(int64_t(-7), int64_t(100), int64_t(3));
  check_arange_rules<float>(0.5, 10.25, 0.75);
  check_arange_rules<float>(0.001, 40000.0, 3.3);
  check_arange_rules<double>(-1.1, 1000.3, 0.37);
  check_arange_rules<reel::half>(0.0, 3.0, 0.1);
  check_arange_rules<reel::bfloat16>(-5.5, 100.25, 0.37);
  check_arange_rules<int8_t>(0.0, 1e6, 1e5);
  check_logspace_rules<float>(-30, 30, 10007, 10.0);
  check_logspace_rules<double>(-30, 30, 10007, 10.0);
  check_logspace_rules<reel::half>(-2, 4, 101, 10.0);
  check_logspace_rules<reel::bfloat16>(-2, 4, 101, 2.0);
  check_logspace_rules<int32_t>(0, 9, 10, 10.0);
  // where PyTorch's CPU and CUDA kernels agree, so do reel's devices
  CHECK(host(linspace<float, CUDA>(-3.7, 11.1, 100003)).to_vector() == linspace<float>(-3.7, 11.1, 100003).to_vector());
  CHECK(host(linspace<double, CUDA>(-3.7, 11.1, 1001)).to_vector() == linspace<double>(-3.7, 11.1, 1001).to_vector());
  CHECK(host(arange<int64_t, CUDA>(-7, 100, 3)).to_vector() == arange<int64_t>(-7, 100, 3).to_vector());
  CHECK(host(eye<float, CUDA>(5)).to_vector() == eye<float>(5).to_vector());
  Generator g1(7), g2(7);
  CHECK(host(randn<float, CUDA>({100}, g1)).to_vector() == randn<float>({100}, g2).to_vector());
  CHECK(host(zeros<float, CUDA>({3, 3})).to_vector() == std::vector<float>(9, 0.0f));
}

TEST_CASE("cuda: arange and linspace of 2^32 + 2^20 elements write every element") {
  REQUIRE_GPU();
  const int64_t n = (int64_t(1) << 32) + (int64_t(1) << 20);
  const void* poisoned;
  {
    auto p = full<int64_t, CUDA>({n}, -1);  // its block returns to the cache, full of -1
    poisoned = p.data_ptr();
  }
  auto a = arange<int64_t, CUDA>(n);
  REQUIRE(a.data_ptr() == poisoned);  // arange writes over the poison
  CHECK(sum(Tensor<bool, CUDA>(eq(a, int64_t(-1)))).item() == 0);
  CHECK(a[n - 1].item() == n - 1);
  CHECK(a[int64_t(1) << 32].item() == int64_t(1) << 32);
  CHECK(amin(a).item() == 0);
  CHECK(amax(a).item() == n - 1);
  {
    auto f = full<float, CUDA>({n}, NAN);
    (void)f;
  }
  auto l = linspace<float, CUDA>(0, 1, n);
  CHECK(sum(Tensor<bool, CUDA>(isnan(l))).item() == 0);
  CHECK(l[0].item() == 0.0f);
  CHECK(l[n - 1].item() == 1.0f);
  CHECK(l[n / 2].item() == reel::detail::linspace_at<float, true>(0, 1, n, n / 2));
}

TEST_CASE("cuda: failures become reel::error naming the call") {
  REQUIRE_GPU();
  try {
    auto huge = empty<float, CUDA>({int64_t(1) << 50});  // 4 PiB
    FAIL("allocation should fail");
  } catch (const error& e) {
    CHECK(std::string(e.what()).find("out of memory") != std::string::npos);
  }
  try {
    REEL_CUDA_CHECK(cudaSetDevice(9999));
    FAIL("cudaSetDevice should fail");
  } catch (const error& e) {
    CHECK(std::string(e.what()).find("cudaSetDevice") != std::string::npos);
    CHECK(std::string(e.what()).find("cudaErrorInvalidDevice") != std::string::npos);
  }
  // the reported failure is not left behind for the next launch or Thrust call to report
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  auto after = dev(host_randn({1000}));
  Tensor<float, CUDA> doubled = after * 2.0f;
  CHECK(sort(doubled).values.numel() == 1000);
}

TEST_CASE("cuda: sort and topk (Thrust) match the CPU, NaN last ascending, ties in index order") {
  REQUIRE_GPU();
  auto a = host_randn({13, 257});
  a.select(0, 2).select(0, 5).fill_(NAN);
  a.select(0, 4).slice(0, 10, 20).fill_(0.25f);  // ties
  for (bool desc : {false, true}) {
    auto c = sort(a, 1, desc);
    auto g = sort(dev(a), 1, desc);
    CHECK_CLOSE_T(host(g.values), c.values, 0, 0);
    CHECK(host(g.indices).to_vector() == c.indices.to_vector());
    auto c0 = sort(a, 0, desc);  // along a non-last dim
    auto g0 = sort(dev(a), 0, desc);
    CHECK_CLOSE_T(host(g0.values), c0.values, 0, 0);
    CHECK(host(g0.indices).to_vector() == c0.indices.to_vector());
  }
  auto t = topk(dev(a), 5, 1);
  auto ct = topk(a, 5, 1);
  CHECK_CLOSE_T(host(t.values), ct.values, 0, 0);
  CHECK(host(t.indices).to_vector() == ct.indices.to_vector());
  auto one = sort(dev(host_randn({100000})));  // one long line
  auto v = host(one.values).to_vector();
  CHECK(std::is_sorted(v.begin(), v.end()));
  CHECK(sort(dev(empty<float>({0, 4})), 1).values.numel() == 0);
}

TEST_CASE("cuda: argmax / argmin and cumsum match the CPU (first NaN wins, ties to the first)") {
  REQUIRE_GPU();
  auto a = host_randn({9, 300});
  a.select(0, 1).select(0, 100).fill_(NAN);
  a.select(0, 1).select(0, 200).fill_(NAN);
  a.select(0, 2).slice(0, 5, 9).fill_(7.0f);  // a tied maximum
  a.select(0, 3).slice(0, 5, 9).fill_(-7.0f);  // a tied minimum
  auto d = dev(a);
  CHECK(host(argmax(d, 1)).to_vector() == argmax(a, 1).to_vector());
  CHECK(host(argmin(d, 1)).to_vector() == argmin(a, 1).to_vector());
  CHECK(host(argmax(d, 0, true)).to_vector() == argmax(a, 0, true).to_vector());  // short runs
  CHECK(argmax(d).item() == argmax(a).item());
  CHECK(argmin(dev(host_randn({1 << 20}))).item() >= 0);
  CHECK_THROWS_AS(argmax(dev(empty<float>({3, 0})), 1), index_error);
  auto c = host_randn({5, 1000});
  CHECK_CLOSE_T(host(cumsum(dev(c), 1)), cumsum(c, 1), 1e-4, 1e-4);
  CHECK_CLOSE_T(host(cumsum(dev(c), 0)), cumsum(c, 0), 1e-5, 1e-5);
  auto ci = arange<int32_t>(0, 100).reshape({10, 10});
  CHECK(host(cumsum(dev(ci), 1)).to_vector() == cumsum(ci, 1).to_vector());  // int32 sums in int64
  // cumprod: a multiplicative scan; values near 1 keep the products in range
  auto p = Tensor<float>(host_randn({4, 300}) * 0.05f + 1.0f);
  CHECK_CLOSE_T(host(cumprod(dev(p), 1)), cumprod(p, 1), 1e-4, 1e-4);
  CHECK(host(cumprod(dev(Tensor<int32_t>(remainder(ci, 3) + 1)), 1)).to_vector() ==
        cumprod(Tensor<int32_t>(remainder(ci, 3) + 1), 1).to_vector());
}

TEST_CASE("cuda: scatter (distinct indices) and cumprod's gradient match the CPU") {
  REQUIRE_GPU();
  auto x = host_randn({3, 5}), src = host_randn({3, 4});
  auto idx = from_vector<int64_t>({4, 0, 2, 1, 3, 2, 0, 4, 0, 1, 2, 3}, {3, 4});
  CHECK(host(scatter(dev(x), 1, dev(idx), dev(src))).to_vector() == scatter(x, 1, idx, src).to_vector());
  CHECK(host(scatter(dev(x), 1, dev(idx), 2.5f)).to_vector() == scatter(x, 1, idx, 2.5f).to_vector());
  auto v = Tensor<float>(host_randn({2, 6}) * 0.5f + 1.0f);
  v.select(0, 1).select(0, 2).fill_(0.0f);  // a zero: the masked first-zero rule
  auto vd = dev(v).requires_grad_();
  auto vh = v.clone().requires_grad_();
  sum(cumprod(vd, 1)).backward();
  sum(cumprod(vh, 1)).backward();
  CHECK_CLOSE_T(host(vd.grad()), vh.grad(), 1e-5, 1e-5);
}

TEST_CASE("cuda: max(x, dim) (argmax, then a gather) and out-of-range gather indices") {
  REQUIRE_GPU();
  auto a = host_randn({6, 40});
  auto g = max(dev(a), 1);
  auto c = max(a, 1);
  CHECK_CLOSE_T(host(g.values), c.values, 0, 0);
  CHECK(host(g.indices).to_vector() == c.indices.to_vector());
  // A bad index is found by the kernel and raised at the next synchronization (here the copy
  // to the host); the device keeps working afterwards.
  auto w = dev(host_randn({10, 3}));
  CHECK_THROWS_WITH_AS(host(nn::functional::embedding(dev(tensor<int64_t>({1, 10})), w)),
                       doctest::Contains("index 10 is out of range for size 10"), index_error);
  CHECK_NOTHROW(gpu::synchronize());  // reported once
  CHECK(host(nn::functional::embedding(dev(tensor<int64_t>({9, 0})), w)).to_vector()[0] == host(w)[9][0].item());
  auto gi = dev(tensor<int64_t>({{0, -1}}));
  CHECK_THROWS_WITH_AS((reel::detail::gather_along(dev(host_randn({1, 4})), gi, 1), gpu::synchronize()),
                       doctest::Contains("index -1"), index_error);
}

TEST_CASE("cuda: ops that only have a host loop say so instead of reading device memory") {
  REQUIRE_GPU();
  auto d = dev(host_randn({4, 5}));
  CHECK_THROWS_WITH_AS(histc(d, 10), doctest::Contains("histc: not implemented for CUDA"), not_implemented_error);
}

TEST_CASE("cuda: a .pt checkpoint loads onto the device with map_location CUDA, views still views") {
  REQUIRE_GPU();
  auto base = host_randn({6, 8});
  Value root = Value::dict();
  root.set(Value("base"), Value(base));
  root.set(Value("view"), Value(AnyTensor(Tensor<float>(base.slice(0, 2, 5).transpose(0, 1)))));
  std::ostringstream os;
  save(os, root);
  std::istringstream is(os.str());
  const Value v = load(is, {.map_location = DeviceType::CUDA});
  const AnyTensor b = v.at("base").tensor(), w = v.at("view").tensor();
  CHECK(b.device() == DeviceType::CUDA);
  CHECK(w.device() == DeviceType::CUDA);
  CHECK(w.is_same_storage(b));
  CHECK(w.storage_offset() == 16);
  CHECK(rel_err(host(b.as<float, CUDA>()), base, 0, 0) <= 1.0);
  CHECK(rel_err(host(w.as<float, CUDA>()), Tensor<float>(base.slice(0, 2, 5).transpose(0, 1)).contiguous(), 0, 0) <= 1.0);
}
