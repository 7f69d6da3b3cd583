#pragma once
// The zip container of PyTorch's checkpoints (torch.save since 1.6): entries stored
// uncompressed, each record's data 64-byte aligned (padding in a "FB" extra field, as
// PyTorch's writer does), zip64 records where sizes or offsets need them.
// The reader checks the central directory against the file before it trusts a byte of it:
// entries inside the file and not overlapping, names unique and relative (no zip slip),
// zip64 records consistent, no encryption (compressed entries are listed, with their
// method, for the caller to refuse). Its errors are unpickling_error
// (a bad checkpoint), I/O failures reel::error.
#include "../core/config.hpp"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <unordered_map>
#include <vector>

#include "../core/errors.hpp"

namespace reel::inline REEL_ABI::detail::zip {

// CRC-32 (the zip polynomial 0xEDB88320). crc32_table: eight bytes per step through tables
// (any length); crc32_clmul: folding 64 bytes per step with carry-less multiplication (x86
// PCLMULQDQ; Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", with its
// constants for the bit-reflected polynomial) for whole 16-byte blocks, at least 64 bytes.
// Both take and return the register, not its complement.
inline uint32_t crc32_table(uint32_t crc, const unsigned char* p, size_t n) {
  static const auto table = [] {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    return t;
  }();
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^ table[4][lo >> 24] ^
          table[3][hi & 0xFF] ^ table[2][(hi >> 8) & 0xFF] ^ table[1][(hi >> 16) & 0xFF] ^ table[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xFF];
  return crc;
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define REEL_CLMUL __attribute__((target("pclmul,sse4.1")))
// a folded by the constant pair k (x^(T+32) and x^(T-32) mod P, reflected) onto b
REEL_CLMUL inline __m128i crc32_fold(__m128i a, __m128i k, __m128i b) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11)), b);
}
REEL_CLMUL inline uint32_t crc32_clmul(uint32_t crc, const unsigned char* p, size_t n) {
  auto load = [](const unsigned char* q) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)); };
  auto fold = crc32_fold;
  const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4), k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
  __m128i x1 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(crc))), x2 = load(p + 16),
          x3 = load(p + 32), x4 = load(p + 48);
  p += 64;
  n -= 64;
  for (; n >= 64; p += 64, n -= 64) {  // four lanes, 512 bits apart
    x1 = fold(x1, k1k2, load(p));
    x2 = fold(x2, k1k2, load(p + 16));
    x3 = fold(x3, k1k2, load(p + 32));
    x4 = fold(x4, k1k2, load(p + 48));
  }
  x1 = fold(fold(fold(x1, k3k4, x2), k3k4, x3), k3k4, x4);  // into one lane
  for (; n >= 16; p += 16, n -= 16) x1 = fold(x1, k3k4, load(p));
  // 128 -> 64 bits, then 64 -> 32 by Barrett reduction
  const __m128i lo32 = _mm_setr_epi32(~0, 0, ~0, 0);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), _mm_clmulepi64_si128(x1, k3k4, 0x10));
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, lo32), _mm_set_epi64x(0, 0x0163cd6124), 0x00),
                     _mm_srli_si128(x1, 4));
  const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);  // mu, P
  __m128i t = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, lo32), poly, 0x10), lo32);
  x1 = _mm_xor_si128(x1, _mm_clmulepi64_si128(t, poly, 0x00));
  return static_cast<uint32_t>(_mm_extract_epi32(x1, 1));
}
#undef REEL_CLMUL
#endif

// The zip CRC-32 of n bytes, continuing from crc (0 to start).
inline uint32_t crc32(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  if (clmul && n >= 64) {
    const size_t whole = n & ~size_t(15);
    crc = crc32_clmul(crc, p, whole);
    p += whole;
    n -= whole;
  }
#endif
  return ~crc32_table(crc, p, n);
}

inline constexpr uint32_t kLocal = 0x04034b50, kCentral = 0x02014b50, kEnd = 0x06054b50, kEnd64 = 0x06064b50,
                          kLocator64 = 0x07064b50;
inline constexpr uint64_t k32 = 0xFFFFFFFFu;

