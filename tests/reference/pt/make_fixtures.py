"""Fixtures for tests/test_checkpoint.cpp, written by PyTorch, and the check of reel's files.

    python make_fixtures.py                 # writes the fixtures next to this script
    python make_fixtures.py --check FILE    # torch.load(FILE, weights_only=True) of a file reel
                                            # wrote (the suite writes one to $REEL_PT_OUT when
                                            # that is set) and compares it with what reel meant

Needs torch 2.15.0 from PyPI; CI never runs it. The tensors of every dtype hold the values of
../safetensors/make_fixtures.py (the suite computes the same formulas).

Fixtures:
  torch_checkpoint.pt   torch.save of a dict: every dtype, views of one storage, Parameters,
                        Python scalars and containers, torch.Size/device/set, int keys, an empty
                        and a 0-dim tensor, a meta tensor, a module's state_dict (with its
                        _metadata) and an Adam optimizer's state_dict after two steps
  torch_zip64.pt        torch_checkpoint.pt repacked by Python's zipfile with zip64 records
                        (and unaligned records)
  torch_tensor.pt       torch.save of one tensor (a non-contiguous view)
  torch_njt.pt          a nested jagged tensor (loads only when its globals are allowed)
  torch_script.pt       torch.jit.save of a scripted module (refused: TorchScript)
  torch_legacy.pt       _use_new_zipfile_serialization=False (refused: legacy format)
  adam_expected.pt      the Adam state after two more steps, for the resumed-training check
  charlm_init.pt        weights of examples/train_charlm.cpp's model (--hidden 32 --blocks 1),
                        initialized by PyTorch, and charlm_init_loss.txt: PyTorch's eval loss of
                        them on the example's validation windows (example_train_charlm
                        --init-from must report the same)
"""
import collections
import os
import sys
import zipfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "safetensors"))
from make_fixtures import NAMES, values  # noqa: E402

DTYPES = NAMES + ["complex128"]


def value(name):
    if name == "complex128":
        i = torch.arange(12, dtype=torch.float64)
        return torch.complex((i - 5) * 0.25, i * 0.5).reshape(3, 4)
    return values(name).reshape(3, 4)


def base():
    return torch.arange(24, dtype=torch.float32).reshape(4, 6)


def tiny_model():
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2)
    with torch.no_grad():
        m.weight.copy_(torch.tensor([[0.5, -0.25, 1.0], [0.75, 0.125, -0.5]]))
        m.bias.copy_(torch.tensor([0.1, -0.2]))
    return m


def adam_steps(m, opt, n, start):
    for k in range(start, start + n):
        x = torch.tensor([[1.0, 2.0, -1.0], [0.5, -1.5, 2.0]]) * (k + 1)
        loss = (m(x) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


def checkpoint():
    b = base()
    m = tiny_model()
    opt = torch.optim.Adam(m.parameters(), lr=0.01, betas=(0.8, 0.9))
    adam_steps(m, opt, 2, 0)
    return {
        "dtypes": collections.OrderedDict((n, value(n)) for n in DTYPES),
        "views": {"base": b, "row": b[1], "col": b[:, 2], "t": b.t(), "slice": b[1:3, ::2]},
        "param": torch.nn.Parameter(torch.tensor([1.5, -2.0])),
        "frozen": torch.nn.Parameter(torch.tensor([3.0]), requires_grad=False),
        "grad_tensor": torch.tensor([1.0, 2.0], requires_grad=True),
        "scalars": [None, True, False, 0, 255, 256, 65535, 65536, -1, 2**31 - 1, -(2**31), 2**31, 2**62,
                    -(2**63), 2**63 - 1, 0.1, -0.0, float("inf"), 1 + 2j, "h\u00e9llo \u2211", b"\x00\xffab",
                    bytearray(b"xy")],
        "tuple": (1, (2, 3), [4]),
        "size": torch.Size([2, 3]),
        "device": torch.device("cpu"),
        "set": {7},
        "int_keys": {0: "a", 1: "b"},
        "empty": torch.zeros(0, 3),
        "scalar0d": torch.tensor(3.5, dtype=torch.float64),
        "meta": torch.empty(2, 3, device="meta"),
        "model": m.state_dict(),
        "optim": opt.state_dict(),
    }


class Block(torch.nn.Module):
    def __init__(self, h):
        super().__init__()
        self.norm = torch.nn.RMSNorm([h])
        self.up = torch.nn.Linear(h, 2 * h)
        self.down = torch.nn.Linear(2 * h, h)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class CharLM(torch.nn.Module):
    # examples/train_charlm.cpp's model, with its parameter names
    def __init__(self, vocab, context=16, embed=16, hidden=32, blocks=1):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, embed)
        self.add_module("in", torch.nn.Linear(context * embed, hidden))
        self.blocks = torch.nn.ModuleList([Block(hidden) for _ in range(blocks)])
        self.norm = torch.nn.RMSNorm([hidden])
        self.head = torch.nn.Linear(hidden, vocab)

    def loss(self, x, y):
        h = getattr(self, "in")(self.embed(x).reshape(x.shape[0], -1))
        for b in self.blocks:
            h = b(h)
        return torch.nn.functional.cross_entropy(self.head(self.norm(h)), y)


