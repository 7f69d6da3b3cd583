#pragma once
// safetensors files (https://huggingface.co/docs/safetensors): save_safetensors and
// load_safetensors of a StateDict, with the format's rules:
//   8 bytes: N, the header's length (little-endian); N bytes: a JSON object (at most 100 MB),
//   name -> {"dtype", "shape", "data_offsets": [begin, end]} plus an optional "__metadata__"
//   object of strings; then the data, little-endian, each tensor contiguous, the offsets
//   relative to the data's start, contiguous from 0 without gaps or overlaps, ending exactly
//   at the end of the file.
// The JSON goes through nlohmann/json (Debian's nlohmann-json3-dev): this header is not part
// of <reel/reel.hpp>, and a program that includes it needs nlohmann/json.hpp on its include
// path (CMake: find_package(nlohmann_json), link nlohmann_json::nlohmann_json).
//
// dtypes: BOOL U8 I8 I16 U16 F16 BF16 I32 U32 F32 C64 F64 I64 U64 F8_E4M3 F8_E5M2 F8_E8M0 and F4
// (float4_e2m1fn_x2: safetensors counts FP4 values, reel packs two per element along the last
// dim, so a reel shape [..., c] is written as [..., 2c]). complex<double> has no safetensors
// dtype: saving it is a type_error.
// Bad files raise value_error naming the rule (never a crash, a hang or a huge allocation:
// sizes are checked against the file's before anything is allocated); I/O failures raise
// reel::error.
#include "../core/config.hpp"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "../interop/state_dict.hpp"
#include "atomic_file.hpp"

