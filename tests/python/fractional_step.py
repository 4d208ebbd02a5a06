#!/usr/bin/python3
"""antdt.torch.fractional_step (one process): a step standing for part of a global
batch. Checks that fraction 1 is exactly optimizer.step(); that with momentum, ten
steps of a tenth of a batch move a parameter about as far as one full step (the
gradient-only scaling it replaces moved it six times as far: the momentum coasted);
that the optimizer's settings are restored, also after a failing step; and that
fractions outside (0, 1] are refused. Exit 77 (skip) without torch."""

import sys

try:
    import torch
except ImportError:
    print("fractional_step: torch is not installed: skipped")
    sys.exit(77)

from antdt.torch.fractional_step import fractional_step

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr)


def sgd(lr=0.1, momentum=0.9):
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    return p, torch.optim.SGD([p], lr=lr, momentum=momentum)


def set_grad(p, values):
    p.grad = torch.tensor(values)


# 1. fraction 1 is optimizer.step(), bit for bit.
a, opt_a = sgd()
b, opt_b = sgd()
for g in ([0.5, 0.25], [0.1, -0.3], [0.7, 0.2]):
    set_grad(a, g)
    set_grad(b, g)
    opt_a.step()
    fractional_step(opt_b, 1.0)
check(torch.equal(a.detach(), b.detach()), f"fraction 1 differs from step(): {a.tolist()} vs {b.tolist()}")

# 2. Momentum: after a warm-up step (buffer = g0), how far `steps` steps with zero
#    gradients move the parameter, each taken by `step(optimizer)`.
def moved_after_warm_up(steps, step):
    p, opt = sgd()
    set_grad(p, [1.0, 1.0])
    opt.step()
    start = p.detach().clone()
    for _ in range(steps):
        set_grad(p, [0.0, 0.0])
        step(opt)
    return (start - p.detach()).abs().sum().item()


one_step = moved_after_warm_up(1, lambda opt: opt.step())
ten_tenths = moved_after_warm_up(10, lambda opt: fractional_step(opt, 0.1))
check(abs(ten_tenths - one_step) <= 0.1 * one_step,
      f"ten steps of 0.1 moved {ten_tenths:.4f}, one full step {one_step:.4f} (want within 10%)")
# The behaviour it replaces (the gradient times the fraction, then a full step): the coasting.
coasted = moved_after_warm_up(10, lambda opt: opt.step())
check(coasted > 5 * ten_tenths, f"gradient-only scaling moved {coasted:.4f}, expected far more than {ten_tenths:.4f}")

# 3. Settings restored, also when the step raises.
p, opt = sgd(lr=0.05, momentum=0.9)
set_grad(p, [1.0, 1.0])
fractional_step(opt, 0.25)
check(opt.param_groups[0]["lr"] == 0.05 and opt.param_groups[0]["momentum"] == 0.9,
      f"settings not restored: {opt.param_groups[0]['lr']}, {opt.param_groups[0]['momentum']}")


class Failing(torch.optim.SGD):
    def step(self, closure=None):
        raise RuntimeError("step failed")


p = torch.nn.Parameter(torch.tensor([1.0]))
opt = Failing([p], lr=0.05, momentum=0.9)
set_grad(p, [1.0])
try:
    fractional_step(opt, 0.5)
    check(False, "a failing step did not raise")
except RuntimeError:
    pass
check(opt.param_groups[0]["lr"] == 0.05 and opt.param_groups[0]["momentum"] == 0.9,
      "settings not restored after a failing step")

# 4. Fractions outside (0, 1].
for bad in (0.0, -0.5, 1.5):
    try:
        fractional_step(opt_a, bad)
        check(False, f"fraction {bad} accepted")
    except ValueError:
        pass

if failures:
    sys.exit(1)
print("fractional_step: ok")
