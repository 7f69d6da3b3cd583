// reel::distributed on NCCL (issue 20): every collective on CUDA tensors, asynchronous calls,
// strided tensors, sub-groups, barrier, the errors, and DistributedDataParallel on CUDA
// parameters. Built where nvcc and NCCL exist, without MPI (REEL_DIST_NO_MPI: the world comes
// from RANK / WORLD_SIZE / LOCAL_RANK and NCCL's id through REEL_INIT_FILE).
// tests/cuda/run_on_gpu.sh runs it with one rank, and with one rank per GPU where a machine
// has several. Every rank runs the same cases in the same order; rank r holds values that are a
// closed form of r, so each rank computes the expected results itself.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <reel/distributed.hpp>
#include <string>

using namespace reel;
namespace dist = reel::distributed;
// Built without MPI (REEL_DIST_NO_MPI): its distributed types are another inline namespace's
// than an MPI build's (other layouts), so the two cannot be linked together by mistake.
static_assert(std::is_same_v<dist::ProcessGroup, reel::distributed::no_mpi::ProcessGroup>);

namespace {
__global__ void spin_kernel(long long ns) {  // (busy for about ns nanoseconds)
  const long long until = clock64() + ns * 2;  // (clock64 counts SM cycles: ~2 GHz)
  while (clock64() < until) __nanosleep(1000);
}
#define REQUIRE_WORLD()                   \
  do {                                    \
    if (!dist::is_initialized()) {        \
      MESSAGE("no CUDA device: skipped"); \
      return;                             \
    }                                     \
  } while (0)

int me() { return dist::rank(); }
int world() { return dist::world_size(); }

// What rank r holds at element i.
template <class T>
T held(int r, int64_t i) {
  if constexpr (std::is_same_v<T, bool>)
    return (i + r) % 3 != 0;
  else if constexpr (is_complex_v<T>)
    return T(static_cast<typename T::value_type>(r + 1 + i), static_cast<typename T::value_type>(2 * r - i));
  else
    return static_cast<T>(static_cast<double>(1 + (r + i) % 3));  // (PRODUCT stays small)
}
template <class T>
Tensor<T, CUDA> holding(int r, Shape s) {
  std::vector<T> v;
  int64_t n = 1;
  for (int64_t d = 0; d < s.size(); ++d) n *= s[d];
  for (int64_t i = 0; i < n; ++i) v.push_back(held<T>(r, i));
  return from_vector<T>(v, s).template to_device<CUDA>();
}
template <class T>
std::vector<T> on_host(const Tensor<T, CUDA>& t) {
  return t.template to_device<CPU>().contiguous().to_vector();
}
// The reduction of every rank's element i, in double (bool: or / and).
template <class T>
double folded(dist::ReduceOp op, int64_t i) {
  double acc = 0;
  for (int r = 0; r < world(); ++r) {
    const double x = static_cast<double>(held<T>(r, i));
    if (r == 0) acc = x;
    else if (op == dist::ReduceOp::SUM || op == dist::ReduceOp::AVG) acc = std::is_same_v<T, bool> ? std::max(acc, x) : acc + x;
    else if (op == dist::ReduceOp::PRODUCT) acc = std::is_same_v<T, bool> ? std::min(acc, x) : acc * x;
    else if (op == dist::ReduceOp::MIN) acc = std::min(acc, x);
    else acc = std::max(acc, x);
  }
  return op == dist::ReduceOp::AVG ? acc / world() : acc;
}
const char* op_name(dist::ReduceOp op) {
  switch (op) {
    case dist::ReduceOp::SUM: return "SUM";
    case dist::ReduceOp::AVG: return "AVG";
    case dist::ReduceOp::PRODUCT: return "PRODUCT";
    case dist::ReduceOp::MIN: return "MIN";
    default: return "MAX";
  }
}
template <class T>
void check_all_reduce(std::vector<dist::ReduceOp> ops, double tol) {
  for (auto op : ops) {
    auto t = holding<T>(me(), {3, 5});
    dist::all_reduce(t, op);
    const auto got = on_host(t);
    const std::string dtype(dtype_name(scalar_type_v<T>)), name(op_name(op));
    CAPTURE(dtype);
    CAPTURE(name);
    for (int64_t i = 0; i < 15; ++i) {
      const double want = folded<T>(op, i);
      if (std::is_integral_v<T> && want > 127) continue;  // (a product past int8: wraps)
      CHECK(std::abs(static_cast<double>(got[static_cast<size_t>(i)]) - want) <= tol * std::max(1.0, std::abs(want)));
    }
  }
}
}  // namespace

