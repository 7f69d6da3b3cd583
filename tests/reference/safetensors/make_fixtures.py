"""Fixtures for tests/test_safetensors.cpp, written by the reference implementation.

    python make_fixtures.py                 # writes reference.safetensors next to this script
    python make_fixtures.py --check FILE    # checks a file reel wrote (the suite writes one to
                                            # $REEL_SAFETENSORS_OUT when that is set)

Needs torch (2.15.0) and safetensors (0.8.0) from PyPI; CI never runs it. Every tensor is [3, 4]
and holds value(dtype, i) at flat index i (the suite computes the same formulas), exact in its
dtype. float4_e2m1fn_x2 holds the byte codes (i * 17) % 256; F4 counts FP4 values, so its
shape in the file is [3, 8].
"""
import os
import struct
import sys

import torch
import safetensors
import safetensors.torch as st

N = 12


def values(name):
    i = torch.arange(N, dtype=torch.float64)
    if name == "bool":
        return torch.tensor([k % 3 == 0 for k in range(N)])
    if name == "uint8":
        return torch.tensor([(k * 37) % 256 for k in range(N)], dtype=torch.int64).to(torch.uint8)
    if name == "int8":
        return torch.tensor([(k * 37) % 256 - 128 for k in range(N)], dtype=torch.int8)
    if name == "int16":
        return torch.tensor([k * 5000 - 30000 for k in range(N)], dtype=torch.int16)
    if name == "uint16":
        return torch.tensor([65535 - k * 4099 for k in range(N)], dtype=torch.int64).to(torch.uint16)
    if name == "int32":
        return torch.tensor([k * 300000007 - 2000000000 for k in range(N)], dtype=torch.int64).to(torch.int32)
    if name == "uint32":
        return torch.tensor([4294967295 - k * 123456789 for k in range(N)], dtype=torch.int64).to(torch.uint32)
    if name == "int64":
        return torch.tensor([k * 700000000000000001 - 4000000000000000000 for k in range(N)], dtype=torch.int64)
    if name == "uint64":  # 2^64 - 1 - k: built from int64 bits
        return torch.tensor([-1 - k for k in range(N)], dtype=torch.int64).view(torch.uint64)
    if name == "complex64":
        return torch.complex((i - 5) * 0.25, i * 0.5).to(torch.complex64)
    if name == "float8_e8m0fnu":
        return torch.pow(2.0, i - 5).to(torch.float32).to(torch.float8_e8m0fnu)
    if name == "float4_e2m1fn_x2":
        return torch.tensor([(k * 17) % 256 for k in range(N)], dtype=torch.int64).to(torch.uint8).view(torch.float4_e2m1fn_x2)
    dtype = getattr(torch, name)
    return ((i - 5) * 0.25).to(dtype)


NAMES = ["bool", "uint8", "int8", "int16", "uint16", "float16", "bfloat16", "int32", "uint32", "float32",
         "complex64", "float64", "int64", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn_x2"]


def expected():
    return {n: values(n).reshape(3, 4) for n in NAMES}


def same(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bytes(a.contiguous().view(torch.uint8).numpy()) == bytes(b.contiguous().view(torch.uint8).numpy())


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        got = st.load_file(sys.argv[2])
        want = expected()
        bad = [n for n in NAMES if n not in got or not same(got[n], want[n])]
        extra = sorted(set(got) - set(NAMES))
        with open(sys.argv[2], "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            print("header:", f.read(n).decode()[:200], "...")
        print("tensors checked:", len(NAMES) - len(bad), "of", len(NAMES), "; mismatched:", bad, "; extra:", extra)
        sys.exit(1 if bad or extra else 0)
    out = os.path.join(here, "reference.safetensors")
    st.save_file(expected(), out, metadata={"format": "pt", "writer": f"safetensors {safetensors.__version__}, torch {torch.__version__}"})
    print("wrote", out, os.path.getsize(out), "bytes")


if __name__ == "__main__":
    main()
