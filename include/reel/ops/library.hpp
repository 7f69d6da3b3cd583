#pragma once
// Custom ops: a process-wide registry of named callables (PyTorch's torch.library).
//
//   auto lib = reel::library("myops");                      // a namespace, registered once
//   lib.def("scale(Tensor x, float alpha) -> Tensor",       // or just "scale"
//           [](const Tensor<float>& x, double a) { return Tensor<float>(x * a); },
//           {OpTag::nondeterministic});
//   Tensor<float> y = reel::ops::call<Tensor<float>>("myops::scale", x, 2.0);
//   auto scale = reel::ops::handle<Tensor<float>(Tensor<float>, double)>("myops::scale");
//   y = scale(x, 2.0);                                     // looked up and checked once
//
// An op's C++ signature is its callable's, with references and const dropped; more kernels
// (other signatures: CUDA or Meta tensors, other dtypes) join it with lib.impl("name", fn).
// ops::call picks the kernel whose signature the arguments' types match, and raises type_error
// naming them all when none does (no conversions: pass 2.0, not 2, for a double). An op whose callable records autograd
// (reel's ops, or an autograd::Function's apply) is differentiable.
// While an op runs, warnings it raises carry its name ("myops::scale: ..."), so the Error
// action turns them into a warning_error at the call site that names the op.
// Registering a namespace or an op a second time (a plugin loaded twice, two shared objects
// that both register it, a dlclose'd plugin loaded again) raises reel::error naming it and
// where it was first registered; nothing is replaced.
#include "../core/config.hpp"
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <typeindex>
#include <vector>

#include "../core/errors.hpp"
#include "../core/op_report.hpp"
#include "../core/type_name.hpp"
#include "../autograd/record.hpp"

// The registry: one per process. A header-only library is compiled into every shared object
// that uses it, and the dynamic linker does not always merge their copies of a function's
// static (objects loaded with RTLD_LOCAL, built by clang or with -fno-gnu-unique, or with other
// settings of reel: another settings namespace). So the first copy that needs the registry
// makes it on the heap (never freed: it outlives any shared object that registered into it)
// and leaves its address, with the process id, in the environment variable
// REEL_OP_REGISTRY_V1; every other copy finds it there. Its types are outside the settings
// namespace, so all copies agree on them. A kernel registered from a shared object other than
// the program remembers which (and where it was loaded), so a call after that object was
// unloaded (dlclose) is refused rather than jumping into unmapped code.
namespace reel::registry_v1 {
struct Kernel {
  std::type_index sig;  // (its type_info lives in the object that registered it: compared only while loaded)
  std::string signature, where;
  std::shared_ptr<void> fn;  // a std::function of the signature
  bool autograd = false;     // fn records the op's history around the kernel (register_autograd)
  std::string object;        // the shared object that registered it ("": the program itself)
  uintptr_t object_base = 0;
};
struct Entry {
  std::string name, schema, where;
  std::vector<OpTag> tags;
  std::vector<Kernel> kernels;  // one per signature (e.g. per device: Tensor<T, CPU>, Tensor<T, CUDA>)
  std::string signatures() const {
    std::string s;
    for (const Kernel& k : kernels) s += (s.empty() ? "" : " or ") + k.signature;
    return s;
  }
};
struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const Entry>> ops;
  std::map<std::string, std::string> namespaces;  // -> where registered
  static Registry& get() {
    static Registry* r = anchor();  // (once per copy of reel, whichever thread comes first)
    return *r;
  }

