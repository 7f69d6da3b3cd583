#pragma once
// The few nn building blocks a small trainer needs: Linear, Embedding, LayerNorm, RMSNorm
// and activations, as functions (nn::functional) and as modules holding their parameters.
//
// A module keeps its parameters as named tensor handles, in registration order (a child's
// parameters are registered under "child.name"). Handles alias, so a module can be moved or
// copied (into a std::vector, say) and the optimizer still updates the same tensors.
#include "../core/config.hpp"
#include "../interop/state_dict.hpp"
#include "linear_cross_entropy.hpp"

namespace reel::inline REEL_ABI::nn {

namespace functional {
template <TensorLike X> auto silu(const X& x) {
  static_assert(is_floating_v<reel::detail::value_t<X>>, "reel::silu: needs a floating point tensor");
  return Tensor<reel::detail::value_t<X>, reel::detail::device_t<X>>(make_expr(SiluOp{}, x));
}

namespace detail_emb {
template <class T, class D> Tensor<T, D> embedding_backward(const Tensor<T, D>& g, const Tensor<int64_t, D>& idx, int64_t rows);
// out[k] = w[idx[k]] (rows of w): the primal, and its adjoint (rows of g added into row idx[k]).
template <class T, class D>
Tensor<T, D> embedding_rows(const Tensor<T, D>& w, const Tensor<int64_t, D>& idx) {
  const int64_t n = idx.numel(), E = w.size(1);
  auto out = empty<T, D>({n, E});
  if constexpr (reel::detail::Backend<D>::has_data) {
    auto wc = w.detach().contiguous();
    const int64_t* ip = idx.data_ptr();
    for (int64_t k = 0; k < n; ++k)
      std::copy_n(wc.data_ptr() + ip[k] * E, E, out.mutable_data_ptr() + k * E);
  }
  if (!w.impl().autograd) return out;
  int64_t rows = w.size(0);
  return reel::detail::record_fn(
      out, "EmbeddingBackward", {w}, {},
      [idx, rows](const Tensor<T, D>& g) { return std::vector{embedding_backward(g, idx, rows)}; },
      [idx](const std::vector<Tensor<T, D>>& t) { return embedding_rows(t[0], idx); });
}
template <class T, class D>
Tensor<T, D> embedding_backward(const Tensor<T, D>& g, const Tensor<int64_t, D>& idx, int64_t rows) {
  const int64_t n = idx.numel(), E = g.size(1);
  auto out = zeros<T, D>({rows, E});
  if constexpr (reel::detail::Backend<D>::has_data) {
    auto gc = g.detach().contiguous();
    const int64_t* ip = idx.data_ptr();
    T* o = out.mutable_data_ptr();
    for (int64_t k = 0; k < n; ++k) {
      const T* src = gc.data_ptr() + k * E;
      T* dst = o + ip[k] * E;
      for (int64_t e = 0; e < E; ++e) dst[e] += src[e];
    }
  }
  if (!g.impl().autograd) return out;
  return reel::detail::record_fn(
      out, "EmbeddingBackwardBackward", {g}, {},
      [idx](const Tensor<T, D>& gg) { return std::vector{embedding_rows(gg, idx)}; },
      [idx, rows](const std::vector<Tensor<T, D>>& t) { return embedding_backward(t[0], idx, rows); });
}
}  // namespace detail_emb

// weight[input]: input holds row indices (any integer type), the result has shape
// input.sizes() + [embedding_dim].
template <class T, class D, class I>
Tensor<T, D> embedding(const Tensor<I, D>& input, const Tensor<T, D>& weight) {
  static_assert(std::is_integral_v<I> && !std::is_same_v<I, bool>, "reel::embedding: indices must be integers");
  REEL_CHECK(weight.dim() == 2, value_error, "embedding: weight must be [num_embeddings, embedding_dim], got shape ",
             weight.sizes());
  auto idx = input.template to<int64_t>().contiguous().reshape({-1});
  // (a device: the gather checks every index there, reported at the next synchronization)
  if constexpr (reel::detail::Backend<D>::host_memory) {
    const int64_t* ip = idx.data_ptr();
    for (int64_t k = 0; k < idx.numel(); ++k)
      REEL_CHECK(ip[k] >= 0 && ip[k] < weight.size(0), index_error, "embedding: index ", ip[k], " is out of range for ",
                 weight.size(0), " embeddings");
  }
  Shape s = input.sizes();
  s.push_back(weight.size(1));
  if constexpr (reel::detail::device_memory_v<D>) {
    // rows of weight: a gather along dim 0 (its backward, a scatter-add, runs on the GPU too)
    const int64_t n = idx.numel(), E = weight.size(1);
    auto rows = Tensor<int64_t, D>(idx.reshape({n, 1}).expand({n, E}).contiguous());
    return reel::detail::gather_along(weight, rows, 0).reshape(s);
  } else {
    return detail_emb::embedding_rows(weight, idx).reshape(s);
  }
}

namespace detail_norm {
inline Shape last_dims(int64_t dim, const Shape& normalized, const char* fn) {
  int64_t k = normalized.size();
  REEL_CHECK(k >= 1 && k <= dim, value_error, fn, ": normalized_shape ", normalized, " does not fit an input of ", dim,
             " dimensions");
  Shape dims;
  for (int64_t d = dim - k; d < dim; ++d) dims.push_back(d);
  return dims;
}
template <class T, class D>
void check_tail(const Tensor<T, D>& x, const Shape& normalized, const char* fn) {
  bool ok = normalized.size() <= x.dim();
  for (int64_t i = 0; ok && i < normalized.size(); ++i) ok = x.size(x.dim() - normalized.size() + i) == normalized[i];
  REEL_CHECK(ok, value_error, fn, ": expected input with shape [*, ", normalized, "], got ", x.sizes());
}
}  // namespace detail_norm

// (x - mean) / sqrt(var + eps) * weight + bias over the last normalized_shape.size() dims
// (biased variance, as PyTorch).
template <class T, class D>
Tensor<T, D> layer_norm(const Tensor<T, D>& x, Shape normalized_shape, const Tensor<T, D>& weight = {},
                        const Tensor<T, D>& bias = {}, double eps = 1e-5) {
  static_assert(is_floating_v<T> && !is_fp8_v<T>, "reel::layer_norm: needs a floating point input");
  detail_norm::check_tail(x, normalized_shape, "layer_norm");
  auto dims = detail_norm::last_dims(x.dim(), normalized_shape, "layer_norm");
  Tensor<T, D> xc = x - mean(x, dims, true);
  Tensor<T, D> y = xc * rsqrt(mean(Tensor<T, D>(xc * xc), dims, true) + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}
// x / sqrt(mean(x^2) + eps) * weight; eps defaults to the dtype's machine epsilon (PyTorch).
template <class T, class D>
Tensor<T, D> rms_norm(const Tensor<T, D>& x, Shape normalized_shape, const Tensor<T, D>& weight = {},
                      std::optional<double> eps = {}) {
  static_assert(is_floating_v<T> && !is_fp8_v<T>, "reel::rms_norm: needs a floating point input");
  detail_norm::check_tail(x, normalized_shape, "rms_norm");
  auto dims = detail_norm::last_dims(x.dim(), normalized_shape, "rms_norm");
  double e = eps ? *eps : static_cast<double>(std::numeric_limits<T>::epsilon());
  Tensor<T, D> y = x * rsqrt(mean(Tensor<T, D>(x * x), dims, true) + e);
  if (weight.defined()) y = y * weight;
  return y;
}
}  // namespace functional

// ------------------------------------------------------------------ modules
template <class T = float, class D = CPU>
class Module {
 public:
  using value_type = T;
  using device_type = D;
  // Parameters in registration order (what an optimizer takes).
  std::vector<Tensor<T, D>> parameters() const {
    std::vector<Tensor<T, D>> out;
    for (const auto& [n, p] : params_) out.push_back(p);
    return out;
  }
  const std::vector<std::pair<std::string, Tensor<T, D>>>& named_parameters() const { return params_; }
  void zero_grad() {
    for (auto& [n, p] : params_) p.set_grad({});
  }
  void train(bool on = true) { training_ = on; }
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // PyTorch's state_dict(): the parameters by name, in registration order, sharing their
  // storage (detached: saving them records nothing).
  StateDict state_dict() const {
    StateDict sd;
    for (const auto& [n, p] : params_) sd[n] = AnyTensor(p.detach());
    return sd;
  }
  struct LoadResult {
    std::vector<std::string> missing_keys, unexpected_keys;
  };
  // PyTorch's load_state_dict: copies each entry into the parameter of that name in place
  // (an optimizer holding the parameters keeps them), converting a floating dtype to T as
  // copy_ does; a shape mismatch is a value_error ("size mismatch for ..."), another dtype a
  // type_error. strict: missing or unexpected keys are a value_error naming them all (nothing
  // is copied); otherwise they are returned.
  LoadResult load_state_dict(const StateDict& sd, bool strict = true) {
    LoadResult r;
    for (const auto& [n, p] : params_)
      if (!sd.contains(n)) r.missing_keys.push_back(n);
    for (const auto& [n, t] : sd) {
      bool known = false;
      for (const auto& [pn, p] : params_) known = known || pn == n;
      if (!known) r.unexpected_keys.push_back(n);
    }
    if (strict && (!r.missing_keys.empty() || !r.unexpected_keys.empty())) {
      std::string msg = "load_state_dict: error(s) loading the state dict:";
      auto list = [&](const char* what, const std::vector<std::string>& keys) {
        if (keys.empty()) return;
        msg += std::string(" ") + what + " key(s) in state_dict:";
        for (size_t i = 0; i < keys.size(); ++i) msg += (i ? ", \"" : " \"") + keys[i] + "\"";
        msg += ".";
      };
      list("Missing", r.missing_keys);
      list("Unexpected", r.unexpected_keys);
      raise<value_error>(msg);
    }
    for (auto& [n, p] : params_)  // every entry checked before any is copied
      if (sd.contains(n)) check_source(n, sd.at(n), p);
    for (auto& [n, p] : params_)
      if (sd.contains(n)) p.detach().copy_(source_of(sd.at(n)));
    return r;
  }

