#pragma once
// asarray: a tensor over a foreign buffer described like Python's buffer protocol
// (PEP 3118). The declared format decides the dtype: byte order, standard vs native sizes
// and the item size are all checked, never guessed from the item size alone.
#include "../core/config.hpp"
#include <bit>
#include <cstring>
#include <string>

#include "any_tensor.hpp"

namespace reel::inline REEL_ABI {

struct BufferInfo {
  void* ptr = nullptr;
  int64_t itemsize = 0;
  std::string format;  // PEP 3118 / struct-module format of one item, e.g. "<f", "h", "Zd"
  Shape shape;
  Shape strides;  // in bytes; empty: C-contiguous
  bool readonly = false;
};

namespace detail {

struct ParsedFormat {
  ScalarType dtype;
  int64_t size;
  bool swap;  // stored in the other byte order than this machine's
};

// Parses one item's format: an optional byte-order prefix, then one type code.
inline ParsedFormat parse_buffer_format(const std::string& fmt) {
  REEL_CHECK(!fmt.empty(), value_error, "asarray: empty buffer format");
  size_t i = 0;
  char order = '@';
  if (std::string_view("@=<>!").find(fmt[0]) != std::string_view::npos) order = fmt[i++];
  const bool native_sizes = order == '@';
  const bool little = std::endian::native == std::endian::little;
  bool swap = (order == '<' && !little) || ((order == '>' || order == '!') && little);
  std::string code = fmt.substr(i);
  auto bad = [&]() -> ParsedFormat {
    raise<type_error>("asarray: unsupported buffer format '", fmt, "'");
  };
  auto is = [&](const char* c) { return code == c; };
  ParsedFormat p{ScalarType::Float, 0, swap};
  if (is("?")) p = {ScalarType::Bool, 1, false};
  else if (is("b")) p = {ScalarType::Int8, 1, false};
  else if (is("B")) p = {ScalarType::UInt8, 1, false};
  else if (is("h")) p = {ScalarType::Int16, 2, swap};
  else if (is("H")) p = {ScalarType::UInt16, 2, swap};
  else if (is("i")) p = {ScalarType::Int32, 4, swap};
  else if (is("I")) p = {ScalarType::UInt32, 4, swap};
  else if (is("l") || is("L")) {
    // C long: 8 bytes natively on LP64 platforms, 4 bytes in the standard sizes.
    int64_t sz = native_sizes ? static_cast<int64_t>(sizeof(long)) : 4;
    bool u = is("L");
    p = {sz == 8 ? (u ? ScalarType::UInt64 : ScalarType::Int64) : (u ? ScalarType::UInt32 : ScalarType::Int32), sz, swap};
  } else if (is("q")) p = {ScalarType::Int64, 8, swap};
  else if (is("Q")) p = {ScalarType::UInt64, 8, swap};
  else if (is("n") || is("N")) {
    REEL_CHECK(native_sizes, type_error, "asarray: format '", fmt, "': 'n'/'N' exist only with native sizes");
    p = {is("n") ? ScalarType::Int64 : ScalarType::UInt64, static_cast<int64_t>(sizeof(size_t)), false};
  } else if (is("e")) p = {ScalarType::Half, 2, swap};
  else if (is("f")) p = {ScalarType::Float, 4, swap};
  else if (is("d")) p = {ScalarType::Double, 8, swap};
  else if (is("Zf")) p = {ScalarType::ComplexFloat, 8, swap};
  else if (is("Zd")) p = {ScalarType::ComplexDouble, 16, swap};
  else return bad();
  return p;
}

inline void byteswap_items(unsigned char* p, int64_t n, int64_t size, int64_t parts) {
  int64_t w = size / parts;  // complex: each part separately
  for (int64_t i = 0; i < n * parts; ++i) std::reverse(p + i * w, p + (i + 1) * w);
}

}  // namespace detail

// The buffer's elements as a tensor of the dtype its format declares. Native byte order:
// zero-copy, the tensor aliases the buffer (which must outlive it, as with
// torch.frombuffer). Other byte order: a converted copy. A read-only buffer gives a
// UserWarning (writing through the tensor would be undefined), as in PyTorch.
inline AnyTensor asarray(const BufferInfo& b) {
  auto f = detail::parse_buffer_format(b.format);
  REEL_CHECK(b.itemsize == f.size, value_error, "asarray: format '", b.format, "' describes ", f.size,
             "-byte items but itemsize is ", b.itemsize);
  detail::check_sizes(b.shape, "asarray");
  int64_t nd = b.shape.size();
  Shape st(nd);
  if (b.strides.empty()) {
    st = detail::contiguous_strides(b.shape);
  } else {
    REEL_CHECK(b.strides.size() == nd, value_error, "asarray: ", b.strides.size(), " strides given for ", nd,
               " dimensions");
    for (int64_t d = 0; d < nd; ++d) {
      REEL_CHECK(b.strides[d] >= 0, value_error, "asarray: negative strides are not supported (dimension ", d, ")");
      REEL_CHECK(b.strides[d] % b.itemsize == 0, value_error, "asarray: stride ", b.strides[d], " of dimension ", d,
                 " is not a multiple of the item size ", b.itemsize);
      st[d] = b.strides[d] / b.itemsize;
    }
  }
  int64_t n = detail::numel_of(b.shape);
  REEL_CHECK(b.ptr || n == 0, value_error, "asarray: null buffer pointer");
  int64_t extent = 1;  // elements spanned
  for (int64_t d = 0; d < nd && n > 0; ++d) extent += (b.shape[d] - 1) * st[d];
  if (b.readonly)
    warn("asarray: the given buffer is not writable; writing to the tensor is undefined behaviour");

  auto impl = std::make_shared<detail::TensorImpl>();
  impl->sizes = b.shape;
  impl->strides = st;
  impl->dtype = f.dtype;
  impl->device = DeviceType::CPU;
  auto storage = std::make_shared<detail::Storage>();
  storage->nbytes = static_cast<size_t>(n ? extent * b.itemsize : 0);
  storage->data = b.ptr;  // not owned
  impl->storage = std::move(storage);
  AnyTensor view(impl);
  if (!f.swap) return view;
  // Foreign byte order: copy element by element with the bytes reversed.
  auto out = std::make_shared<detail::TensorImpl>();
  out->sizes = b.shape;
  out->strides = detail::contiguous_strides(b.shape);
  out->dtype = f.dtype;
  out->storage = detail::make_storage(static_cast<size_t>(n * b.itemsize), DeviceType::CPU);
  auto* dst = static_cast<unsigned char*>(out->storage->data);
  const auto* src = static_cast<const unsigned char*>(b.ptr);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(dst + i * b.itemsize, src + detail::linear_to_offset(i, b.shape, st) * b.itemsize, b.itemsize);
  bool cplx = f.dtype == ScalarType::ComplexFloat || f.dtype == ScalarType::ComplexDouble;
  detail::byteswap_items(dst, n, b.itemsize, cplx ? 2 : 1);
  return AnyTensor(out);
}

// Same, checking that the format declares T (type_error naming both otherwise).
template <class T>
Tensor<T> asarray(const BufferInfo& b) {
  auto f = detail::parse_buffer_format(b.format);
  REEL_CHECK(f.dtype == scalar_type_v<T>, type_error, "asarray: the buffer's format '", b.format, "' is ",
             dtype_name(f.dtype), ", not the requested ", scalar_type_of<T>::name);
  return asarray(b).as<T>();
}

}  // namespace reel
