#pragma once
// Collective communication between processes (PyTorch's torch.distributed) on MPI, the engine
// clusters already run: a program compiled with mpicxx and launched by mpirun / srun.
//
//   reel::distributed::init_process_group(Backend::MPI);      // reads the launcher's world
//   Tensor<float> g = ...;
//   reel::distributed::all_reduce(g, ReduceOp::AVG);           // in place, on every rank
//   reel::distributed::broadcast(w, /*src=*/0);
//   reel::distributed::destroy_process_group();
//
// The MPI backend carries CPU tensors of every dtype MPI can (float16 and bfloat16 with a
// reduction of reel's own that computes in float). Every collective returns a Work; with
// {.async_op = true} the call is queued for reel's communication thread (one per process: it
// makes the queued calls in order while the caller goes on, as PyTorch's ProcessGroupMPI does)
// and Work::wait() finishes it (a Work that is dropped waits); a synchronous call runs on its
// caller's thread once that thread is idle. Results are written in place (a strided tensor
// goes through a contiguous copy, written back when the call completes). MPI must provide
// MPI_THREAD_SERIALIZED (init_process_group asks for it when it starts MPI). The ranks of a group must call
// its collectives in the same order with the same shapes; src / dst are ranks of the world,
// as in PyTorch. An MPI failure raises reel::error with MPI's message.
//
// Backend::NCCL carries CUDA tensors (reel/cuda/nccl.cuh, included with the collectives in a translation unit
// compiled by nvcc where <nccl.h> is found; link -lnccl): the same collectives, enqueued on a
// stream of the group's after the caller's stream (wait() makes the caller's stream wait, not
// the host). With MPI in the build, NCCL's unique id is broadcast over MPI and CPU tensors still
// go over MPI; without it (nvcc alone, REEL_DIST_NO_MPI, or no <mpi.h>) the world comes from
// RANK / WORLD_SIZE / LOCAL_RANK (torchrun's variables) and the id through a file
// (InitOptions::init_file / REEL_INIT_FILE).
//
// When a rank fails: an exception nothing catches (any std::terminate) on a rank ends every
// rank through MPI_Abort, after a line naming the rank and the exception on stderr; a rank that
// exits or dies without leaving the group is reported, and the job ended, by the launcher
// (mpirun names the rank). With DebugLevel::DETAIL (InitOptions::debug, GroupOptions, or
// REEL_DISTRIBUTED_DEBUG / TORCH_DISTRIBUTED_DEBUG=DETAIL) every collective's signature (its
// number in the group, op, dtype, shape, root) is compared across the group first: a mismatch,
// or a rank that has not joined within the group's timeout, raises reel::error naming the ranks
// on every member (distributed/check.hpp). Without it a collective waits as MPI does.
// nn::parallel::DistributedDataParallel (distributed/ddp.hpp) builds on these;
// DistributedSampler (distributed/sampler.hpp) deals each rank its share of a dataset.
#include "distributed/collectives.hpp"
#include "distributed/ddp.hpp"
#include "distributed/process_group.hpp"
#include "distributed/sampler.hpp"

