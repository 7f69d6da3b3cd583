#!/usr/bin/env python3
"""JAX and PyTorch on the rows of benchmarks/bench_physics.cpp, for the ratios in
benchmarks/README.md. Optional: never run by CI. Run it on the same machine right beside
bench_physics (same thread count):

    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch==2.15.0 numpy "jax[cpu]==0.10.2"
    OMP_NUM_THREADS=2 /tmp/tv/bin/python benchmarks/anchors/physics_anchors.py [--quick] [--lce]
    OMP_NUM_THREADS=2 /tmp/tv/bin/python benchmarks/anchors/physics_anchors.py --pairs build/bench/benchmarks/bench_physics [rounds]

Same work as reel's rows: LJ38 in the tensor formulation (double), its gradient and full
Hessian (jax.hessian = jacfwd(jacrev) under jit; torch.func.hessian, eager), one PINN step
(MLP 2-64-64-64-1 tanh, 1024 points, Laplacian by nested differentiation, gradient of the
loss w.r.t. all weights, Adam step; float32), a [38,38,3] pair difference and a sum over its
dim of 3 (PyTorch eager), float/double GEMM 4096x512x8192 (PyTorch, MKL), and with --lce
linear + cross-entropy at N 4096, D 512, V 32768 (F.linear_cross_entropy and the unfused
composition; reel's figures for it come from bench_training). With --pairs, only the PINN
step: reel's (bench_physics --pinn, eager and compiled) and PyTorch's, alternated round by
round.
Medians of repeated timings, like reel's median_timer.hpp.
"""
import math
import statistics
import sys
import time

import numpy as np


def median_seconds(f, reps, inner=1):
    ts = []
    for _ in range(reps):
        s = time.perf_counter()
        for _ in range(inner):
            f()
        ts.append((time.perf_counter() - s) / inner)
    return statistics.median(ts)


