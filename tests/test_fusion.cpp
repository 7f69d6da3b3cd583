// autograd::compile with code generation (CompileOptions::fuse, autograd/fusion.hpp): a
// replay gives what running the function eagerly gives, within rounding, at new inputs each
// call; buffers with one consumer disappear into it (the kernel counts say how many loop
// nests remain); what generated code cannot do runs as captured; without a compiler the
// capture replays its kernels as without the option.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <reel/reel.hpp>

#include "../examples/lj_model.hpp"
#include "check_close.hpp"

using namespace reel;
using Td = Tensor<double>;
namespace ag = autograd;

namespace {
// The generated libraries go to a directory of the test's own.
struct JitCache {
  JitCache() {
    auto dir = std::filesystem::temp_directory_path() / "reel-test-jit";
    setenv("REEL_JIT_CACHE", dir.c_str(), 1);
  }
};
const JitCache jit_cache;

Td random(Shape s, uint64_t seed) {
  Generator gen(seed);
  return randn<double>(s, gen);
}
// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};
}  // namespace

TEST_CASE("fusion: the LJ energy becomes two loop nests and the scalar product") {
  auto energy = ag::compile(
      [](const Td& x) {
        ag::no_grad ng;
        return lj::energy(x);
      },
      {.fuse = true});
  for (int k = 0; k < 3; ++k) {
    Td P = lj::random_cluster(13 + k, 5 + k);
    auto xs = P.to_vector();
    const double e = energy(P).item();
    CHECK(energy.fusion_reason() == "");
    CHECK(e == doctest::Approx(lj::energy_by_hand(xs.data(), static_cast<int>(P.size(0)))).epsilon(1e-13));
    check_near(energy(P), lj::energy(P));
  }
  // the pair differences and their squares go into the sum over xyz; + eye and r^-6 into the
  // final sum; 2 * sum stays: three loop nests, in one generated function
  CHECK(energy.fused_kernels() == 3);
  CHECK(energy.kernels() == 1);
}

TEST_CASE("fusion: broadcasts, reductions over leading and middle dims, keepdim, mean") {
  auto f = ag::compile(
      [](const Td& x, const Td& w) {
        Td y = tanh(x) * w + 1.0;  // read by three consumers: stays a buffer
        return std::vector<Td>{mean(y, Shape{0, 2}, true), sum(exp(y), Shape{1}), sum(y * y), mean(x, Shape{1})};
      },
      {.fuse = true});
  for (int k = 0; k < 3; ++k) {
    Td x = random({4, 5, 3}, 10 + k), w = random({5, 1}, 20 + k);
    auto got = f(x, w);
    Td y = tanh(x) * w + 1.0;
    std::vector<Td> want{mean(y, Shape{0, 2}, true), sum(exp(y), Shape{1}), sum(y * y), mean(x, Shape{1})};
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) check_near(got[i], want[i]);
  }
  CHECK(f.fusion_reason() == "");
  CHECK(f.fused_kernels() == 5);  // y, and one nest per result (exp(y) and y * y inside their sums)
}

TEST_CASE("fusion: an intermediate that is also a result, views, in-place updates, masks") {
  auto f = ag::compile(
      [](const Td& x) {
        Td a = x * 2.0;        // a result: written, never inlined
        Td b = a.t() + 1.0;    // a transposed read
        Td c = x * 3.0;
        c.add_(x);             // written twice: stays
        Td d = where(x > 0.0, x, 0.5 * x);  // bool nodes, converted
        Td m = (x > 0.0) * x + 0.5 * x;
        return std::vector<Td>{a, b, c * 2.0, sum(d, Shape{0}), sum(m * m, Shape{1})};
      },
      {.fuse = true});
  for (int k = 0; k < 3; ++k) {
    Td x = random({3, 4}, 30 + k);
    auto got = f(x);
    Td a = x * 2.0, c = x * 4.0;
    Td m = (x > 0.0) * x + 0.5 * x;
    std::vector<Td> want{a, a.t() + 1.0, c * 2.0, sum(where(x > 0.0, x, 0.5 * x), Shape{0}), sum(m * m, Shape{1})};
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) check_near(got[i], want[i]);
  }
  CHECK(f.fusion_reason() == "");
  // one generated function of seven loop nests: a, b, c = x * 3, c += x, c * 2, and the two
  // sums with d and m inlined into them
  CHECK(f.fused_kernels() == 7);
  CHECK(f.kernels() == 1);
}

TEST_CASE("fusion: a tensor from outside the function that it writes is still written") {
  Td w = zeros<double>({3, 4});
  auto f = ag::compile(
      [&](const Td& x) {
        w.copy_(x * 2.0);  // written once, read once: but the caller sees it
        return sum(w * 3.0, Shape{1});
      },
      {.fuse = true});
  for (int k = 0; k < 3; ++k) {
    Td x = random({3, 4}, 100 + k);
    check_near(f(x), sum(x * 6.0, Shape{1}));
    check_near(w, x * 2.0);
  }
  CHECK(f.fusion_reason() == "");
  CHECK(f.fused_kernels() == 2);
}

