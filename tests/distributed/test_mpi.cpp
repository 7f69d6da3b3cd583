// reel::distributed on MPI (issue 20, first part), run by ctest under mpirun with 2 and 3
// ranks: every rank runs the same cases in the same order. Expected values are closed forms
// of the ranks' contributions (rank r holds r + 1 + i at element i, ...).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <filesystem>
#include <thread>
#include <reel/distributed.hpp>
#include <reel/distributed/init_file.hpp>
#ifdef REEL_TEST_SHARDED
#include <reel/distributed/sharded.hpp>
#endif
#include <reel/reel.hpp>

using namespace reel;
namespace dist = reel::distributed;
// An MPI build's distributed types live in their own inline namespace (a file compiled
// without MPI has other layouts: mixing the two must not link).
static_assert(std::is_same_v<dist::ProcessGroup, reel::distributed::with_mpi::ProcessGroup>);
static_assert(std::is_same_v<nn::parallel::DistributedDataParallel<float>,
                             reel::nn::parallel::with_mpi::DistributedDataParallel<float>>);

namespace {
template <class T>
Tensor<T> ramp(int64_t n, double r) {  // element i: r + 1 + i
  std::vector<T> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<T>(r + 1 + static_cast<double>(i)));
  return from_vector<T>(v, {n});
}
void check_all_close(const Tensor<double>& a, const Tensor<double>& b) {
  REQUIRE(a.defined());
  REQUIRE(b.defined());
  REQUIRE(a.sizes() == b.sizes());
  auto x = a.contiguous().to_vector(), y = b.contiguous().to_vector();
  for (size_t i = 0; i < x.size(); ++i) CHECK(x[i] == doctest::Approx(y[i]).epsilon(1e-12).scale(1));
}
template <class T>
std::vector<double> values(const Tensor<T>& t) {
  std::vector<double> v;
  for (const T& x : t.contiguous().to_vector()) v.push_back(static_cast<double>(x));
  return v;
}
#ifdef REEL_TEST_SHARDED
// A CPU AnyTensor's real values as doubles (the dtypes the checkpoint test saves).
std::vector<double> any_values(const AnyTensor& t) {
  return t.visit([](const auto& x) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(x.data_ptr())>>;
    if constexpr (std::is_arithmetic_v<T> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>)
      return values(x);
    else
      return std::vector<double>{};
  });
}
#endif
}  // namespace

bool nccl_refused = false;
TEST_CASE("mpi: Backend::NCCL in a program without reel's NCCL engine raises, and leaves no group") {
  CHECK(nccl_refused);
}

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