inline void put_le(std::string& b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b += static_cast<char>((v >> (8 * i)) & 0xFF);
}
inline uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Writes a stored (uncompressed) archive to a stream, each entry's data aligned.
class Writer {
 public:
  // force_zip64: every size and offset in zip64 records (as for archives over 4 GiB)
  explicit Writer(std::ostream& os, bool force_zip64 = false) : os_(os), force64_(force_zip64) {}
  void add(const std::string& name, const void* data, uint64_t n, uint64_t align = 64) {
    const uint32_t crc = crc32(0, data, static_cast<size_t>(n));
    const bool big = force64_ || n >= k32;
    std::string h;
    put_le(h, kLocal, 4);
    put_le(h, big ? 45 : 20, 2);  // version needed
    put_le(h, 0, 2);              // flags
    put_le(h, 0, 2);              // stored
    put_le(h, 0, 2);              // time
    put_le(h, 33, 2);             // date: 1980-01-01
    put_le(h, crc, 4);
    put_le(h, big ? k32 : n, 4);
    put_le(h, big ? k32 : n, 4);
    put_le(h, name.size(), 2);
    const uint64_t fixed = 30 + name.size() + (big ? 20 : 0) + 4;
    const uint64_t pad = (align - (pos_ + fixed) % align) % align;
    put_le(h, fixed - 30 - name.size() + pad, 2);
    h += name;
    if (big) {
      put_le(h, 1, 2);
      put_le(h, 16, 2);
      put_le(h, n, 8);
      put_le(h, n, 8);
    }
    put_le(h, 0x4246, 2);  // "FB": padding up to the alignment
    put_le(h, pad, 2);
    h.append(pad, 'Z');
    entries_.push_back({name, n, pos_, crc});
    write(h.data(), h.size());
    write(data, n);
  }
  void finish() {
    const uint64_t cd_begin = pos_;
    for (const Entry& e : entries_) {
      const bool size64 = force64_ || e.size >= k32, off64 = force64_ || e.offset >= k32;
      std::string h;
      put_le(h, kCentral, 4);
      put_le(h, 45, 2);  // made by
      put_le(h, (size64 || off64) ? 45 : 20, 2);
      put_le(h, 0, 2);
      put_le(h, 0, 2);
      put_le(h, 0, 2);
      put_le(h, 33, 2);
      put_le(h, e.crc, 4);
      put_le(h, size64 ? k32 : e.size, 4);
      put_le(h, size64 ? k32 : e.size, 4);
      put_le(h, e.name.size(), 2);
      const int extra = (size64 ? 16 : 0) + (off64 ? 8 : 0);
      put_le(h, extra ? extra + 4 : 0, 2);
      put_le(h, 0, 2);  // comment
      put_le(h, 0, 2);  // disk
      put_le(h, 0, 2);  // internal attributes
      put_le(h, 0, 4);  // external attributes
      put_le(h, off64 ? k32 : e.offset, 4);
      h += e.name;
      if (extra) {
        put_le(h, 1, 2);
        put_le(h, extra, 2);
        if (size64) {
          put_le(h, e.size, 8);
          put_le(h, e.size, 8);
        }
        if (off64) put_le(h, e.offset, 8);
      }
      write(h.data(), h.size());
    }
    const uint64_t cd_size = pos_ - cd_begin, n = entries_.size();
    std::string h;
    if (force64_ || n >= 0xFFFF || cd_begin >= k32 || cd_size >= k32) {
      const uint64_t at = pos_;
      put_le(h, kEnd64, 4);
      put_le(h, 44, 8);
      put_le(h, 45, 2);
      put_le(h, 45, 2);
      put_le(h, 0, 4);
      put_le(h, 0, 4);
      put_le(h, n, 8);
      put_le(h, n, 8);
      put_le(h, cd_size, 8);
      put_le(h, cd_begin, 8);
      put_le(h, kLocator64, 4);
      put_le(h, 0, 4);
      put_le(h, at, 8);
      put_le(h, 1, 4);
    }
    put_le(h, kEnd, 4);
    put_le(h, 0, 2);
    put_le(h, 0, 2);
    put_le(h, force64_ ? 0xFFFF : std::min<uint64_t>(n, 0xFFFF), 2);
    put_le(h, force64_ ? 0xFFFF : std::min<uint64_t>(n, 0xFFFF), 2);
    put_le(h, force64_ ? k32 : std::min(cd_size, k32), 4);
    put_le(h, force64_ ? k32 : std::min(cd_begin, k32), 4);
    put_le(h, 0, 2);
    write(h.data(), h.size());
    os_.flush();
    if (!os_) raise<error>("save: writing the archive failed");
  }