 private:
  static constexpr const char* kVariable = "REEL_OP_REGISTRY_V1";
  static void publish(Registry* r) {
    char v[64];
    std::snprintf(v, sizeof v, "%lld:%llx", static_cast<long long>(::getpid()),
                  static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(r)));
    ::setenv(kVariable, v, 1);
  }
  static Registry* anchor() {
    ::flockfile(stderr);  // (a lock every copy shares: the C library's)
    Registry* r = nullptr;
    long long pid = 0;
    unsigned long long at = 0;
    if (const char* v = std::getenv(kVariable))  // another process's (inherited through exec): ignored
      if (std::sscanf(v, "%lld:%llx", &pid, &at) == 2 && pid == static_cast<long long>(::getpid()))
        r = reinterpret_cast<Registry*>(static_cast<uintptr_t>(at));
    if (!r) {
      r = new Registry;
      static Registry* made = r;
      publish(r);
      ::pthread_atfork(nullptr, nullptr, [] { publish(made); });  // a forked child shares it
    }
    ::funlockfile(stderr);
    return r;
  }
};
// Where the object `h` (a dlopen handle) is loaded.
inline uintptr_t load_address(void* h) {
  struct link_map* map = nullptr;
  return h && ::dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map ? static_cast<uintptr_t>(map->l_addr) : 0;
}
// The shared object holding `code` and where it is loaded ({"", 0}: the program itself).
inline std::pair<std::string, uintptr_t> object_of(const void* code) {
  Dl_info info{};
  if (!::dladdr(code, &info) || !info.dli_fname) return {"", 0};
  void* self = ::dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
  void* program = ::dlopen(nullptr, RTLD_LAZY);
  std::pair<std::string, uintptr_t> r{"", 0};
  if (self && self != program) r = {info.dli_fname, load_address(self)};
  if (self) ::dlclose(self);
  if (program) ::dlclose(program);
  return r;
}
// Whether the object that registered k is still loaded where it was.
inline bool kernel_loaded(const Kernel& k) {
  if (k.object.empty()) return true;
  void* h = ::dlopen(k.object.c_str(), RTLD_NOLOAD | RTLD_LAZY);
  const bool same = h && load_address(h) == k.object_base;
  if (h) ::dlclose(h);
  return same;
}
template <class F> void kernel_marker() {}  // instantiated in the object that registers F
}  // namespace reel::registry_v1

namespace reel::inline REEL_ABI::detail::ops {
// Refuses k, a kernel of op e, once the shared object that registered it is unloaded.
inline void check_loaded(const registry_v1::Entry& e, const registry_v1::Kernel& k) {
  REEL_CHECK(registry_v1::kernel_loaded(k), error, "ops: the kernel ", k.signature, " of ", e.name, " was registered by ",
             k.object, " (at ", k.where, "), which has been unloaded (dlclose): the op cannot run any more, and ",
             "loading that library again cannot register it again (registrations are never replaced)");
}
}  // namespace reel::detail::ops