TEST_CASE("mpi: DistributedDataParallel gives the full batch's gradients, overlaps, no_sync, unused parameters") {
  const int n = dist::world_size();
  const int r = dist::rank();
  const int64_t rows = 12, per = rows / n;  // (12: divisible by 2 and 3)
  Generator g(42);  // the same data and initial weights on every rank...
  Tensor<double> X = randn<double>({rows, 4}, g), Y = randn<double>({rows, 2}, g);
  Tensor<double> W1_0 = randn<double>({4, 5}, g), b1_0 = randn<double>({5}, g), W2_0 = randn<double>({5, 2}, g),
                 b2_0 = randn<double>({2}, g);
  auto loss_of = [](const Tensor<double>& x, const Tensor<double>& y, const std::vector<Tensor<double>>& p) {
    Tensor<double> h = tanh(matmul(x, p[0]) + p[1]);
    Tensor<double> d = matmul(h, p[2]) + p[3] - y;
    return Tensor<double>(mean(Tensor<double>(d * d)));
  };
  auto fresh = [&](double skew) {  // ...except that ranks other than 0 start perturbed: DDP broadcasts rank 0's
    return std::vector<Tensor<double>>{Tensor<double>(W1_0 + skew).requires_grad_(), Tensor<double>(b1_0 + skew).requires_grad_(),
                                       Tensor<double>(W2_0 + skew).requires_grad_(), Tensor<double>(b2_0 + skew).requires_grad_()};
  };
  auto ref = fresh(0);  // the whole batch in one process
  loss_of(X, Y, ref).backward();
  auto params = fresh(r == 0 ? 0.0 : 0.5);
  nn::parallel::DistributedDataParallel<double> ddp(params, {.bucket_cap_mb = 1e-6});  // one bucket per parameter
  CHECK(ddp.bucket_count() == 4);
  CHECK(ddp.buckets().front() == std::vector<size_t>{3});  // the last registered first
  Tensor<double> xs = X.slice(0, r * per, (r + 1) * per), ys = Y.slice(0, r * per, (r + 1) * per);
  loss_of(xs, ys, params).backward();
  for (size_t k = 0; k < 4; ++k) {
    CAPTURE(k);
    check_all_close(params[k].grad(), ref[k].grad());
  }
  // the first bucket's all-reduce started before backward had produced every gradient
  const auto& ev = ddp.events();
  REQUIRE(!ev.empty());
  CHECK(ev.back() == "end");
  auto at = [&](const std::string& e) { return std::find(ev.begin(), ev.end(), e) - ev.begin(); };
  CHECK(at("launch 0") < at("ready 0"));  // (parameter 0, W1, is the last one backward reaches)
  // the all-reduces' times: four of them, in one step; what ran during backward is part of it
  const auto ov = ddp.overlap();
  CHECK(ov.steps == 1);
  CHECK(ov.all_reduce_seconds > 0);
  CHECK(ov.during_backward_seconds >= 0);
  CHECK(ov.during_backward_seconds <= ov.all_reduce_seconds);
  ddp.reset_overlap();
  CHECK(ddp.overlap().steps == 0);
  // no_sync: local gradients accumulate; the next synchronized backward reduces their sum
  for (auto& p : params) p.set_grad(Tensor<double>());
  {
    auto guard = ddp.no_sync();
    loss_of(xs, ys, params).backward();
  }
  auto local = fresh(0);
  loss_of(xs, ys, local).backward();
  check_all_close(params[0].grad(), local[0].grad());  // not reduced
  loss_of(xs, ys, params).backward();
  for (size_t k = 0; k < 4; ++k) check_all_close(params[k].grad(), Tensor<double>(ref[k].grad() * 2.0));
  // a parameter without a gradient: an error, or zeros with find_unused_parameters
  auto p2 = fresh(0);
  nn::parallel::DistributedDataParallel<double> strict(p2, {.bucket_cap_mb = 1e-6});
  auto partial = [&](const std::vector<Tensor<double>>& p) { return mean(Tensor<double>(tanh(matmul(xs, p[0]) + p[1]))); };
  CHECK_THROWS_WITH_AS(Tensor<double>(partial(p2)).backward(), doctest::Contains("parameters 2, 3 received no gradient"), error);
  auto p3 = fresh(0);
  nn::parallel::DistributedDataParallel<double> lenient(p3, {.bucket_cap_mb = 1e-6, .find_unused_parameters = true});
  Tensor<double>(partial(p3)).backward();
  auto p4 = fresh(0);
  Tensor<double>(mean(Tensor<double>(tanh(matmul(X, p4[0]) + p4[1])))).backward();  // (per-rank means of equal shards)
  check_all_close(p3[0].grad(), p4[0].grad());
  CHECK(values(p3[3].grad()) == std::vector<double>{0, 0});
}

