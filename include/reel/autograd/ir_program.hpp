#pragma once
// A graph (ir.hpp) flattened for evaluation one element at a time, as an accelerator runs it:
// each thread computes its element's operand offsets, walks the live nodes in order holding
// every value in a small array of 16-byte slots, and calls each op's per-element function
// (ir::apply_elem) through a pointer. The CPU evaluator runs graphs chunk by chunk instead
// (ir.hpp); this form is what a kernel can take.
//
// Host and device code, no CUDA: everything but the kernel launch is shared with the CPU,
// where tests run it with the ops' host functions (ProgramEvalGuard), so it is tested on
// every autograd graph the CPU suites build, without a GPU.
#include "../core/config.hpp"
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <span>
#include <vector>

#include "../expr/launch_plan.hpp"
#include "ir.hpp"

namespace reel::inline REEL_ABI::detail::ir {

// Values per thread (16 bytes each); a slot is reused once its value's last reader ran.
inline constexpr int kProgSlots = 32;
inline constexpr int kSlotBytes = 16;

struct ProgNode {
  ElemFn fn = nullptr;          // Kind::Op
  int16_t slot = 0;             // where the value goes
  int16_t args[3] = {0, 0, 0};  // Kind::Op: the operands' slots
  int16_t operand = 0;          // Kind::Leaf: the tensor operand it reads
  uint8_t kind = 0;             // ir::Kind
  uint8_t size = 0;             // bytes of the value
  alignas(16) unsigned char data[sizeof(IrNode::data)] = {};  // the op object, or the constant
};

// Everything a launch needs besides the program: the iteration space (contiguous dims
// merged), each operand's strides and first element (outputs are operands 0 .. nout-1,
// then the leaves' tensors), and the slot each output is stored from.
struct ProgLaunch {
  int nops = 0, nd = 1, nout = 0, nnodes = 0;
  bool fast = false;  // numel < 2^31: indices decomposed with 32-bit dividers
  int64_t numel = 0;
  int64_t sizes[kMaxKernelDims] = {};
  FastDivider divs[kMaxKernelDims] = {};
  int64_t strides[kMaxKernelDims][kMaxOperands] = {};
  const void* base[kMaxOperands] = {};
  int16_t root_slot[kMaxOperands] = {};
  uint8_t root_size[kMaxOperands] = {};
};

// Flattens the live nodes of g (in `order`) for the given roots. leaf_op[k]: the operand
// of leaf slot k; fn_of(const OpInfo*) gives an op's ElemFn. Raises not_implemented_error
// when more than kProgSlots values would be live at once.
template <class FnOf>
void build_program(const Graph& g, std::span<const int> order, std::span<const int> leaf_op, std::span<const int> roots,
                   FnOf&& fn_of, std::vector<ProgNode>& prog, ProgLaunch& a) {
  const int nn = static_cast<int>(g.nodes.size());
  const int len = static_cast<int>(order.size());
  thread_local std::vector<int> last, slot, free_slots;
  last.assign(nn, -1);
  slot.assign(nn, -1);
  free_slots.clear();
  for (int j = 0; j < len; ++j) {
    const IrNode& n = g.nodes[order[j]];
    if (n.kind == Kind::Op)
      for (int k = 0; k < n.nargs; ++k) last[n.args[k]] = j;
  }
  for (int r : roots) last[r] = len;  // read after the walk
  int used = 0;
  prog.clear();
  for (int j = 0; j < len; ++j) {
    const int i = order[j];
    const IrNode& n = g.nodes[i];
    REEL_CHECK(n.type->size <= kSlotBytes, not_implemented_error, "autograd on a device: a value of ", n.type->size,
               " bytes");
    ProgNode p;
    p.kind = static_cast<uint8_t>(n.kind);
    p.size = static_cast<uint8_t>(n.type->size);
    if (n.kind == Kind::Leaf) {
      p.operand = static_cast<int16_t>(leaf_op[n.leaf]);
    } else {
      std::memcpy(p.data, n.data, sizeof p.data);
    }
    if (n.kind == Kind::Op) {
      p.fn = fn_of(n.op);
      for (int k = 0; k < n.nargs; ++k) p.args[k] = static_cast<int16_t>(slot[n.args[k]]);
      // operands read for the last time here free their slots (the result may take one: an
      // op reads all its operands before it writes)
      for (int k = 0; k < n.nargs; ++k) {
        const int x = n.args[k];
        if (last[x] == j && slot[x] >= 0) {
          free_slots.push_back(slot[x]);
          slot[x] = -1;
        }
      }
    }
    int s;
    if (!free_slots.empty()) {
      s = free_slots.back();
      free_slots.pop_back();
    } else {
      REEL_CHECK(used < kProgSlots, not_implemented_error, "autograd on a device: a derivative expression holding more ",
                 "than ", kProgSlots, " values at once");
      s = used++;
    }
    slot[i] = s;
    p.slot = static_cast<int16_t>(s);
    prog.push_back(p);
  }
  a.nout = static_cast<int>(roots.size());
  a.nnodes = len;
  for (size_t r = 0; r < roots.size(); ++r) {
    a.root_slot[r] = static_cast<int16_t>(slot[roots[r]]);
    a.root_size[r] = static_cast<uint8_t>(g.nodes[roots[r]].type->size);
  }
}

// The program and launch for evaluating `roots` of g into `outs` (the contract of
// ir::evaluate). Returns false when there is nothing to do (no elements).
template <class FnOf>
bool prepare_program(const Graph& g, std::span<const TensorImpl* const> leaves, std::span<const int> roots,
                     std::span<TensorImpl* const> outs, const std::vector<char>& live, FnOf&& fn_of,
                     std::vector<ProgNode>& prog, ProgLaunch& a) {
  const int64_t numel = numel_of(outs[0]->sizes);
  if (numel == 0) return false;
  thread_local std::vector<int> order, leaf_op;
  Operands ops;
  live_operands(g, leaves, roots, outs, live, ops, order, leaf_op);
  build_program(g, order, leaf_op, roots, fn_of, prog, a);
  IterPlan plan;
  plan_iteration(ops, plan);
  REEL_CHECK(plan.nd <= kMaxKernelDims, not_implemented_error, "device kernels handle up to ", kMaxKernelDims,
             " dimensions after merging contiguous ones, got ", plan.nd);
  a.numel = numel;
  a.nops = ops.n;
  a.nd = static_cast<int>(plan.nd);
  for (int64_t d = 0; d < plan.nd; ++d) {
    a.sizes[d] = plan.sizes[d];
    for (int k = 0; k < ops.n; ++k) a.strides[d][k] = plan.stride(k, d);
  }
  for (int k = 0; k < ops.n; ++k) a.base[k] = ops.base[k];
  a.fast = make_dividers(a.nd, a.sizes, a.numel, a.divs);
  return true;
}

REEL_HD inline void copy_value(unsigned char* dst, const unsigned char* src, int size) {
  switch (size) {
    case 1: *dst = *src; break;
    case 2: *reinterpret_cast<uint16_t*>(dst) = *reinterpret_cast<const uint16_t*>(src); break;
    case 4: *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src); break;
    case 8: *reinterpret_cast<uint64_t*>(dst) = *reinterpret_cast<const uint64_t*>(src); break;
    default:
      for (int b = 0; b < size; ++b) dst[b] = src[b];
  }
}