namespace reel::inline REEL_ABI {

// (OpTag, the tags an op may have: core/op_report.hpp)

namespace detail::ops {
using registry_v1::Entry;
using registry_v1::Kernel;
using registry_v1::Registry;
inline std::string where_of(const SourceLocation& w) { return std::string(w.file_name()) + ":" + std::to_string(w.line()); }

template <class F> struct fn_sig : fn_sig<decltype(std::function{std::declval<F>()})> {};
template <class R, class... A> struct fn_sig<std::function<R(A...)>> {
  using type = std::remove_cvref_t<R>(std::remove_cvref_t<A>...);
};
// "(Tensor<float>, double) -> Tensor<float>"
template <class Sig> struct sig_name;
template <class R, class... A> struct sig_name<R(A...)> {
  static std::string get() {
    std::string s = "(";
    ((s += (s.size() > 1 ? ", " : "") + type_name<A>()), ...);
    return s + ") -> " + type_name<R>();
  }
};
// register_autograd without a forward rule.
struct NoJvp {};
// A kernel's argument as the kernel of an op with registered autograd gets it: tensors
// without history (and without tangents), anything else as it is.
template <class A>
A without_history(const A& a) {
  if constexpr (requires { a.detach(); })
    return a.detach();
  else
    return a;
}
template <class R, class A>
void push_if_same(std::vector<R>& v, const A& a) {
  if constexpr (std::is_same_v<A, R>) v.push_back(a);
}
// Names the running op for the warnings it raises.
struct OpScope {
  const char* prev;
  explicit OpScope(const char* name) : prev(current_op_name()) { current_op_name() = name; }
  ~OpScope() { current_op_name() = prev; }
};
}  // namespace detail::ops

class Library {
 public:
  // `schema`: "name" or "name(Tensor x, float alpha) -> Tensor" (kept for messages; its
  // parameter count must be the callable's).
  template <class F>
  Library& def(const std::string& schema, F&& fn, std::initializer_list<OpTag> tags = {},
               SourceLocation where = SourceLocation::current()) {
    using Sig = typename detail::ops::fn_sig<std::decay_t<F>>::type;
    const auto paren = schema.find('(');
    const std::string base = schema.substr(0, paren);
    REEL_CHECK(!base.empty() && base.find_first_of(" :)") == std::string::npos, value_error, "library(\"", ns_,
               "\").def: '", schema, "' does not start with an op name");
    if (paren != std::string::npos) check_arity(schema, paren, arity<Sig>());
    auto e = std::make_shared<detail::ops::Entry>(detail::ops::Entry{ns_ + "::" + base, schema,
                                                                     detail::ops::where_of(where), tags, {}});
    e->kernels.push_back(kernel<Sig>(std::forward<F>(fn), e->where));
    auto& r = detail::ops::Registry::get();
    std::lock_guard<std::mutex> lock(r.mu);
    auto [it, fresh] = r.ops.try_emplace(e->name, e);
    REEL_CHECK(fresh, error, "library: the op ", e->name, " is registered already (at ", it->second->where,
               "); registering it again at ", e->where,
               " is refused (was a library that registers it loaded twice, or reloaded?)");
    return *this;
  }
  // Another kernel for the op `name` def'd before (in this library): the same op for another
  // signature, e.g. for CUDA or Meta tensors (PyTorch's impl per dispatch key). ops::call picks
  // the kernel whose signature the arguments match.
  template <class F>
  Library& impl(const std::string& name, F&& fn, SourceLocation where = SourceLocation::current()) {
    using Sig = typename detail::ops::fn_sig<std::decay_t<F>>::type;
    const std::string full = ns_ + "::" + name;
    detail::ops::Kernel k = kernel<Sig>(std::forward<F>(fn), detail::ops::where_of(where));
    auto& r = detail::ops::Registry::get();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.ops.find(full);
    REEL_CHECK(it != r.ops.end(), index_error, "library(\"", ns_, "\").impl: def the op ", full, " first");
    for (const auto& old : it->second->kernels) {
      detail::ops::check_loaded(*it->second, old);
      REEL_CHECK(old.sig != k.sig, error, "library: the op ", full, " has a kernel for ", old.signature,
                 " already (at ", old.where, "); registering another at ", k.where, " is refused");
    }
    auto e = std::make_shared<detail::ops::Entry>(*it->second);  // (handles keep the old entry)
    e->kernels.push_back(std::move(k));
    it->second = std::move(e);
    return *this;
  }
  // Autograd for the op `name` (PyTorch's torch.library.register_autograd): its kernel then
  // runs on its arguments without history, and the result is recorded with
  //   backward(grad, out, args...) -> std::vector<Tensor<T, D>>  one gradient per argument of
  //                                                               the result's type (undefined: none)
  //   jvp(tangents, out, args...) -> Tensor<T, D>                 optional: forward mode, one
  //                                                               tangent per such argument (undefined: zero)
  // where `out` is the result without history (a constant to higher derivatives: write the rules
  // in terms of the arguments to differentiate them again). The kernel is the one whose
  // signature, Tensor<T, D>(args...), the backward's parameters give. A checkpoint can then keep
  // the op's result (a policy's save, a side effect) and still record its history.
  template <class Bw>
  Library& register_autograd(const std::string& name, Bw backward) {
    return register_autograd(name, std::move(backward), detail::ops::NoJvp{});
  }
  template <class Bw, class Fw>
  Library& register_autograd(const std::string& name, Bw backward, Fw jvp) {
    using BwSig = typename detail::ops::fn_sig<std::decay_t<Bw>>::type;
    return autograd_for(name, std::move(backward), std::move(jvp), static_cast<BwSig*>(nullptr));
  }
  const std::string& name() const { return ns_; }