TEST_CASE("mpi: DistributedSampler deals each rank its share, as torch's does") {
  const int r = dist::rank(), n = dist::world_size();
  // no shuffle: every n-th index from the rank's place, padded from the start (torch's rule)
  dist::DistributedSampler plain(10, {.shuffle = false});
  const int64_t per = (10 + n - 1) / n;
  CHECK(plain.num_samples() == per);
  CHECK(plain.total_size() == per * n);
  std::vector<int64_t> want;
  for (int64_t i = r; i < per * n; i += n) want.push_back(i % 10);
  CHECK(plain.indices() == want);
  // drop_last: ceil((10 - n) / n) each, nothing repeated
  dist::DistributedSampler cut(10, {.shuffle = false, .drop_last = true});
  CHECK(cut.num_samples() == (10 % n ? (10 - n + n - 1) / n : 10 / n));
  // shuffled: the ranks' shares are disjoint and cover every index once (23 = 0 mod n or padded)
  dist::DistributedSampler mixed(23, {.seed = 5});
  for (int64_t epoch : {0, 1}) {
    mixed.set_epoch(epoch);
    auto mine = mixed.indices();
    REQUIRE(static_cast<int64_t>(mine.size()) == mixed.num_samples());
    std::vector<Tensor<int64_t>> all;
    dist::all_gather(all, from_vector<int64_t>(mine, {mixed.num_samples()}));
    std::vector<int> seen(23, 0);
    for (auto& a : all)
      for (int64_t i : a.to_vector()) ++seen[static_cast<size_t>(i)];
    for (int c : seen) CHECK(c >= 1);
    int64_t total = 0;
    for (int c : seen) total += c;
    CHECK(total == mixed.total_size());
    if (r == 0 && epoch == 1) {  // another epoch, another order
      dist::DistributedSampler again(23, {.seed = 5});
      CHECK(again.indices() != mine);
    }
  }
  // every rank's share agrees with a sampler told its rank explicitly
  dist::DistributedSampler told(23, {.num_replicas = n, .rank = r, .seed = 5});
  told.set_epoch(1);
  CHECK(told.indices() == mixed.indices());
  CHECK_THROWS_WITH_AS(dist::DistributedSampler(5, {.num_replicas = 2, .rank = 2}), doctest::Contains("invalid rank 2"), value_error);
}

#ifdef REEL_TEST_SHARDED
TEST_CASE("mpi: sharded checkpoints (Hugging Face's layout) load on any number of ranks") {
  const int r = dist::rank(), n = dist::world_size();
  Generator g(11);  // the same state on every rank
  StateDict sd;
  sd.insert_or_assign("embed.weight", AnyTensor(randn<float>({50, 8}, g)));
  sd.insert_or_assign("in.weight", AnyTensor(randn<double>({16, 7}, g)));
  sd.insert_or_assign("in.bias", AnyTensor(randn<float>({16}, g)));
  sd.insert_or_assign("head.weight", AnyTensor(Tensor<bfloat16>(randn<float>({30, 16}, g).to<bfloat16>())));
  sd.insert_or_assign("steps", AnyTensor(full<int64_t>({}, 123)));
  sd.insert_or_assign("mask", AnyTensor(Tensor<bool>(randn<float>({9}, g) > 0.0f)));
  // shard_of deals every entry to exactly one rank, the same way on every rank
  std::map<std::string, int> owners;
  for (int k = 0; k < n; ++k)
    for (const auto& [name, t] : dist::shard_of(sd, k, n)) {
      CHECK(owners.count(name) == 0);
      owners[name] = k;
    }
  CHECK(owners.size() == sd.size());
  const std::string prefix = "reel_sharded_np" + std::to_string(n) + "/model";
  if (r == 0) std::system(("mkdir -p reel_sharded_np" + std::to_string(n)).c_str());
  dist::barrier();
  dist::save_sharded(prefix, dist::shard_of(sd, r, n));
  for (int k = 1; k <= n; ++k) {
    char f[64];
    std::snprintf(f, sizeof f, "-%05d-of-%05d.safetensors", k, n);
    CHECK(std::ifstream(prefix + f).good());
  }
  // every rank reads the whole state back (as a run on any other number of ranks would)
  StateDict back = dist::load_sharded(prefix);
  REQUIRE(back.size() == sd.size());
  for (const auto& [name, t] : sd) {
    CAPTURE(name);
    REQUIRE(back.contains(name));
    const AnyTensor& u = back.at(name);
    CHECK(u.dtype() == t.dtype());
    CHECK(u.sizes() == t.sizes());
    CHECK(any_values(u) == any_values(t));
  }
  // the index names each entry's shard
  std::ifstream idx(prefix + ".safetensors.index.json");
  std::stringstream text;
  text << idx.rdbuf();
  CHECK(text.str().find("\"total_size\"") != std::string::npos);
  CHECK(text.str().find("\"in.weight\": \"model-0000" + std::to_string(owners["in.weight"] + 1)) != std::string::npos);
  // a name in two shards: every rank raises before anything is written
  StateDict twice;
  twice.insert_or_assign("both", AnyTensor(full<float>({2}, 1.0f)));
  CHECK_THROWS_WITH_AS(dist::save_sharded(prefix + "_dup", twice), doctest::Contains("'both' is in the shards of rank 0 and of rank 1"),
                       value_error);
  CHECK(!std::ifstream(prefix + "_dup.safetensors.index.json").good());
  dist::barrier();
  if (r == 0) std::system(("rm -rf reel_sharded_np" + std::to_string(n)).c_str());
}
#endif

