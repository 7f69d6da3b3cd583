# Generates training_reference.hpp: PyTorch reference values for the optimizers (SGD, Adam, AdamW)
# and torch.nn.functional.cross_entropy. Everything is computed in float64 on the CPU.
# Run: <venv with torch>/bin/python tests/reference/training_reference.py   (not needed by CI)
import math
import os
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "training_reference.hpp")


def num(x):
    x = float(x)
    if math.isnan(x):
        return "std::numeric_limits<double>::quiet_NaN()"
    if math.isinf(x):
        return ("-" if x < 0 else "") + "std::numeric_limits<double>::infinity()"
    return "%.17g" % x


def dvec(t):  # flattened row-major std::vector<double> initializer
    vals = t.detach().reshape(-1).tolist() if torch.is_tensor(t) else list(t)
    return "{" + ", ".join(num(v) for v in vals) + "}"


def ivec(vals):
    return "{" + ", ".join(str(int(v)) for v in vals) + "}"


def cbool(b):
    return "true" if b else "false"


out = []

# ---------------------------------------------------------------- optimizers
# Parameters p0 (shape [3]) and p1 (shape [2,2]); at each step the gradient is set in closed form,
# p.grad = 2*c*p + cos(p) (c = 0.5 for p0, 1.5 for p1), from the current values, then opt.step().
# After each of the 6 steps the 7 values (p0, then p1 row-major) are recorded: 42 numbers.
P0, P1, C = [0.5, -1.2, 2.0], [[0.3, -0.7], [1.5, -2.5]], (0.5, 1.5)
STEPS = 6


def run_optimizer(make_opt):
    ps = [torch.tensor(P0), torch.tensor(P1)]
    opt = make_opt(ps)
    traj = []
    for _ in range(STEPS):
        for p, c in zip(ps, C):
            q = p.detach()
            p.grad = 2 * c * q + torch.cos(q)
        opt.step()
        for p in ps:
            traj += p.detach().reshape(-1).tolist()
    return traj, opt


# (name, optimizer, kwargs): the kwargs are passed as given, everything else is PyTorch's default.
CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.3)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.05, momentum=0.5, weight_decay=0.1, maximize=True)),
    ("SGD", dict(lr=0.1, weight_decay=0.2)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("Adam", dict(lr=0.02, maximize=True, amsgrad=True, weight_decay=0.05)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.02, betas=(0.5, 0.7), eps=1e-4, weight_decay=0.3)),
    ("AdamW", dict(lr=0.01, maximize=True)),
]
# Fields not given (or not used by the optimizer) get PyTorch's defaults; only weight_decay differs.
DEFAULTS = {"SGD": 0.0, "Adam": 0.0, "AdamW": 0.01}  # default weight_decay

out.append("struct OptimCase { const char* name; const char* optimizer; double lr, momentum, dampening, "
           "weight_decay, beta1, beta2, eps; bool nesterov, maximize, amsgrad; "
           "std::vector<double> trajectory; };")
out.append("// trajectory: after each of 6 steps, p0 (3 values) then p1 (2x2 row-major): 42 numbers.")
out.append("inline const std::vector<OptimCase> optim_cases = {")
for oname, kw in CASES:
    traj, _ = run_optimizer(lambda ps: getattr(torch.optim, oname)(ps, **kw))
    f = dict(momentum=0.0, dampening=0.0, weight_decay=DEFAULTS[oname], betas=(0.9, 0.999), eps=1e-8,
             nesterov=False, maximize=False, amsgrad=False)
    f.update(kw)
    name = oname + " " + " ".join(k if v is True else "%s=%s" % (k, v) for k, v in kw.items())
    fields = [f["lr"], f["momentum"], f["dampening"], f["weight_decay"], f["betas"][0], f["betas"][1], f["eps"]]
    out.append('  {"%s", "%s", %s, %s, %s, %s, %s},' % (
        name, oname, ", ".join(num(v) for v in fields), cbool(f["nesterov"]), cbool(f["maximize"]),
        cbool(f["amsgrad"]), dvec(traj)))
out.append("};")

# Parameter groups: Adam([{params: [p0]}, {params: [p1], lr: 0.05, weight_decay: 0.1}], lr=0.01).
traj, opt = run_optimizer(lambda ps: torch.optim.Adam(
    [{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.05, "weight_decay": 0.1}], lr=0.01))
st = opt.state_dict()["state"][1]  # state of p1 (index 1 in the state_dict numbering)
out.append("// Adam with two parameter groups (p0: lr=0.01; p1: lr=0.05, weight_decay=0.1); same layout.")
out.append("inline const std::vector<double> adam_groups_trajectory = %s;" % dvec(traj))
out.append("// Optimizer state of p1 after the 6 steps (opt.state_dict()['state'][1]).")
out.append("inline const std::vector<double> adam_groups_p1_exp_avg = %s;" % dvec(st["exp_avg"]))
out.append("inline const std::vector<double> adam_groups_p1_exp_avg_sq = %s;" % dvec(st["exp_avg_sq"]))
out.append("inline const double adam_groups_step = %s;" % num(st["step"]))

