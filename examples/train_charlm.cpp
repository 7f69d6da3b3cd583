// A character-level language model trained on a public-domain novel (examples/data/).
//
// The model sees the previous `context` characters: their embeddings, concatenated, go
// through a linear layer and a few residual MLP blocks (RMSNorm -> Linear -> GELU -> Linear),
// and a fused linear_cross_entropy scores the next character against the vocabulary
// without materializing the logits. Training uses AdamW, gradient clipping and an EMA of the
// weights (used for evaluation and sampling). A fixed seed reproduces the run. With --fp8
// the hidden linear layers compute in FP8 (nn::functional::float8_linear, torchao's recipe:
// e4m3 activations and weights, e5m2 gradients, dynamic per-tensor scales; on the CPU the
// forward through scaled_mm's float fast path, the gradients through its exact reference),
// the master weights staying fp32.
//
// Checkpoints are PyTorch .pt files: --checkpoint FILE saves the model, its EMA, the
// optimizer's state, the generator's state and the step every --save-every steps and at the
// end; --resume FILE continues such a run exactly as if it had never stopped (same losses);
// --init-from FILE starts from weights written by PyTorch (a state_dict, or a dict holding
// one under "model"; tests/reference/pt/make_fixtures.py writes one, with the same layer names).
//
// Data parallel: example_train_charlm_mpi is this program built with MPI (REEL_TRAIN_DDP) and
// run by mpirun; each of the W ranks trains on its share (distributed::DistributedSampler) of
// every global batch of W x --batch windows, nn::parallel::DistributedDataParallel averages
// the gradients, and rank 0 prints and saves. Every rank draws the same global batch, so a run
// on W ranks with --batch B follows the run on one process with --batch W*B (to float rounding),
// and a checkpoint of either resumes on any number of ranks (examples/ddp_matches.cmake).
// --log-losses FILE writes each step's loss; --compare-losses FILE fails the run when a step's
// loss is not that file's (relative 1e-5).
//
//   example_train_charlm [--steps N] [--seed S] [--data FILE] [--fp8] [--hidden H] [--blocks K]
//                        [--batch B] [--eval-every N] [--checkpoint FILE] [--save-every N]
//                        [--resume FILE] [--init-from FILE] [--log-losses FILE]
//                        [--compare-losses FILE] [--bucket-mb MB (with MPI)]
//   mpirun -np 2 example_train_charlm_mpi [the same options]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <reel/io/pt.hpp>
#include <reel/reel.hpp>
#include <sstream>
#include <unistd.h>
#ifdef REEL_TRAIN_DDP
#include <reel/distributed.hpp>
namespace dist = reel::distributed;
#endif

using namespace reel;
namespace F = nn::functional;
using Tf = Tensor<float>;
using Ti = Tensor<int64_t>;

#ifndef REEL_EXAMPLES_DATA
#define REEL_EXAMPLES_DATA "examples/data"
#endif

struct Config {
  int64_t context = 16, embed = 16, hidden = 192, blocks = 3, batch = 128, steps = 3000, eval_every = 500;
  double lr = 3e-3, weight_decay = 0.01, clip = 1.0, ema_decay = 0.995;
  uint64_t seed = 1234;
  int64_t save_every = 0;
  double bucket_mb = 25;  // DistributedDataParallel's bucket_cap_mb
  bool fp8 = false;
  std::string data = REEL_EXAMPLES_DATA "/botchan.txt";
  std::string checkpoint, resume, init_from, log_losses, compare_losses;
};

// A linear layer, in fp32 or FP8
static Tf apply(const nn::Linear<float>& l, const Tf& x, bool fp8) {
  return fp8 ? F::float8_linear(x, l.weight, l.bias) : l(x);
}

struct Block : nn::Module<float> {
  nn::RMSNorm<float> norm;
  nn::Linear<float> up, down;
  bool fp8;
  Block(int64_t h, Generator& g, bool fp8) : norm({h}), up(h, 2 * h, g), down(2 * h, h, g), fp8(fp8) {
    register_module("norm", norm);
    register_module("up", up);
    register_module("down", down);
  }
  Tf operator()(const Tf& x) const { return Tf(x + apply(down, F::gelu(apply(up, norm(x), fp8)), fp8)); }
};