def charlm_fixture(here):
    data = open(os.path.join(here, "..", "..", "..", "examples", "data", "botchan.txt"), "rb").read()
    chars = sorted(set(data))
    ids = {c: i for i, c in enumerate(chars)}
    text = [ids[c] for c in data]
    split, context = len(text) * 9 // 10, 16
    starts = []
    s = split
    while s + context < len(text) and len(starts) < 4096:
        starts.append(s)
        s += 7
    x = torch.tensor([text[s:s + context] for s in starts])
    y = torch.tensor([text[s + context] for s in starts])
    torch.manual_seed(3)
    m = CharLM(len(chars))
    with torch.no_grad():
        for p in m.parameters():  # not the default init: a model reel's init would not give
            p.add_(torch.randn_like(p) * 0.05)
        loss = m.loss(x, y).item()
    torch.save(m.state_dict(), os.path.join(here, "charlm_init.pt"))
    with open(os.path.join(here, "charlm_init_loss.txt"), "w") as f:
        f.write(f"{loss:.6f}\n")
    return loss


def same(a, b):
    if not isinstance(a, torch.Tensor) or a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bytes(a.contiguous().view(torch.uint8).numpy()) == bytes(b.contiguous().view(torch.uint8).numpy())


def check(path):
    # What the suite's "files reel writes" case saves (the same formulas again).
    got = torch.load(path, weights_only=True)
    bad = []
    for n in DTYPES:
        if not same(got["dtypes"][n], value(n)):
            bad.append(n)
    v = got["views"]
    if not same(v["base"], base()) or not same(v["slice"], base()[1:3, ::2]) or not same(v["t"], base().t()):
        bad.append("views")
    ptrs = {v[k].untyped_storage().data_ptr() for k in v}
    if len(ptrs) != 1 or v["slice"].stride() != (6, 2) or v["slice"].storage_offset() != 6:
        bad.append("sharing")
    if not isinstance(got["param"], torch.nn.Parameter) or not got["param"].requires_grad:
        bad.append("param")
    if got["scalars"] != [None, True, 7, -(2**40), 0.5, 1 + 2j, "h\u00e9llo", b"\x00\xff"]:
        bad.append("scalars")
    if got["tuple"] != (1, (2.5,), []) or got["int_keys"] != {0: "a", 5: "b"}:
        bad.append("containers")
    if not isinstance(got["ordered"], collections.OrderedDict) or list(got["ordered"]) != ["z", "a"]:
        bad.append("ordered")
    if got["meta"].device.type != "meta" or got["meta"].shape != (2, 5):
        bad.append("meta")
    print("checked", path, "; mismatched:", bad)
    sys.exit(1 if bad else 0)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
    here = os.path.dirname(os.path.abspath(__file__))
    out = lambda n: os.path.join(here, n)  # noqa: E731
    torch.save(checkpoint(), out("torch_checkpoint.pt"))
    with zipfile.ZipFile(out("torch_checkpoint.pt")) as src, zipfile.ZipFile(out("torch_zip64.pt"), "w") as dst:
        for info in src.infolist():
            with dst.open(info.filename, "w", force_zip64=True) as f:
                f.write(src.read(info.filename))
    torch.save(base()[1:, ::3], out("torch_tensor.pt"))
    nt = torch.nested.nested_tensor([torch.arange(3.0), torch.arange(2.0) + 10], layout=torch.jagged)
    torch.save(nt, out("torch_njt.pt"))
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), out("torch_script.pt"))
    torch.save(torch.ones(2), out("torch_legacy.pt"), _use_new_zipfile_serialization=False)
    # resumed training: two more Adam steps from the checkpoint's state
    m = tiny_model()
    opt = torch.optim.Adam(m.parameters(), lr=0.01, betas=(0.8, 0.9))
    adam_steps(m, opt, 2, 0)
    adam_steps(m, opt, 2, 2)
    torch.save({"model": m.state_dict(), "optim": opt.state_dict()}, out("adam_expected.pt"))
    print("charlm eval loss (PyTorch):", charlm_fixture(here))
    for n in ["charlm_init.pt", "torch_checkpoint.pt", "torch_zip64.pt", "torch_tensor.pt", "torch_njt.pt", "torch_script.pt",
              "torch_legacy.pt", "adam_expected.pt"]:
        print("wrote", n, os.path.getsize(out(n)), "bytes")


if __name__ == "__main__":
    main()