 private:
  struct Entry {
    std::string name;
    uint64_t size, offset;
    uint32_t crc;
  };
  void write(const void* p, uint64_t n) {
    const auto* c = static_cast<const char*>(p);
    while (n > 0) {  // (streamsize is signed: write huge blocks in pieces)
      const uint64_t k = std::min<uint64_t>(n, uint64_t(1) << 30);
      os_.write(c, static_cast<std::streamsize>(k));
      c += k;
      n -= k;
      pos_ += k;
    }
    if (!os_) raise<error>("save: writing the archive failed");
  }
  std::ostream& os_;
  bool force64_;
  uint64_t pos_ = 0;
  std::vector<Entry> entries_;
};

// Where an archive's bytes come from: a file (read with pread, or mapped), or memory.
class Source {
 public:
  // mmap: map the whole file privately (copy-on-write): records can alias it.
  static Source file(const std::string& path, bool mmap) {
    Source s;
    s.what_ = path;
    auto fd = std::shared_ptr<int>(new int(::open(path.c_str(), O_RDONLY | O_CLOEXEC)), [](int* f) {
      if (*f >= 0) ::close(*f);
      delete f;
    });
    if (*fd < 0) raise<error>("load: cannot open ", path, ": ", std::strerror(errno));
    struct stat sb {};
    if (::fstat(*fd, &sb) != 0) raise<error>("load: ", path, ": ", std::strerror(errno));
    if (!S_ISREG(sb.st_mode)) raise<unpickling_error>("load: ", path, ": not a regular file");
    s.size_ = static_cast<uint64_t>(sb.st_size);
    s.fd_ = fd;
    if (mmap && s.size_ > 0) {
      void* p = ::mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, *fd, 0);
      if (p == MAP_FAILED) raise<error>("load: cannot map ", path, ": ", std::strerror(errno));
      const uint64_t n = s.size_;
      s.keep_ = std::shared_ptr<void>(p, [n](void* q) { ::munmap(q, n); });
      s.data_ = static_cast<unsigned char*>(p);
    }
    return s;
  }
  static Source memory(std::shared_ptr<std::string> bytes, std::string what) {
    Source s;
    s.what_ = std::move(what);
    s.size_ = bytes->size();
    s.data_ = reinterpret_cast<unsigned char*>(bytes->data());
    s.keep_ = std::shared_ptr<void>(bytes, bytes.get());
    return s;
  }
  uint64_t size() const { return size_; }
  const std::string& what() const { return what_; }
  // The bytes in memory (mapped or buffered), or null when the file is read on demand.
  unsigned char* data() const { return data_; }
  // What keeps data() valid: storages that alias it hold this.
  const std::shared_ptr<void>& keeper() const { return keep_; }
  void read(uint64_t off, void* dst, uint64_t n) const {
    if (off > size_ || n > size_ - off)
      raise<unpickling_error>("load: ", what_, ": the archive ends early (truncated?): ", n, " bytes at ", off,
                              " are past its end (", size_, " bytes)");
    if (!fd_) {  // (a mapped file is still read with pread: the mapping's pages stay untouched)
      std::memcpy(dst, data_ + off, n);
      return;
    }
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t r = ::pread(*fd_, p, std::min<uint64_t>(n, uint64_t(1) << 30), static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) raise<error>("load: reading ", what_, ": ", std::strerror(errno));
      if (r == 0) raise<unpickling_error>("load: ", what_, ": the file ended early (truncated, or changed while read)");
      p += r;
      n -= static_cast<uint64_t>(r);
      off += static_cast<uint64_t>(r);
    }
  }
  std::string read_string(uint64_t off, uint64_t n) const {
    std::string s(static_cast<size_t>(n), '\0');
    read(off, s.data(), n);
    return s;
  }

 private:
  std::string what_;
  uint64_t size_ = 0;
  unsigned char* data_ = nullptr;
  std::shared_ptr<void> keep_;
  std::shared_ptr<int> fd_;
};