struct CharLM : nn::Module<float> {
  int64_t context;
  bool fp8;
  nn::Embedding<float> embed;
  nn::Linear<float> in;
  std::vector<Block> blocks;
  nn::RMSNorm<float> norm;
  nn::Linear<float> head;  // [vocab, hidden]: used as the weight of linear_cross_entropy
  CharLM(const Config& c, int64_t vocab, Generator& g)
      : context(c.context), fp8(c.fp8), embed(vocab, c.embed, g), in(c.context * c.embed, c.hidden, g), norm({c.hidden}),
        head(c.hidden, vocab, g) {
    register_module("embed", embed);
    register_module("in", in);
    for (int64_t i = 0; i < c.blocks; ++i) {
      blocks.emplace_back(c.hidden, g, c.fp8);
      register_module("blocks." + std::to_string(i), blocks.back());
    }
    register_module("norm", norm);
    register_module("head", head);
  }
  // [B, context] character ids -> [B, hidden] features
  Tf features(const Ti& x) const {
    Tf h = apply(in, embed(x).reshape({x.size(0), -1}), fp8);
    for (const auto& b : blocks) h = b(h);
    return norm(h);
  }
  Tf loss(const Ti& x, const Ti& y) const {
    return F::linear_cross_entropy(features(x), head.weight, y, {.bias = head.bias});
  }
};

// Windows of `context` characters and the character after each.
struct Batch {
  Ti x, y;
};
static Batch make_batch(const std::vector<int64_t>& text, const std::vector<int64_t>& starts, int64_t context) {
  const int64_t B = static_cast<int64_t>(starts.size());
  std::vector<int64_t> xs(B * context), ys(B);
  for (int64_t b = 0; b < B; ++b) {
    std::copy_n(text.begin() + starts[b], context, xs.begin() + b * context);
    ys[b] = text[starts[b] + context];
  }
  return {from_vector<int64_t>(xs, {B, context}), from_vector<int64_t>(ys, {B})};
}

static double evaluate(const CharLM& m, const Batch& val) {
  autograd::no_grad ng;
  return static_cast<double>(m.loss(val.x, val.y).item());
}

// Everything a run needs to continue: model, EMA, optimizer, generator, step, smoothed loss.
static void save_checkpoint(const std::string& path, const CharLM& model, const CharLM& ema, const optim::AdamW<float>& opt,
                            const Generator& gen, int64_t step, double smooth) {
  Value ck = Value::dict();
  ck.set("model", Value(model.state_dict()));
  ck.set("ema", Value(ema.state_dict()));
  ck.set("optim", optim::to_value(opt.state_dict()));
  ck.set("generator", Value(from_vector<uint64_t>({gen.seed(), gen.offset()}, {2})));  // (as torch's: a tensor)
  ck.set("step", Value(step));
  ck.set("smooth_loss", Value(smooth));
  save(path, ck);
}

