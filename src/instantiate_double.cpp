// The instantiations of include/detail/instantiate.hpp for double, compiled once for reel::runtime
// (its users' headers declare them extern).
#define REEL_INSTANTIATING
#include <reel.hpp>

namespace reel::inline REEL_ABI {
REEL_INSTANTIATE_TYPED(REEL_TEMPLATE_INSTANCE, double)
#define REEL_OP_ENTRY REEL_TEMPLATE_INSTANCE
#define REEL_OP_T double
#include <detail/instantiate_ops.inc>
}  // namespace reel::inline REEL_ABI