struct Entry {
  std::string name;
  uint64_t header, data, size;  // local header's offset, data's offset, data's size (as stored)
  uint32_t crc;
  int method;  // 0: stored (the only one reel reads)
};
struct Directory {
  std::vector<Entry> entries;  // in the central directory's order
  std::unordered_map<std::string, size_t> by_name;
  const Entry* find(const std::string& name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : &entries[it->second];
  }
};

template <class... A>
[[noreturn]] void bad_zip(const Source& src, const A&... a) {
  raise<unpickling_error>("load: ", src.what(), ": not a valid checkpoint archive: ", a...);
}

// The central directory, every entry checked against the file.
inline Directory read_directory(const Source& src) {
  const uint64_t size = src.size();
  if (size < 22) bad_zip(src, "the file has ", size, " bytes, too few for a zip archive");
  // the end record: in the last 22 + 65535 bytes (its comment may follow it)
  const uint64_t tail = std::min<uint64_t>(size, 22 + 0xFFFF);
  const std::string t = src.read_string(size - tail, tail);
  const auto* tp = reinterpret_cast<const unsigned char*>(t.data());
  int64_t at = -1;
  for (int64_t i = static_cast<int64_t>(tail) - 22; i >= 0; --i)
    if (get_le(tp + i, 4) == kEnd && i + 22 + get_le(tp + i + 20, 2) == tail) {
      at = i;
      break;
    }
  if (at < 0) bad_zip(src, "no end-of-central-directory record");
  const unsigned char* e = tp + at;
  const uint64_t end_at = size - tail + static_cast<uint64_t>(at);
  if (get_le(e + 4, 2) != 0 || get_le(e + 6, 2) != 0) bad_zip(src, "multi-disk archives are not supported");
  uint64_t count = get_le(e + 10, 2), cd_size = get_le(e + 12, 4), cd_off = get_le(e + 16, 4);
  if (get_le(e + 8, 2) != count) bad_zip(src, "the end record's entry counts disagree");
  uint64_t cd_limit = end_at;  // the directory ends before the (zip64) end records
  if (count == 0xFFFF || cd_size == k32 || cd_off == k32) {
    if (end_at < 20) bad_zip(src, "zip64 sizes without a zip64 locator");
    unsigned char loc[20];
    src.read(end_at - 20, loc, 20);
    if (get_le(loc, 4) != kLocator64) bad_zip(src, "zip64 sizes without a zip64 locator");
    const uint64_t e64 = get_le(loc + 8, 8);
    if (get_le(loc + 4, 4) != 0 || get_le(loc + 16, 4) > 1) bad_zip(src, "multi-disk zip64 archives are not supported");
    if (e64 > end_at - 20 || end_at - 20 - e64 < 56) bad_zip(src, "the zip64 locator points outside the file");
    unsigned char r[56];
    src.read(e64, r, 56);
    if (get_le(r, 4) != kEnd64) bad_zip(src, "the zip64 end record is missing at ", e64);
    if (get_le(r + 16, 4) != 0 || get_le(r + 20, 4) != 0) bad_zip(src, "multi-disk zip64 archives are not supported");
    const uint64_t c64 = get_le(r + 32, 8), s64 = get_le(r + 40, 8), o64 = get_le(r + 48, 8);
    if (get_le(r + 24, 8) != c64) bad_zip(src, "the zip64 end record's entry counts disagree");
    if ((count != 0xFFFF && count != c64) || (cd_size != k32 && cd_size != s64) || (cd_off != k32 && cd_off != o64))
      bad_zip(src, "the zip64 end record disagrees with the end record");
    count = c64, cd_size = s64, cd_off = o64;
    cd_limit = e64;
  }
  if (cd_off > cd_limit || cd_size > cd_limit - cd_off)
    bad_zip(src, "the central directory (", cd_size, " bytes at ", cd_off, ") is outside the file");
  if (count > cd_size / 46) bad_zip(src, count, " entries cannot fit in a central directory of ", cd_size, " bytes");
  const std::string cd = src.read_string(cd_off, cd_size);
  const auto* c = reinterpret_cast<const unsigned char*>(cd.data());
  Directory dir;
  dir.entries.reserve(static_cast<size_t>(count));
  uint64_t p = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (cd_size - p < 46 || get_le(c + p, 4) != kCentral) bad_zip(src, "central directory entry ", i, " is malformed");
    const unsigned char* h = c + p;
    const uint64_t flags = get_le(h + 8, 2), method = get_le(h + 10, 2);
    uint64_t csize = get_le(h + 20, 4), usize = get_le(h + 24, 4), local = get_le(h + 42, 4);
    const uint64_t nl = get_le(h + 28, 2), el = get_le(h + 30, 2), cl = get_le(h + 32, 2);
    if (cd_size - p - 46 < nl + el + cl) bad_zip(src, "central directory entry ", i, " runs past the directory");
    std::string name(reinterpret_cast<const char*>(h + 46), static_cast<size_t>(nl));
    // zip64 extra: the saturated fields, in order
    for (uint64_t x = 0; x + 4 <= el;) {
      const unsigned char* f = h + 46 + nl + x;
      const uint64_t id = get_le(f, 2), len = get_le(f + 2, 2);
      if (x + 4 + len > el) bad_zip(src, "'", name, "': a malformed extra field");
      if (id == 1) {
        uint64_t q = 0;
        auto take = [&](uint64_t& v) {
          if (v != k32) return;
          if (q + 8 > len) bad_zip(src, "'", name, "': the zip64 extra field is too short");
          v = get_le(f + 4 + q, 8);
          q += 8;
        };
        take(usize);
        take(csize);
        take(local);
      }
      x += 4 + len;
    }
    if (usize == k32 || csize == k32 || local == k32) bad_zip(src, "'", name, "': zip64 sizes without a zip64 extra field");
    if (flags & 1) bad_zip(src, "'", name, "' is encrypted");
    if (method == 0 && csize != usize) bad_zip(src, "'", name, "' is stored with different compressed and uncompressed sizes");
    if (name.empty() || name.find('\0') != std::string::npos || name[0] == '/' || name[0] == '\\' ||
        name.find('\\') != std::string::npos || name.find(':') != std::string::npos || ("/" + name + "/").find("/../") != std::string::npos ||
        ("/" + name + "/").find("/./") != std::string::npos)
      bad_zip(src, "the entry name '", name, "' is not a plain relative path");
    if (!dir.by_name.emplace(name, dir.entries.size()).second) bad_zip(src, "the entry '", name, "' appears twice");
    // the local header: its name must agree; the data follows it
    if (local > cd_off || cd_off - local < 30) bad_zip(src, "'", name, "': its local header is outside the data area");
    unsigned char lh[30];
    src.read(local, lh, 30);
    if (get_le(lh, 4) != kLocal) bad_zip(src, "'", name, "': no local header at ", local);
    const uint64_t lnl = get_le(lh + 26, 2), lel = get_le(lh + 28, 2);
    const uint64_t data = local + 30 + lnl + lel;
    if (data > cd_off || csize > cd_off - data)
      bad_zip(src, "'", name, "': its data (", csize, " bytes) runs into the central directory");
    if (lnl != nl || src.read_string(local + 30, lnl) != name)
      bad_zip(src, "'", name, "': the local header names another entry");
    dir.entries.push_back({std::move(name), local, data, csize, static_cast<uint32_t>(get_le(h + 16, 4)),
                           static_cast<int>(method)});
    p += 46 + nl + el + cl;
  }
  // entries may not overlap
  std::vector<const Entry*> by_pos;
  for (const Entry& en : dir.entries) by_pos.push_back(&en);
  std::sort(by_pos.begin(), by_pos.end(), [](const Entry* a, const Entry* b) { return a->header < b->header; });
  for (size_t i = 1; i < by_pos.size(); ++i)
    if (by_pos[i]->header < by_pos[i - 1]->data + by_pos[i - 1]->size)
      bad_zip(src, "the entries '", by_pos[i - 1]->name, "' and '", by_pos[i]->name, "' overlap");
  return dir;
}

}  // namespace reel::detail::zip