 protected:
  // Registers (and returns) a parameter: it requires grad from now on.
  Tensor<T, D> register_parameter(const std::string& name, Tensor<T, D> t) {
    REEL_CHECK(t.defined(), value_error, "register_parameter: '", name, "' is an undefined tensor");
    for (const auto& [n, p] : params_) REEL_CHECK(n != name, value_error, "register_parameter: '", name, "' exists already");
    t.requires_grad_();
    params_.emplace_back(name, t);
    return t;
  }
  // Registers a child's parameters under "name.".
  template <class M>
  M& register_module(const std::string& name, M& child) {
    for (const auto& [n, p] : child.named_parameters()) register_parameter(name + "." + n, p);
    return child;
  }

 private:
  // load_state_dict's checks of the entry `name` for parameter p, before anything is copied.
  static void check_source(const std::string& name, const AnyTensor& a, const Tensor<T, D>& p) {
    REEL_CHECK(a.defined(), value_error, "load_state_dict: '", name, "' is an undefined tensor");
    REEL_CHECK(a.sizes() == p.sizes(), value_error, "load_state_dict: size mismatch for ", name,
               ": copying a param with shape ", a.sizes(), " from checkpoint, the shape in current model is ", p.sizes());
    REEL_CHECK(a.device() == DeviceType::CPU, not_implemented_error, "load_state_dict: '", name,
               "' must be a CPU tensor");
    const ScalarType s = a.dtype();
    const bool converts = is_floating_v<T> && (s == ScalarType::Float || s == ScalarType::Double ||
                                               s == ScalarType::Half || s == ScalarType::BFloat16);
    REEL_CHECK(s == scalar_type_v<T> || converts, type_error, "load_state_dict: '", name, "' is ", dtype_name(s),
               " in the state dict and ", scalar_type_of<T>::name, " in the module (convert it first)");
  }
  // A checked entry as a Tensor<T, D> (converted, moved).
  static Tensor<T, D> source_of(const AnyTensor& a) {
    Tensor<T, CPU> h;
    switch (a.dtype()) {
      case ScalarType::Float: h = to_param_type(a.as<float>()); break;
      case ScalarType::Double: h = to_param_type(a.as<double>()); break;
      case ScalarType::Half: h = to_param_type(a.as<half>()); break;
      case ScalarType::BFloat16: h = to_param_type(a.as<bfloat16>()); break;
      default: h = a.as<T>();  // T itself (check_source admits nothing else)
    }
    if constexpr (reel::detail::Backend<D>::host_memory)  // (the CPU: h already is one)
      return h;
    else
      return h.template to_device<D>();
  }
  template <class U>
  static Tensor<T, CPU> to_param_type(const Tensor<U, CPU>& u) {
    if constexpr (std::is_same_v<U, T>)
      return u;
    else if constexpr (!is_floating_v<T>)  // (check_source admits no conversion to a T that is not floating)
      raise<type_error>("load_state_dict: a ", scalar_type_of<U>::name, " entry does not convert to ",
                        scalar_type_of<T>::name);
    else
      return u.template to<T>();
  }
  std::vector<std::pair<std::string, Tensor<T, D>>> params_;
  bool training_ = true;
};

// y = x Wᵀ + b, W [out, in]; PyTorch's initialization: U(-1/sqrt(in), 1/sqrt(in)) for both.
template <class T = float, class D = CPU>
class Linear : public Module<T, D> {
 public:
  Tensor<T, D> weight, bias;
  Linear(int64_t in_features, int64_t out_features, Generator& gen, bool with_bias = true) {
    REEL_CHECK(in_features >= 0 && out_features >= 0, value_error, "Linear: feature counts must be >= 0");
    double k = in_features > 0 ? 1 / std::sqrt(static_cast<double>(in_features)) : 0;
    weight = this->register_parameter("weight", Tensor<T, D>(rand<T, D>({out_features, in_features}, gen) * (2 * k) - k));
    if (with_bias) bias = this->register_parameter("bias", Tensor<T, D>(rand<T, D>({out_features}, gen) * (2 * k) - k));
  }
  Tensor<T, D> operator()(const Tensor<T, D>& x) const { return functional::linear(x, weight, bias); }
};

// Rows of a [num_embeddings, embedding_dim] table, initialized N(0, 1).
template <class T = float, class D = CPU>
class Embedding : public Module<T, D> {
 public:
  Tensor<T, D> weight;
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen) {
    weight = this->register_parameter("weight", randn<T, D>({num_embeddings, embedding_dim}, gen));
  }
  template <class I> Tensor<T, D> operator()(const Tensor<I, D>& idx) const { return functional::embedding(idx, weight); }
};

template <class T = float, class D = CPU>
class LayerNorm : public Module<T, D> {
 public:
  Tensor<T, D> weight, bias;
  Shape normalized_shape;
  double eps;
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true)
      : normalized_shape(normalized_shape), eps(eps) {
    if (elementwise_affine) {
      weight = this->register_parameter("weight", ones<T, D>(normalized_shape));
      bias = this->register_parameter("bias", zeros<T, D>(normalized_shape));
    }
  }
  Tensor<T, D> operator()(const Tensor<T, D>& x) const {
    return functional::layer_norm(x, normalized_shape, weight, bias, eps);
  }
};

template <class T = float, class D = CPU>
class RMSNorm : public Module<T, D> {
 public:
  Tensor<T, D> weight;
  Shape normalized_shape;
  std::optional<double> eps;
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = {}, bool elementwise_affine = true)
      : normalized_shape(normalized_shape), eps(eps) {
    if (elementwise_affine) weight = this->register_parameter("weight", ones<T, D>(normalized_shape));
  }
  Tensor<T, D> operator()(const Tensor<T, D>& x) const { return functional::rms_norm(x, normalized_shape, weight, eps); }
};

// Activations as modules (no parameters).
#define REEL_ACTIVATION(NAME, CALL)                                                  \
  struct NAME {                                                                      \
    template <class T, class D> Tensor<T, D> operator()(const Tensor<T, D>& x) const { \
      return Tensor<T, D>(CALL);                                                     \
    }                                                                                \
  };
REEL_ACTIVATION(ReLU, functional::relu(x))
REEL_ACTIVATION(GELU, functional::gelu(x))
REEL_ACTIVATION(SiLU, functional::silu(x))
REEL_ACTIVATION(Tanh, reel::tanh(x))
REEL_ACTIVATION(Sigmoid, reel::sigmoid(x))
#undef REEL_ACTIVATION

}  // namespace reel::nn
