// A job in which rank 1 fails while the others wait in a collective, run by ctest under
// mpirun with 2 ranks: the job must end (ctest's timeout), with a message naming rank 1.
//   fail_mpi throw   rank 1 throws an exception nothing catches: reel's terminate handler
//                    names the rank and ends every rank (MPI_Abort)
//   fail_mpi exit    rank 1 exits without leaving the group: the launcher ends the others
//   fail_mpi noleave every rank returns from main without destroy_process_group: reel leaves
//                    the group at exit (with a warning), MPI ends cleanly, the job succeeds
//   fail_mpi detail  rank 1 is busy elsewhere (a sleep) while rank 0 enters a checked all_reduce
//                    (DebugLevel::DETAIL, 2 s timeout): rank 0's error names rank 1, and rank 0
//                    then ends the job (MPI_Abort, exit code 3). (Had rank 1 called another
//                    collective, the check would have named both calls at once.)
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <unistd.h>

#include <reel/distributed.hpp>
#include <reel/reel.hpp>

namespace dist = reel::distributed;

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "throw";
  if (!std::strcmp(mode, "noleave")) {
    // (registered before reel's own handler, so it runs after it)
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      std::fprintf(stderr, "at exit: %s, MPI %s\n", dist::is_initialized() ? "still in the group" : "left the group",
                   finalized ? "finalized" : "not finalized");
    });
  }
  dist::InitOptions o;
  if (!std::strcmp(mode, "detail")) {
    o.debug = dist::DebugLevel::DETAIL;
    o.timeout = std::chrono::seconds(2);
  }
  dist::init_process_group(dist::Backend::MPI, o);
  auto t = reel::ones<float>({8});
  dist::all_reduce(t);  // (everyone is up)
  if (!std::strcmp(mode, "noleave")) return 0;  // every rank ends without destroy_process_group
  if (dist::rank() == 1) {
    if (!std::strcmp(mode, "throw")) throw std::runtime_error("a planted failure on rank 1");
    if (!std::strcmp(mode, "exit")) {
      std::fprintf(stderr, "rank 1 exits without leaving the group\n");
      _exit(7);
    }
  }
  if (!std::strcmp(mode, "detail")) {
    if (dist::rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(50));  // (ended by rank 0)
    try {
      dist::all_reduce(t);
    } catch (const reel::error& e) {
      std::printf("rank %d: %s\n", dist::rank(), e.what());
      std::fflush(stdout);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    return 0;
  }
  dist::all_reduce(t);  // rank 0 waits here for rank 1, which is gone
  std::printf("rank %d: the second all_reduce returned (it should not have)\n", dist::rank());
  dist::destroy_process_group();
  return 0;
}