TEST_CASE("mpi: DETAIL checks: matching collectives run, mismatched shapes, dtypes and ops raise on every rank") {
  const int r = dist::rank(), n = dist::world_size();
  std::vector<int> all(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) all[static_cast<size_t>(k)] = k;
  auto g = dist::new_group(all, {.debug = dist::DebugLevel::DETAIL, .timeout = std::chrono::seconds(20)});
  CHECK(g->debug() == dist::DebugLevel::DETAIL);
  const dist::CollectiveOptions on{.group = g.get()};
  auto t = ramp<float>(4, r);
  dist::all_reduce(t, dist::ReduceOp::SUM, on);
  CHECK(values(t)[0] == doctest::Approx(n * (n + 1) / 2.0));
  dist::barrier(on);
  // the last rank's shape differs
  auto u = r == n - 1 ? ramp<float>(3, r) : ramp<float>(4, r);
  const std::string last = std::to_string(n - 1);
  const std::string shapes = "rank 0 calls collective #2: all_reduce(torch.float32 [4]), but rank " + last +
                             " calls collective #2: all_reduce(torch.float32 [3])";
  CHECK_THROWS_WITH_AS(dist::all_reduce(u, dist::ReduceOp::SUM, on), doctest::Contains(shapes.c_str()), error);
  CHECK(values(u)[0] == r + 1);  // (nothing was sent)
  // rank 1's dtype differs (a broadcast of doubles against floats)
  if (r == 1) {
    auto d = ramp<double>(4, r);
    CHECK_THROWS_WITH_AS(dist::broadcast(d, 0, on), doctest::Contains("but rank 1 calls collective #3: broadcast(torch.float64 [4], root 0)"), error);
  } else {
    auto f = ramp<float>(4, r);
    CHECK_THROWS_WITH_AS(dist::broadcast(f, 0, on), doctest::Contains("broadcast(torch.float32 [4], root 0), but rank 1"), error);
  }
  // different ops: a barrier against an all_reduce
  if (r == 0) CHECK_THROWS_WITH_AS(dist::barrier(on), doctest::Contains("calls collective #4: all_reduce("), error);
  else CHECK_THROWS_WITH_AS(dist::all_reduce(t, dist::ReduceOp::SUM, on), doctest::Contains("rank 0 calls collective #4: barrier"), error);
  // and the group still works
  auto w = ramp<double>(2, r);
  dist::all_reduce(w, dist::ReduceOp::MAX, on);
  CHECK(values(w) == std::vector<double>{double(n), double(n + 1)});
}

TEST_CASE("mpi: DETAIL checks: a rank that does not join is named within the timeout") {
  const int r = dist::rank(), n = dist::world_size();
  std::vector<int> all(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) all[static_cast<size_t>(k)] = k;
  auto g = dist::new_group(all, {.debug = dist::DebugLevel::DETAIL, .timeout = std::chrono::milliseconds(1500)});
  const dist::CollectiveOptions on{.group = g.get()};
  if (r != 1) {  // rank 1 skips the collective
    auto t = ramp<float>(4, r);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(dist::all_reduce(t, dist::ReduceOp::SUM, on),
                         doctest::Contains("rank 1 did not join collective #0: all_reduce(torch.float32 [4])"), error);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(waited < 30);  // (a generous bound: what matters is that it returns)
  }
  dist::barrier();  // (the world's, unchecked: everyone meets again)
}

