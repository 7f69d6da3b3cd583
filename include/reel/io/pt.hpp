#pragma once
// PyTorch checkpoints (.pt): save() writes what torch.load(path, weights_only=True) reads;
// load() reads what torch.save writes (and what save() writes), with the weights-only rules.
//
// The format (PyTorch's zip serialization): one top-level folder holding
//   data.pkl        the object, pickle protocol 2; tensors are calls of
//                   torch._utils._rebuild_tensor_v2 (v3 for dtypes without a legacy storage
//                   class: uint16/32/64, float8, ...), parameters _rebuild_parameter, and each
//                   storage a BINPERSID ('storage', type, key, location, numel)
//   data/<key>      each storage's bytes, stored uncompressed, 64-byte aligned
//   byteorder, version, .format_version, .storage_alignment, .data/serialization_id
// Views of one storage share one record, with their offsets and strides: loaded, they are
// views of one storage again (on the CPU, memory-mapped, or on Meta).
#include "../core/config.hpp"
#include <istream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "atomic_file.hpp"
#include "pickle.hpp"
#include "zip.hpp"

namespace reel::inline REEL_ABI {

static_assert(std::endian::native == std::endian::little, "reel's checkpoint I/O assumes a little-endian host");

struct LoadOptions {
  // Where the tensors go, whatever device they were saved from: CPU; Meta (sizes, strides,
  // offsets, dtypes and storage sharing, and not a byte of tensor data read or allocated); or
  // CUDA (read on the host, then each storage copied once; needs <reel/cuda.hpp>).
  DeviceType map_location = DeviceType::CPU;
  // Map the file (private, copy-on-write) and let the tensors alias it: no copies; memory
  // grows only with what is touched. Writing to a tensor never changes the file.
  bool mmap = false;
  // Globals allowed beyond PyTorch's default allowlist, by full name ("module.Class"):
  // "torch.nested._internal.nested_tensor._rebuild_njt" and "...NestedTensor" together load
  // nested jagged tensors (as an object "reel.jagged" whose state() holds values, offsets,
  // lengths, ragged_idx); any other name loads instances of that class as Value objects
  // (type_name(), args(), state()): data only, nothing is ever called.
  std::vector<std::string> safe_globals = {};
};

namespace detail::pt {

// ---- save
class Saver {
 public:
  explicit Saver(const Value& root) {
    survey(root, 0);
    for (auto& [s, info] : storages_)
      info.legacy = info.dtypes.size() == 1 && legacy_name(*info.dtypes.begin()) != nullptr &&
                    info.storage->nbytes % static_cast<size_t>(element_size(*info.dtypes.begin())) == 0;
    e_.proto();
    emit(root, 0);
    e_.stop();
  }
  void write(std::ostream& os, const std::string& folder) {
    zip::Writer w(os);
    auto text = [&](const std::string& name, const std::string& s) { w.add(folder + "/" + name, s.data(), s.size()); };
    text("data.pkl", e_.out);
    text(".format_version", "1");
    text(".storage_alignment", "64");
    text("byteorder", "little");
    for (const auto* info : order_)
      w.add(folder + "/data/" + std::to_string(info->key), info->storage->data, info->storage->nbytes);
    text("version", "3\n");
    std::random_device rd;
    std::string id;
    for (int i = 0; i < 40; ++i) id += static_cast<char>('0' + rd() % 10);
    text(".data/serialization_id", id);
    w.finish();
  }

