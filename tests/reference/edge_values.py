#!/usr/bin/env python3
"""Writes tests/reference/edge_values.hpp: PyTorch 2.15's values and gradients of reel's
elementwise ops, activations and a few reductions at edge values (NaN, +-inf, +-0, bounds,
ties), for float64 and float32 (and a few integer ops in int64, values only).
tests/test_reference_edges.cpp runs the same cases in reel.

Every case computes y = op(inputs), then backward of sum(y * w) with w = 1, 1.5, 2, 2.5, 1, ...
(exact in every dtype), and records y and each input's gradient (None: PyTorch leaves the
gradient undefined; y that does not require grad has no backward). An op's name here is the key of its reel form in the test.

    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch==2.15.0 numpy
    /tmp/tv/bin/python tests/reference/edge_values.py
"""
import math
import os

import torch
import torch.nn.functional as F

assert torch.__version__.startswith("2.15"), torch.__version__

nan, inf = math.nan, math.inf
E = [nan, inf, -inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.5, 1e-3, 100.0, 1e-40, -1e-40, 1e-310,
     -800.0, 800.0, -100.0, 89.0]

# op name -> function of the input tensors (elementwise: run on E, or on all pairs of E)
UNARY = {
    "neg": torch.neg, "exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "expm1": torch.expm1,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf, "reciprocal": torch.reciprocal,
    "square": torch.square, "relu": torch.relu, "abs": torch.abs, "sign": torch.sign, "sgn": torch.sgn,
    "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "hardtanh": F.hardtanh, "hardtanh(-0.5,2)": lambda x: F.hardtanh(x, -0.5, 2.0),
    "clamp(-1,1)": lambda x: torch.clamp(x, -1.0, 1.0), "clamp_min(1)": lambda x: torch.clamp_min(x, 1.0),
    "clamp_max(1)": lambda x: torch.clamp_max(x, 1.0), "clamp(nan,1)": lambda x: torch.clamp(x, nan, 1.0),
    "clamp(1,-1)": lambda x: torch.clamp(x, 1.0, -1.0),
    "pow(x,0)": lambda x: x ** 0.0, "pow(x,1)": lambda x: x ** 1.0, "pow(x,2)": lambda x: x ** 2.0,
    "pow(x,3)": lambda x: x ** 3.0, "pow(x,-3)": lambda x: x ** -3.0, "pow(x,0.5)": lambda x: x ** 0.5,
    "pow(x,-0.5)": lambda x: x ** -0.5, "pow(x,2.5)": lambda x: x ** 2.5, "pow(x,-1)": lambda x: x ** -1.0,
    "softplus": F.softplus, "softplus(2,1)": lambda x: F.softplus(x, 2.0, 1.0), "elu": F.elu,
    "elu(0.7)": lambda x: F.elu(x, 0.7), "selu": F.selu, "leaky_relu": F.leaky_relu,
    "leaky_relu(0.2)": lambda x: F.leaky_relu(x, 0.2),
    "floor(x)+x": lambda x: torch.floor(x) + x, "trunc": torch.trunc, "gt(x,0)*2": lambda x: (x > 0).to(x.dtype) * 2,
}
BINARY = {
    "maximum": torch.maximum, "minimum": torch.minimum, "fmax": torch.fmax, "fmin": torch.fmin,
    "pow(x,y)": torch.pow, "add": torch.add, "mul": torch.mul, "div": torch.div,
    "atan2": torch.atan2, "hypot": torch.hypot, "copysign": torch.copysign, "logaddexp": torch.logaddexp,
    "xlogy": torch.xlogy, "fmod": torch.fmod, "remainder": torch.remainder, "floor_divide": torch.floor_divide,
}
# integer forms (values only; no zero divisors: those raise)
INT_BINARY = {"fmod", "remainder", "floor_divide", "maximum", "minimum"}
I = [-7, -6, -5, -3, -2, -1, 0, 1, 2, 3, 5, 7, 2 ** 62, -2 ** 62, -2 ** 63, 2 ** 63 - 1]
IB = [x for x in I for y in I if y != 0]
IE = [y for x in I for y in I if y != 0]
# over the last dim of a [rows, n] input
ROWS = {
    "softmax": lambda x: torch.softmax(x, -1), "log_softmax": lambda x: torch.log_softmax(x, -1),
    "norm2": lambda x: torch.linalg.vector_norm(x, 2, -1), "norm3": lambda x: torch.linalg.vector_norm(x, 3, -1),
    "norm1": lambda x: torch.linalg.vector_norm(x, 1, -1), "norm_inf": lambda x: torch.linalg.vector_norm(x, inf, -1),
}
ROW_INPUTS = [
    [0.0, 0.0, 0.0], [-0.0, 0.0, -0.0], [1.0, 2.0, 3.0], [1.0, inf, 2.0], [-inf, -inf, -inf],
    [-inf, 0.0, 1.0], [1.0, nan, 2.0], [3.0, -4.0, 0.0], [2.0, 2.0, -2.0], [inf, inf, 1.0],
]


def cases():
    for name, f in UNARY.items():
        yield name, f, [E]
    b = [x for x in E for _ in E]
    e = [y for _ in E for y in E]
    for name, f in BINARY.items():
        yield name, f, [b, e]
    for name, f in ROWS.items():
        yield name, f, [ROW_INPUTS]


def weights(n):
    return [1.0 + 0.5 * (i % 4) for i in range(n)]


def lit(v):
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Inf" if v > 0 else "-Inf"
    if v == 0:
        return "-0.0" if math.copysign(1, v) < 0 else "0.0"
    return float(v).hex()


def lits(vs):
    return "{" + ", ".join(lit(v) for v in vs) + "}"