namespace reel::inline REEL_ABI {

static_assert(std::endian::native == std::endian::little, "reel's safetensors I/O assumes a little-endian host");

struct SafetensorsLoadOptions {
  // Map the file instead of reading it: each tensor aliases the mapping (no copy) where its
  // offset suits its element size, and is copied otherwise. The mapping is private
  // (copy-on-write): writing to a loaded tensor never changes the file. It lives as long as
  // any tensor loaded from it.
  bool mmap = false;
};
using SafetensorsMetadata = std::map<std::string, std::string>;

namespace detail::st {
inline constexpr uint64_t kMaxHeader = 100'000'000;

struct Code {
  ScalarType dtype;
  const char* name;
  int bits;  // per safetensors element
};
inline constexpr Code kCodes[] = {
    {ScalarType::Bool, "BOOL", 8},           {ScalarType::UInt8, "U8", 8},
    {ScalarType::Int8, "I8", 8},             {ScalarType::Int16, "I16", 16},
    {ScalarType::UInt16, "U16", 16},         {ScalarType::Half, "F16", 16},
    {ScalarType::BFloat16, "BF16", 16},      {ScalarType::Int32, "I32", 32},
    {ScalarType::UInt32, "U32", 32},         {ScalarType::Float, "F32", 32},
    {ScalarType::ComplexFloat, "C64", 64},   {ScalarType::Double, "F64", 64},
    {ScalarType::Int64, "I64", 64},          {ScalarType::UInt64, "U64", 64},
    {ScalarType::Float8_e4m3fn, "F8_E4M3", 8}, {ScalarType::Float8_e5m2, "F8_E5M2", 8},
    {ScalarType::Float8_e8m0fnu, "F8_E8M0", 8}, {ScalarType::Float4_e2m1fn_x2, "F4", 4},
};
inline const Code* code_of(ScalarType t) {
  for (const Code& c : kCodes)
    if (c.dtype == t) return &c;
  return nullptr;
}
inline const Code* code_named(const std::string& s) {
  for (const Code& c : kCodes)
    if (s == c.name) return &c;
  return nullptr;
}

// One tensor's entry in a header.
struct Entry {
  std::string name;
  const Code* code;
  Shape shape;  // reel's (F4: the last dim halved)
  uint64_t begin, end;
};
struct Header {
  std::vector<Entry> entries;  // in the header's order
  SafetensorsMetadata metadata;
};

template <class... A>
[[noreturn]] void bad_file(const std::string& path, const A&... a) {
  raise<value_error>("load_safetensors: ", path, ": ", a...);
}

// The JSON header -> entries, every rule of the format checked; data_size: the bytes after the
// header.
inline Header parse_header(const std::string& text, uint64_t data_size, const std::string& path) {
  using Json = nlohmann::ordered_json;
  if (text.empty() || text[0] != '{') bad_file(path, "the header does not start with '{'");
  // nlohmann keeps the last of duplicate keys silently: the parser's callback sees each key
  std::vector<std::set<std::string>> open;
  std::string duplicate;
  auto watch = [&](int, Json::parse_event_t ev, Json& parsed) {
    if (ev == Json::parse_event_t::object_start) {
      open.emplace_back();
    } else if (ev == Json::parse_event_t::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (ev == Json::parse_event_t::key && !open.empty()) {
      auto k = parsed.get<std::string>();
      if (!open.back().insert(k).second && duplicate.empty()) duplicate = "'" + k + "'";
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(text, watch);
  } catch (const Json::exception& e) {
    bad_file(path, "the header is not valid JSON (", e.what(), ")");
  }
  if (!duplicate.empty()) bad_file(path, "the header names ", duplicate, " twice");
  if (!j.is_object()) bad_file(path, "the header is not a JSON object");
  Header h;
  for (auto item = j.begin(); item != j.end(); ++item) {  // (no structured bindings: lambdas below use them)
    const std::string& name = item.key();
    const Json& v = item.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad_file(path, "__metadata__ must be an object of strings");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) bad_file(path, "__metadata__['", mk, "'] is not a string");
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) bad_file(path, "the entry '", name, "' is not an object");
    auto field = [&](const char* f) -> const Json& {
      auto it = v.find(f);
      if (it == v.end()) bad_file(path, "the entry '", name, "' has no \"", f, "\"");
      return *it;
    };
    const Json& dt = field("dtype");
    if (!dt.is_string()) bad_file(path, "the entry '", name, "': dtype is not a string");
    const Code* code = code_named(dt.get<std::string>());
    if (!code) bad_file(path, "the entry '", name, "' has the dtype '", dt.get<std::string>(), "', which reel does not know");
    const Json& sh = field("shape");
    if (!sh.is_array()) bad_file(path, "the entry '", name, "': shape is not a list");
    if (sh.size() > static_cast<size_t>(kMaxDims))
      bad_file(path, "the entry '", name, "' has ", sh.size(), " dims (reel allows ", kMaxDims, ")");
    Shape shape;
    uint64_t numel = 1;
    for (const Json& d : sh) {
      if (!d.is_number_unsigned()) bad_file(path, "the entry '", name, "': shape entries must be non-negative integers");
      const uint64_t n = d.get<uint64_t>();
      if (n > (uint64_t(1) << 62) || __builtin_mul_overflow(numel, n, &numel) || numel > (uint64_t(1) << 62))
        bad_file(path, "the entry '", name, "': its shape's element count overflows");
      shape.push_back(static_cast<int64_t>(n));
    }
    const Json& off = field("data_offsets");
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad_file(path, "the entry '", name, "': data_offsets must be two non-negative integers");
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e) bad_file(path, "the entry '", name, "': data_offsets [", b, ", ", e, "] end before they begin");
    uint64_t bits = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(code->bits), &bits))
      bad_file(path, "the entry '", name, "': its size in bytes overflows");
    if (bits % 8) bad_file(path, "the entry '", name, "': ", numel, " values of ", code->name, " are not whole bytes");
    if (e - b != bits / 8)
      bad_file(path, "the entry '", name, "': data_offsets [", b, ", ", e, "] hold ", e - b, " bytes, but ", code->name,
               " of shape ", shape, " takes ", bits / 8);
    if (code->dtype == ScalarType::Float4_e2m1fn_x2) {
      if (shape.empty() || shape.back() % 2)
        bad_file(path, "the entry '", name, "': F4 of shape ", shape, " (reel packs two FP4 values per element ",
                 "along the last dim, which must be even)");
      shape.back() /= 2;
    }
    h.entries.push_back({name, code, std::move(shape), b, e});
  }
  std::vector<const Entry*> by_offset;
  for (const Entry& e : h.entries) by_offset.push_back(&e);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  uint64_t at = 0;
  for (const Entry* e : by_offset) {
    if (e->begin > at) bad_file(path, "a gap in the data before '", e->name, "' (bytes ", at, " to ", e->begin, ")");
    if (e->begin < at) bad_file(path, "the data of '", e->name, "' overlaps the previous tensor's (from byte ", e->begin, ")");
    at = e->end;
  }
  if (at < data_size) bad_file(path, data_size - at, " bytes after the last tensor's data");
  if (at > data_size) bad_file(path, "the tensors' data needs ", at, " bytes but the file holds ", data_size, " (truncated?)");
  return h;
}

struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
inline void read_at(int fd, void* dst, uint64_t n, uint64_t off, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) raise<error>("load_safetensors: reading ", path, ": ", std::strerror(errno));
    if (r == 0) bad_file(path, "the file ended early (truncated)");
    p += r;
    n -= static_cast<uint64_t>(r);
    off += static_cast<uint64_t>(r);
  }
}