// NCCL's unique id without MPI goes through a file (init_file.hpp); threads stand for the
// ranks here (each MPI rank uses a directory of its own).
TEST_CASE("init file: rank 0's bytes reach every rank, the file goes, an earlier run's file stops every rank") {
  namespace fs = std::filesystem;
  namespace dd = dist::detail_dist;
  const fs::path dir = fs::temp_directory_path() / ("reel_init_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "id").string();
  constexpr size_t len = 129;
  auto msg_of = [](int seed) {
    std::vector<char> m(len);
    for (size_t i = 0; i < len; ++i) m[i] = static_cast<char>((seed * 31 + static_cast<int>(i) * 7) & 0x7f);
    return m;
  };
  // Runs ranks 0 .. size-1 as threads (rank 0 after `delay0`); what each raised ("" if none).
  auto run = [&](int size, std::vector<std::vector<char>>& got, std::chrono::milliseconds timeout,
                 std::chrono::milliseconds delay0, int only = -1) {
    std::vector<std::string> err(size);
    std::vector<std::thread> ts;
    for (int r = 0; r < size; ++r) {
      if (only >= 0 && r != only) continue;
      got[r] = r == 0 ? msg_of(1) : std::vector<char>(len, 0);
      ts.emplace_back([&, r] {
        try {
          if (r == 0) std::this_thread::sleep_for(delay0);
          dd::exchange_by_file(got[r].data(), len, r, size, path, timeout);
        } catch (const std::exception& e) {
          err[r] = e.what();
        }
      });
    }
    for (auto& t : ts) t.join();
    return err;
  };
  SUBCASE("three ranks, rank 0 last to start: every rank holds rank 0's bytes, no file is left") {
    std::vector<std::vector<char>> got(3);
    auto err = run(3, got, std::chrono::seconds(20), std::chrono::milliseconds(50));
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK(err[r] == "");
      CHECK(got[r] == msg_of(1));
    }
    CHECK(fs::is_empty(dir));
  }
  SUBCASE("a file an earlier run left: rank 0 refuses it, the other ranks raise instead of going on with its id") {
    {
      auto stale = msg_of(2);
      std::ofstream(path, std::ios::binary).write(stale.data(), len);
      std::ofstream(dd::init_ack_path(path, 1), std::ios::binary).write(stale.data(), len);
    }
    std::vector<std::vector<char>> got(2);
    auto err = run(2, got, std::chrono::milliseconds(300), std::chrono::milliseconds(0));
    CHECK(err[0].find("exists already") != std::string::npos);
    CHECK(err[1].find("did not confirm") != std::string::npos);
  }
  SUBCASE("a rank that never comes: rank 0 raises within the timeout and removes what it wrote") {
    std::vector<std::vector<char>> got(3);
    auto err = run(3, got, std::chrono::milliseconds(200), std::chrono::milliseconds(0), 0);
    CHECK(err[0].find("rank 1 did not acknowledge") != std::string::npos);
    CHECK(fs::is_empty(dir));
  }
  SUBCASE("no rank 0: the others raise within the timeout") {
    std::vector<std::vector<char>> got(2);
    auto err = run(2, got, std::chrono::milliseconds(100), std::chrono::milliseconds(0), 1);
    CHECK(err[1].find("rank 0 did not write") != std::string::npos);
  }
  fs::remove_all(dir);
}

int main(int argc, char** argv) {
  try {  // (this program is not compiled by nvcc: no NCCL engine in it)
    dist::init_process_group(dist::Backend::NCCL);
  } catch (const not_implemented_error& e) {
    nccl_refused = !dist::is_initialized() && std::string(e.what()).find("-lnccl") != std::string::npos;
  }
  dist::init_process_group(dist::Backend::MPI);
  doctest::Context ctx(argc, argv);
  if (dist::rank() != 0) ctx.setOption("no-version", true);
  const int rc = ctx.run();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);  // any rank's failure fails all
  // A send whose Work is still to be waited for when the group is left: waiting afterwards
  // raises (MPI has ended) instead of touching the ended communication thread.
  auto mine = ones<double>({2}), back = zeros<double>({2});
  dist::Work received = dist::recv(back, dist::rank(), 5, {.async_op = true});
  dist::Work sent = dist::send(mine, dist::rank(), 5, {.async_op = true});  // (to itself)
  received.wait();
  dist::destroy_process_group();
  bool late_wait_raised = false;
  try {
    sent.wait();
  } catch (const error& e) {
    late_wait_raised = std::string(e.what()).find("after destroy_process_group") != std::string::npos;
  }
  if (!late_wait_raised) std::fprintf(stderr, "a send's wait() after destroy_process_group did not raise\n");
  return worst != 0 ? worst : late_wait_raised ? 0 : 1;
}