TEST_CASE("nccl: the world is RANK / WORLD_SIZE's (one rank without them)") {
  REQUIRE_WORLD();
  CHECK(dist::get_backend() == dist::Backend::NCCL);
  const char* ws = std::getenv("WORLD_SIZE");
  CHECK(world() == (ws ? std::atoi(ws) : 1));
  CHECK(dist::world().rank() == me());
}

TEST_CASE("nccl: all_reduce of every reducible dtype and op") {
  REQUIRE_WORLD();
  using O = dist::ReduceOp;
  const std::vector<O> every{O::SUM, O::AVG, O::PRODUCT, O::MIN, O::MAX}, ints{O::SUM, O::PRODUCT, O::MIN, O::MAX};
  check_all_reduce<float>(every, 1e-6);
  check_all_reduce<double>(every, 1e-14);
  check_all_reduce<reel::half>(every, 2e-3);
  check_all_reduce<bfloat16>(every, 1e-2);
  check_all_reduce<int32_t>(ints, 0);
  check_all_reduce<int64_t>(ints, 0);
  check_all_reduce<int8_t>({O::SUM, O::MIN, O::MAX}, 0);
  check_all_reduce<uint8_t>(ints, 0);
  check_all_reduce<uint32_t>(ints, 0);
  check_all_reduce<uint64_t>(ints, 0);
  check_all_reduce<bool>(ints, 0);
}

TEST_CASE("nccl: complex all_reduce (SUM, AVG) and the ops it refuses") {
  REQUIRE_WORLD();
  using C = std::complex<float>;
  for (auto op : {dist::ReduceOp::SUM, dist::ReduceOp::AVG}) {
    auto t = holding<C>(me(), {7});
    dist::all_reduce(t, op);
    const auto got = on_host(t);
    for (int64_t i = 0; i < 7; ++i) {
      C want{};
      for (int r = 0; r < world(); ++r) want += held<C>(r, i);
      if (op == dist::ReduceOp::AVG) want /= static_cast<float>(world());
      CHECK(std::abs(got[static_cast<size_t>(i)] - want) <= 1e-5f * std::max(1.0f, std::abs(want)));
    }
  }
  auto c = holding<C>(me(), {2});
  CHECK_THROWS_AS(dist::all_reduce(c, dist::ReduceOp::PRODUCT), not_implemented_error);
  CHECK_THROWS_AS(dist::all_reduce(c, dist::ReduceOp::MAX), type_error);
  auto i32 = holding<int32_t>(me(), {2});
  CHECK_THROWS_AS(dist::all_reduce(i32, dist::ReduceOp::AVG), type_error);
}

TEST_CASE("nccl: a strided tensor is reduced in place, an asynchronous call overlaps later kernels") {
  REQUIRE_WORLD();
  auto base = holding<float>(me(), {4, 6});
  auto view = base.transpose(0, 1);  // not contiguous
  dist::all_reduce(view, dist::ReduceOp::SUM);
  auto got = on_host(base);
  for (int64_t i = 0; i < 24; ++i) CHECK(got[static_cast<size_t>(i)] == doctest::Approx(folded<float>(dist::ReduceOp::SUM, i)));

  auto a = holding<double>(me(), {1 << 20});
  auto other = ones<double, CUDA>({1 << 16});
  dist::Work w = dist::all_reduce(a, dist::ReduceOp::MAX, {.async_op = true});
  Tensor<double, CUDA> later = other * 2.0;  // queued while the all-reduce may still run
  w.wait();
  const auto va = on_host(a);
  for (int64_t i : {int64_t{0}, int64_t{5}, int64_t{(1 << 20) - 1}})
    CHECK(va[static_cast<size_t>(i)] == folded<double>(dist::ReduceOp::MAX, i));
  CHECK(on_host(later)[7] == 2.0);
  CHECK(w.is_completed());

  // is_completed() asks the device: work queued behind a kernel still running is not done,
  // before wait() or after it (wait() only makes this stream wait).
  spin_kernel<<<1, 1, 0, gpu::current_stream()>>>(200'000'000);  // 0.2 s ahead of the all-reduce
  dist::Work slow = dist::all_reduce(a, dist::ReduceOp::SUM, {.async_op = true});
  CHECK_FALSE(slow.is_completed());
  slow.wait();
  CHECK_FALSE(slow.is_completed());
  gpu::synchronize();
  CHECK(slow.is_completed());
}