// The opened file, its size and its parsed header (data from byte `base`).
struct Opened {
  Fd f;
  uint64_t size = 0, base = 0;
  Header h;
};
inline void open_file(Opened& o, const std::string& path) {
  o.f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (o.f.fd < 0) raise<error>("load_safetensors: cannot open ", path, ": ", std::strerror(errno));
  struct stat sb {};
  if (::fstat(o.f.fd, &sb) != 0) raise<error>("load_safetensors: ", path, ": ", std::strerror(errno));
  if (!S_ISREG(sb.st_mode)) bad_file(path, "not a regular file");
  o.size = static_cast<uint64_t>(sb.st_size);
  if (o.size < 8) bad_file(path, "the file has ", o.size, " bytes, too few for a safetensors header");
  unsigned char len[8];
  read_at(o.f.fd, len, 8, 0, path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxHeader) bad_file(path, "the header would be ", n, " bytes, over the format's limit of ", kMaxHeader);
  if (n > o.size - 8) bad_file(path, "the header would be ", n, " bytes, past the end of the file (", o.size, " bytes)");
  std::string text(static_cast<size_t>(n), '\0');
  read_at(o.f.fd, text.data(), n, 8, path);
  o.base = 8 + n;
  o.h = parse_header(text, o.size - o.base, path);
}

// bool elements must be 0 or 1 (any other byte is not a C++ bool).
inline void check_bools(const unsigned char* p, uint64_t n, const std::string& name, const std::string& path) {
  for (uint64_t i = 0; i < n; ++i)
    if (p[i] > 1) bad_file(path, "the BOOL tensor '", name, "' holds the byte ", int(p[i]), " (element ", i, ")");
}
}  // namespace detail::st

// The tensors of a safetensors file, in the header's order, each on its own storage.
inline StateDict load_safetensors(const std::string& path, SafetensorsLoadOptions opt = {}) {
  namespace st = detail::st;
  st::Opened o;
  st::open_file(o, path);
  std::shared_ptr<void> map;
  if (opt.mmap && o.size > o.base) {
    void* p = ::mmap(nullptr, o.size, PROT_READ | PROT_WRITE, MAP_PRIVATE, o.f.fd, 0);
    if (p == MAP_FAILED) raise<error>("load_safetensors: cannot map ", path, ": ", std::strerror(errno));
    const uint64_t size = o.size;
    map = std::shared_ptr<void>(p, [size](void* q) { ::munmap(q, size); });
  }
  StateDict sd;
  for (const st::Entry& e : o.h.entries) {
    auto impl = std::make_shared<detail::TensorImpl>();
    impl->sizes = e.shape;
    impl->strides = detail::contiguous_strides(e.shape);
    impl->dtype = e.code->dtype;
    impl->device = DeviceType::CPU;
    const uint64_t nbytes = e.end - e.begin, at = o.base + e.begin;
    const auto es = static_cast<uint64_t>(element_size(e.code->dtype));
    if (map && at % es == 0) {
      auto s = std::make_shared<detail::Storage>();
      s->data = static_cast<unsigned char*>(map.get()) + at;  // not owned: the mapping is
      s->nbytes = static_cast<size_t>(nbytes);
      s->owner = map;
      impl->storage = std::move(s);
    } else {
      impl->storage = detail::make_storage(static_cast<size_t>(nbytes), DeviceType::CPU);
      if (map)
        std::memcpy(impl->storage->data, static_cast<const unsigned char*>(map.get()) + at, nbytes);
      else
        st::read_at(o.f.fd, impl->storage->data, nbytes, at, path);
    }
    if (e.code->dtype == ScalarType::Bool)
      st::check_bools(static_cast<const unsigned char*>(impl->storage->data), nbytes, e.name, path);
    sd.insert_or_assign(e.name, AnyTensor(std::move(impl)));
  }
  return sd;
}

// The file's "__metadata__" (empty when it has none); reads the header only.
inline SafetensorsMetadata load_safetensors_metadata(const std::string& path) {
  detail::st::Opened o;
  detail::st::open_file(o, path);
  return o.h.metadata;
}

