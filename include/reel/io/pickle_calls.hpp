#pragma once
// What the weights-only unpickler does with its allowed globals (REDUCE of a rebuild function,
// OrderedDict, torch.Size, ...), and the container rules every opcode keeps: no cycles (a
// container put inside another is final), bounded nesting. Tensors are views of the storages
// the caller loads, checked against them before they exist.
#include "../core/config.hpp"
#include <complex>
#include <memory>
#include <string>
#include <vector>

#include "pickle_globals.hpp"

namespace reel::inline REEL_ABI::detail::pickle {

class Calls {
 protected:
  explicit Calls(const Context& ctx) : ctx_(ctx) {}
  using VA = ValueAccess;
  template <class... A>
  [[noreturn]] void fail(size_t at, const A&... a) const {
    raise<unpickling_error>("load: ", ctx_.what, ": data.pkl byte ", at, ": ", a...);
  }
  // ---- containers: no cycles, bounded nesting
  // A container put inside another is final: changing it afterwards (what a cycle needs) is
  // refused, and the nesting depth is known when it is put in.
  void adopt(const Value& parent, const Value& child) {
    if (!VA::has_node(child) || !VA::has_node(parent)) return;
    if (parent.is(child)) fail(at_, "a container put inside itself");
    VA::frozen(child) = true;
    int& d = VA::depth(parent);
    d = std::max(d, VA::depth(child) + 1);
    if (static_cast<size_t>(d) > ctx_.max_depth) fail(at_, "containers nested more than ", ctx_.max_depth, " deep");
  }
  void check_open(const Value& target, const char* op) {
    if (VA::frozen(target))
      fail(at_, op, " on a ", target.kind_name(), " already inside another container (a cycle, or a malformed pickle)");
  }
  Value make_tuple(std::vector<Value> items) {
    Value t = Value::tuple();
    for (const Value& v : items) adopt(t, v);
    VA::object_slots(t) = std::move(items);
    return t;
  }
  void add_to_list(Value& target, std::vector<Value> items, const char* op) {
    if (!target.is_list()) fail(at_, op, " on a ", target.kind_name(), " (only lists can be appended to)");
    check_open(target, op);
    for (Value& v : items) {
      adopt(target, v);
      target.append(std::move(v));
    }
  }
  void set_items(Value& target, std::vector<Value> kv, const char* op) {
    if (!target.is_dict())
      fail(at_, op, " on a ", target.kind_name(), " (only dict, OrderedDict and Counter take items)");
    check_open(target, op);
    for (size_t i = 0; i < kv.size(); i += 2) {
      adopt(target, kv[i + 1]);
      try {
        target.set(kv[i], std::move(kv[i + 1]));
      } catch (const error& e) {
        fail(at_, op, ": ", e.what());
      }
    }
  }
  // ---- globals: object Values tagged with their G (type_name: "module.name")
  static G gid(const Value& v) {
    return v.is_object() && v.args().is_none() && v.state().is_int() ? static_cast<G>(v.state().to_int()) : G::None;
  }
  // ---- tensors
  static bool is_storage(const Value& v) { return v.is_tensor() && VA::tag(v) != 0; }
  Shape int_tuple(const Value& v, const char* what) {
    if (!v.is_tuple() && !v.is_list()) fail(at_, "a tensor's ", what, " is a ", v.kind_name(), ", not a tuple");
    if (v.size() > static_cast<size_t>(kMaxDims)) fail(at_, "a tensor with ", v.size(), " dims (reel allows ", kMaxDims, ")");
    Shape s;
    for (const Value& e : v.items()) {
      if (!e.is_int()) fail(at_, "a tensor's ", what, " holds a ", e.kind_name());
      s.push_back(e.to_int());
    }
    return s;
  }
  int64_t int_arg(const Value& v, const char* what) {
    if (!v.is_int()) fail(at_, what, " is a ", v.kind_name(), ", not an int");
    return v.to_int();
  }
  bool bool_arg(const Value& v, const char* what) {
    if (!v.is_bool()) fail(at_, what, " is a ", v.kind_name(), ", not a bool");
    return v.to_bool();
  }
  ScalarType dtype_arg(const Value& v) {
    ScalarType t;
    if (gid(v) != G::DType || !dtype_named(v.type_name(), t)) fail(at_, "a tensor's dtype is not a torch dtype");
    return t;
  }
  // Checks that size/stride/offset stay inside the storage, then views it.
  Value view(const Value& storage, int64_t offset, const Shape& size, const Shape& stride, ScalarType dtype,
             bool requires_grad) {
    if (!is_storage(storage)) fail(at_, "a tensor is rebuilt from a ", storage.kind_name(), ", not a storage");
    if (size.size() != stride.size()) fail(at_, "a tensor with ", size.size(), " sizes and ", stride.size(), " strides");
    const auto& st = storage.tensor().impl_ptr()->storage;
    const uint64_t es = static_cast<uint64_t>(element_size(dtype)), capacity = st->nbytes / es;
    if (offset < 0) fail(at_, "a tensor with the negative storage offset ", offset);
    uint64_t numel = 1, last = static_cast<uint64_t>(offset);
    bool empty = false;
    for (int64_t d = 0; d < size.size(); ++d) {
      if (size[d] < 0) fail(at_, "a tensor with the negative size ", size[d]);
      if (stride[d] < 0) fail(at_, "a tensor with the negative stride ", stride[d]);
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(size[d]), &numel) || numel > (uint64_t(1) << 62))
        fail(at_, "a tensor whose element count overflows");
      empty = empty || size[d] == 0;
    }
    if (!empty)
      for (int64_t d = 0; d < size.size(); ++d) {
        uint64_t step;
        if (__builtin_mul_overflow(static_cast<uint64_t>(size[d] - 1), static_cast<uint64_t>(stride[d]), &step) ||
            __builtin_add_overflow(last, step, &last))
          fail(at_, "a tensor whose extent overflows");
      }
    if (!empty && last >= capacity)
      fail(at_, "a view (offset ", offset, ", size ", size, ", stride ", stride, ") reaches element ", last,
           " of a storage of ", capacity, " ", dtype_name(dtype), " elements");
    if (empty && static_cast<uint64_t>(offset) > capacity)
      fail(at_, "a tensor's storage offset ", offset, " is past its storage (", capacity, " elements)");
    if (dtype == ScalarType::Bool && st->data && !empty)  // (a bool view of bytes: each must be 0 or 1)
      for (uint64_t i = static_cast<uint64_t>(offset); i <= last; ++i)
        if (static_cast<const unsigned char*>(st->data)[i] > 1)
          fail(at_, "a bool tensor over a storage holding the byte ", int(static_cast<const unsigned char*>(st->data)[i]));
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = st;
    impl->sizes = size;
    impl->strides = stride;
    impl->offset = offset;
    impl->dtype = dtype;
    impl->device = st->device;
    return Value(AnyTensor(std::move(impl)), requires_grad);
  }
  void no_conj_neg(const Value& metadata) {
    if (metadata.is_none()) return;
    if (!metadata.is_dict()) fail(at_, "a tensor's metadata is a ", metadata.kind_name(), ", not a dict");
    for (const char* bit : {"conj", "neg"})
      if (metadata.contains(Value(bit)) && metadata.at(bit).is_bool() && metadata.at(bit).to_bool())
        fail(at_, "a tensor saved with its ", bit, " bit set: reel has no lazy ", bit,
             " views (resolve_", bit, "() it before torch.save)");
  }
  static const char* gname(G g) {
    switch (g) {
      case G::RebuildV2: return "_rebuild_tensor_v2";
      case G::RebuildV3: return "_rebuild_tensor_v3";
      case G::RebuildTensor: return "_rebuild_tensor";
      case G::RebuildParameter: return "_rebuild_parameter";
      case G::RebuildParameterWithState: return "_rebuild_parameter_with_state";
      case G::RebuildMeta: return "_rebuild_meta_tensor_no_storage";
      case G::RebuildFromCpu: return "_rebuild_device_tensor_from_cpu_tensor";
      case G::RebuildFromType: return "_rebuild_from_type_v2";
      default: return "the call";
    }
  }
  void arity(const std::vector<Value>& a, size_t lo, size_t hi, G g) {
    if (a.size() < lo || a.size() > hi) fail(at_, gname(g), " with ", a.size(), " arguments");
  }
  Value tensor_arg(const Value& v, const char* fn) {
    if (!v.is_tensor() || is_storage(v)) fail(at_, fn, " of a ", v.kind_name(), ", not a tensor");
    return v;
  }
  // func(*args) for an allowed global.
  Value call(const Value& fn, const Value& args_v) {
    if (!args_v.is_tuple()) fail(at_, "REDUCE with arguments that are a ", args_v.kind_name(), ", not a tuple");
    const std::vector<Value>& a = args_v.items();
    const G g = gid(fn);
    switch (g) {
      case G::OrderedDict:
      case G::Counter: {
        Value d = Value::dict(g == G::OrderedDict);
        if (a.size() > 1) fail(at_, fn.type_name(), " with ", a.size(), " arguments");
        if (a.size() == 1) {
          if (!a[0].is_list() && !a[0].is_tuple()) fail(at_, fn.type_name(), " of a ", a[0].kind_name());
          for (const Value& kv : a[0].items()) {
            if (!kv.is_tuple() || kv.size() != 2) fail(at_, fn.type_name(), " of something other than pairs");
            set_items(d, {kv.at(0), kv.at(1)}, "OrderedDict");
          }
        }
        return d;
      }
      case G::Size:
        if (a.size() > 1) fail(at_, "torch.Size with ", a.size(), " arguments");
        return a.empty() ? Value::tuple() : make_tuple([&] {
          int_tuple(a[0], "size");
          return a[0].items();
        }());
      case G::Device: {
        if (a.empty() || a.size() > 2 || !a[0].is_string()) fail(at_, "torch.device with malformed arguments");
        if (a.size() == 2 && !a[1].is_int()) fail(at_, "torch.device with a non-integer index");
        return Value(a[0].to_string() + (a.size() == 2 ? ":" + std::to_string(a[1].to_int()) : ""));
      }
      case G::GetLayout:
        if (a.size() != 1 || !a[0].is_string()) fail(at_, "_get_layout with malformed arguments");
        return a[0];
      case G::Encode: {  // _codecs.encode(str, "latin1"): protocol 2's bytes
        if (a.size() != 2 || !a[0].is_string() || !a[1].is_string() ||
            (a[1].to_string() != "latin1" && a[1].to_string() != "latin-1"))
          fail(at_, "_codecs.encode other than encode(str, 'latin1')");
        std::string out;
        const std::string& s = a[0].to_string();
        for (size_t i = 0; i < s.size();) {
          const auto c = static_cast<unsigned char>(s[i]);
          if (c < 0x80) {
            out += static_cast<char>(c);
            ++i;
          } else if ((c >> 5) == 6 && c <= 0xC3) {
            out += static_cast<char>(((c & 0x1F) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3F));
            i += 2;
          } else {
            fail(at_, "_codecs.encode: a character outside latin-1");
          }
        }
        return Value::bytes(std::move(out));
      }
      case G::Bytearray:
        if (a.empty()) return Value::bytes("");
        if (a.size() != 1 || !a[0].is_bytes()) fail(at_, "bytearray of something other than bytes");
        return a[0];
      case G::Set: {
        if (a.empty()) return Value::list();
        if (a.size() != 1 || (!a[0].is_list() && !a[0].is_tuple())) fail(at_, "set of something other than a list");
        Value l = Value::list();
        add_to_list(l, a[0].items(), "set");
        return l;
      }
      case G::Complex: {
        if (a.empty() || a.size() > 2) fail(at_, "complex with ", a.size(), " arguments");
        for (const Value& x : a)
          if (!x.is_int() && !x.is_double()) fail(at_, "complex of a ", x.kind_name());
        return Value(std::complex<double>(a[0].to_double(), a.size() == 2 ? a[1].to_double() : 0.0));
      }
      case G::RebuildTensor:  // (storage, offset, size, stride)
        arity(a, 4, 4, g);
        return view(a[0], int_arg(a[1], "the storage offset"), int_tuple(a[2], "size"), int_tuple(a[3], "stride"),
                    storage_dtype(a[0]), false);
      case G::RebuildV2: {  // (storage, offset, size, stride, requires_grad, hooks[, metadata])
        arity(a, 6, 7, g);
        if (a.size() == 7) no_conj_neg(a[6]);
        return view(a[0], int_arg(a[1], "the storage offset"), int_tuple(a[2], "size"), int_tuple(a[3], "stride"),
                    storage_dtype(a[0]), bool_arg(a[4], "requires_grad"));
      }
      case G::RebuildV3: {  // (storage, offset, size, stride, requires_grad, hooks, dtype[, metadata])
        arity(a, 7, 8, g);
        if (a.size() == 8) no_conj_neg(a[7]);
        return view(a[0], int_arg(a[1], "the storage offset"), int_tuple(a[2], "size"), int_tuple(a[3], "stride"),
                    dtype_arg(a[6]), bool_arg(a[4], "requires_grad"));
      }
      case G::RebuildParameter:
      case G::RebuildParameterWithState: {  // (data, requires_grad, hooks[, state])
        arity(a, g == G::RebuildParameter ? 3 : 4, g == G::RebuildParameter ? 3 : 4, g);
        return Value::parameter(tensor_arg(a[0], gname(g)).tensor(), bool_arg(a[1], "requires_grad"));
      }
      case G::RebuildMeta: {  // (dtype, size, stride, requires_grad): a Meta tensor
        arity(a, 3, 4, g);
        const ScalarType t = dtype_arg(a[0]);
        const Shape size = int_tuple(a[1], "size"), stride = int_tuple(a[2], "stride");
        uint64_t extent = 1;
        for (int64_t d = 0; d < size.size() && d < stride.size(); ++d) {
          if (size[d] == 0) extent = 0;
          if (size[d] < 0 || stride[d] < 0) fail(at_, "a Meta tensor with a negative size or stride");
        }
        if (extent)
          for (int64_t d = 0; d < size.size() && d < stride.size(); ++d) {
            uint64_t step;
            if (__builtin_mul_overflow(static_cast<uint64_t>(size[d] - 1), static_cast<uint64_t>(stride[d]), &step) ||
                __builtin_add_overflow(extent, step, &extent) || extent > (uint64_t(1) << 56))
              fail(at_, "a Meta tensor whose extent overflows");
          }
        Value s(AnyTensor(meta_storage(extent * static_cast<uint64_t>(element_size(t)), t)));
        VA::tag(s) = kUntypedStorageTag;
        return view(s, 0, size, stride, t, a.size() == 4 && bool_arg(a[3], "requires_grad"));
      }
      case G::RebuildFromCpu: {  // (data, dtype, device, requires_grad)
        arity(a, 4, 4, g);
        Value t = tensor_arg(a[0], gname(g));
        return Value(t.tensor(), bool_arg(a[3], "requires_grad"));
      }
      case G::RebuildFromType: {  // (func, new_type, args, state): Python attributes (state) are dropped
        arity(a, 4, 4, g);
        const G cls = gid(a[1]);
        if (cls != G::TensorClass && cls != G::Parameter && cls != G::NestedTensorClass)
          fail(at_, "_rebuild_from_type_v2 of the type ", a[1].is_object() ? a[1].type_name() : a[1].kind_name(),
               " (reel rebuilds only torch.Tensor and Parameter)");
        const G f = gid(a[0]);
        if (f == G::None || f == G::User || f == G::RebuildFromType || f == G::DType || f == G::LegacyStorage)
          fail(at_, "_rebuild_from_type_v2 with a function that is not a tensor rebuild");
        if ((cls == G::NestedTensorClass) != (f == G::Njt))
          fail(at_, "_rebuild_from_type_v2 pairs NestedTensor with another function, or _rebuild_njt with another type");
        Value r = call(a[0], a[2]);
        if (cls == G::Parameter && r.is_tensor()) return Value::parameter(r.tensor(), r.requires_grad());
        return r;
      }
      case G::Njt: {  // _rebuild_njt({values, offsets, lengths, _ragged_idx, ...}): reel's jagged form
        if (a.size() != 1 || !a[0].is_dict()) fail(at_, "_rebuild_njt with malformed arguments");
        const Value& d = a[0];
        Value j = Value::dict();
        for (const char* k : {"values", "offsets"}) {
          if (!d.contains(Value(k)) || !d.at(k).is_tensor()) fail(at_, "_rebuild_njt without '", k, "'");
          j.set(Value(k), d.at(k));
        }
        j.set(Value("lengths"), d.contains(Value("lengths")) ? d.at("lengths") : Value());
        j.set(Value("ragged_idx"), d.contains(Value("_ragged_idx")) ? d.at("_ragged_idx") : Value(int64_t(1)));
        return Value::object("reel.jagged", Value::tuple(), j);
      }
      case G::User: {
        Value o = Value::object(fn.type_name(), args_v);
        return o;
      }
      default:
        fail(at_, "REDUCE calls ", fn.is_object() ? fn.type_name() : std::string("a ") + fn.kind_name(),
             ", which the weights-only unpickler does not call");
    }
  }
  static ScalarType storage_dtype(const Value& s) {
    return s.is_tensor() && VA::tag(s) == kTypedStorageTag ? s.tensor().dtype() : ScalarType::UInt8;
  }
  static std::shared_ptr<TensorImpl> meta_storage(uint64_t nbytes, ScalarType t) {
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = make_storage(static_cast<size_t>(nbytes), DeviceType::Meta);
    impl->sizes = {static_cast<int64_t>(nbytes)};
    impl->strides = {1};
    impl->dtype = ScalarType::UInt8;
    impl->device = DeviceType::Meta;
    (void)t;
    return impl;
  }

  const Context& ctx_;
  size_t at_ = 0;  // the current opcode's offset
};

}  // namespace reel::detail::pickle