TEST_CASE("fusion: kernels it cannot generate (a product) run between generated ones") {
  auto f = ag::compile(
      [](const Td& x, const Td& w) {
        Td h = matmul(x * 0.5, w);
        return sum(tanh(h) * tanh(h), Shape{1});
      },
      {.fuse = true});
  for (int k = 0; k < 2; ++k) {
    Td x = random({6, 4}, 40 + k), w = random({4, 5}, 50 + k);
    Td h = matmul(x * 0.5, w);
    check_near(f(x, w), sum(tanh(h) * tanh(h), Shape{1}));
  }
  CHECK(f.fusion_reason() == "");
  CHECK(f.fused_kernels() == 2);
  CHECK(f.kernels() == 3);  // x * 0.5 (generated), the product (captured), the sum (generated)
}

TEST_CASE("fusion: gradients inside the function (forward and backward kernels generated)") {
  auto forces = ag::compile([](const Td& x) { return lj::forces(x); }, {.fuse = true});
  for (int k = 0; k < 2; ++k) {
    Td P = lj::random_cluster(8, 60 + k);
    check_near(forces(P), lj::forces(P));
  }
  CHECK(forces.fusion_reason() == "");
  CHECK(forces.kernels() == 1);  // every kernel of the forward and the backward pass generated
  // a derivative graph with two roots (the gradients of both factors of a product)
  auto grads = [](const Td& x, const Td& w) {
    Td a = x.detach(), b = w.detach();
    a.requires_grad_();
    b.requires_grad_();
    return ag::grad({sum(tanh(a * b) * a)}, {a, b});
  };
  auto g = ag::compile(grads, {.fuse = true});
  for (int k = 0; k < 2; ++k) {
    Td x = random({3, 4}, 80 + k), w = random({3, 4}, 90 + k);
    auto got = g(x, w), want = grads(x, w);
    check_near(got[0], want[0]);
    check_near(got[1], want[1]);
  }
  CHECK(g.fusion_reason() == "");
  CHECK(g.kernels() == 1);
}

TEST_CASE("fusion: the cache key changes with reel's headers (their paths, sizes and times)") {
  namespace fs = std::filesystem;
  using detail::fusion::jit_headers_fingerprint;
  const fs::path root = fs::temp_directory_path() / ("reel_fingerprint_" + std::to_string(std::rand()));
  fs::create_directories(root / "reel" / "core");
  auto write = [&](const fs::path& p, const std::string& text) {
    std::ofstream(p) << text;
  };
  write(root / "reel" / "a.hpp", "// a\n");
  write(root / "reel" / "core" / "b.hpp", "// b\n");
  const uint64_t f0 = jit_headers_fingerprint(root.string());
  CHECK(f0 != 0);
  CHECK(jit_headers_fingerprint(root.string()) == f0);
  write(root / "reel" / "core" / "b.hpp", "// b, edited\n");  // another size
  const uint64_t f1 = jit_headers_fingerprint(root.string());
  CHECK(f1 != f0);
  fs::last_write_time(root / "reel" / "a.hpp", fs::last_write_time(root / "reel" / "a.hpp") - std::chrono::hours(1));
  const uint64_t f2 = jit_headers_fingerprint(root.string());  // the same size, an older time
  CHECK(f2 != f1);
  fs::rename(root / "reel" / "core", root / "reel" / "core2");  // moved
  CHECK(jit_headers_fingerprint(root.string()) != f2);
  CHECK(jit_headers_fingerprint((root / "none").string()) == 0);
  fs::remove_all(root);
  // reel's own headers are found and read
  CHECK(jit_headers_fingerprint((fs::path(__FILE__).parent_path().parent_path() / "include").string()) != 0);
}

TEST_CASE("fusion: without a compiler the capture replays its kernels as captured") {
  Td x = random({5, 3}, 70);
  auto run = [](const Td& v) { return sum(exp(v) * 2.0, Shape{1}); };
  {
    ScopedEnv off("REEL_JIT_CXX", "none");
    set_warning_action(WarningAction::Ignore);
    auto f = ag::compile(run, {.fuse = true});
    Td r = f(x);
    CHECK(f.fused_kernels() == 0);
    CHECK(f.fusion_reason().find("off") != std::string::npos);
    CHECK(r.to_vector() == run(x).to_vector());  // the captured kernels: bit for bit
    CHECK(f(x * 2.0).to_vector() == run(x * 2.0).to_vector());
  }
  {
    ScopedEnv broken("REEL_JIT_CXX", "false");  // a "compiler" that always fails
    auto f = ag::compile([](const Td& v) { return sum(sin(v) * 3.0, Shape{0}); }, {.fuse = true});
    Td r = f(x);
    CHECK(f.fused_kernels() == 0);
    CHECK(f.fusion_reason().find("compiler failed") != std::string::npos);
    CHECK(r.to_vector() == sum(sin(x) * 3.0, Shape{0}).to_vector());
  }
  set_warning_action(WarningAction::Default);
}