 private:
  template <class Bw, class Fw, class G, class R, class O, class... A>
  Library& autograd_for(const std::string& name, Bw bw, Fw jvp, std::vector<G> (*)(R, O, A...)) {
    static_assert(std::is_same_v<G, R> && std::is_same_v<O, R> && requires(const R& r) { r.requires_grad(); },
                  "register_autograd: the backward is backward(grad, out, args...) -> std::vector<Tensor<T, D>>, "
                  "with grad and out the op's result type");
    using Sig = R(A...);
    const std::string full = ns_ + "::" + name;
    auto& r = detail::ops::Registry::get();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.ops.find(full);
    REEL_CHECK(it != r.ops.end(), index_error, "library(\"", ns_, "\").register_autograd: def the op ", full, " first");
    auto e = std::make_shared<detail::ops::Entry>(*it->second);
    auto k = std::find_if(e->kernels.begin(), e->kernels.end(),
                          [&](const detail::ops::Kernel& x) {
                            detail::ops::check_loaded(*e, x);
                            return x.sig == std::type_index(typeid(Sig));
                          });
    REEL_CHECK(k != e->kernels.end(), type_error, "register_autograd: the backward's parameters make ", full, " ",
               detail::ops::sig_name<Sig>::get(), ", but its kernels are ", e->signatures());
    REEL_CHECK(!k->autograd, error, "register_autograd: ", full, " ", k->signature, " has its autograd already");
    auto inner = std::static_pointer_cast<std::function<Sig>>(k->fn);
    auto op = std::make_shared<const std::string>(full);  // (the nodes keep its name's characters)
    std::vector<OpTag> tags = e->tags;
    std::function<Sig> wrapped = [inner, bw, jvp, op, tags](A... args) -> R {
      R out = detail::report_op<R>(OpCall(*op, tags),
                                   [&]() -> R { return (*inner)(detail::ops::without_history(args)...); });
      std::vector<R> ins;
      (detail::ops::push_if_same(ins, args), ...);
      const size_t n = ins.size();
      R value = out.detach();
      return detail::record_fn(
          std::move(out), op->c_str(), std::span<const R>(ins), std::span<const R>(ins),
          [bw, value, args..., op, n](const R& g) {
            std::vector<R> gs = bw(g, value, args...);
            REEL_CHECK(gs.size() == n, error, "the backward registered for ", *op, " returned ", gs.size(),
                       " gradients for ", n, " tensor arguments");
            return gs;
          },
          [jvp, value, args..., op](const std::vector<R>& t) -> R {
            if constexpr (std::is_same_v<Fw, detail::ops::NoJvp>)
              raise<not_implemented_error>(*op, ": no forward rule (jvp) is registered for forward-mode AD; pass one ",
                                           "to register_autograd");
            else
              return jvp(t, value, args...);
          });
    };
    k->fn = std::make_shared<std::function<Sig>>(std::move(wrapped));
    k->autograd = true;
    it->second = std::move(e);
    return *this;
  }
  friend Library library(const std::string&, SourceLocation);
  explicit Library(std::string ns) : ns_(std::move(ns)) {}
  template <class Sig> struct arity_of;
  template <class R, class... A> struct arity_of<R(A...)> : std::integral_constant<size_t, sizeof...(A)> {};
  template <class Sig> static constexpr size_t arity() { return arity_of<Sig>::value; }
  template <class Sig, class F>
  static detail::ops::Kernel kernel(F&& fn, std::string where) {
    auto [object, base] = registry_v1::object_of(reinterpret_cast<const void*>(&registry_v1::kernel_marker<std::decay_t<F>>));
    return {typeid(Sig), detail::ops::sig_name<Sig>::get(), std::move(where),
            std::make_shared<std::function<Sig>>(std::forward<F>(fn)), false, std::move(object), base};
  }
  void check_arity(const std::string& schema, size_t paren, size_t n) const {
    const auto close = schema.find(')', paren);
    REEL_CHECK(close != std::string::npos, value_error, "library(\"", ns_, "\").def: '", schema, "' has no ')'");
    const std::string params = schema.substr(paren + 1, close - paren - 1);
    size_t count = params.find_first_not_of(' ') == std::string::npos ? 0 : 1 + std::count(params.begin(), params.end(), ',');
    REEL_CHECK(count == n, value_error, "library(\"", ns_, "\").def: '", schema, "' names ", count,
               " parameters, but the callable takes ", n);
  }
  std::string ns_;
};

// The namespace `ns`, registered on this call: a second library(ns) (anywhere in the process)
// raises reel::error naming where the first was; register all of a namespace's ops through one.
inline Library library(const std::string& ns, SourceLocation where = SourceLocation::current()) {
  REEL_CHECK(!ns.empty() && ns.find_first_of(" :()") == std::string::npos, value_error, "library: '", ns,
             "' is not a namespace name");
  auto& r = detail::ops::Registry::get();
  std::lock_guard<std::mutex> lock(r.mu);
  auto [it, fresh] = r.namespaces.try_emplace(ns, detail::ops::where_of(where));
  REEL_CHECK(fresh, error, "library: the namespace ", ns, " is registered already (at ", it->second,
             "); registering it again at ", detail::ops::where_of(where),
             " is refused (put all of its ops in one library(\"", ns, "\"), or was it loaded twice?)");
  return Library(ns);
}

namespace ops {
template <class Sig> class Handle;
// A checked, typed reference to a registered op: calling it costs a std::function call.
template <class R, class... A>
class Handle<R(A...)> {
 public:
  R operator()(A... args) const {
    detail::ops::OpScope scope(e_->name.c_str());
    if (!k_->object.empty()) detail::ops::check_loaded(*e_, *k_);  // (a kernel from a shared object)
    if (autograd_) return (*f_)(std::move(args)...);  // (reports its kernel itself)
    return detail::report_op<R>(OpCall(e_->name, e_->tags), [&]() -> R { return (*f_)(std::move(args)...); });
  }
  const std::string& name() const { return e_->name; }
  const std::string& schema() const { return e_->schema; }
  bool has_tag(OpTag t) const { return std::find(e_->tags.begin(), e_->tags.end(), t) != e_->tags.end(); }

