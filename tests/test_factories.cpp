// Factories and the random generator behind rand/randn/randint.
#include <doctest/doctest.h>

#include <reel/reel.hpp>

using namespace reel;

TEST_CASE("basic factories") {
  CHECK(zeros<float>({2, 3}).to_vector() == std::vector<float>(6, 0));
  CHECK(ones<int8_t>({2}).to_vector() == std::vector<int8_t>{1, 1});
  CHECK(full<double>({2}, 2.5).to_vector() == std::vector<double>{2.5, 2.5});
  CHECK(eye<float>(3).to_vector() == std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(eye<int>(2, 3).sizes() == Shape{2, 3});
  auto t = tensor<float>({{1, 2}, {3, 4}});
  CHECK(zeros_like(t).sizes() == t.sizes());
  CHECK(ones_like(t).to_vector() == std::vector<float>(4, 1));
  CHECK(empty_like(t).sizes() == Shape{2, 2});
  CHECK(tensor<int64_t>({{{1, 2}}, {{3, 4}}}).sizes() == Shape{2, 1, 2});
  CHECK(tensor<half>({1.5, 2}).to<float>().to_vector() == std::vector<float>{1.5, 2});
  CHECK_THROWS_AS(tensor<float>({{1, 2}, {3}}), value_error);
  CHECK_THROWS_AS(from_vector<float>({1, 2, 3}, {2, 2}), value_error);
  CHECK(from_vector<float>({1, 2, 3, 4}, {2, 2}).to_vector() == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("random factories are reproducible and split-invariant") {
  Generator g1(42), g2(42);
  auto a = rand<float>({1000}, g1);
  auto b = rand<float>({1000}, g2);
  CHECK(a.to_vector() == b.to_vector());
  auto c = rand<float>({1000}, g1);
  CHECK(c.to_vector() != a.to_vector());
  // the first word of a fresh generator's stream is Philox4x32-10 at counter 0
  Generator g3(42);
  auto r = rand<float>({1}, g3).item();
  uint32_t w = detail::philox4x32_10({0, 0, 0, 0}, {42, 0})[0];
  CHECK(r == static_cast<float>(w >> 8) * 0x1p-24f);
  // large fills (parallel) equal small ones taken in sequence from the same offset
  Generator g4(7), g5(7);
  auto big = rand<double>({200000}, g4).to_vector();
  std::vector<double> pieces;
  for (int k = 0; k < 4; ++k) {
    auto p = rand<double>({50000}, g5).to_vector();
    pieces.insert(pieces.end(), p.begin(), p.end());
  }
  CHECK(big == pieces);
}

TEST_CASE("distributions") {
  Generator g(3);
  auto u = rand<double>({100000}, g);
  CHECK(mean(u).item() == doctest::Approx(0.5).epsilon(0.01));
  CHECK(amin(u).item() >= 0);
  CHECK(amax(u).item() < 1);
  auto n = randn<double>({100000}, g);
  CHECK(std::abs(mean(n).item()) < 0.02);
  CHECK(mean(square(n)).item() == doctest::Approx(1).epsilon(0.02));
  auto h = rand<half>({10000}, g);
  CHECK(static_cast<float>(amax(h).item()) < 1.0f);
  auto i = randint<int32_t>(-3, 4, {10000}, g);
  CHECK(amin(i).item() == -3);
  CHECK(amax(i).item() == 3);
  auto z = randn<std::complex<double>>({20000}, g);
  CHECK(mean(Tensor<double>(square(abs(z)))).item() == doctest::Approx(1).epsilon(0.05));
  CHECK_THROWS_AS(randint<int32_t>(3, 3, {1}, g), value_error);
  manual_seed(5);
  auto d1 = rand<float>({4});
  manual_seed(5);
  CHECK(rand<float>({4}).to_vector() == d1.to_vector());
}
