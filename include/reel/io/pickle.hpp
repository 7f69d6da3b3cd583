#pragma once
// Pickle, protocol 2, as torch.save writes it and torch.load(weights_only=True) reads it.
//   Emitter:    the opcodes reel writes (PROTO 2, GLOBAL, REDUCE, MARK/TUPLE, BINPERSID, ...).
//   unpickle(): a weights-only unpickler. It accepts exactly the opcodes of PyTorch's
//               weights-only unpickler and, by default, exactly its allowed globals
//               (pickle_globals.hpp); it builds Values, never runs code (pickle_calls.hpp:
//               what the allowed calls make). Tensors are rebuilt over the storages that the
//               caller's load_storage returns (so views of one storage stay views of one).
// Every rule broken raises unpickling_error naming the opcode or global and its byte offset.
#include "../core/config.hpp"
#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "pickle_calls.hpp"

namespace reel::inline REEL_ABI::detail::pickle {

// ---- writing ------------------------------------------------------------------------------
class Emitter {
 public:
  std::string out;
  void op(char c) { out += c; }
  void proto() { out += "\x80\x02"; }
  void stop() { out += '.'; }
  void mark() { out += '('; }
  void none() { out += 'N'; }
  void boolean(bool b) { out += b ? '\x88' : '\x89'; }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      out += 'K';
      le(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v < 65536) {
      out += 'M';
      le(static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out += 'J';
      le(static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v))), 4);
    } else {  // LONG1: two's complement, little-endian, as few bytes as hold the sign
      std::string b;
      uint64_t u = static_cast<uint64_t>(v);
      for (int i = 0; i < 8; ++i) b += static_cast<char>((u >> (8 * i)) & 0xFF);
      while (b.size() > 1 && ((b.back() == 0 && !(b[b.size() - 2] & 0x80)) ||
                              (b.back() == '\xFF' && (b[b.size() - 2] & 0x80))))
        b.pop_back();
      out += '\x8a';
      out += static_cast<char>(b.size());
      out += b;
    }
  }
  void real(double d) {
    out += 'G';
    const auto u = std::bit_cast<uint64_t>(d);
    for (int i = 7; i >= 0; --i) out += static_cast<char>((u >> (8 * i)) & 0xFF);  // big-endian
  }
  void str(const std::string& s) {
    out += 'X';
    le(s.size(), 4);
    out += s;
  }
  void global(const std::string& module, const std::string& name) { out += "c" + module + "\n" + name + "\n"; }
  void tuple(size_t n) {  // of the last n items pushed after a mark (n > 3), or without a mark
    if (n == 0) out += ')';
    else if (n == 1) out += '\x85';
    else if (n == 2) out += '\x86';
    else if (n == 3) out += '\x87';
    else out += 't';
  }

 private:
  void le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
  }
};

// ---- reading ------------------------------------------------------------------------------
class Unpickler : Calls {
 public:
  Unpickler(const unsigned char* p, size_t n, const Context& ctx) : Calls(ctx), p_(p), n_(n) {}

