# SPDX-License-Identifier: Apache-2.0
"""What the tests of normkernels.torch's modules share (imported after torch is
found): inputs in a memory format, a forward and backward step, the comparison within
a bound and the bounds of BatchNorm's and GroupNorm's steps, and training runs
compared by their losses."""
import copy

import numpy as np
import torch

import normkernels as nk
from reference import (U, bn_gradient_bounds, bn_inference_reference, bn_reference,
                       gn_backward_reference, gn_reference)


def in_layout(a, channels_last):
    """a (N, C, *spatial) as a float32 tensor, channels last in memory when asked."""
    t = torch.from_numpy(a)
    return t.movedim(1, -1).contiguous().movedim(-1, 1) if channels_last else t


def step(module, x, dy):
    """One forward and backward from dy: (y, dx, dweight, dbias), gradients cleared
    first."""
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    y = module(x)
    y.backward(dy)
    grads = [None if p is None else p.grad for p in (module.weight, module.bias)]
    return [y.detach(), x.grad] + grads


def same_gradients_in_any_layout(module, shape, seed=1):
    """Whether module's gradients of a channels_last x of shape (N, C, *spatial) are the
    same for dy laid out as x and otherwise: contiguous, or expanded (y.sum())."""
    rng = np.random.default_rng(seed)
    x, dy = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    x = in_layout(x, True)
    pairs = ((torch.from_numpy(dy), in_layout(dy, True)),
             (torch.ones(()).expand(shape), in_layout(np.ones(shape, np.float32), True)))
    for a, b in pairs:
        if not all(torch.equal(g, h) for g, h in zip(step(module, x, a)[1:],
                                                     step(module, x, b)[1:])):
            return False
    return True


def within(got, want, bound):
    return np.all(np.abs(got.numpy() - want.numpy()) <= bound)


def float64_slack(bound, count):
    """bound, widened by what PyTorch's float64 computation of y may round: as much
    over count values at u = 2^-53 (the terms of the bound are its terms)."""
    return bound * (1 + count * 2.0 ** -29)


def sgd_losses(model, x, target, steps=5):
    """The losses of steps of SGD (lr 0.1, MSE) on the batch (x, target)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def conv_losses(theirs, ours, memory_format):
    """Conv-norm-ReLU-Linear with theirs (a torch.nn norm of 8 channels, its weight
    drawn so that it matters from the first step) and a copy with ours in its place,
    loaded with its state_dict, in memory_format: (their model, ours, their losses,
    ours) over five SGD steps on the same batch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), theirs, torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4))
    with torch.no_grad():
        model[1].weight.normal_()
    model = model.to(memory_format=memory_format)
    mine = copy.deepcopy(model)
    mine[1] = ours
    mine[1].load_state_dict(model[1].state_dict())
    x = torch.randn(16, 3, 8, 8).contiguous(memory_format=memory_format)
    target = torch.randn(16, 4)
    return model, mine, sgd_losses(model, x, target), sgd_losses(mine, x, target)


def bn_bounds(x, dy, w, b, eps=1e-5):
    """The bounds on a training BatchNorm step's (y, dx, dweight, dbias) of x
    (N, C, *spatial) against PyTorch's float64 ones: bn_reference's on y (with
    PyTorch's float64 rounding); bn_gradient_bounds from the statistics the library's
    forward saves."""
    _, mean, var, count, y_bound = bn_reference(x, w, b, eps, False)
    _, *saved = nk.batch_norm(x, None, None, w, b, True, eps=eps, return_stats=True)
    return [float64_slack(y_bound, count),
            *bn_gradient_bounds(dy, x, saved, (mean, 1 / np.sqrt(var + eps)), w)]


def gn_bounds(x, dy, groups, w, b, channels_last, eps=1e-5):
    """The bounds on a GroupNorm step's (y, dx, dweight, dbias) of x (N, C, *spatial)
    against PyTorch's float64 ones: gn_reference's on y; bn_gradient_bounds with
    GroupNorm's reference from the statistics the library's forward saves in x's
    memory format."""
    _, mean, rstd, y_bound = gn_reference(x, groups, w, b, eps)
    nhwc = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    saved = nk.group_norm(nhwc if channels_last else x, groups, w, b, eps,
                          channels_last, return_stats=True)[1:]

    def backward(*args, **kw):
        return gn_backward_reference(*args[:4], groups, *args[4:], **kw)

    grad_bounds = bn_gradient_bounds(dy, x, saved, (mean, rstd), w, backward)
    return [float64_slack(y_bound, x[0].size // groups), *grad_bounds]


def eval_bounds(x, dy, rm, rv, w, b, exact_dx, eps=1e-5):
    """The bounds on an eval-mode step's (y, dx, dweight, dbias) of x (N, C, *spatial)
    normalized with running statistics rm, rv against PyTorch's float64 ones (exact_dx
    its dx): y's, and those of the gradients of the per-channel affine map it is:
    dx = dy * weight * rstd (the library's inference forward of dy: weight * rstd and
    the product each rounded once), dgamma = sum dy * x_hat and dbeta = sum dy (its
    backward sums, from rstd = rsqrt(running_var + eps) in float32)."""
    _, y_bound = bn_inference_reference(x, rm, rv, w, b, eps, False)
    rstd = torch.rsqrt(torch.from_numpy(rv) + eps).numpy()
    bounds = bn_gradient_bounds(dy, x, (rm, rstd), (rm, 1 / np.sqrt(rv + eps)), w)
    return [float64_slack(y_bound, 1), 3 * U * np.abs(exact_dx) + 1e-30, *bounds[1:]]


def eval_is_pytorchs(ours, theirs, x, dy, w, b, channels_last, eps=1e-5):
    """Whether ours in eval mode, normalizing x (N, C, *spatial) with running statistics
    (theirs, in float64, holding the same), is theirs within eval_bounds: y and the
    gradients. w, b: the weight and bias of both."""
    rm, rv = (getattr(ours, name).numpy().copy() for name in ("running_mean",
                                                             "running_var"))
    got = step(ours, in_layout(x, channels_last), in_layout(dy, channels_last))
    want = step(theirs, torch.from_numpy(x).double(), torch.from_numpy(dy).double())
    bounds = eval_bounds(x, dy, rm, rv, w, b, want[1].numpy(), eps)
    return all(within(g, theirs_g, bound)
               for g, theirs_g, bound in zip(got, want, bounds))
