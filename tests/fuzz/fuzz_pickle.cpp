// libFuzzer harness for the weights-only unpickler alone (the pickle of data.pkl, without the
// zip around it, so that the fuzzer's mutations reach it): every storage a pickle names is
// given (up to 4096 bytes), so views, rebuilds and containers are all exercised. An
// unpickling_error is the expected outcome for a bad pickle; anything else is a bug.
// Built and run by tests/fuzz/run.sh.
#include <cstddef>
#include <cstdint>
#include <map>
#include <reel/io/pt.hpp>
#include <string>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, reel::AnyTensor> storages;
  reel::detail::pickle::Context ctx;
  ctx.what = "fuzz";
  ctx.safe_globals = {"torch.nested._internal.nested_tensor._rebuild_njt",
                      "torch.nested._internal.nested_tensor.NestedTensor", "argparse.Namespace"};
  ctx.load_storage = [&](const std::string& key, const std::string&, reel::ScalarType dtype, bool typed,
                         int64_t numel) -> reel::Value {
    const reel::ScalarType as = typed ? dtype : reel::ScalarType::UInt8;
    const int64_t es = reel::element_size(as);
    if (numel > 4096 / es) reel::raise<reel::unpickling_error>("fuzz: storage too large");
    auto& s = storages[key];
    if (!s.defined() || s.dtype() != as || s.numel() != numel) {
      auto impl = std::make_shared<reel::detail::TensorImpl>();
      impl->storage = reel::detail::make_storage(static_cast<size_t>(numel * es), reel::DeviceType::CPU);
      std::memset(impl->storage->data, 0, static_cast<size_t>(numel * es));
      impl->sizes = {numel};
      impl->strides = {1};
      impl->dtype = as;
      s = reel::AnyTensor(std::move(impl));
    }
    return reel::Value(s);
  };
  try {
    reel_fuzz::walk(reel::detail::pickle::unpickle(data, size, ctx));
  } catch (const reel::error&) {
  }
  return 0;
}
