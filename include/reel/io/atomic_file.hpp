#pragma once
// Writing a file so that it is replaced only by a complete one: the bytes go to `path`.tmp,
// which is renamed to `path` once written and closed; on any failure the .tmp is removed and
// `path` is left as it was.
#include "../core/config.hpp"
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "../core/errors.hpp"

namespace reel::inline REEL_ABI::detail::io {

// write(std::ostream&) writes the contents (and may throw); who: the caller's name, for messages.
template <class F>
void write_atomically(const std::string& path, const char* who, F&& write) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) raise<error>(who, ": cannot create ", tmp, ": ", std::strerror(errno));
    try {
      write(static_cast<std::ostream&>(f));
      f.close();
    } catch (...) {
      f.close();
      std::remove(tmp.c_str());
      throw;
    }
    if (!f) {
      std::remove(tmp.c_str());
      raise<error>(who, ": writing ", tmp, " failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    raise<error>(who, ": cannot rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
}

}  // namespace reel::detail::io
