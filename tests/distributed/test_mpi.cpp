// reel::distributed on MPI (issue 20, first part), run by ctest under mpirun with 2 and 3
// ranks: every rank runs the same cases in the same order. Expected values are closed forms
// of the ranks' contributions (rank r holds r + 1 + i at element i, ...).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <reel/distributed.hpp>
#include <reel/reel.hpp>

using namespace reel;
namespace dist = reel::distributed;

namespace {
template <class T>
Tensor<T> ramp(int64_t n, double r) {  // element i: r + 1 + i
  std::vector<T> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<T>(r + 1 + static_cast<double>(i)));
  return from_vector<T>(v, {n});
}
template <class T>
std::vector<double> values(const Tensor<T>& t) {
  std::vector<double> v;
  for (const T& x : t.contiguous().to_vector()) v.push_back(static_cast<double>(x));
  return v;
}
}  // namespace

TEST_CASE("mpi: the world is the launcher's") {
  CHECK(dist::is_initialized());
  CHECK(dist::get_backend() == dist::Backend::MPI);
  CHECK(dist::world_size() >= 2);
  CHECK(dist::rank() >= 0);
  CHECK(dist::rank() < dist::world_size());
  if (const char* v = std::getenv("OMPI_COMM_WORLD_SIZE")) CHECK(std::atoi(v) == dist::world_size());
  dist::barrier();
  CHECK_THROWS_WITH_AS(dist::init_process_group(), doctest::Contains("initialized already"), error);
}

TEST_CASE_TEMPLATE("mpi: all_reduce SUM, PRODUCT, MIN, MAX (and AVG for floating types)", T, float, double, int32_t,
                   int64_t, uint8_t, half, bfloat16) {
  const int n = dist::world_size();
  const double r = dist::rank();
  const int64_t len = 5;
  for (auto op : {dist::ReduceOp::SUM, dist::ReduceOp::PRODUCT, dist::ReduceOp::MIN, dist::ReduceOp::MAX,
                  dist::ReduceOp::AVG}) {
    if (op == dist::ReduceOp::AVG && !is_floating_v<T>) {
      Tensor<T> t = ramp<T>(len, r);
      CHECK_THROWS_AS(dist::all_reduce(t, op), type_error);
      continue;
    }
    Tensor<T> t = ramp<T>(len, r);
    const uint64_t v0 = t.version();
    dist::all_reduce(t, op);
    CHECK(t.version() > v0);
    auto got = values(t);
    for (int64_t i = 0; i < len; ++i) {
      double want = op == dist::ReduceOp::PRODUCT ? 1 : 0;
      for (int k = 0; k < n; ++k) {
        const double x = k + 1 + static_cast<double>(i);
        if (op == dist::ReduceOp::SUM || op == dist::ReduceOp::AVG) want += x;
        if (op == dist::ReduceOp::PRODUCT) want *= x;
      }
      if (op == dist::ReduceOp::MIN) want = 1 + static_cast<double>(i);
      if (op == dist::ReduceOp::MAX) want = n + static_cast<double>(i);
      if (op == dist::ReduceOp::AVG) want /= n;
      // (every value here is exact in each type except float16 / bfloat16 products and means)
      CHECK(got[static_cast<size_t>(i)] == doctest::Approx(static_cast<double>(static_cast<T>(want))).epsilon(1e-2));
    }
  }
}

TEST_CASE("mpi: a strided tensor, complex sums, bool, broadcast from every rank, all_gather") {
  const int n = dist::world_size();
  const int r = dist::rank();
  // a transposed (non-contiguous) tensor is reduced through a copy and written back
  Tensor<double> m = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor<double> mt = m.transpose(0, 1);
  dist::all_reduce(mt);
  CHECK(values(m) == std::vector<double>{1.0 * n, 2.0 * n, 3.0 * n, 4.0 * n, 5.0 * n, 6.0 * n});
  Tensor<std::complex<double>> z = from_vector<std::complex<double>>({{1.0 * r, 1.0}}, {1});
  dist::all_reduce(z);
  CHECK(z.to_vector()[0] == std::complex<double>(n * (n - 1) / 2.0, n));
  CHECK_THROWS_AS(dist::all_reduce(z, dist::ReduceOp::MAX), type_error);
  Tensor<bool> flag = from_vector<bool>({r == 1, false}, {2});
  dist::all_reduce(flag, dist::ReduceOp::MAX);  // any
  CHECK(flag.to_vector() == std::vector<bool>{true, false});
  for (int src = 0; src < n; ++src) {
    Tensor<float> b = ramp<float>(4, r * 10.0);
    dist::broadcast(b, src);
    CHECK(values(b) == values(ramp<float>(4, src * 10.0)));
  }
  CHECK_THROWS_AS(dist::broadcast(m, n), value_error);
  std::vector<Tensor<int64_t>> parts;
  dist::all_gather(parts, ramp<int64_t>(3, r));
  REQUIRE(parts.size() == static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) CHECK(values(parts[static_cast<size_t>(k)]) == values(ramp<int64_t>(3, k)));
  Tensor<int64_t> whole = empty<int64_t>({n * 3});
  dist::all_gather_into_tensor(whole, ramp<int64_t>(3, r));
  for (int k = 0; k < n; ++k) CHECK(values(Tensor<int64_t>(whole.slice(0, 3 * k, 3 * k + 3))) == values(ramp<int64_t>(3, k)));
  std::vector<Tensor<int64_t>> wrong(1, empty<int64_t>({3}));
  CHECK_THROWS_WITH_AS(dist::all_gather(wrong, ramp<int64_t>(3, r)), doctest::Contains("tensors for a group of"), value_error);
}