TEST_CASE("nccl: broadcast, reduce, all_gather (list and tensor), reduce_scatter") {
  REQUIRE_WORLD();
  const int n = world(), last = n - 1;
  for (int src : {0, last}) {
    auto t = holding<int16_t>(me(), {5});  // (a dtype NCCL only moves)
    dist::broadcast(t, src);
    const auto got = on_host(t);
    for (int64_t i = 0; i < 5; ++i) CHECK(got[static_cast<size_t>(i)] == held<int16_t>(src, i));
  }
  {
    auto t = holding<float>(me(), {6});
    dist::reduce(t, last, dist::ReduceOp::SUM);
    const auto got = on_host(t);
    for (int64_t i = 0; i < 6; ++i)
      CHECK(got[static_cast<size_t>(i)] == (me() == last ? folded<float>(dist::ReduceOp::SUM, i) : held<float>(me(), i)));
  }
  {
    std::vector<Tensor<bfloat16, CUDA>> list;
    dist::all_gather(list, holding<bfloat16>(me(), {2, 3}));
    REQUIRE(static_cast<int>(list.size()) == n);
    for (int r = 0; r < n; ++r) {
      const auto got = on_host(list[static_cast<size_t>(r)]);
      for (int64_t i = 0; i < 6; ++i) CHECK(static_cast<float>(got[static_cast<size_t>(i)]) == static_cast<float>(held<bfloat16>(r, i)));
    }
    auto out = empty<int64_t, CUDA>({n, 4});
    dist::all_gather_into_tensor(out, holding<int64_t>(me(), {4}));
    const auto all = on_host(out);
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < 4; ++i) CHECK(all[static_cast<size_t>(r * 4 + i)] == held<int64_t>(r, i));
  }
  {
    // in[k] of rank r holds held(r, 10 k + i): the sum over r of in[me] lands here
    std::vector<Tensor<double, CUDA>> in;
    for (int k = 0; k < n; ++k) {
      std::vector<double> v;
      for (int64_t i = 0; i < 3; ++i) v.push_back(held<double>(me(), 10 * k + i));
      in.push_back(from_vector<double>(v, {3}).to_device<CUDA>());
    }
    auto out = empty<double, CUDA>({3});
    dist::reduce_scatter(out, in, dist::ReduceOp::SUM);
    const auto got = on_host(out);
    for (int64_t i = 0; i < 3; ++i) CHECK(got[static_cast<size_t>(i)] == folded<double>(dist::ReduceOp::SUM, 10 * me() + i));
  }
}

TEST_CASE("nccl: gather, scatter and all_to_all through NCCL's sends and receives") {
  REQUIRE_WORLD();
  const int n = world();
  {
    std::vector<Tensor<float, CUDA>> list;
    dist::gather(holding<float>(me(), {4}), list, 0);
    if (me() == 0) {
      REQUIRE(static_cast<int>(list.size()) == n);
      for (int r = 0; r < n; ++r) {
        const auto got = on_host(list[static_cast<size_t>(r)]);
        for (int64_t i = 0; i < 4; ++i) CHECK(got[static_cast<size_t>(i)] == held<float>(r, i));
      }
    } else {
      CHECK(list.empty());
    }
  }
  {
    std::vector<Tensor<int32_t, CUDA>> list;
    if (me() == 0)
      for (int r = 0; r < n; ++r) list.push_back(holding<int32_t>(100 + r, {3}));
    auto out = empty<int32_t, CUDA>({3});
    dist::scatter(out, list, 0);
    const auto got = on_host(out);
    for (int64_t i = 0; i < 3; ++i) CHECK(got[static_cast<size_t>(i)] == held<int32_t>(100 + me(), i));
  }
  {
    // rank r sends held(n r + k, i) to rank k
    std::vector<Tensor<double, CUDA>> in, out;
    for (int k = 0; k < n; ++k) in.push_back(holding<double>(n * me() + k, {2}));
    dist::all_to_all(out, in);
    REQUIRE(static_cast<int>(out.size()) == n);
    for (int r = 0; r < n; ++r) {
      const auto got = on_host(out[static_cast<size_t>(r)]);
      for (int64_t i = 0; i < 2; ++i) CHECK(got[static_cast<size_t>(i)] == held<double>(n * r + me(), i));
    }
  }
}

