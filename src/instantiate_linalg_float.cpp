// The linalg ops of include/linalg.hpp (REEL_INSTANTIATE_LINALG) for float, compiled once for
// reel::runtime (its users' headers declare them extern).
#define REEL_INSTANTIATING
#include <reel.hpp>
#include <linalg.hpp>

namespace reel::inline REEL_ABI {
REEL_INSTANTIATE_LINALG(REEL_TEMPLATE_INSTANCE, float)
}  // namespace reel::inline REEL_ABI
