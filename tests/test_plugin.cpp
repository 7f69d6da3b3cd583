// Ops registered by shared objects that embed reel (issue 19): the host sees them (one
// registry per process, whichever copy of reel makes it); initializing the plugin twice,
// loading a second copy of it, or reloading it after dlclose is refused with an error naming
// where the op was first registered; calling an op whose library was unloaded raises instead
// of jumping into unmapped code.
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <cstdlib>
#include <reel/ops/library.hpp>
#include <string>

using namespace reel;

namespace {
std::string init(void* lib) {
  void* sym = ::dlsym(lib, "reel_plugin_init");
  REQUIRE(sym != nullptr);
  char* m = reinterpret_cast<char* (*)()>(sym)();
  std::string s = m ? m : "";
  std::free(m);
  return s;
}
}  // namespace

TEST_CASE("plugins: ops from a shared object, initialized twice, copied, unloaded and reloaded") {
  CHECK_FALSE(ops::has_op("plugin_ops::twice"));  // (the host makes the registry)
  void* a = ::dlopen(REEL_PLUGIN_A, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(a != nullptr);
  CHECK(init(a).empty());
  CHECK(ops::call<double>("plugin_ops::twice", 21.0) == 42.0);  // registered by the plugin, called by the host
  // initialized a second time: refused, naming the first registration
  const std::string again = init(a);
  CHECK(again.find("the namespace plugin_ops is registered already (at ") != std::string::npos);
  CHECK(again.find("op_plugin.cpp:") != std::string::npos);
  // a second shared object embedding reel and registering the same namespace: refused too
  void* b = ::dlopen(REEL_PLUGIN_B, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(b != nullptr);
  CHECK(init(b).find("registered already") != std::string::npos);
  ::dlclose(b);
  // unloaded (plugin a is built with -fno-gnu-unique, so dlclose unmaps it): its op refuses to run
  auto h = ops::handle<double(double)>("plugin_ops::twice");
  ::dlclose(a);
  void* still = ::dlopen(REEL_PLUGIN_A, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE_MESSAGE(still == nullptr, "the plugin was not unloaded");
  CHECK_THROWS_WITH_AS(ops::call<double>("plugin_ops::twice", 1.0), doctest::Contains("has been unloaded (dlclose)"),
                       error);
  CHECK_THROWS_WITH_AS(h(1.0), doctest::Contains("has been unloaded (dlclose)"), error);
  // loaded again: its registration is refused, as reloading torch is
  a = ::dlopen(REEL_PLUGIN_A, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(a != nullptr);
  CHECK(init(a).find("registered already") != std::string::npos);
  ::dlclose(a);
}
