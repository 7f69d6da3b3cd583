// Compiled with -mfma -ffp-contract=fast (tests/CMakeLists.txt): the flags under which g++
// fuses `a * b + c` into one FMA. test_numerics checks that the plain expression is fused
// here, and that reel's explicitly rounded product and sum (reel/core/hd.hpp) are not.
#include <reel/core/hd.hpp>

#include "fp_contract_probe.hpp"

float probe_plain_mad(float a, float b, float c) { return a * b + c; }
float probe_rn_mad(float a, float b, float c) { return reel::detail::add_rn(reel::detail::mul_rn(a, b), c); }
double probe_rn_mad(double a, double b, double c) { return reel::detail::add_rn(reel::detail::mul_rn(a, b), c); }