def run(f, inputs, dtype):
    shape = [len(inputs[0]), len(inputs[0][0])] if isinstance(inputs[0][0], list) else [len(inputs[0])]
    xs = [torch.tensor(i, dtype=dtype).reshape(shape) for i in inputs]
    if dtype.is_floating_point:
        xs = [x.requires_grad_() for x in xs]
    y = f(*xs)
    w = torch.tensor(weights(y.numel()), dtype=dtype).reshape(y.shape)
    y.backward_raises = False
    if y.requires_grad:
        try:
            (y * w).sum().backward()
        except RuntimeError:  # "derivative for aten::floor_divide is not implemented"
            y.backward_raises = True
    return shape, xs, y


def differ(a, b):
    if math.isnan(a) or math.isnan(b):
        return not (math.isnan(a) and math.isnan(b))
    if a == 0 and b == 0:
        return math.copysign(1, a) != math.copysign(1, b)
    return abs(a - b) > 1e-6 * max(1.0, abs(b)) if not (math.isinf(a) or math.isinf(b)) else a != b


def alone(f, flat, dtype, n):
    """Each element (or pair) of an elementwise op on its own: PyTorch's scalar path, which
    gives other answers than its vectorized one in places (hardtanh's gradient at NaN...)."""
    out, grads = [], [[] for _ in flat]
    for i in range(n):
        _, xs, y = run(f, [[v[i]] for v in flat], dtype)
        out.append(y.item())
        for k, x in enumerate(xs):
            grads[k].append(x.grad.item() * weights(n)[i] if x.grad is not None else 0.0)  # the batch's weight
    return out, sum(grads, [])


def main():
    data, ints, rows = [], [], []

    def put(vs, into=data):
        into.extend(vs)
        return len(into) - len(vs)

    for name, f, inputs in cases():
        for dtype in (torch.float64, torch.float32, torch.int64):
            if dtype == torch.int64:
                if name not in INT_BINARY:
                    continue
                inputs = [IB, IE]
            shape, xs, y = run(f, inputs, dtype)
            flat = [sum(i, []) if isinstance(i[0], list) else i for i in inputs]
            store = data if dtype.is_floating_point else ints
            in_at = put(sum((torch.tensor(i, dtype=dtype).tolist() for i in flat), []), store)  # as the dtype holds them
            out_at = put(y.detach().reshape(-1).tolist(), store)
            n = len(flat[0])
            grad_at = -1
            if dtype.is_floating_point:
                grad_at = put(sum((x.grad.clone().reshape(-1).tolist() if x.grad is not None else [0.0] * n for x in xs), []))
            has = [1 if x.grad is not None else 0 for x in xs] + [0]
            alt_out = alt_grad = -1
            if len(shape) == 1 and dtype.is_floating_point:
                a_out, a_grad = alone(f, flat, dtype, n)
                g_flat = data[grad_at:grad_at + len(a_grad)]
                if any(differ(p, q) for p, q in zip(a_out + a_grad, data[out_at:out_at + n] + g_flat)):
                    alt_out, alt_grad = put(a_out), put(a_grad)
            oshape = list(y.shape) + [1] * (2 - y.dim())
            rows.append('  {"%s", %s, %d, {%s}, %d, {%s}, %d, %d, %d, %d, %d, %d, %d, %d, {%d, %d}, %d},' % (
                name, {torch.float32: 0, torch.float64: 1, torch.int64: 2}[dtype], len(shape), ", ".join(map(str, shape + [1] * (2 - len(shape)))),
                y.dim(), ", ".join(map(str, oshape)), len(xs), n, y.numel(), in_at, out_at, grad_at, alt_out, alt_grad,
                has[0], has[1],
                2 if y.backward_raises else 1 if y.requires_grad else 0))
    out = ["// Generated by tests/reference/edge_values.py with PyTorch " + torch.__version__ + "; do not edit.",
           "#pragma once", "#include <cstdint>", "#include <limits>", "", "namespace reel_ref {",
           "inline constexpr double NaN = std::numeric_limits<double>::quiet_NaN();",
           "inline constexpr double Inf = std::numeric_limits<double>::infinity();",
           "// Case k: nin inputs of n elements at data[in_at], the n_out outputs at data[out_at], the",
           "// inputs' gradients (n each) at data[grad_at] (has_grad[i] 0: undefined in PyTorch). Where",
           "// PyTorch's vectorized and scalar kernels disagree, either answer is PyTorch's.",
           "struct EdgeCase {", "  const char* op;", "  int dtype;  // 0 float32, 1 float64, 2 int64 (values only: in_at and out_at index edge_ints)", "  int rank;", "  int64_t shape[2];",
           "  int out_rank;", "  int64_t out_shape[2];", "  int nin;", "  int64_t n, n_out, in_at, out_at, grad_at;",
           "  int64_t alt_out_at, alt_grad_at;  // PyTorch's answers element by element where they differ (else -1)",
           "  int has_grad[2];", "  int requires_grad;  // y's: 0 no (no backward at all), 1 yes, 2 yes but PyTorch's backward raises", "};",
           "inline constexpr double edge_data[] = {"]
    for i in range(0, len(data), 8):
        out.append("  " + ", ".join(lit(v) for v in data[i:i + 8]) + ",")
    out += ["};", "inline constexpr int64_t edge_ints[] = {"]
    for i in range(0, len(ints), 8):
        out.append("  " + ", ".join(str(v) if v != -2 ** 63 else "INT64_MIN" for v in ints[i:i + 8]) + ",")
    out += ["};", "inline constexpr EdgeCase edge_cases[] = {"] + rows + ["};", "}  // namespace reel_ref", ""]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "edge_values.hpp")
    with open(path, "w") as fh:
        fh.write("\n".join(out))
    print(f"wrote {len(rows)} cases to {path}")


if __name__ == "__main__":
    main()
