#pragma once
// Value: what torch.load returns, in C++. A pickled checkpoint is a tree of Python objects;
// reel's weights-only loader knows these kinds:
//   None, bool, int (64-bit), float (double), complex, str, bytes, tensor (AnyTensor, with
//   its requires_grad flag and whether it was a Parameter), list, tuple, dict (insertion
//   ordered; `ordered()` when it was a collections.OrderedDict), and object (an instance of
//   a class the caller allowed through LoadOptions::safe_globals, kept as its type name, its
//   constructor arguments and its state).
// Conversions made on load: torch.Size -> tuple, torch.device -> str ("cpu", "cuda:0"),
// torch.dtype -> str ("torch.float32"), set -> list, bytearray -> bytes, Counter -> dict.
//
// Containers have reference semantics, as in Python: copying a Value copies a handle, and
// appending to a list through one handle shows through every other.
#include "../core/config.hpp"
#include <cmath>
#include <complex>
#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../interop/state_dict.hpp"

namespace reel::inline REEL_ABI {

namespace detail {
struct ValueAccess;
}

class Value {
 public:
  enum class Kind { None, Bool, Int, Double, Complex, String, Bytes, Tensor, List, Tuple, Dict, Object };

  Value() = default;  // None
  Value(std::nullptr_t) {}
  Value(bool b) : n_(make(Kind::Bool)) { n_->i = b; }
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  Value(I i) : n_(make(Kind::Int)) {
    if constexpr (std::is_unsigned_v<I> && sizeof(I) >= sizeof(int64_t))
      REEL_CHECK(i <= static_cast<uint64_t>(INT64_MAX), value_error, "Value: ", i, " does not fit in an int64");
    n_->i = static_cast<int64_t>(i);
  }
  Value(double d) : n_(make(Kind::Double)) { n_->d = d; }
  Value(std::complex<double> c) : n_(make(Kind::Complex)) { n_->c = c; }
  Value(std::string s) : n_(make(Kind::String)) { n_->s = std::move(s); }
  Value(const char* s) : Value(std::string(s)) {}
  Value(AnyTensor t, bool requires_grad = false) : n_(make(Kind::Tensor)) {
    n_->t = std::move(t);
    n_->flag = requires_grad;
  }
  template <class T, class D>
  Value(const Tensor<T, D>& t) : Value(AnyTensor(t)) {}
  // A state dict: an OrderedDict of tensors, as torch.save writes module.state_dict().
  Value(const StateDict& sd) : Value(dict(true)) {
    for (const auto& [name, t] : sd) set(name, Value(t));
  }

  static Value bytes(std::string b) {
    Value v;
    v.n_ = make(Kind::Bytes);
    v.n_->s = std::move(b);
    return v;
  }
  static Value list(std::vector<Value> items = {}) { return seq(Kind::List, std::move(items)); }
  static Value tuple(std::vector<Value> items = {}) { return seq(Kind::Tuple, std::move(items)); }
  // ordered: written as collections.OrderedDict (torch.load gives an OrderedDict back).
  static Value dict(bool ordered = false) {
    Value v;
    v.n_ = make(Kind::Dict);
    v.n_->ordered = ordered;
    return v;
  }
  // A tensor written as torch.nn.Parameter (torch.load gives a Parameter back).
  static Value parameter(AnyTensor t, bool requires_grad = true) {
    Value v(std::move(t), requires_grad);
    v.n_->ordered = true;
    return v;
  }
  // An instance of an allowed class (see LoadOptions::safe_globals).
  static Value object(std::string type_name, Value args, Value state = {}) {
    Value v;
    v.n_ = make(Kind::Object);
    v.n_->s = std::move(type_name);
    v.n_->items = {std::move(args), std::move(state)};
    return v;
  }

