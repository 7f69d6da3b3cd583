// libFuzzer harness for the safetensors reader: every input is written to a memory file and
// loaded (read and mapped); a reel::error is the expected outcome for a bad file, anything
// else (a crash, a sanitizer report, another exception, a hang, a huge allocation) is a bug.
// Built and run by tests/fuzz/run.sh (clang++ -fsanitize=fuzzer,address,undefined).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <reel/io/safetensors.hpp>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("reel_fuzz_safetensors", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  for (bool mapped : {false, true}) {
    try {
      reel::StateDict sd = reel::load_safetensors(path, {.mmap = mapped});
      for (const auto& [name, t] : sd) {  // what a loaded tensor promises: all its bytes are readable
        const auto* p = static_cast<const unsigned char*>(t.impl_ptr()->storage->data);
        const int64_t n = t.numel() * reel::element_size(t.dtype());
        if (n > 0 && static_cast<size_t>(n) > t.impl_ptr()->storage->nbytes) __builtin_trap();
        if (n > 0) {
          volatile unsigned char first = p[0], last = p[n - 1];
          (void)first;
          (void)last;
        }
      }
    } catch (const reel::error&) {
    }
  }
  return 0;
}
