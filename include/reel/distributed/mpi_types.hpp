#pragma once
// reel::distributed on MPI: the MPI datatypes and reductions of reel's dtypes (float16 and
// bfloat16 reduced in float by an MPI_Op of reel's own).
#include "process_group.hpp"
#if !REEL_DIST_MPI
#error "reel/distributed/mpi_types.hpp needs MPI"
#endif

namespace reel::inline REEL_ABI::distributed::inline REEL_DIST_ABI {
namespace detail_dist {
// float16 / bfloat16: two bytes on the wire, reduced in float.
template <class T>
void reduce_in_float(void* in, void* inout, int* len, MPI_Datatype*, int op) {
  auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    b[i] = static_cast<T>(op == 0 ? x + y : op == 1 ? x * y : op == 2 ? (y < x || y != y ? y : x) : (y > x || y != y ? y : x));
  }
}
template <class T, int Op>
void reduce_fn(void* in, void* inout, int* len, MPI_Datatype* type) {
  reduce_in_float<T>(in, inout, len, type, Op);
}
template <class T>
MPI_Datatype half_type() {
  static MPI_Datatype t = [] {
    MPI_Datatype d;
    check_mpi(MPI_Type_contiguous(static_cast<int>(sizeof(T)), MPI_BYTE, &d), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&d), "MPI_Type_commit");
    return d;
  }();
  return t;
}
template <class T, int Op>
MPI_Op half_op() {
  static MPI_Op o = [] {
    MPI_Op op;
    check_mpi(MPI_Op_create(&reduce_fn<T, Op>, /*commute=*/1, &op), "MPI_Op_create");
    return op;
  }();
  return o;
}

template <class T>
MPI_Datatype datatype() {
  if constexpr (std::is_same_v<T, bool>) return MPI_C_BOOL;
  else if constexpr (std::is_same_v<T, int8_t>) return MPI_INT8_T;
  else if constexpr (std::is_same_v<T, int16_t>) return MPI_INT16_T;
  else if constexpr (std::is_same_v<T, int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, uint8_t>) return MPI_UINT8_T;
  else if constexpr (std::is_same_v<T, uint16_t>) return MPI_UINT16_T;
  else if constexpr (std::is_same_v<T, uint32_t>) return MPI_UINT32_T;
  else if constexpr (std::is_same_v<T, uint64_t>) return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::complex<float>>) return MPI_C_FLOAT_COMPLEX;
  else if constexpr (std::is_same_v<T, std::complex<double>>) return MPI_C_DOUBLE_COMPLEX;
  else if constexpr (is_half_v<T>) return half_type<T>();
  else static_assert(sizeof(T) == 0, "reel::distributed: MPI does not carry this dtype (float8 / float4: convert first)");
}

template <class T>
MPI_Op mpi_op(ReduceOp op) {
  if constexpr (is_half_v<T>) {
    switch (op) {
      case ReduceOp::PRODUCT: return half_op<T, 1>();
      case ReduceOp::MIN: return half_op<T, 2>();
      case ReduceOp::MAX: return half_op<T, 3>();
      default: return half_op<T, 0>();
    }
  } else {
    if constexpr (is_complex_v<T>)
      REEL_CHECK(op != ReduceOp::MIN && op != ReduceOp::MAX, type_error,
                 "distributed: MIN and MAX are not defined for complex tensors (they have no order)");
    if constexpr (std::is_same_v<T, bool>) {
      switch (op) {  // (MPI's logical ops: bool has no arithmetic)
        case ReduceOp::SUM: case ReduceOp::MAX: return MPI_LOR;
        default: return MPI_LAND;
      }
    }
    switch (op) {
      case ReduceOp::PRODUCT: return MPI_PROD;
      case ReduceOp::MIN: return MPI_MIN;
      case ReduceOp::MAX: return MPI_MAX;
      default: return MPI_SUM;
    }
  }
}

template <class T, class D>
void check_cpu(const char* what) {
  static_assert(reel::detail::Backend<D>::host_memory && reel::detail::Backend<D>::has_data,
                "reel::distributed: the MPI backend carries CPU tensors (CUDA tensors need NCCL)");
  (void)what;
}
}  // namespace detail_dist
}  // namespace reel::distributed
