// libFuzzer harness for the .pt reader (zip container + weights-only unpickler): every input
// is loaded from a memory file, read, mapped and onto Meta, and from a stream; an
// unpickling_error (or another reel::error) is the expected outcome for a bad file; anything
// else (a crash, a sanitizer report, another exception, a hang, a huge allocation) is a bug.
// Built and run by tests/fuzz/run.sh.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <reel/io/pt.hpp>
#include <sstream>
#include <string>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("reel_fuzz_pt", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  for (int how = 0; how < 4; ++how) {
    try {
      reel::LoadOptions o;
      o.mmap = how == 1;
      o.map_location = how == 2 ? reel::DeviceType::Meta : reel::DeviceType::CPU;
      if (how == 3) {
        std::istringstream is(std::string(reinterpret_cast<const char*>(data), size));
        reel_fuzz::walk(reel::load(is));
      } else {
        reel_fuzz::walk(reel::load(path, o));
      }
    } catch (const reel::error&) {
    }
  }
  return 0;
}