 private:
  template <class S> friend Handle<S> handle(const std::string&);
  std::shared_ptr<const detail::ops::Entry> e_;
  const std::function<R(A...)>* f_ = nullptr;
  const detail::ops::Kernel* k_ = nullptr;
  bool autograd_ = false;
};

// The op "ns::name" as a Handle of signature Sig: index_error when there is none, type_error
// when its signature is another (both named).
template <class Sig>
Handle<Sig> handle(const std::string& name) {
  auto& r = detail::ops::Registry::get();
  std::shared_ptr<const detail::ops::Entry> e;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.ops.find(name);
    REEL_CHECK(it != r.ops.end(), index_error, "ops: no op named ", name, " is registered");
    e = it->second;
  }
  for (const auto& k : e->kernels)
    if (detail::ops::check_loaded(*e, k), k.sig == std::type_index(typeid(Sig))) {
      Handle<Sig> h;
      h.f_ = static_cast<const std::function<Sig>*>(k.fn.get());
      h.autograd_ = k.autograd;
      h.k_ = &k;
      h.e_ = std::move(e);
      return h;
    }
  raise<type_error>("ops: ", name, " takes ", e->signatures(), ", but was called as ", detail::ops::sig_name<Sig>::get());
}

// Calls the op "ns::name" (R: what it returns; the arguments' types must be its parameters').
template <class R, class... A>
R call(const std::string& name, A&&... args) {
  return handle<R(std::remove_cvref_t<A>...)>(name)(std::forward<A>(args)...);
}

// Whether "ns::name" is registered, and its tags.
inline bool has_op(const std::string& name) {
  auto& r = detail::ops::Registry::get();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.ops.count(name) != 0;
}
}  // namespace ops

}  // namespace reel
