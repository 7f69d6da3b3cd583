#pragma once
// fusion.hpp's compiler driver: generated source -> shared library in a cache directory ->
// loaded functions.
#include "fusion.hpp"
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#if defined(__unix__) || defined(__APPLE__)
#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>
#define REEL_JIT_POSIX 1
#endif

namespace reel::inline REEL_ABI::detail::fusion {

REEL_INLINE JitLibrary::~JitLibrary() {
#if defined(REEL_JIT_POSIX)
  if (handle) dlclose(handle);
#endif
}

namespace jit {
inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}
inline std::string quote(const std::string& s) {  // for /bin/sh
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}
// reel's include directory: where this header is, two levels up.
inline std::string reel_include_dir() {
  std::string f = __FILE__;
  size_t k = f.rfind("reel/autograd/");
  std::string dir = k == std::string::npos ? std::string(".") : f.substr(0, k);
  if (dir.empty()) dir = ".";
  if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}
inline std::string compiler() {
  std::string c = env("REEL_JIT_CXX");
#if defined(REEL_JIT_CXX_DEFAULT)
  if (c.empty()) c = REEL_JIT_CXX_DEFAULT;
#endif
  return c.empty() ? std::string("c++") : c;
}
inline std::string flags() {
  std::string f = "-std=c++20 -O3 -march=native -fopenmp-simd -fPIC -shared -DNDEBUG -DREEL_NO_AUTOGRAD -w";
  f += " -I" + quote(reel_include_dir());
#if defined(REEL_JIT_EIGEN_DIR)
  f += " -I" + quote(REEL_JIT_EIGEN_DIR);
#else
  f += " -I/usr/include/eigen3 -I/usr/local/include/eigen3";
#endif
  std::string extra = env("REEL_JIT_FLAGS");
  if (!extra.empty()) f += " " + extra;
  return f;
}
#if defined(REEL_JIT_POSIX)
inline bool make_dirs(const std::string& path) {
  for (size_t k = 1; k <= path.size(); ++k)
    if (k == path.size() || path[k] == '/') {
      std::string part = path.substr(0, k);
      if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return false;
    }
  return true;
}
// A directory we own that no one else may write into (libraries found there get loaded).
inline bool private_dir(const std::string& d) {
  struct stat st;
  return make_dirs(d) && stat(d.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
         (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}
inline std::string cache_dir() {
  std::string d = env("REEL_JIT_CACHE");
  if (d.empty() && !env("XDG_CACHE_HOME").empty()) d = env("XDG_CACHE_HOME") + "/reel-jit";
  if (d.empty() && !env("HOME").empty()) d = env("HOME") + "/.cache/reel-jit";
  if (d.empty() || !private_dir(d)) {
    std::string t = env("TMPDIR");
    d = (t.empty() ? std::string("/tmp") : t) + "/reel-jit-" + std::to_string(geteuid());
    if (!private_dir(d)) return {};
  }
  return d;
}
#endif
inline uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
#if defined(REEL_JIT_POSIX)
// the sum over the files under dir (recursively) of a hash of each one's path, size and
// modification time (a sum: the order directories list their files in does not matter)
inline uint64_t tree_fingerprint(const std::string& dir, int depth = 0) {
  DIR* d = depth < 8 ? opendir(dir.c_str()) : nullptr;
  if (!d) return 0;
  uint64_t sum = 0;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = dir + "/" + name;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      sum += tree_fingerprint(path, depth + 1);
    } else if (S_ISREG(st.st_mode)) {
      std::ostringstream id;
#if defined(__APPLE__)
      const auto& mtime = st.st_mtimespec;
#else
      const auto& mtime = st.st_mtim;
#endif
      id << path << '\n' << st.st_size << '\n' << mtime.tv_sec << '.' << mtime.tv_nsec;
      sum += fnv1a(id.str());
    }
  }
  closedir(d);
  return sum;
}
#endif
}  // namespace jit

REEL_INLINE uint64_t jit_headers_fingerprint(const std::string& include_dir) {
#if defined(REEL_JIT_POSIX)
  return jit::tree_fingerprint(include_dir + "/reel");
#else
  (void)include_dir;
  return 0;
#endif
}

REEL_INLINE std::shared_ptr<JitLibrary> jit_compile(const std::string& source, int n, std::string& error) {
#if !defined(REEL_JIT_POSIX)
  (void)source;
  (void)n;
  error = "code generation needs a POSIX system (dlopen)";
  return nullptr;
#else
  using namespace jit;
  const std::string cxx = compiler();
  if (cxx == "none") {
    error = "code generation is off (REEL_JIT_CXX=none)";
    return nullptr;
  }
  const std::string fl = flags();
  static const uint64_t headers = jit_headers_fingerprint(reel_include_dir());  // (once a process)
  char key[17];
  std::snprintf(key, sizeof key, "%016llx",
                static_cast<unsigned long long>(fnv1a(source, fnv1a(cxx + "\n" + fl + "\n" + std::to_string(headers)))));
  const std::string dir = cache_dir();
  if (dir.empty()) {
    error = "no private cache directory (set REEL_JIT_CACHE to a directory only you can write)";
    return nullptr;
  }
  const std::string so = dir + "/reel-" + key + ".so";
  if (access(so.c_str(), R_OK) != 0) {
    static std::atomic<int> serial{0};
    const std::string tmp = dir + "/reel-" + key + "." + std::to_string(getpid()) + "." + std::to_string(serial++);
    {
      std::ofstream src(tmp + ".cpp");
      src << source;
      if (!src) {
        error = "cannot write " + tmp + ".cpp";
        return nullptr;
      }
    }
    const std::string cmd = quote(cxx) + " " + fl + " -o " + quote(tmp + ".so") + " " + quote(tmp + ".cpp") + " > " +
                            quote(tmp + ".log") + " 2>&1";
    const int rc = std::system(cmd.c_str());
    if (rc != 0 || std::rename((tmp + ".cpp").c_str(), (dir + "/reel-" + key + ".cpp").c_str()) != 0)
      std::remove((tmp + ".cpp").c_str());  // (the source stays beside its library, for the curious)
    if (rc != 0) {
      std::ifstream log(tmp + ".log");
      std::stringstream msg;
      msg << log.rdbuf();
      std::remove((tmp + ".log").c_str());
      std::remove((tmp + ".so").c_str());
      error = "the C++ compiler failed (" + cxx + "): " + msg.str().substr(0, 2000);
      return nullptr;
    }
    std::remove((tmp + ".log").c_str());
    if (std::rename((tmp + ".so").c_str(), so.c_str()) != 0) {  // (another process may have won)
      std::remove((tmp + ".so").c_str());
      if (access(so.c_str(), R_OK) != 0) {
        error = "cannot move the library into " + dir;
        return nullptr;
      }
    }
  }
  auto lib = std::make_shared<JitLibrary>();
  lib->handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle) {
    const char* e = dlerror();
    error = std::string("cannot load ") + so + ": " + (e ? e : "");
    return nullptr;
  }
  for (int i = 0; i < n; ++i) {
    auto* fn = reinterpret_cast<FusedFn>(dlsym(lib->handle, ("reel_fused_" + std::to_string(i)).c_str()));
    if (!fn) {
      error = so + " lacks reel_fused_" + std::to_string(i);
      return nullptr;
    }
    lib->fns.push_back(fn);
  }
  return lib;
#endif
}

}  // namespace reel::detail::fusion
