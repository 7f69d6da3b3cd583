#pragma once
// The weights-only unpickler's globals: PyTorch's default allowlist (torch 2.15's
// _weights_only_unpickler._get_allowed_globals), what reel makes of each, and the ones PyTorch
// allows but reel has no counterpart for (refused, naming what is missing).
#include "../core/config.hpp"
#include <algorithm>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "value.hpp"

namespace reel::inline REEL_ABI::detail::pickle {

// The globals the unpickler knows.
enum class G {
  None, OrderedDict, Counter, Parameter, GetLayout, Size, TensorClass, Device, Encode, Bytearray, Set, Complex,
  DType, LegacyStorage, UntypedStorage, RebuildTensor, RebuildV2, RebuildV3, RebuildParameter,
  RebuildParameterWithState, RebuildMeta, RebuildFromCpu, RebuildFromType, Unsupported, Njt, NestedTensorClass, User
};

// What PyTorch's legacy typed storages hold.
inline bool legacy_storage_dtype(const std::string& full, ScalarType& t) {
  static const std::pair<const char*, ScalarType> table[] = {
      {"torch.DoubleStorage", ScalarType::Double},     {"torch.FloatStorage", ScalarType::Float},
      {"torch.HalfStorage", ScalarType::Half},         {"torch.LongStorage", ScalarType::Int64},
      {"torch.IntStorage", ScalarType::Int32},         {"torch.ShortStorage", ScalarType::Int16},
      {"torch.CharStorage", ScalarType::Int8},         {"torch.ByteStorage", ScalarType::UInt8},
      {"torch.BoolStorage", ScalarType::Bool},         {"torch.BFloat16Storage", ScalarType::BFloat16},
      {"torch.ComplexDoubleStorage", ScalarType::ComplexDouble}, {"torch.ComplexFloatStorage", ScalarType::ComplexFloat}};
  for (const auto& [n, s] : table)
    if (full == n) {
      t = s;
      return true;
    }
  return false;
}
inline bool dtype_named(const std::string& full, ScalarType& t) {
  for (int i = 0; i <= static_cast<int>(ScalarType::Float4_e2m1fn_x2); ++i)
    if (full == dtype_name(static_cast<ScalarType>(i))) {
      t = static_cast<ScalarType>(i);
      return true;
    }
  return false;
}

// The global `full` ("module.name") resolves to: its G, or Unsupported with why (allowed by
// PyTorch but with no reel counterpart), or a refusal.
inline G classify_global(const std::string& full, const std::vector<std::string>& safe, std::string& why) {
  static const std::unordered_map<std::string, G> known = {
      {"collections.OrderedDict", G::OrderedDict},
      {"collections.Counter", G::Counter},
      {"torch.nn.parameter.Parameter", G::Parameter},
      {"torch.serialization._get_layout", G::GetLayout},
      {"torch.Size", G::Size},
      {"torch.Tensor", G::TensorClass},
      {"torch.device", G::Device},
      {"_codecs.encode", G::Encode},
      {"builtins.bytearray", G::Bytearray},
      {"builtins.set", G::Set},
      {"builtins.complex", G::Complex},
      {"torch.storage.UntypedStorage", G::UntypedStorage},
      {"torch._utils._rebuild_tensor", G::RebuildTensor},
      {"torch._utils._rebuild_tensor_v2", G::RebuildV2},
      {"torch._utils._rebuild_tensor_v3", G::RebuildV3},
      {"torch._utils._rebuild_parameter", G::RebuildParameter},
      {"torch._utils._rebuild_parameter_with_state", G::RebuildParameterWithState},
      {"torch._utils._rebuild_meta_tensor_no_storage", G::RebuildMeta},
      {"torch._utils._rebuild_device_tensor_from_cpu_tensor", G::RebuildFromCpu},
      {"torch._tensor._rebuild_from_type_v2", G::RebuildFromType},
  };
  static const std::unordered_map<std::string, const char*> unsupported = {
      {"torch._utils._rebuild_qtensor", "quantized tensors"},
      {"torch._utils._rebuild_sparse_tensor", "sparse tensors"},
      {"torch._utils._rebuild_wrapper_subclass", "tensor subclasses"},
      {"torch._utils._rebuild_device_tensor_from_numpy", "tensors rebuilt through numpy"},
      {"torch.storage.TypedStorage", "TypedStorage objects"},
      {"torch.per_tensor_affine", "quantization schemes"},
      {"torch.per_tensor_symmetric", "quantization schemes"},
      {"torch.per_channel_affine", "quantization schemes"},
      {"torch.per_channel_symmetric", "quantization schemes"},
      {"torch.per_channel_affine_float_qparams", "quantization schemes"},
      {"torch.complex32", "the dtype torch.complex32"},
      {"torch.float8_e4m3fnuz", "the dtype torch.float8_e4m3fnuz"},
      {"torch.float8_e5m2fnuz", "the dtype torch.float8_e5m2fnuz"},
      {"torch.qint8", "quantized dtypes"},
      {"torch.quint8", "quantized dtypes"},
      {"torch.qint32", "quantized dtypes"},
      {"torch.quint4x2", "quantized dtypes"},
      {"torch.quint2x4", "quantized dtypes"},
      {"torch.QInt8Storage", "quantized storages"},
      {"torch.QUInt8Storage", "quantized storages"},
      {"torch.QInt32Storage", "quantized storages"},
      {"torch.QUInt4x2Storage", "quantized storages"},
      {"torch.QUInt2x4Storage", "quantized storages"},
  };
  if (auto it = known.find(full); it != known.end()) return it->second;
  ScalarType t;
  if (dtype_named(full, t)) return G::DType;
  if (legacy_storage_dtype(full, t)) return G::LegacyStorage;
  const bool opted = std::find(safe.begin(), safe.end(), full) != safe.end();
  if (full == "torch.nested._internal.nested_tensor._rebuild_njt" && opted) return G::Njt;
  if (full == "torch.nested._internal.nested_tensor.NestedTensor" && opted) return G::NestedTensorClass;
  if (auto it = unsupported.find(full); it != unsupported.end()) {
    why = it->second;
    return G::Unsupported;
  }
  // torch.bits8, torch.uint1..7, torch.int1..7, the legacy tensor classes (torch.FloatTensor, ...)
  if (full.rfind("torch.bits", 0) == 0 || full.rfind("torch.uint", 0) == 0 || full.rfind("torch.int", 0) == 0) {
    why = "the dtype " + full;
    return G::Unsupported;
  }
  if (full.size() > 6 && full.compare(full.size() - 6, 6, "Tensor") == 0 &&
      (full.rfind("torch.", 0) == 0) && full.find('.', 6) == std::string::npos) {
    why = "the legacy tensor class " + full;
    return G::Unsupported;
  }
  if (full.rfind("torch.cuda.", 0) == 0 && full.size() > 6 && full.compare(full.size() - 6, 6, "Tensor") == 0) {
    why = "the legacy tensor class " + full;
    return G::Unsupported;
  }
  if (opted) return G::User;
  return G::None;  // refused
}

struct Context {
  std::string what;                       // for messages: the file
  std::vector<std::string> safe_globals;  // LoadOptions::safe_globals
  // ("storage", type, key, location, numel) -> a storage Value (see storage_value)
  std::function<Value(const std::string& key, const std::string& location, ScalarType dtype, bool typed,
                      int64_t numel)>
      load_storage;
  size_t max_depth = 200;  // containers nested inside each other
};

// A storage, as the unpickler passes it around: a 1-D tensor over all of its bytes, tagged.
// (torch.load of a bare storage gives this tensor.)
inline constexpr int64_t kTypedStorageTag = 1, kUntypedStorageTag = 2;

}  // namespace reel::detail::pickle