TEST_CASE("mpi: reduce, reduce_scatter, gather, scatter, all_to_all, send / recv") {
  const int n = dist::world_size();
  const int r = dist::rank();
  const double tri = n * (n + 1) / 2.0;  // sum over ranks of r + 1
  for (int dst = 0; dst < n; ++dst) {
    Tensor<double> t = ramp<double>(3, r);
    dist::reduce(t, dst);
    if (r == dst)
      CHECK(values(t) == std::vector<double>{tri, tri + n, tri + 2 * n});
    else
      CHECK(values(t) == values(ramp<double>(3, r)));  // unchanged
  }
  {  // member k receives the sum over ranks of their in[k]
    std::vector<Tensor<float>> in;
    for (int k = 0; k < n; ++k) in.push_back(ramp<float>(2, 100.0 * k + r));
    Tensor<float> out = empty<float>({2});
    dist::reduce_scatter(out, in);
    CHECK(values(out) == std::vector<double>{100.0 * r * n + tri, 100.0 * r * n + tri + n});
  }
  for (int dst = 0; dst < n; ++dst) {
    std::vector<Tensor<int32_t>> got;
    dist::gather(ramp<int32_t>(2, r), got, dst);
    if (r == dst) {
      REQUIRE(got.size() == static_cast<size_t>(n));
      for (int k = 0; k < n; ++k) CHECK(values(got[static_cast<size_t>(k)]) == values(ramp<int32_t>(2, k)));
    } else {
      CHECK(got.empty());
    }
  }
  for (int src = 0; src < n; ++src) {
    std::vector<Tensor<int64_t>> parts;
    if (r == src)
      for (int k = 0; k < n; ++k) parts.push_back(ramp<int64_t>(2, 10.0 * k));
    Tensor<int64_t> mine = empty<int64_t>({2});
    dist::scatter(mine, parts, src);
    CHECK(values(mine) == values(ramp<int64_t>(2, 10.0 * r)));
  }
  {  // every rank sends 100 r + k to rank k
    std::vector<Tensor<double>> in, out;
    for (int k = 0; k < n; ++k) in.push_back(ramp<double>(1, 100.0 * r + k));
    dist::all_to_all(out, in);
    REQUIRE(out.size() == static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) CHECK(values(out[static_cast<size_t>(k)]) == values(ramp<double>(1, 100.0 * k + r)));
  }
  {  // a ring: send to the next rank, receive from the previous one (both started, then waited)
    Tensor<double> mine = ramp<double>(4, r), theirs = zeros<double>({4});
    auto s = dist::send(mine, (r + 1) % n, /*tag=*/7, {.async_op = true});
    auto q = dist::recv(theirs, (r + n - 1) % n, 7, {.async_op = true});
    q.wait();
    s.wait();
    CHECK(values(theirs) == values(ramp<double>(4, (r + n - 1) % n)));
  }
}

TEST_CASE("mpi: asynchronous all_reduce and groups") {
  const int n = dist::world_size();
  const int r = dist::rank();
  Tensor<float> a = ramp<float>(1000, r);
  Tensor<float> at = from_vector<float>({1, 2, 3, 4}, {2, 2}).transpose(0, 1);  // through a copy
  auto w1 = dist::all_reduce(a, dist::ReduceOp::SUM, {.async_op = true});
  auto w2 = dist::all_reduce(at, dist::ReduceOp::MAX, {.async_op = true});
  w2.wait();
  w1.wait();
  CHECK(w1.is_completed());
  CHECK(values(a)[999] == doctest::Approx(n * (n + 1) / 2.0 + 999.0 * n));
  CHECK(values(at) == std::vector<double>{1, 3, 2, 4});  // (the same on every rank; written back)
  // a group of ranks 0 and n - 1; the others are not members
  auto g = dist::new_group({0, n - 1});
  CHECK(g->size() == 2);
  CHECK(g->ranks() == std::vector<int>{0, n - 1});
  Tensor<double> v = ramp<double>(1, r);
  if (g->is_member()) {
    dist::all_reduce(v, dist::ReduceOp::SUM, {.group = g.get()});
    CHECK(values(v)[0] == doctest::Approx(1.0 + n));
    Tensor<double> b = ramp<double>(1, r);
    dist::broadcast(b, n - 1, {.group = g.get()});
    CHECK(values(b)[0] == doctest::Approx(n));
    dist::barrier({.group = g.get()});
  } else {
    CHECK(g->rank() == -1);
    CHECK_THROWS_WITH_AS(dist::all_reduce(v, dist::ReduceOp::SUM, {.group = g.get()}), doctest::Contains("not in the group"),
                         error);
  }
  dist::barrier();
}

int main(int argc, char** argv) {
  dist::init_process_group(dist::Backend::MPI);
  doctest::Context ctx(argc, argv);
  if (dist::rank() != 0) ctx.setOption("no-version", true);
  const int rc = ctx.run();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);  // any rank's failure fails all
  dist::destroy_process_group();
  return worst;
}