 private:
  struct StorageInfo {
    const detail::Storage* storage = nullptr;
    size_t key = 0;
    std::set<ScalarType> dtypes;
    bool legacy = false;
  };
  static const char* legacy_name(ScalarType t) {
    switch (t) {
      case ScalarType::Double: return "DoubleStorage";
      case ScalarType::Float: return "FloatStorage";
      case ScalarType::Half: return "HalfStorage";
      case ScalarType::Int64: return "LongStorage";
      case ScalarType::Int32: return "IntStorage";
      case ScalarType::Int16: return "ShortStorage";
      case ScalarType::Int8: return "CharStorage";
      case ScalarType::UInt8: return "ByteStorage";
      case ScalarType::Bool: return "BoolStorage";
      case ScalarType::BFloat16: return "BFloat16Storage";
      case ScalarType::ComplexDouble: return "ComplexDoubleStorage";
      case ScalarType::ComplexFloat: return "ComplexFloatStorage";
      default: return nullptr;
    }
  }
  // First pass: every CPU storage, the dtypes it is viewed as, its record's key.
  void survey(const Value& v, int depth) {
    REEL_CHECK(depth < 200, value_error, "save: the value is nested more than 200 deep (or contains itself)");
    switch (v.kind()) {
      case Value::Kind::Tensor: {
        const AnyTensor& t = v.tensor();
        REEL_CHECK(t.defined(), value_error, "save: an undefined tensor");
        REEL_CHECK(t.device() != DeviceType::CUDA, not_implemented_error,
                   "save: a CUDA tensor: move it to the CPU first (to_device<CPU>())");
        if (t.device() != DeviceType::CPU) return;
        const detail::Storage* s = t.impl_ptr()->storage.get();
        auto [it, fresh] = storages_.try_emplace(s);
        if (fresh) {
          it->second.storage = s;
          it->second.key = order_.size();
          order_.push_back(&it->second);
          keep_.push_back(t.impl_ptr()->storage);
        }
        it->second.dtypes.insert(t.dtype());
        return;
      }
      case Value::Kind::List:
      case Value::Kind::Tuple:
        for (const Value& x : v.items()) survey(x, depth + 1);
        return;
      case Value::Kind::Dict:
        for (size_t i = 0; i < v.size(); ++i) {
          survey(v.keys()[i], depth + 1);
          survey(v.values()[i], depth + 1);
        }
        return;
      case Value::Kind::Object:
        survey(v.args(), depth + 1);
        survey(v.state(), depth + 1);
        return;
      default: return;
    }
  }
  void global(const std::string& full) {
    const auto dot = full.rfind('.');
    REEL_CHECK(dot != std::string::npos && dot > 0 && dot + 1 < full.size() && full.find('\n') == std::string::npos,
               value_error, "save: '", full, "' is not a global's full name (module.name)");
    e_.global(full.substr(0, dot), full.substr(dot + 1));
  }
  void ints(const Shape& s) {
    if (s.size() > 3) e_.mark();
    for (int64_t x : s) e_.integer(x);
    e_.tuple(s.size());
  }
  void empty_ordered_dict() {
    e_.global("collections", "OrderedDict");
    e_.tuple(0);
    e_.op('R');
  }
  void tensor(const AnyTensor& t, bool requires_grad) {
    if (t.device() == DeviceType::Meta) {  // (no data: PyTorch's form for meta tensors)
      e_.global("torch._utils", "_rebuild_meta_tensor_no_storage");
      e_.mark();
      global(std::string(dtype_name(t.dtype())));
      ints(t.sizes());
      ints(t.strides());
      e_.boolean(requires_grad);
      e_.op('t');
      e_.op('R');
      return;
    }
    const StorageInfo& info = storages_.at(t.impl_ptr()->storage.get());
    e_.global("torch._utils", info.legacy ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
    e_.mark();
    e_.mark();
    e_.str("storage");
    if (info.legacy)
      e_.global("torch", legacy_name(t.dtype()));
    else
      e_.global("torch.storage", "UntypedStorage");
    e_.str(std::to_string(info.key));
    e_.str("cpu");
    e_.integer(static_cast<int64_t>(info.storage->nbytes / (info.legacy ? static_cast<size_t>(element_size(t.dtype())) : 1)));
    e_.op('t');
    e_.op('Q');
    e_.integer(t.storage_offset());
    ints(t.sizes());
    ints(t.strides());
    e_.boolean(requires_grad);
    empty_ordered_dict();
    if (!info.legacy) global(std::string(dtype_name(t.dtype())));
    e_.op('t');
    e_.op('R');
  }
  void emit(const Value& v, int depth) {
    switch (v.kind()) {
      case Value::Kind::None: e_.none(); return;
      case Value::Kind::Bool: e_.boolean(v.to_bool()); return;
      case Value::Kind::Int: e_.integer(v.to_int()); return;
      case Value::Kind::Double: e_.real(v.to_double()); return;
      case Value::Kind::Complex:
        e_.global("builtins", "complex");
        e_.real(v.to_complex().real());
        e_.real(v.to_complex().imag());
        e_.tuple(2);
        e_.op('R');
        return;
      case Value::Kind::String: e_.str(v.to_string()); return;
      case Value::Kind::Bytes: {  // protocol 2: _codecs.encode(latin-1 text, "latin1")
        std::string text;
        for (unsigned char c : v.to_string()) {
          if (c < 0x80) {
            text += static_cast<char>(c);
          } else {
            text += static_cast<char>(0xC0 | (c >> 6));
            text += static_cast<char>(0x80 | (c & 0x3F));
          }
        }
        e_.global("_codecs", "encode");
        e_.str(text);
        e_.str("latin1");
        e_.tuple(2);
        e_.op('R');
        return;
      }
      case Value::Kind::Tensor:
        if (v.is_parameter()) {
          e_.global("torch._utils", "_rebuild_parameter");
          e_.mark();
          tensor(v.tensor(), false);
          e_.boolean(v.requires_grad());
          empty_ordered_dict();
          e_.op('t');
          e_.op('R');
        } else {
          tensor(v.tensor(), v.requires_grad());
        }
        return;
      case Value::Kind::List:
        e_.op(']');
        if (v.size()) {
          e_.mark();
          for (const Value& x : v.items()) emit(x, depth + 1);
          e_.op('e');
        }
        return;
      case Value::Kind::Tuple:
        if (v.size() > 3) e_.mark();
        for (const Value& x : v.items()) emit(x, depth + 1);
        e_.tuple(v.size());
        return;
      case Value::Kind::Dict:
        if (v.ordered())
          empty_ordered_dict();
        else
          e_.op('}');
        if (v.size()) {
          e_.mark();
          for (size_t i = 0; i < v.size(); ++i) {
            emit(v.keys()[i], depth + 1);
            emit(v.values()[i], depth + 1);
          }
          e_.op('u');
        }
        return;
      case Value::Kind::Object:
        REEL_CHECK(v.type_name() != "reel.jagged", not_implemented_error,
                   "save: a nested jagged tensor (reel.jagged): save its values and offsets");
        global(v.type_name());
        if (v.args().is_none()) return;  // a global itself (a dtype, a class)
        REEL_CHECK(v.args().is_tuple(), value_error, "save: an object's args must be a tuple");
        emit(v.args(), depth + 1);
        e_.op('R');
        if (!v.state().is_none()) {
          emit(v.state(), depth + 1);
          e_.op('b');
        }
        return;
    }
  }

  pickle::Emitter e_;
  std::unordered_map<const detail::Storage*, StorageInfo> storages_;
  std::vector<StorageInfo*> order_;
  std::vector<std::shared_ptr<detail::Storage>> keep_;
};

// The archive's folder name for a path: its file name without the extension, as PyTorch does.
inline std::string folder_for(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  if (auto dot = base.find('.'); dot != std::string::npos) base.resize(dot);
  std::string out;
  for (char c : base) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') ? c : '_';
  return out.empty() ? "archive" : out;
}

// ---- load
// Moves every tensor in v onto CUDA, each storage copied once (views stay views).
inline void to_cuda(const Value& v, std::unordered_map<const detail::Storage*, std::shared_ptr<detail::Storage>>& copies,
                    int depth) {
  if (depth > 256) return;  // (the loader bounds nesting at 200)
  if (v.is_tensor()) {
    const auto& impl = v.tensor().impl_ptr();
    if (impl->device != DeviceType::CPU) return;
    auto& c = copies[impl->storage.get()];
    if (!c) c = detail::storage_to_cuda(impl->storage->data, impl->storage->nbytes);
    impl->storage = c;
    impl->device = DeviceType::CUDA;
  } else if (v.is_list() || v.is_tuple()) {
    for (const Value& x : v.items()) to_cuda(x, copies, depth + 1);
  } else if (v.is_dict()) {
    for (const Value& x : v.values()) to_cuda(x, copies, depth + 1);
  } else if (v.is_object()) {
    to_cuda(v.args(), copies, depth + 1);
    to_cuda(v.state(), copies, depth + 1);
  }
}

template <class... A>
[[noreturn]] void bad(const zip::Source& src, const A&... a) {
  raise<unpickling_error>("load: ", src.what(), ": ", a...);
}

inline Value load(const zip::Source& src, const LoadOptions& opt) {
  REEL_CHECK(opt.map_location != DeviceType::CUDA || detail::storage_to_cuda, not_implemented_error,
             "load: map_location CUDA needs a program built with <reel/cuda.hpp> (compiled by nvcc)");
  unsigned char magic[8] = {};
  src.read(0, magic, std::min<uint64_t>(8, src.size()));
  if (!(magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4)) {
    if (magic[0] == 0x80)
      bad(src, "the legacy torch.save format (PyTorch < 1.6, or _use_new_zipfile_serialization=False), which reel ",
          "does not read: re-save it with a current PyTorch");
    if (src.size() > 9) {
      char c = 0;
      src.read(8, &c, 1);
      if (c == '{') bad(src, "a safetensors file, not a torch.save archive: use load_safetensors");
    }
    bad(src, "not a torch.save archive (no zip header)");
  }
  const zip::Directory dir = zip::read_directory(src);
  if (dir.entries.empty()) bad(src, "the archive has no entries");
  const std::string& first = dir.entries.front().name;
  const auto slash = first.find('/');
  if (slash == std::string::npos) bad(src, "the entry '", first, "' is not inside the archive's folder");
  const std::string folder = first.substr(0, slash + 1);
  for (const zip::Entry& e : dir.entries) {
    if (e.name.compare(0, folder.size(), folder) != 0)
      bad(src, "the entries '", first, "' and '", e.name, "' are in different top-level folders");
    const std::string rel = e.name.substr(folder.size());
    if (rel == "constants.pkl" || rel.rfind("code/", 0) == 0)
      bad(src, "a TorchScript archive (torch.jit.save): reel loads torch.save files; in Python, save its ",
          "state_dict() with torch.save");
  }
  for (const zip::Entry& e : dir.entries)
    if (e.method != 0)
      bad(src, "'", e.name, "' is compressed (zip method ", e.method, "); torch.save stores entries uncompressed, ",
          "and reel reads only those");
  auto text = [&](const zip::Entry* e, uint64_t limit) {
    if (e->size > limit) bad(src, "'", e->name, "' is ", e->size, " bytes, more than it can be");
    return src.read_string(e->data, e->size);
  };
  if (const zip::Entry* bo = dir.find(folder + "byteorder")) {
    const std::string b = text(bo, 16);
    if (b == "big") bad(src, "a big-endian checkpoint; reel reads little-endian ones");
    if (b != "little") bad(src, "unknown byte order '", b, "'");
  }
  const zip::Entry* pkl = dir.find(folder + "data.pkl");
  if (!pkl) bad(src, "no ", folder, "data.pkl");
  std::string pickled = src.read_string(pkl->data, pkl->size);
  if (pkl->crc != 0 && zip::crc32(0, pickled.data(), pickled.size()) != pkl->crc)
    bad(src, "data.pkl fails its CRC check (the file is corrupt)");

  // key -> the storage: the record's bytes (read once however many tensors view them)
  struct Loaded {
    std::shared_ptr<detail::Storage> storage;
    bool bools_checked = false;
  };
  std::unordered_map<std::string, Loaded> loaded;
  pickle::Context ctx;
  ctx.what = src.what();
  ctx.safe_globals = opt.safe_globals;
  ctx.load_storage = [&](const std::string& key, const std::string&, ScalarType dtype, bool typed, int64_t numel) {
    const ScalarType as = typed ? dtype : ScalarType::UInt8;
    const zip::Entry* rec = dir.find(folder + "data/" + key);
    if (!rec) bad(src, "a storage names the missing record data/", key);
    const uint64_t es = static_cast<uint64_t>(element_size(as));
    uint64_t nbytes;
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel), es, &nbytes) || nbytes > rec->size)
      bad(src, "the storage ", key, " holds ", numel, " elements of ", es, " bytes, more than its record's ", rec->size,
          " bytes");
    Loaded& l = loaded[key];
    if (!l.storage) {
      auto& s = l.storage;
      if (opt.map_location == DeviceType::Meta) {
        s = detail::make_storage(static_cast<size_t>(rec->size), DeviceType::Meta);
      } else if (src.data() && rec->data % 16 == 0) {
        s = std::make_shared<detail::Storage>();  // aliases the mapping (or the buffered stream)
        s->data = src.data() + rec->data;
        s->nbytes = static_cast<size_t>(rec->size);
        s->owner = src.keeper();
      } else {
        s = detail::make_storage(static_cast<size_t>(rec->size), DeviceType::CPU);
        src.read(rec->data, s->data, rec->size);
      }
    }
    if (as == ScalarType::Bool && l.storage->data && !l.bools_checked) {
      const auto* b = static_cast<const unsigned char*>(l.storage->data);
      for (uint64_t i = 0; i < rec->size; ++i)
        if (b[i] > 1) bad(src, "the bool storage ", key, " holds the byte ", int(b[i]), " (element ", i, ")");
      l.bools_checked = true;
    }
    auto impl = std::make_shared<detail::TensorImpl>();  // a 1-D tensor of `as` over the storage
    impl->storage = l.storage;
    impl->sizes = {numel};
    impl->strides = {1};
    impl->dtype = as;
    impl->device = impl->storage->device;
    return Value(AnyTensor(std::move(impl)));
  };
  Value v = pickle::unpickle(reinterpret_cast<const unsigned char*>(pickled.data()), pickled.size(), ctx);
  if (opt.map_location != DeviceType::CUDA) return v;
  // CUDA: everything was loaded (and checked) on the CPU; each storage is copied once
  std::unordered_map<const detail::Storage*, std::shared_ptr<detail::Storage>> copies;
  to_cuda(v, copies, 0);
  return v;
}

}  // namespace detail::pt

