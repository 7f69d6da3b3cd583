// A plugin for tests/test_plugin.cpp: a shared object that embeds reel (header-only) and
// registers ops when the host calls its init function (as a Python extension's PyInit_ or a
// TORCH_LIBRARY block registers when imported). Errors come back as a message (the host
// embeds reel with its own settings, so it may not share reel's exception types).
#include <cstdlib>
#include <cstring>
#include <exception>
#include <reel/ops/library.hpp>

extern "C" __attribute__((visibility("default"))) char* reel_plugin_init() {
  try {
    reel::library("plugin_ops").def("twice(float x) -> float", [](double v) { return 2 * v; });
    return nullptr;
  } catch (const std::exception& e) {
    return ::strdup(e.what());
  }
}