def cluster(n, seed):
    """The first n points of a cubic grid of spacing 1.1, each moved by up to 0.1 (as reel's
    lj::random_cluster; the random numbers differ, the work does not)."""
    side = 1
    while side ** 3 < n:
        side += 1
    grid = np.array([[i % side, (i // side) % side, i // (side * side)] for i in range(n)], dtype=np.float64) * 1.1
    return grid + 0.2 * (np.random.default_rng(seed).random((n, 3)) - 0.5)


def row(name, value, unit):
    print(f"{name:<58} {value:12.2f} {unit}")


def torch_pinn_step():
    """One PINN training step in PyTorch (eager), as a callable."""
    import torch
    import torch.nn as nn

    torch.manual_seed(2026)
    net = nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                        nn.Linear(64, 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    X = torch.rand(1024, 2)
    s = torch.rand(256)
    side = torch.arange(256) % 4
    Xb = torch.stack([torch.where(side < 2, s, (side == 3).float()), torch.where(side < 2, (side == 1).float(), s)], 1)

    def pinn_step():
        opt.zero_grad()
        x = X.detach().requires_grad_()
        u = net(x)
        g = torch.autograd.grad(u.sum(), x, create_graph=True)[0]
        uxx = torch.autograd.grad(g[:, 0].sum(), x, create_graph=True)[0][:, 0]
        uyy = torch.autograd.grad(g[:, 1].sum(), x, create_graph=True)[0][:, 1]
        f = 2 * math.pi ** 2 * torch.sin(math.pi * X[:, 0]) * torch.sin(math.pi * X[:, 1])
        res = -(uxx + uyy) - f
        loss = (res * res).mean() + 100 * (net(Xb) ** 2).mean()
        loss.backward()
        opt.step()

    return pinn_step


def torch_rows(quick):
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    P = torch.tensor(cluster(38, 1), dtype=torch.float64)
    eye = torch.eye(38, dtype=torch.float64)

    def energy(p):
        d = p.unsqueeze(1) - p.unsqueeze(0)
        r2 = (d * d).sum(2) + eye
        inv6 = r2.pow(-3.0)
        return 2.0 * ((inv6 * inv6 - inv6) * (1.0 - eye)).sum()

    def grad():
        x = P.detach().requires_grad_()
        return torch.autograd.grad(energy(x), x)[0]

    with torch.no_grad():
        row("torch LJ38 energy (eager)", median_seconds(lambda: energy(P), 31, 50) * 1e6, "us")
    row("torch LJ38 gradient (eager)", median_seconds(grad, 31, 50) * 1e6, "us")
    hess = torch.func.hessian(energy)
    row("torch LJ38 Hessian (torch.func.hessian)", median_seconds(lambda: hess(P), 11) * 1e3, "ms")

    row("torch PINN step (eager, float32)", median_seconds(torch_pinn_step(), 11) * 1e3, "ms")

    a = torch.randn(38, 38, 3, dtype=torch.float64)
    b = torch.randn(38, 38, 3, dtype=torch.float64)
    row("torch [38,38,3] contiguous a - b", median_seconds(lambda: a - b, 31, 200) * 1e6, "us")
    row("torch [38,38,3] P[:,None] - P[None]", median_seconds(lambda: P.unsqueeze(1) - P.unsqueeze(0), 31, 200) * 1e6,
        "us")
    row("torch [38,38,3] sum of all", median_seconds(lambda: a.sum(), 31, 200) * 1e6, "us")
    row("torch [38,38,3] sum over the dim of 3", median_seconds(lambda: a.sum(2), 31, 200) * 1e6, "us")

    if not quick:
        for dt, name in ((torch.float32, "float"), (torch.float64, "double")):
            A = torch.randn(4096, 512, dtype=dt)
            B = torch.randn(512, 8192, dtype=dt)
            t = median_seconds(lambda: A @ B, 3)
            row(f"torch GEMM 4096x512x8192 {name}", 2 * 4096 * 512 * 8192 / t * 1e-9, "GFLOP/s")


def torch_lce_rows():
    """linear + cross-entropy, N 4096, D 512, V 32768, float, forward + backward (dX, dW): the
    row bench_training measures for reel (fused and unfused)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    N, D, V = 4096, 512, 32768
    h0 = torch.randn(N, D)
    w0 = torch.randn(V, D) * 0.02
    y = torch.randint(0, V, (N,))

    def fused():
        h = h0.clone().requires_grad_()
        w = w0.clone().requires_grad_()
        F.linear_cross_entropy(h, w, y).backward()

    def unfused():
        h = h0.clone().requires_grad_()
        w = w0.clone().requires_grad_()
        F.cross_entropy(F.linear(h, w), y).backward()

    for name, f in (("fused F.linear_cross_entropy", fused), ("unfused cross_entropy(linear)", unfused)):
        f()
        row(f"torch LCE N4096 D512 V32768 {name}", median_seconds(f, 3), "s")


def jax_rows(quick):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    P = jnp.asarray(cluster(38, 1))
    eye = jnp.eye(38)

    def energy(p):
        d = p[:, None, :] - p[None, :, :]
        r2 = jnp.sum(d * d, 2) + eye
        inv6 = r2 ** -3.0
        return 2.0 * jnp.sum((inv6 * inv6 - inv6) * (1.0 - eye))

    e = jax.jit(energy)
    g = jax.jit(jax.grad(energy))
    h = jax.jit(jax.hessian(energy))
    for f in (e, g, h):
        f(P).block_until_ready()
    row("jax LJ38 energy (jit)", median_seconds(lambda: e(P).block_until_ready(), 31, 50) * 1e6, "us")
    row("jax LJ38 gradient (jit)", median_seconds(lambda: g(P).block_until_ready(), 31, 50) * 1e6, "us")
    row("jax LJ38 Hessian (jit(jax.hessian))", median_seconds(lambda: h(P).block_until_ready(), 11) * 1e3, "ms")

    key = jax.random.PRNGKey(2026)
    sizes = [2, 64, 64, 64, 1]
    params = []
    for i in range(4):
        key, k1, k2 = jax.random.split(key, 3)
        lim = 1 / math.sqrt(sizes[i])
        params.append((jax.random.uniform(k1, (sizes[i], sizes[i + 1]), jnp.float32, -lim, lim),
                       jax.random.uniform(k2, (sizes[i + 1],), jnp.float32, -lim, lim)))

    def net(params, x):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < 3:
                h = jnp.tanh(h)
        return h[..., 0]

    def u_point(params, p):
        return net(params, p[None, :])[0]

    def laplacian(params, p):
        return jnp.trace(jax.hessian(u_point, argnums=1)(params, p))

    key, k1, k2 = jax.random.split(key, 3)
    X = jax.random.uniform(k1, (1024, 2), jnp.float32)
    s = jax.random.uniform(k2, (256,), jnp.float32)
    side = jnp.arange(256) % 4
    Xb = jnp.stack([jnp.where(side < 2, s, (side == 3).astype(jnp.float32)),
                    jnp.where(side < 2, (side == 1).astype(jnp.float32), s)], 1)

    def loss(params):
        lap = jax.vmap(lambda p: laplacian(params, p))(X)
        f = 2 * math.pi ** 2 * jnp.sin(math.pi * X[:, 0]) * jnp.sin(math.pi * X[:, 1])
        res = -lap - f
        return jnp.mean(res * res) + 100 * jnp.mean(net(params, Xb) ** 2)

    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8

    @jax.jit
    def step(params, m, v, t):
        gr = jax.grad(loss)(params)
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, gr)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, gr)
        params = jax.tree_util.tree_map(
            lambda p, m, v: p - lr * (m / (1 - b1 ** t)) / (jnp.sqrt(v / (1 - b2 ** t)) + eps), params, m, v)
        return params, m, v

    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = [params, m, v, 1.0]

    def one():
        p, mm, vv = step(state[0], state[1], state[2], state[3])
        jax.block_until_ready(p)
        state[0], state[1], state[2], state[3] = p, mm, vv, state[3] + 1

    one()
    row("jax PINN step (jit, float32)", median_seconds(one, 11) * 1e3, "ms")


def pinn_pairs(bench, rounds):
    """The PINN step of reel (bench_physics --pinn: eager and compiled) and of PyTorch,
    alternated round by round, so both see the same phase of a noisy machine."""
    import subprocess

    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    step = torch_pinn_step()
    step()
    print(f"{'round':<6} {'reel eager':>11} {'reel compiled':>14} {'torch eager':>12}  (ms)")
    faster = [0, 0]
    for r in range(rounds):
        out = subprocess.run([bench, "--pinn"], capture_output=True, text=True, check=True).stdout
        line = next(l for l in out.splitlines() if l.startswith("PINN step"))
        eager, compiled = (float(v) for v in line.split("loss+grad")[1].split()[:2])
        t = median_seconds(step, 11) * 1e3
        faster[0] += eager < t
        faster[1] += compiled < t
        print(f"{r + 1:<6} {eager:11.2f} {compiled:14.2f} {t:12.2f}")
    print(f"reel faster than PyTorch in {faster[0]} of {rounds} rounds eager, {faster[1]} of {rounds} compiled")


if __name__ == "__main__":
    if "--pairs" in sys.argv:  # --pairs path/to/bench_physics [rounds]
        i = sys.argv.index("--pairs")
        pinn_pairs(sys.argv[i + 1], int(sys.argv[i + 2]) if len(sys.argv) > i + 2 else 10)
        sys.exit(0)
    quick = "--quick" in sys.argv
    print(f"{'case':<58} {'value':>12}")
    torch_rows(quick)
    if "--lce" in sys.argv:
        torch_lce_rows()
    jax_rows(quick)