// torch.load(path, weights_only=True): the checkpoint's object as a Value (a state dict loads
// as a dict of tensors: load(path).state_dict()). Bad or hostile files raise unpickling_error
// naming what is wrong and where; nothing in them is ever run.
inline Value load(const std::string& path, const LoadOptions& opt = {}) {
  return detail::pt::load(detail::zip::Source::file(path, opt.mmap), opt);
}
// From a stream (read to its end; mmap does not apply).
inline Value load(std::istream& in, const LoadOptions& opt = {}) {
  REEL_CHECK(!opt.mmap, value_error, "load: mmap needs a file, not a stream");
  auto bytes = std::make_shared<std::string>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) raise<error>("load: reading the stream failed");
  return detail::pt::load(detail::zip::Source::memory(std::move(bytes), "<stream>"), opt);
}

// torch.save(v, path): a Value, a StateDict (saved as an OrderedDict of tensors) or a tensor.
// Written to path.tmp, then renamed: an existing file is replaced only by a complete one.
inline void save(std::ostream& out, const Value& v, const std::string& folder = "archive") {
  detail::pt::Saver s(v);
  s.write(out, folder);
}
inline void save(const std::string& path, const Value& v) {
  detail::pt::Saver s(v);  // (every check before a byte is written)
  detail::io::write_atomically(path, "save", [&](std::ostream& os) { s.write(os, detail::pt::folder_for(path)); });
}

}  // namespace reel