  Value run() {
    while (true) {
      if (pos_ >= n_) fail(n_, "the pickle ends without STOP (truncated?)");
      at_ = pos_;
      const unsigned char code = p_[pos_++];
      switch (code) {
        case 0x80: {  // PROTO
          const int v = byte();
          if (v < 2 || v > 5) fail(at_, "unsupported pickle protocol ", v);
          break;
        }
        case '.': {  // STOP
          const Value r = pop("STOP");
          if (marks_.size()) fail(at_, "STOP with an open MARK");
          return r;
        }
        case 'c': global(); break;
        case 0x81: newobj(); break;
        case 'R': reduce(); break;
        case 'b': build(); break;
        case 'a': {  // APPEND
          Value item = pop("APPEND");
          add_to_list(top("APPEND"), {std::move(item)}, "APPEND");
          break;
        }
        case 'e': {  // APPENDS
          std::vector<Value> items = pop_mark("APPENDS");
          add_to_list(top("APPENDS"), std::move(items), "APPENDS");
          break;
        }
        case 's': {  // SETITEM
          Value v = pop("SETITEM");
          Value k = pop("SETITEM");
          set_items(top("SETITEM"), {std::move(k), std::move(v)}, "SETITEM");
          break;
        }
        case 'u': {  // SETITEMS
          std::vector<Value> kv = pop_mark("SETITEMS");
          if (kv.size() % 2) fail(at_, "SETITEMS with an odd number of items");
          set_items(top("SETITEMS"), std::move(kv), "SETITEMS");
          break;
        }
        case '(': marks_.push_back(stack_.size()); break;
        case 't': push(make_tuple(pop_mark("TUPLE"))); break;
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const size_t k = code - 0x84;
          std::vector<Value> items(k);
          for (size_t i = k; i-- > 0;) items[i] = pop("TUPLE1/2/3");
          push(make_tuple(std::move(items)));
          break;
        }
        case 'N': push(Value()); break;
        case 0x88: push(Value(true)); break;
        case 0x89: push(Value(false)); break;
        case ')': push(Value::tuple()); break;
        case ']': push(Value::list()); break;
        case '}': push(Value::dict()); break;
        case 0x8f: push(Value::list()); break;  // EMPTY_SET: a list
        case 'J': push(Value(static_cast<int64_t>(static_cast<int32_t>(uint_le(4))))); break;
        case 'K': push(Value(static_cast<int64_t>(uint_le(1)))); break;
        case 'M': push(Value(static_cast<int64_t>(uint_le(2)))); break;
        case 'G': {
          need(8);
          uint64_t u = 0;
          for (int i = 0; i < 8; ++i) u = (u << 8) | p_[pos_ + i];
          pos_ += 8;
          push(Value(std::bit_cast<double>(u)));
          break;
        }
        case 'X': {  // BINUNICODE
          const uint64_t len = uint_le(4);
          push(Value(utf8(take(len))));
          break;
        }
        case 'U': {  // SHORT_BINSTRING (torch.load decodes it as utf-8)
          const uint64_t len = uint_le(1);
          push(Value(utf8(take(len))));
          break;
        }
        case 0x8a: push(Value(long1())); break;
        case 'Q': persid(); break;
        case 'h': push(memo_get(uint_le(1))); break;
        case 'j': push(memo_get(uint_le(4))); break;
        case 'q': memo_[static_cast<uint32_t>(uint_le(1))] = top("BINPUT"); break;
        case 'r': memo_[static_cast<uint32_t>(uint_le(4))] = top("LONG_BINPUT"); break;
        default:
          fail(at_, "the opcode ", opcode_name(code), " is not allowed by the weights-only unpickler");
      }
    }
  }

 private:
  static std::string opcode_name(unsigned char c) {
    static const std::pair<unsigned char, const char*> names[] = {
        {'I', "INT"},         {'L', "LONG"},        {'S', "STRING"},      {'V', "UNICODE"},      {'F', "FLOAT"},
        {'i', "INST"},        {'o', "OBJ"},         {'P', "PERSID"},      {'g', "GET"},          {'p', "PUT"},
        {'0', "POP"},         {'1', "POP_MARK"},    {'2', "DUP"},         {'d', "DICT"},         {'l', "LIST"},
        {'T', "BINSTRING"},   {0x82, "EXT1"},       {0x83, "EXT2"},       {0x84, "EXT4"},        {0x8b, "LONG4"},
        {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"}, {0x8e, "BINBYTES8"}, {0x90, "ADDITEMS"},
        {0x91, "FROZENSET"},  {0x92, "NEWOBJ_EX"},  {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"},   {0x95, "FRAME"},
        {'B', "BINBYTES"},    {'C', "SHORT_BINBYTES"}, {0x96, "BYTEARRAY8"}, {0x97, "NEXT_BUFFER"},
        {0x98, "READONLY_BUFFER"}};
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", c);
    for (const auto& [k, n] : names)
      if (k == c) return std::string(n) + " (" + hex + ")";
    return std::string("0x") + (hex + 2) + " (unknown)";
  }
  void need(uint64_t k) const {
    if (k > n_ - pos_) fail(at_, "an argument of ", k, " bytes runs past the end of the pickle (", n_ - pos_, " left)");
  }
  int byte() {
    need(1);
    return p_[pos_++];
  }
  uint64_t uint_le(int bytes) {
    need(static_cast<uint64_t>(bytes));
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p_[pos_ + static_cast<size_t>(i)];
    pos_ += static_cast<size_t>(bytes);
    return v;
  }
  std::string take(uint64_t len) {
    need(len);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }
  std::string utf8(std::string s) const {  // (checked: reel hands out valid UTF-8)
    for (size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (!len || i + len > s.size()) fail(at_, "a string that is not valid UTF-8");
      for (size_t k = 1; k < len; ++k)
        if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) fail(at_, "a string that is not valid UTF-8");
      i += len;
    }
    return s;
  }
  int64_t long1() {
    const uint64_t len = uint_le(1);
    if (len > 8) fail(at_, "an integer of ", len, " bytes does not fit in 64 bits");
    need(len);
    uint64_t u = 0;
    for (uint64_t i = 0; i < len; ++i) u |= static_cast<uint64_t>(p_[pos_ + i]) << (8 * i);
    if (len > 0 && len < 8 && (p_[pos_ + len - 1] & 0x80)) u |= ~uint64_t(0) << (8 * len);  // sign
    pos_ += len;
    return static_cast<int64_t>(u);
  }
  // ---- the stack
  size_t base() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Value v) { stack_.push_back(std::move(v)); }
  Value pop(const char* op) {
    if (stack_.size() <= base()) fail(at_, op, " on an empty stack (stack underflow)");
    Value v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Value& top(const char* op) {
    if (stack_.size() <= base()) fail(at_, op, " on an empty stack (stack underflow)");
    return stack_.back();
  }
  std::vector<Value> pop_mark(const char* op) {
    if (marks_.empty()) fail(at_, op, " without a MARK");
    const size_t b = marks_.back();
    marks_.pop_back();
    std::vector<Value> items(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(b)),
                             std::make_move_iterator(stack_.end()));
    stack_.resize(b);
    return items;
  }
  Value memo_get(uint64_t i) {
    auto it = memo_.find(static_cast<uint32_t>(i));
    if (it == memo_.end()) fail(at_, "memo entry ", i, " was never set");
    return it->second;
  }
  void global() {
    auto line = [&] {
      const size_t start = pos_;
      while (pos_ < n_ && p_[pos_] != '\n') {
        if (pos_ - start > 512) fail(at_, "GLOBAL with a name longer than 512 bytes");
        ++pos_;
      }
      if (pos_ >= n_) fail(at_, "GLOBAL runs past the end of the pickle");
      return std::string(reinterpret_cast<const char*>(p_ + start), pos_++ - start);
    };
    std::string module = line(), name = line();
    if (module == "__builtin__") module = "builtins";  // protocol 2's spelling (Python 2 names)
    if (module == "copy_reg") module = "copyreg";
    const std::string full = module + "." + name;
    for (const char* blocked : {"sys", "os", "posix", "nt"})
      if (module == blocked || module.rfind(std::string(blocked) + ".", 0) == 0)
        fail(at_, "GLOBAL ", full, " is refused: its module ", blocked, " is blocked. reel's load is a weights-only ",
             "unpickler: C++ cannot run pickled code, and there is no unsafe mode");
    std::string why;
    const G g = classify_global(full, ctx_.safe_globals, why);
    if (g == G::None) {
      std::string hint;
      if (full.rfind("torch.nested._internal.nested_tensor.", 0) == 0)
        hint = " (nested jagged tensors load only when LoadOptions::safe_globals names both "
               "torch.nested._internal.nested_tensor._rebuild_njt and ...NestedTensor, as PyTorch 2.15 requires)";
      fail(at_, "GLOBAL ", full, " is not an allowed global by default", hint,
           ". reel's load is a weights-only unpickler (PyTorch's allowlist): C++ cannot run pickled code, and there is ",
           "no unsafe mode; a class that only holds data can be allowed with LoadOptions::safe_globals, and loads as a ",
           "Value object");
    }
    if (g == G::Unsupported) fail(at_, "GLOBAL ", full, ": reel has no ", why);
    push(Value::object(full, Value(), Value(static_cast<int64_t>(g))));
  }
  void reduce() {
    Value args = pop("REDUCE");
    Value& fn = top("REDUCE");
    if (gid(fn) == G::None) fail(at_, "REDUCE calls a ", fn.kind_name(), ", not an allowed global");
    Value r = call(fn, args);
    if (r.is_object()) adopt(r, args);  // (an object holds its args)
    fn = std::move(r);
  }
  void newobj() {
    Value args = pop("NEWOBJ");
    Value cls = pop("NEWOBJ");
    if (!args.is_tuple()) fail(at_, "NEWOBJ with arguments that are a ", args.kind_name());
    const G g = gid(cls);
    if (g == G::Parameter) {
      const auto& a = args.items();
      if (a.empty() || a.size() > 2) fail(at_, "Parameter with ", a.size(), " arguments");
      push(Value::parameter(tensor_arg(a[0], "Parameter").tensor(), a.size() == 2 ? bool_arg(a[1], "requires_grad") : true));
    } else if (g == G::User) {
      push(Value::object(cls.type_name(), args));
    } else {
      fail(at_, "NEWOBJ of ", cls.is_object() ? cls.type_name() : cls.kind_name(),
           ": only Parameter and classes in LoadOptions::safe_globals can be created");
    }
  }
  void build() {
    Value state = pop("BUILD");
    Value& inst = top("BUILD");
    if (inst.is_dict() && inst.ordered()) return;  // OrderedDict attributes (a state dict's _metadata): dropped
    if (inst.is_tensor() && inst.is_parameter()) return;  // Parameter attributes: dropped
    if (inst.is_object() && gid(inst) == G::None && inst.type_name() != "reel.jagged") {
      check_open(inst, "BUILD");
      adopt(inst, state);
      VA::object_slots(inst)[1] = std::move(state);
      return;
    }
    fail(at_, "BUILD on a ", inst.kind_name(), " (only Parameter, OrderedDict and allowed classes can be built)");
  }
  void persid() {
    const Value pid = pop("BINPERSID");
    if (!pid.is_tuple() || pid.size() != 5 || !pid.at(0).is_string() || pid.at(0).to_string() != "storage")
      fail(at_, "a persistent id that is not ('storage', type, key, location, numel)");
    const Value &type = pid.at(1), &key = pid.at(2), &loc = pid.at(3), &numel = pid.at(4);
    const G g = gid(type);
    if (g != G::LegacyStorage && g != G::UntypedStorage) fail(at_, "a persistent id whose storage type is not a storage class");
    if (!key.is_string() || key.to_string().empty() || key.to_string().size() > 20 ||
        key.to_string().find_first_not_of("0123456789") != std::string::npos)
      fail(at_, "a storage key that is not a decimal number");
    if (!loc.is_string()) fail(at_, "a storage location that is not a string");
    if (!numel.is_int() || numel.to_int() < 0) fail(at_, "a storage size that is not a non-negative int");
    ScalarType t = ScalarType::UInt8;
    if (g == G::LegacyStorage) legacy_storage_dtype(type.type_name(), t);
    Value s = ctx_.load_storage(key.to_string(), loc.to_string(), t, g == G::LegacyStorage, numel.to_int());
    VA::tag(s) = g == G::LegacyStorage ? kTypedStorageTag : kUntypedStorageTag;
    push(std::move(s));
  }

  const unsigned char* p_;
  size_t n_, pos_ = 0;
  std::vector<Value> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, Value> memo_;
};

inline Value unpickle(const unsigned char* p, size_t n, const Context& ctx) { return Unpickler(p, n, ctx).run(); }

}  // namespace reel::detail::pickle