  Kind kind() const { return n_ ? n_->kind : Kind::None; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_double() const { return kind() == Kind::Double; }
  bool is_complex() const { return kind() == Kind::Complex; }
  bool is_string() const { return kind() == Kind::String; }
  bool is_bytes() const { return kind() == Kind::Bytes; }
  bool is_tensor() const { return kind() == Kind::Tensor; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_tuple() const { return kind() == Kind::Tuple; }
  bool is_dict() const { return kind() == Kind::Dict; }
  bool is_object() const { return kind() == Kind::Object; }
  // Whether two handles are the same object (Python's `is`).
  bool is(const Value& o) const { return n_ == o.n_; }

  bool to_bool() const { return expect(Kind::Bool, "to_bool").i != 0; }
  int64_t to_int() const { return expect(Kind::Int, "to_int").i; }
  // ints convert too, as Python's float(int)
  double to_double() const { return is_int() ? static_cast<double>(n_->i) : expect(Kind::Double, "to_double").d; }
  std::complex<double> to_complex() const {
    return is_complex() ? n_->c : std::complex<double>(to_double(), 0.0);
  }
  // str, or the raw bytes of bytes
  const std::string& to_string() const {
    if (is_bytes()) return n_->s;
    return expect(Kind::String, "to_string").s;
  }
  const AnyTensor& tensor() const { return expect(Kind::Tensor, "tensor").t; }
  bool requires_grad() const { return expect(Kind::Tensor, "requires_grad").flag; }
  bool is_parameter() const { return is_tensor() && n_->ordered; }
  // dicts: whether it is a collections.OrderedDict
  bool ordered() const { return expect(Kind::Dict, "ordered").ordered; }
  const std::string& type_name() const { return expect(Kind::Object, "type_name").s; }
  const Value& args() const { return expect(Kind::Object, "args").items[0]; }
  const Value& state() const { return expect(Kind::Object, "state").items[0 + 1]; }

  // Elements of a list/tuple, entries of a dict, characters of a str/bytes.
  size_t size() const {
    switch (kind()) {
      case Kind::List:
      case Kind::Tuple: return n_->items.size();
      case Kind::Dict: return n_->dict->keys.size();
      case Kind::String:
      case Kind::Bytes: return n_->s.size();
      default: raise<type_error>("Value::size: a ", kind_name(), " has no size");
    }
  }
  // list/tuple: the element at i (negative counts from the end); dict: the entry with int key i.
  template <std::integral I>
    requires(!std::is_same_v<I, bool>)
  const Value& at(I index) const {
    const auto i = static_cast<int64_t>(index);
    if (is_dict()) return n_->dict->values[position(Value(i))];
    const auto& v = seq_items("at");
    const int64_t n = static_cast<int64_t>(v.size());
    REEL_CHECK(i >= -n && i < n, index_error, "Value::at: index ", i, " out of range for a ", kind_name(), " of ", n);
    return v[static_cast<size_t>(i < 0 ? i + n : i)];
  }
  const Value& at(const std::string& key) const { return is_dict() ? n_->dict->values[position(Value(key))] : not_dict(); }
  const Value& at(const char* key) const { return at(std::string(key)); }
  const Value& at(const Value& key) const { return is_dict() ? n_->dict->values[position(key)] : not_dict(); }
  bool contains(const Value& key) const {
    if (!is_dict()) not_dict();
    return n_->dict->index.count(hash_key(key)) != 0;
  }
  // list/tuple elements
  const std::vector<Value>& items() const { return seq_items("items"); }
  // dict keys and values, in order
  const std::vector<Value>& keys() const { return is_dict() ? n_->dict->keys : (not_dict(), n_->dict->keys); }
  const std::vector<Value>& values() const { return is_dict() ? n_->dict->values : (not_dict(), n_->dict->values); }

  // Appends to a list.
  // (Containers may not contain themselves: handles are reference-counted, so a cycle would
  // never be freed. A direct one is refused; build values as trees, sharing is fine.)
  void append(Value v) {
    REEL_CHECK(is_list(), type_error, "Value::append: a ", kind_name(), " is not a list");
    REEL_CHECK(!v.is(*this), value_error, "Value::append: a list cannot be put inside itself");
    n_->items.push_back(std::move(v));
  }
  // Sets a dict entry (a new key goes last; an existing key keeps its place). Keys: None,
  // bool, int, float, str, bytes or tuples of them (Python: 1, 1.0 and True are one key).
  void set(const Value& key, Value v) {
    if (!is_dict()) not_dict();
    REEL_CHECK(!v.is(*this), value_error, "Value::set: a dict cannot be put inside itself");
    auto [it, fresh] = n_->dict->index.emplace(hash_key(key), n_->dict->keys.size());
    if (!fresh) {
      n_->dict->values[it->second] = std::move(v);
      return;
    }
    n_->dict->keys.push_back(key);
    n_->dict->values.push_back(std::move(v));
  }

  // The tensors of a checkpoint as a StateDict: nested dicts (and lists/tuples) flattened with
  // '.', as "model.layer.0.weight"; entries that are not tensors are left out. value_error when
  // this is not a dict.
  StateDict state_dict() const {
    REEL_CHECK(is_dict(), value_error, "Value::state_dict: the loaded object is a ", kind_name(),
               ", not a dict (at(...) the dict that holds the tensors)");
    StateDict sd;
    size_t visited = 0;
    flatten(sd, "", visited, 0);
    return sd;
  }

  const char* kind_name() const {
    static constexpr const char* names[] = {"None", "bool",   "int",  "float", "complex", "str",
                                            "bytes", "tensor", "list", "tuple", "dict",    "object"};
    return names[static_cast<int>(kind())];
  }

 private:
  struct Node {
    Kind kind;
    bool ordered = false;  // dict: OrderedDict; tensor: Parameter
    bool flag = false;     // tensor: requires_grad
    bool frozen = false;   // (loader) already inside a container: no longer changed
    int depth = 0;         // (loader) containers nested inside
    int64_t i = 0;
    double d = 0;
    std::complex<double> c;
    std::string s;  // str / bytes / object type
    AnyTensor t;
    std::vector<Value> items;  // list / tuple; object: args, state
    struct Dict {
      std::vector<Value> keys, values;
      std::unordered_map<std::string, size_t> index;  // hash_key -> position
    };
    std::unique_ptr<Dict> dict;  // (only dicts pay for it)
    explicit Node(Kind k) : kind(k) {
      if (k == Kind::Dict) dict = std::make_unique<Dict>();
    }
  };
  static std::shared_ptr<Node> make(Kind k) { return std::make_shared<Node>(k); }
  static Value seq(Kind k, std::vector<Value> items) {
    Value v;
    v.n_ = make(k);
    v.n_->items = std::move(items);
    return v;
  }
  const Node& expect(Kind k, const char* fn) const {
    if (kind() != k) {
      Value want;
      want.n_ = make(k);
      raise<type_error>("Value::", fn, ": the value is a ", kind_name(), ", not a ", want.kind_name());
    }
    return *n_;
  }
  const std::vector<Value>& seq_items(const char* fn) const {
    REEL_CHECK(is_list() || is_tuple(), type_error, "Value::", fn, ": a ", kind_name(), " is not a list or tuple");
    return n_->items;
  }
  [[noreturn]] const Value& not_dict() const { raise<type_error>("Value: a ", kind_name(), " is not a dict"); }
  // A dict key's identity, Python's equality for the hashable kinds.
  static std::string hash_key(const Value& k, int depth = 0) {
    REEL_CHECK(depth < 64, value_error, "Value: dict key nested too deeply");
    switch (k.kind()) {
      case Kind::None: return "N";
      case Kind::Bool:
      case Kind::Int: return "i" + std::to_string(k.n_->i);
      case Kind::Double: {
        const double d = k.n_->d;
        if (d >= -9.2e18 && d <= 9.2e18 && d == std::trunc(d))  // (NaN fails every comparison)
          return "i" + std::to_string(static_cast<int64_t>(d));
        std::string s = "d";
        s.append(reinterpret_cast<const char*>(&d), sizeof d);
        return s;
      }
      case Kind::String: return "s" + k.n_->s;
      case Kind::Bytes: return "b" + k.n_->s;
      case Kind::Tuple: {
        std::string s = "t" + std::to_string(k.n_->items.size());
        for (const Value& e : k.n_->items) {
          std::string h = hash_key(e, depth + 1);
          s += std::to_string(h.size()) + ":" + h;
        }
        return s;
      }
      default: raise<type_error>("Value: a ", k.kind_name(), " cannot be a dict key");
    }
  }
  size_t position(const Value& key) const {
    auto it = n_->dict->index.find(hash_key(key));
    if (it == n_->dict->index.end()) {
      std::string shown = key.is_string() ? "'" + key.n_->s + "'" : key.is_int() ? std::to_string(key.n_->i) : key.kind_name();
      raise<index_error>("Value::at: the dict has no key ", shown);
    }
    return it->second;
  }
  void flatten(StateDict& sd, const std::string& prefix, size_t& visited, int depth) const {
    REEL_CHECK(depth < 256 && ++visited < (size_t(1) << 26), value_error,
               "Value::state_dict: the value is nested too deeply or shares too much to flatten");
    auto child = [&](const Value& v, const std::string& name) {
      const std::string full = prefix.empty() ? name : prefix + "." + name;
      if (v.is_tensor())
        sd.insert_or_assign(full, v.tensor());
      else if (v.is_dict() || v.is_list() || v.is_tuple())
        v.flatten(sd, full, visited, depth + 1);
    };
    if (is_dict()) {
      for (size_t i = 0; i < n_->dict->keys.size(); ++i) {
        const Value& k = n_->dict->keys[i];
        if (k.is_string() || k.is_int()) child(n_->dict->values[i], k.is_string() ? k.n_->s : std::to_string(k.n_->i));
      }
    } else {
      for (size_t i = 0; i < n_->items.size(); ++i) child(n_->items[i], std::to_string(i));
    }
  }
  friend struct detail::ValueAccess;
  std::shared_ptr<Node> n_;
};

namespace detail {
// The loader's view of a Value's bookkeeping (nesting depth, frozen containers).
struct ValueAccess {
  static bool& frozen(const Value& v) { return v.n_->frozen; }
  static int& depth(const Value& v) { return v.n_->depth; }
  static bool has_node(const Value& v) { return v.n_ != nullptr; }
  static int64_t& tag(const Value& v) { return v.n_->i; }  // (tensors: a storage's kind)
  static void set_ordered(const Value& v, bool o) { v.n_->ordered = o; }
  static std::vector<Value>& object_slots(const Value& v) { return v.n_->items; }
};
}  // namespace detail

}  // namespace reel