TEST_CASE("nccl: send and recv around a ring (two or more ranks)") {
  REQUIRE_WORLD();
  const int n = world();
  if (n < 2) return;  // (a rank cannot send to itself on one stream)
  const int next = (me() + 1) % n, prev = (me() + n - 1) % n;
  auto mine = holding<float>(me(), {8});
  auto got = empty<float, CUDA>({8});
  if (me() % 2 == 0) {
    dist::send(mine, next);
    dist::recv(got, prev);
  } else {
    dist::recv(got, prev);
    dist::send(mine, next);
  }
  const auto v = on_host(got);
  for (int64_t i = 0; i < 8; ++i) CHECK(v[static_cast<size_t>(i)] == held<float>(prev, i));
}

TEST_CASE("nccl: new_group splits the world's communicator; barrier") {
  REQUIRE_WORLD();
  auto g = dist::new_group({0});
  CHECK(g->is_member() == (me() == 0));
  if (g->is_member()) {
    auto t = holding<float>(me(), {4});
    dist::all_reduce(t, dist::ReduceOp::SUM, {.group = g.get()});
    const auto v = on_host(t);
    for (int64_t i = 0; i < 4; ++i) CHECK(v[static_cast<size_t>(i)] == held<float>(0, i));
  } else {
    auto t = holding<float>(me(), {4});
    CHECK_THROWS_AS(dist::all_reduce(t, dist::ReduceOp::SUM, {.group = g.get()}), error);
  }
  dist::barrier();
  CHECK(true);
}

TEST_CASE("nccl: DistributedDataParallel on CUDA parameters averages the ranks' gradients") {
  REQUIRE_WORLD();
  // loss_r = sum(tanh(x_r W) * c) + sum(b^2 x_r[0]): every rank's input differs; the expected
  // gradient is the mean of the ranks' gradients, computed here on the CPU for each rank.
  auto x_of = [](int r) {
    Generator gen(1000 + static_cast<uint64_t>(r));
    return randn<double>({5, 4}, gen);
  };
  Generator g0(7);
  auto w0 = randn<double>({4, 3}, g0), b0 = randn<double>({4}, g0);
  auto loss_of = [](const auto& x, const auto& w, const auto& b) {
    return sum(tanh(matmul(x, w)) * 0.5) + sum(b * b * x.select(0, 0));
  };
  Tensor<double> want_w = zeros<double>({4, 3}), want_b = zeros<double>({4});
  for (int r = 0; r < world(); ++r) {
    auto w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    loss_of(x_of(r), w, b).backward();
    want_w = want_w + w.grad() / static_cast<double>(world());
    want_b = want_b + b.grad() / static_cast<double>(world());
  }
  auto w = w0.to_device<CUDA>().requires_grad_(), b = b0.to_device<CUDA>().requires_grad_();
  nn::parallel::DistributedDataParallel<double, CUDA> ddp({w, b}, {.bucket_cap_mb = 0});  // a bucket each
  CHECK(ddp.bucket_count() == 2);
  loss_of(x_of(me()).to_device<CUDA>(), w, b).backward();
  const auto& ev = ddp.events();
  REQUIRE(!ev.empty());
  CHECK(ev.back() == "end");
  CHECK(std::find(ev.begin(), ev.end(), "launch 0") != ev.end());
  CHECK(std::find(ev.begin(), ev.end(), "launch 1") != ev.end());
  const auto gw = w.grad().to_device<CPU>().to_vector(), gb = b.grad().to_device<CPU>().to_vector();
  const auto ew = want_w.contiguous().to_vector(), eb = want_b.contiguous().to_vector();
  for (size_t i = 0; i < ew.size(); ++i) CHECK(gw[i] == doctest::Approx(ew[i]).epsilon(1e-12));
  for (size_t i = 0; i < eb.size(); ++i) CHECK(gb[i] == doctest::Approx(eb[i]).epsilon(1e-12));
}

TEST_CASE("nccl: without a CUDA device, init_process_group raises and leaves no group") {
  if (gpu::is_available()) return;  // (the cases above run instead)
  CHECK_THROWS_WITH_AS(dist::init_process_group(dist::Backend::NCCL), doctest::Contains("no CUDA device"), error);
  CHECK(!dist::is_initialized());
  CHECK_THROWS_AS(dist::world_size(), error);
}

int main(int argc, char** argv) {
  const bool up = gpu::is_available();
  if (up) dist::init_process_group(dist::Backend::NCCL);
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  if (up) {
    gpu::synchronize();
    dist::destroy_process_group();
  }
  return rc;
}