# ---------------------------------------------------------------- cross_entropy
# Inputs, drawn in this order from torch.manual_seed(0): X = randn(5,4)*2,
# soft targets P = softmax(randn(5,4)*1.5, dim=1), then the K-dimensional logits randn(2,3,2).
torch.manual_seed(0)
X = torch.randn(5, 4) * 2
P = torch.softmax(torch.randn(5, 4) * 1.5, dim=1)
XK = torch.randn(2, 3, 2)
W = torch.tensor([0.3, 1.0, 2.0, 0.7])
TARGET_SETS = [[1, 3, -100, 0, 2],        # 0: ce_hard_target
               [1, 3, 2, 0, 2],           # 1: ce_hard_target2 (used with ignore_index=3)
               [-100] * 5]                # 2: ce_all_ignored_target
REDS = ["none", "mean", "sum"]


def ce(x, target, **kw):  # loss and d(loss.sum())/dx
    x = x.detach().clone().requires_grad_(True)
    loss = F.cross_entropy(x, target, **kw)
    loss.sum().backward()
    return loss.detach(), x.grad


out.append("")
out.append("// cross_entropy inputs (seed 0): logits [5,4] row-major, class weights, targets.")
out.append("inline const std::vector<double> ce_logits = %s;" % dvec(X))
out.append("inline const std::vector<double> ce_weight = %s;" % dvec(W))
out.append("inline const std::vector<long long> ce_hard_target = %s;" % ivec(TARGET_SETS[0]))
out.append("inline const std::vector<long long> ce_hard_target2 = %s;" % ivec(TARGET_SETS[1]))
out.append("inline const std::vector<long long> ce_all_ignored_target = %s;" % ivec(TARGET_SETS[2]))
out.append("inline const std::vector<double> ce_soft_target = %s;" % dvec(P))

# (soft, weighted, ignore_index, target_set, reduction, label_smoothing)
combos = []
for soft in (False, True):
    for ig, ts in ([(-100, 0), (3, 1)] if not soft else [(-100, 0)]):
        for weighted in (False, True):
            for red in range(3):
                for ls in (0.0, 0.2):
                    combos.append((soft, weighted, ig, ts, red, ls))
combos += [(False, weighted, -100, 2, 1, 0.0) for weighted in (False, True)]  # all targets ignored

out.append("// loss: F.cross_entropy(ce_logits, target, weight, ignore_index, reduction, label_smoothing)")
out.append("// (5 values for reduction none, else 1); grad: d(loss.sum())/d logits, [5,4] row-major.")
out.append("// target_set selects the hard target vector; it is 0 (unused) for soft targets.")
out.append("struct CeCase { const char* name; bool soft; bool weighted; long long ignore_index; "
           "int target_set /*0: ce_hard_target, 1: ce_hard_target2, 2: ce_all_ignored_target*/; "
           "int reduction /*0 none,1 mean,2 sum*/; double label_smoothing; "
           "std::vector<double> loss; std::vector<double> grad; };")
out.append("inline const std::vector<CeCase> ce_cases = {")
for soft, weighted, ig, ts, red, ls in combos:
    target = P if soft else torch.tensor(TARGET_SETS[ts])
    try:
        loss, grad = ce(X, target, weight=W if weighted else None, ignore_index=ig,
                        reduction=REDS[red], label_smoothing=ls)
    except Exception as e:  # left out of the header, reported on stdout
        print("torch raised for", (soft, weighted, ig, ts, red, ls), ":", e)
        continue
    name = ("all ignored " if ts == 2 else "") + ("soft" if soft else "hard") + \
        (" weighted" if weighted else "") + (" ignore_index=%d" % ig if ig != -100 else "") + \
        " " + REDS[red] + (" label_smoothing=%g" % ls if ls else "")
    out.append('  {"%s", %s, %s, %d, %d, %d, %s, %s, %s},' % (
        name, cbool(soft), cbool(weighted), ig, ts, red, num(ls), dvec(loss), dvec(grad)))
out.append("};")

# K-dimensional case: logits [N=2, C=3, d1=2], hard targets [[0, 2], [1, -100]], reduction mean.
out.append("// K-dimensional cross_entropy: logits [2,3,2] (N, C, d1) row-major, target [2,2], mean.")
out.append("struct CeKdimCase { const char* name; std::vector<double> logits; std::vector<long long> target; "
           "double label_smoothing; std::vector<double> loss; std::vector<double> grad; };")
out.append("inline const std::vector<CeKdimCase> ce_kdim_cases = {")
TK = torch.tensor([[0, 2], [1, -100]])
for ls in (0.0, 0.1):
    loss, grad = ce(XK, TK, reduction="mean", label_smoothing=ls)
    out.append('  {"kdim mean%s", %s, %s, %s, %s, %s},' % (
        " label_smoothing=%g" % ls if ls else "", dvec(XK), ivec(TK.reshape(-1).tolist()),
        num(ls), dvec(loss), dvec(grad)))
out.append("};")

with open(OUT, "w") as fh:
    fh.write("// Generated by tests/reference/training_reference.py with torch %s (float64, CPU).\n"
             "// Do not edit by hand; rerun the script instead.\n#pragma once\n"
             "#include <limits>\n#include <vector>\n\nnamespace reel_ref {\n\n" % torch.__version__)
    fh.write("\n".join(out) + "\n\n}  // namespace reel_ref\n")
print("wrote", OUT)