// Writes `sd` (CPU tensors, any strides) to `path` with `metadata` as "__metadata__". The data
// is ordered by element size (largest first), then name, so that every tensor of a mapped file
// is aligned; the header keeps sd's order. Written to `path`.tmp, then renamed: an existing
// file is replaced only by a complete one. Refused (value_error, nothing written): tensors that
// overlap in memory (views of one storage: they would load as separate tensors; the reference
// implementation refuses them too), undefined or Meta tensors, an entry named __metadata__.
inline void save_safetensors(const std::string& path, const StateDict& sd, const SafetensorsMetadata& metadata = {}) {
  namespace st = detail::st;
  struct Item {
    const std::string* name;
    const AnyTensor* t;
    const st::Code* code;
    uint64_t nbytes, lo, hi;  // bytes in the file; the byte range it spans in its storage
  };
  std::vector<Item> items;
  for (const auto& [name, t] : sd) {
    REEL_CHECK(name != "__metadata__", value_error, "save_safetensors: a tensor may not be named __metadata__");
    REEL_CHECK(t.defined(), value_error, "save_safetensors: '", name, "' is an undefined tensor");
    REEL_CHECK(t.device() != DeviceType::Meta, value_error, "save_safetensors: '", name,
               "' is a Meta tensor: it has no data to save");
    REEL_CHECK(t.device() == DeviceType::CPU, not_implemented_error, "save_safetensors: '", name,
               "' is a CUDA tensor: move it to the CPU first (to_device<CPU>())");
    const st::Code* code = st::code_of(t.dtype());
    REEL_CHECK(code, type_error, "save_safetensors: '", name, "' is a ", dtype_name(t.dtype()),
               " tensor, and safetensors has no dtype for it (save its real and imaginary parts, or convert it to "
               "complex<float>)");
    REEL_CHECK(code->dtype != ScalarType::Float4_e2m1fn_x2 || t.dim() > 0, value_error, "save_safetensors: '", name,
               "' is a 0-dim float4_e2m1fn_x2 tensor (safetensors' F4 needs a last dim to hold the pair)");
    const auto es = static_cast<uint64_t>(element_size(t.dtype()));
    uint64_t span = t.numel() > 0 ? 1 : 0;
    for (int64_t d = 0; d < t.dim() && span; ++d)
      span += static_cast<uint64_t>((t.sizes()[d] - 1) * t.strides()[d]);
    const uint64_t lo = static_cast<uint64_t>(t.storage_offset()) * es;
    items.push_back({&name, &t, code, static_cast<uint64_t>(t.numel()) * es, lo, lo + span * es});
  }
  // overlapping views of one storage
  std::unordered_map<const void*, std::vector<const Item*>> by_storage;
  for (const Item& it : items)
    if (it.hi > it.lo) by_storage[it.t->impl_ptr()->storage.get()].push_back(&it);
  for (auto& [s, group] : by_storage) {
    std::sort(group.begin(), group.end(), [](const Item* a, const Item* b) { return a->lo < b->lo; });
    for (size_t i = 1; i < group.size(); ++i)
      REEL_CHECK(group[i]->lo >= group[i - 1]->hi, value_error, "save_safetensors: '", *group[i - 1]->name, "' and '",
                 *group[i]->name, "' share memory (overlapping views of one storage); safetensors stores each tensor ",
                 "on its own, so they would load as two separate tensors: save one of them, or clone() the other");
  }
  std::vector<const Item*> order;
  for (const Item& it : items) order.push_back(&it);
  std::stable_sort(order.begin(), order.end(), [](const Item* a, const Item* b) {
    const int64_t ea = element_size(a->t->dtype()), eb = element_size(b->t->dtype());
    return ea != eb ? ea > eb : *a->name < *b->name;
  });
  std::unordered_map<const Item*, uint64_t> begin;
  uint64_t at = 0;
  for (const Item* it : order) {
    begin[it] = at;
    at += it->nbytes;
  }
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  for (const Item& it : items) {
    std::vector<int64_t> shape(it.t->sizes().begin(), it.t->sizes().end());
    if (it.code->dtype == ScalarType::Float4_e2m1fn_x2) shape.back() *= 2;
    h[*it.name] = {{"dtype", it.code->name}, {"shape", shape}, {"data_offsets", {begin[&it], begin[&it] + it.nbytes}}};
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  detail::io::write_atomically(path, "save_safetensors", [&](std::ostream& f) {
    auto put = [&](const void* p, size_t n) {
      if (n && !f.write(static_cast<const char*>(p), static_cast<std::streamsize>(n)))
        raise<error>("save_safetensors: writing ", path, ".tmp failed");
    };
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));
    put(len, 8);
    put(text.data(), text.size());
    std::vector<unsigned char> buf;
    for (const Item* it : order) {
      const AnyTensor& t = *it->t;
      const auto* base = static_cast<const unsigned char*>(t.impl_ptr()->storage->data);
      const int64_t es = element_size(t.dtype());
      if (t.is_contiguous()) {
        put(base + it->lo, it->nbytes);
        continue;
      }
      buf.resize(it->nbytes);
      for (int64_t i = 0, n = t.numel(); i < n; ++i)
        std::memcpy(buf.data() + i * es, base + (t.storage_offset() + detail::linear_to_offset(i, t.sizes(), t.strides())) * es,
                    static_cast<size_t>(es));
      put(buf.data(), buf.size());
    }
  });
}

}  // namespace reel
