// A typical 100-line user program, used to measure the cost of `#include <reel/reel.hpp>`:
//   benchmarks/compile_time.sh times `g++ -O2 -c` of this file.
#include <iostream>
#include <reel/reel.hpp>
#ifdef REEL_CT_LINALG  // the same program with one linalg op (compile_time.sh --linalg)
#include <reel/linalg.hpp>
#endif

using namespace reel;

namespace {

Tensor<float> normalize(const Tensor<float>& x) {
  auto m = mean(x, {1}, true);
  Tensor<float> centered = x - m;
  auto var = mean(square(centered), {1}, true);
  return centered * rsqrt(var + 1e-5f);
}

Tensor<float> mlp(const Tensor<float>& x, const Tensor<float>& w1, const Tensor<float>& b1,
                  const Tensor<float>& w2) {
  Tensor<float> h = matmul(x, w1) + b1;
  h = relu(h);
  return matmul(h, w2);
}

double accuracy(const Tensor<float>& logits, const Tensor<int64_t>& labels) {
  auto pred = argmax(logits, 1);
  auto hits = sum(cast<int64_t>(eq(pred, labels)));
  return static_cast<double>(hits.item()) / static_cast<double>(labels.numel());
}

struct Stats {
  double mean_value;
  double max_value;
  double min_value;
};

Stats describe(const Tensor<float>& t) {
  return {static_cast<double>(mean(t).item()), static_cast<double>(amax(t).item()),
          static_cast<double>(amin(t).item())};
}

}  // namespace

int main() {
  Generator gen(1234);
  const int64_t n = 256, d = 32, h = 64, k = 10;

  auto x = randn<float>({n, d}, gen);
  auto w1 = randn<float>({d, h}, gen);
  auto b1 = zeros<float>({h});
  auto w2 = randn<float>({h, k}, gen);
  auto labels = randint<int64_t>(0, k, {n}, gen);

  auto xn = normalize(x);
  auto logits = mlp(xn, w1, b1, w2);
  auto probs = nn::functional::softmax(logits, 1);
  auto logp = nn::functional::log_softmax(logits, 1);

  std::cout << "accuracy of a random network: " << accuracy(logits, labels) << "\n";

  auto s = describe(probs);
  std::cout << "probabilities: mean " << s.mean_value << ", max " << s.max_value << ", min " << s.min_value << "\n";

  auto top = topk(probs, 3, 1);
  std::cout << "top-3 classes of sample 0: " << top.indices[0] << "\n";

  auto sorted = sort(logp.select(0, 0), 0, true);
  std::cout << "sorted log-probabilities: " << sorted.values << "\n";

  auto grid = linspace<half>(-1, 1, 5);
  std::cout << "grid: " << grid << "\n";

  auto counts = histc(x, 10, -3, 3);
  std::cout << "histogram: " << counts << "\n";

  auto clipped = Tensor<float>(clamp(x, -1.0, 1.0));
  auto frac = mean(cast<float>(eq(abs(clipped), 1.0f)));
  std::cout << "fraction clipped: " << frac << "\n";

  auto bytes = randint<uint8_t>(0, 256, {8}, gen);
  std::cout << "saturated: " << Tensor<uint8_t>(clamp(bytes, 16, 240)) << "\n";

  auto cs = cumsum(arange<int64_t>(1, 6), 0);
  std::cout << "cumsum: " << cs << "\n";

  auto stacked = stack({x[0], x[1]}, 0);
  auto joined = cat({stacked, stacked}, 1);
  std::cout << "joined shape: " << joined.sizes() << "\n";

  auto lse = logsumexp(logits, 1);
  std::cout << "logsumexp[0]: " << lse[0] << "\n";

  auto nrm = norm(w1);
  std::cout << "||w1|| = " << nrm << "\n";
#ifdef REEL_CT_LINALG
  auto A = Tensor<double>(randn<double>({4, 4}, gen) + eye<double>(4) * 4.0).requires_grad_();
  linalg::slogdet(A).logabsdet.backward();
  std::cout << "d logabsdet / dA = " << A.grad() << "\n";
#endif
  return 0;
}