int main(int argc, char** argv) {
#ifdef REEL_TRAIN_DDP
  dist::init_process_group(dist::Backend::MPI);
  const int rank = dist::rank(), world = dist::world_size();
  if (rank != 0) std::freopen("/dev/null", "w", stdout);  // (rank 0 reports)
#else
  const int rank = 0, world = 1;
#endif
  Config c;
  for (int i = 1; i < argc; ++i) {
    const bool value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--fp8")) c.fp8 = true;
    else if (value && !std::strcmp(argv[i], "--steps")) c.steps = std::atoll(argv[++i]);
    else if (value && !std::strcmp(argv[i], "--seed")) c.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (value && !std::strcmp(argv[i], "--data")) c.data = argv[++i];
    else if (value && !std::strcmp(argv[i], "--hidden")) c.hidden = std::atoll(argv[++i]);
    else if (value && !std::strcmp(argv[i], "--blocks")) c.blocks = std::atoll(argv[++i]);
    else if (value && !std::strcmp(argv[i], "--eval-every")) c.eval_every = std::atoll(argv[++i]);
    else if (value && !std::strcmp(argv[i], "--checkpoint")) c.checkpoint = argv[++i];
    else if (value && !std::strcmp(argv[i], "--save-every")) c.save_every = std::atoll(argv[++i]);
    else if (value && !std::strcmp(argv[i], "--resume")) c.resume = argv[++i];
    else if (value && !std::strcmp(argv[i], "--init-from")) c.init_from = argv[++i];
    else if (value && !std::strcmp(argv[i], "--batch")) c.batch = std::atoll(argv[++i]);
    else if (value && !std::strcmp(argv[i], "--bucket-mb")) c.bucket_mb = std::atof(argv[++i]);
    else if (value && !std::strcmp(argv[i], "--log-losses")) c.log_losses = argv[++i];
    else if (value && !std::strcmp(argv[i], "--compare-losses")) c.compare_losses = argv[++i];
    else { std::fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
  }
  std::ifstream in(c.data, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s (pass --data FILE)\n", c.data.c_str());
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string raw = ss.str();

  // vocabulary: the distinct bytes, in order; the unigram entropy is the baseline to beat
  std::map<unsigned char, int64_t> counts;
  for (unsigned char ch : raw) ++counts[ch];
  std::vector<unsigned char> chars;
  std::map<unsigned char, int64_t> id;
  double unigram = 0;
  for (auto [ch, n] : counts) {
    id[ch] = static_cast<int64_t>(chars.size());
    chars.push_back(ch);
    double p = static_cast<double>(n) / raw.size();
    unigram -= p * std::log(p);
  }
  std::vector<int64_t> text;
  for (unsigned char ch : raw) text.push_back(id[ch]);
  const int64_t vocab = static_cast<int64_t>(chars.size()), split = static_cast<int64_t>(text.size()) * 9 / 10;
  std::printf("%s: %zu characters, vocabulary %lld, unigram entropy %.3f nats\n", c.data.c_str(), raw.size(),
              static_cast<long long>(vocab), unigram);

  Generator gen(c.seed);
  CharLM model(c, vocab, gen), ema(c, vocab, gen);
  auto params = model.parameters(), ema_params = ema.parameters();
#ifdef REEL_TRAIN_DDP
  nn::parallel::DistributedDataParallel<float> ddp(params, {.bucket_cap_mb = c.bucket_mb});  // (rank 0's weights everywhere)
  std::printf("data parallel: %d ranks, %lld windows per rank and step\n", world, static_cast<long long>(c.batch));
#endif
  {
    autograd::no_grad ng;
    foreach::copy_(ema_params, params);
  }
  optim::AdamW opt(params, optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  std::printf("model: %zu tensors, %lld parameters%s\n", params.size(), [&] {
    long long n = 0;
    for (auto& p : params) n += p.numel();
    return n;
  }(), c.fp8 ? "; hidden linear layers in FP8" : "");

  // a fixed validation set from the last 10% of the text
  std::vector<int64_t> vstarts;
  for (int64_t s = split; s + c.context < static_cast<int64_t>(text.size()) && vstarts.size() < 4096; s += 7)
    vstarts.push_back(s);
  Batch val = make_batch(text, vstarts, c.context);

  int64_t first = 1;
  double smooth = 0;
  if (!c.init_from.empty()) {  // weights from PyTorch (or any .pt state dict with these names)
    const Value w = load(c.init_from);
    const StateDict sd = (w.is_dict() && w.contains(Value("model")) ? w.at("model") : w).state_dict();
    model.load_state_dict(sd);
    ema.load_state_dict(sd);
    std::printf("initialized from %s: eval loss %.6f\n", c.init_from.c_str(), evaluate(model, val));
  }
  if (!c.resume.empty()) {
    const Value ck = load(c.resume);
    model.load_state_dict(ck.at("model").state_dict());
    ema.load_state_dict(ck.at("ema").state_dict());
    opt.load_state_dict(optim::from_value(ck.at("optim")));
    auto g = ck.at("generator").tensor().as<uint64_t>();
    gen.manual_seed(g.data_ptr()[0]);
    gen.set_offset(g.data_ptr()[1]);
    first = ck.at("step").to_int() + 1;
    smooth = ck.at("smooth_loss").to_double();
    std::printf("resumed from %s after step %lld\n", c.resume.c_str(), static_cast<long long>(first - 1));
  }

  // this rank's places in each global batch of world x batch windows
#ifdef REEL_TRAIN_DDP
  const std::vector<int64_t> share = dist::DistributedSampler(c.batch * world, {.shuffle = false}).indices();
#else
  std::vector<int64_t> share(static_cast<size_t>(c.batch));
  std::iota(share.begin(), share.end(), int64_t{0});
#endif
  std::map<int64_t, double> reference;  // --compare-losses
  if (!c.compare_losses.empty()) {
    std::ifstream ref(c.compare_losses);
    int64_t s = 0;
    double v = 0;
    while (ref >> s >> v) reference[s] = v;
  }
  std::FILE* log = rank == 0 && !c.log_losses.empty() ? std::fopen(c.log_losses.c_str(), "w") : nullptr;
  int64_t compared = 0, differing = 0;

  const bool tty = isatty(fileno(stdout));
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = first; step <= c.steps; ++step) {
    auto st = randint<int64_t>(0, split - c.context - 1, {c.batch * world}, gen).to_vector();
    std::vector<int64_t> mine;
    for (int64_t k : share) mine.push_back(st[static_cast<size_t>(k)]);
    Batch b = make_batch(text, mine, c.context);
    opt.zero_grad();
    Tf loss = model.loss(b.x, b.y);
    loss.backward();  // (with DDP: the gradients arrive averaged over the ranks)
    nn::utils::clip_grad_norm_(params, c.clip);
    opt.step();
    update_ema(ema_params, params, c.ema_decay);

#ifdef REEL_TRAIN_DDP
    Tf global = loss.detach().clone();  // the global batch's mean loss
    dist::all_reduce(global, dist::ReduceOp::AVG);
#else
    const Tf& global = loss;
#endif
    double l = static_cast<double>(global.item());
    if (log) std::fprintf(log, "%lld %.9g\n", static_cast<long long>(step), l);
    if (auto it = reference.find(step); it != reference.end()) {
      ++compared;
      if (std::abs(l - it->second) > 1e-5 * std::abs(it->second)) {
        ++differing;
        std::printf("step %lld: loss %.9g, the reference's %.9g\n", static_cast<long long>(step), l, it->second);
      }
    }
    smooth = step == 1 ? l : 0.98 * smooth + 0.02 * l;
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double tps = static_cast<double>((step - first + 1) * c.batch) / secs;
    if (rank == 0 && !c.checkpoint.empty() && ((c.save_every > 0 && step % c.save_every == 0) || step == c.steps))
      save_checkpoint(c.checkpoint, model, ema, opt, gen, step, smooth);
    bool eval = step % c.eval_every == 0 || step == c.steps;
    if (tty || eval) {
      int filled = static_cast<int>(30 * step / c.steps);
      std::printf("%s[%.*s%*s] step %5lld/%lld  loss %.3f  %6.0f tok/s", tty ? "\r" : "", filled,
                  "##############################", 30 - filled, "", static_cast<long long>(step),
                  static_cast<long long>(c.steps), smooth, tps);
      if (eval) std::printf("  | eval loss %.3f (ema)\n", evaluate(ema, val));
      std::fflush(stdout);
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double final_val = evaluate(ema, val);
  const int64_t ran = std::max<int64_t>(c.steps - first + 1, 0);
  std::printf("trained %lld steps in %.1f s (%.0f tokens/s, %.2f ms per step); eval loss %.3f nats vs unigram entropy %.3f\n",
              static_cast<long long>(ran), secs, ran * c.batch * world / secs, 1e3 * secs / std::max<int64_t>(ran, 1),
              final_val, unigram);
#ifdef REEL_TRAIN_DDP
  if (ran > 0) {
    const auto ov = ddp.overlap();
    std::printf("DDP: %zu buckets; all-reduce %.3f ms a step, %.0f%% of it while backward ran\n", ddp.bucket_count(),
                1e3 * ov.all_reduce_seconds / std::max<int64_t>(ov.steps, 1), 100 * ov.fraction());
  }
#endif
  if (log) std::fclose(log);
  int status = 0;
  if (!c.compare_losses.empty()) {
    std::printf("losses compared with %s: %lld steps, %lld differ\n", c.compare_losses.c_str(),
                static_cast<long long>(compared), static_cast<long long>(differing));
    if (compared == 0 || differing > 0) status = 4;
  }
#ifdef REEL_TRAIN_DDP
  dist::barrier();
  dist::destroy_process_group();
#endif
  if (ran == 0 || status != 0) return status;  // (evaluation only, or losses that differ)

  // sample from the EMA model (temperature 0.8)
  autograd::no_grad ng;
  std::vector<int64_t> ctx(text.begin() + split, text.begin() + split + c.context);
  std::string out;
  for (unsigned char ch : std::string(raw.begin() + split, raw.begin() + split + c.context)) out += static_cast<char>(ch);
  out += "|";
  for (int i = 0; i < 300; ++i) {
    Tf h = ema.features(from_vector<int64_t>(ctx, {1, c.context}));
    Tf logits = F::linear(h, ema.head.weight, ema.head.bias);
    auto p = F::softmax(Tf(logits / 0.8f), -1).to_vector();
    double u = rand<double>({1}, gen).item(), acc = 0;
    int64_t next = vocab - 1;
    for (int64_t k = 0; k < vocab; ++k)
      if ((acc += p[k]) > u) {
        next = k;
        break;
      }
    out += static_cast<char>(chars[next]);
    ctx.erase(ctx.begin());
    ctx.push_back(next);
  }
  std::printf("sample (prompt|generated):\n%s\n", out.c_str());
  return final_val < unigram - 0.5 ? 0 : 3;  // the model must have learned something
}
