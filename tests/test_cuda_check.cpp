// The host side of reel's CUDA error handling, tested on the CPU against a stand-in for the
// runtime (tests/fake_cuda/cuda_runtime.h) that keeps a last error the way the runtime does
// (set by a failed call, cleared by reading): checks leave no stale "last error" behind
// (reel/cuda/check.hpp; otherwise the next Thrust call or launch check after a reported and
// caught failure reports it again), and kernels' reports of bad indices are raised once.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <reel/cuda/check.hpp>
#include <reel/cuda/device_errors.hpp>
#include <string>

using namespace reel;

TEST_CASE("a failed checked call raises an error naming it and clears the last error") {
  REQUIRE(cudaPeekAtLastError() == cudaSuccess);
  try {
    REEL_CUDA_CHECK(cudaSetDevice(9999));
    FAIL("should have raised");
  } catch (const error& e) {
    const std::string m = e.what();
    CHECK(m.find("cudaSetDevice(9999)") != std::string::npos);
    CHECK(m.find("cudaErrorInvalidDevice") != std::string::npos);
    CHECK(m.find("invalid device ordinal") != std::string::npos);
  }
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  // the next launch check sees no stale failure
  CHECK_NOTHROW(REEL_CUDA_CHECK_LAUNCH("next_kernel"));
}

TEST_CASE("a launch check reports a pending launch error once") {
  fake_cuda::fail(cudaErrorInvalidValue);  // as a launch with a bad configuration does
  CHECK_THROWS_WITH_AS(REEL_CUDA_CHECK_LAUNCH("some_kernel"), doctest::Contains("launch of some_kernel"), error);
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  CHECK_NOTHROW(REEL_CUDA_CHECK_LAUNCH("some_kernel"));
}

TEST_CASE("a successful call leaves an unrelated pending error to the launch check that owns it") {
  fake_cuda::fail(cudaErrorInvalidValue);
  CHECK_NOTHROW(REEL_CUDA_CHECK(cudaSetDevice(0)));
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

// ---- kernels' reports of bad indices (reel/cuda/device_errors.hpp), host side: what a
// kernel writes through report_device_error is written here by hand.
using reel::detail::cuda::DeviceErrorRecord;
using reel::detail::cuda::DeviceErrorSite;

TEST_CASE("a kernel's report is raised once, at the next check, as an index_error naming the kernel") {
  DeviceErrorRecord* rec = detail::cuda::device_error_record();
  REQUIRE(rec != nullptr);
  CHECK(detail::cuda::device_error_record() == rec);  // one record per device
  CHECK_NOTHROW(detail::cuda::check_device_errors());  // nothing reported
  rec->claimed = 1;  // a kernel is still writing its report: not raised yet
  CHECK_NOTHROW(detail::cuda::check_device_errors());
  rec->site = static_cast<int32_t>(DeviceErrorSite::Gather);
  rec->value = 10;
  rec->bound = 10;
  rec->claimed = 2;  // published
  CHECK_THROWS_WITH_AS(detail::cuda::check_device_errors(),
                       doctest::Contains("gather (or embedding): index 10 is out of range for size 10"), index_error);
  CHECK(rec->claimed == 0);  // cleared: the next kernel's report is kept
  CHECK_NOTHROW(detail::cuda::check_device_errors());
  rec->site = static_cast<int32_t>(DeviceErrorSite::CrossEntropyTarget);
  rec->value = -3;
  rec->bound = 7;
  rec->claimed = 2;
  CHECK_THROWS_WITH_AS(detail::cuda::check_device_errors(),
                       doctest::Contains("linear_cross_entropy: a target class: index -3 is out of range for size 7"),
                       index_error);
}