// Evaluates element i (one thread's work in a kernel).
REEL_HD inline void run_program_at(const ProgNode* prog, const ProgLaunch& a, int64_t i) {
  int64_t off[kMaxOperands];
  for (int k = 0; k < a.nops; ++k) off[k] = 0;
  for_each_coord(i, a.nd, a.sizes, a.divs, a.fast, [&](int d, int64_t r) {
    for (int k = 0; k < a.nops; ++k) off[k] += r * a.strides[d][k];
  });
  alignas(16) unsigned char vals[kProgSlots][kSlotBytes];
  for (int j = 0; j < a.nnodes; ++j) {
    const ProgNode& p = prog[j];
    unsigned char* v = vals[p.slot];
    if (p.kind == static_cast<uint8_t>(Kind::Leaf)) {
      copy_value(v, static_cast<const unsigned char*>(a.base[p.operand]) + off[p.operand] * p.size, p.size);
    } else if (p.kind == static_cast<uint8_t>(Kind::Const)) {
      copy_value(v, p.data, p.size);
    } else {
      const unsigned char* in[3] = {vals[p.args[0]], vals[p.args[1]], vals[p.args[2]]};
      p.fn(p.data, in, v);
    }
  }
  for (int r = 0; r < a.nout; ++r)
    copy_value(static_cast<unsigned char*>(const_cast<void*>(a.base[r])) + off[r] * a.root_size[r],
               vals[a.root_slot[r]], a.root_size[r]);
}

// Tests: while a ProgramEvalGuard is alive, or in a process started with REEL_IR_EVAL=program
// in its environment, CPU graphs are evaluated by the device interpreter (with the ops' host
// apply_elem), so the CPU autograd suites exercise the device path (tests/CMakeLists.txt).
REEL_INLINE bool program_eval_from_env();
inline bool& program_eval_flag() {
  thread_local bool on = program_eval_from_env();
  return on;
}
struct ProgramEvalGuard {
  bool prev;
  ProgramEvalGuard() : prev(program_eval_flag()) { program_eval_flag() = true; }
  ProgramEvalGuard(const ProgramEvalGuard&) = delete;
  ProgramEvalGuard& operator=(const ProgramEvalGuard&) = delete;
  ~ProgramEvalGuard() { program_eval_flag() = prev; }
};

REEL_INLINE void evaluate_host(const Graph& g, std::span<const TensorImpl* const> leaves, std::span<const int> roots,
                          std::span<TensorImpl* const> outs, const std::vector<char>& live);

}  // namespace reel::detail::ir

#ifndef REEL_COMPILED_LIB
#include "ir_program-inl.hpp"
#endif
