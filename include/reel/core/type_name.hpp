#pragma once
// The readable name of a C++ type, for error messages ("reel::Tensor<float, reel::CPU>").
#include "config.hpp"
#include <cstdlib>
#include <memory>
#include <string>
#include <typeinfo>
#ifdef __GNUG__
#include <cxxabi.h>
#endif

namespace reel::inline REEL_ABI::detail {

inline std::string demangle(const char* mangled) {
#ifdef __GNUG__
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  if (status == 0 && d) return d.get();
#endif
  return mangled;
}
template <class R>
std::string type_name() {
  return demangle(typeid(R).name());
}

}  // namespace reel::detail
