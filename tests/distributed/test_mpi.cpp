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
  CHECK_THROWS_WITH_AS(dist::all_gather(wrong, ramp<int64_t>(3, r)), doctest::Contains("for a world of"), value_error);
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
