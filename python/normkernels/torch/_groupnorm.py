# SPDX-License-Identifier: Apache-2.0
"""GroupNorm and InstanceNorm: the autograd Function on the library's forward and
backward, F.group_norm's and F.instance_norm's functions, and the GroupNorm and
InstanceNorm1d / 2d / 3d modules."""
import math

import torch
import torch.nn.functional as F

from .. import _NCHW, _args, _check
from ._batchnorm import batch_norm, kernels, taken
from ._tensors import F32, FallbackModule, address, backward_once, channel_layout
from ._tensors import gradient, needs_grad, one_dtype, ours, parameter


def _shape(input):
    """(n, c, spatial) of input (N, C, *spatial)."""
    if input.dim() < 2:
        raise ValueError(f"input must have at least 2 dimensions (N, C, ...), not "
                         f"{input.dim()}")
    return input.shape[0], input.shape[1], math.prod(input.shape[2:])


def _plan(input, groups, weight, bias, eps):
    """(input as the library reads it, the plan of _GroupNorm: (n, c, spatial, groups,
    layout, eps)), checked as F.group_norm checks them (PyTorch's words), for tensors
    that ours() took. groups None: one per channel (InstanceNorm)."""
    n, c, spatial = _shape(input)
    if groups is None:
        groups = c
    else:
        groups = _args.integer(groups, "num_groups", "int64_t")
        if groups < 1:
            raise ValueError(f"num_groups must be at least 1, not {groups}")
        if c % groups:
            raise ValueError("Expected number of channels in input to be divisible by "
                             f"num_groups, but got input of shape {list(input.shape)} "
                             f"and num_groups={groups}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and p.numel() != c:
            raise ValueError(f"Expected {name} to be a vector of size equal to the "
                             f"number of channels in input, but got {name} of shape "
                             f"{list(p.shape)} and input of shape {list(input.shape)}")
    eps = _args.float32(eps, "eps")
    x, layout = channel_layout(input)
    return x, (n, c, spatial, groups, layout, eps)


class _GroupNorm(torch.autograd.Function):
    """y of the library's GroupNorm forward, in x's layout; the backward, _gradients,
    from the saved x and statistics. Arguments come checked (_plan): y (dx) has x's
    dtype, float32 or half; weight, bias and the statistics are float32. An empty
    tensor reaches no library call (InstanceNorm's groups may be c = 0)."""

    @staticmethod
    def forward(ctx, x, weight, bias, plan):
        n, _, _, groups, _, _ = plan
        stats = torch.empty(2 * n * groups, dtype=F32)  # mean, rstd: [n * groups] each
        mean = stats.data_ptr()
        y = _forward(x, weight, bias, plan, mean, mean + 4 * n * groups)
        ctx.save_for_backward(x, weight)
        ctx.stats = stats
        ctx.plan = plan
        return y


def _gradients(ctx, dy):
    """The gradients of _GroupNorm's inputs from that of y (dy, of y's shape)."""
    need = ctx.needs_input_grad
    x, weight = ctx.saved_tensors
    n, c, spatial, groups, layout, _ = ctx.plan
    dy = gradient(dy, layout)
    dx = torch.empty_like(x)  # the library writes dx, wanted or not
    # Sums over the samples: with no value they are 0.
    new = torch.empty if x.numel() else torch.zeros
    dgamma = new(c, dtype=F32) if need[1] else None
    dbeta = new(c, dtype=F32) if need[2] else None
    if x.numel():
        mean = ctx.stats.data_ptr()
        _check(kernels(x).groupnorm_backward(
            n, c, spatial, groups, layout, x.data_ptr(), dy.data_ptr(), mean,
            mean + 4 * n * groups, address(weight), dx.data_ptr(), address(dgamma),
            address(dbeta)))
    return dx if need[0] else None, dgamma, dbeta, None


_GroupNorm.backward = backward_once(_gradients)


def _forward(x, weight, bias, plan, mean=None, rstd=None):
    """y of the library's forward by plan (_plan's), in x's layout; mean and rstd: the
    addresses the statistics go to, or None (not kept). An empty tensor reaches no
    library call."""
    n, c, spatial, groups, layout, eps = plan
    y = torch.empty_like(x)  # x's strides: its layout
    if x.numel():
        _check(kernels(x).groupnorm_forward(n, c, spatial, groups, layout, x.data_ptr(),
                                            address(weight), address(bias), eps,
                                            y.data_ptr(), mean, rstd))
    return y


def _norm(x, weight, bias, plan):
    """y of x by plan (_plan's): through _GroupNorm where a gradient may be wanted,
    else the library's forward alone, keeping no statistics (as batch_norm's
    inference): 1x512x7x7 G32 under torch.no_grad, 1 thread, 11.4 -> 8.9 us a call of
    the module (torch.nn.GroupNorm 13.7-14.0)."""
    weight, bias = parameter(weight), parameter(bias)
    if needs_grad(x, weight, bias):
        return _GroupNorm.apply(x, weight, bias, plan)
    return _forward(x, weight, bias, plan)


_NAMES = "input", "weight", "bias"
# The dtypes the library takes (one_dtype's message).
_RULE = "weight and bias of input's dtype or float32"


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, *, fallback=False):
    """torch.nn.functional.group_norm on the library (the same arguments): input
    (N, C, *spatial), its C channels in num_groups groups of consecutive channels,
    each normalized over its channels and spatial positions per sample; weight and
    bias per channel. input float32, bfloat16 or float16 (y of its dtype, rounded
    once); weight and bias float32 or of input's dtype (widened exactly)."""
    if not (ours("group_norm", fallback, _NAMES, input, weight, bias)
            and one_dtype("group_norm", fallback, input, (),
                          (("weight", weight), ("bias", bias)), _RULE, "input")):
        return F.group_norm(input, num_groups, weight, bias, eps)
    x, plan = _plan(input, num_groups, weight, bias, eps)
    return _norm(x, weight, bias, plan)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5, *, fallback=False):
    """torch.nn.functional.instance_norm on the library (the same arguments): each
    channel of each sample normalized with its own statistics (group_norm with a
    group per channel).

    Running statistics, as PyTorch's: with use_input_stats, running_mean and
    running_var, when given, are updated in place with the batch's average of the
    instances' means and unbiased variances (momentum as BatchNorm's); an empty input
    leaves them as they are. use_input_stats=False normalizes every instance with
    them instead (batch_norm without training). Dtypes as batch_norm's."""
    if not taken("instance_norm", fallback, input, running_mean, running_var, weight,
                 bias):
        return F.instance_norm(input, running_mean, running_var, weight, bias,
                               use_input_stats, momentum, eps)
    if not use_input_stats:
        if running_mean is None or running_var is None:  # PyTorch's words
            raise ValueError("Expected running_mean and running_var to be defined when "
                             "use_input_stats is false")
        return batch_norm(input, running_mean, running_var, weight, bias, False,
                          momentum, eps)
    n, c, spatial = _shape(input)
    if spatial == 1:  # PyTorch's words
        raise ValueError("Expected more than 1 spatial element when training, got "
                         f"input size {input.shape}")
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        if t is not None and t.numel() != c:  # PyTorch's words
            raise ValueError(f"{name} should contain {c} elements not {t.numel()}")
    x, plan = _plan(input, None, weight, bias, eps)
    if (running_mean is not None or running_var is not None) and x.numel():
        _update_running(x, plan, running_mean, running_var,
                        _args.float32(momentum, "momentum"))
    return _norm(x, weight, bias, plan)


def _update_running(x, plan, running_mean, running_var, momentum):
    """PyTorch's update of InstanceNorm's running statistics (either may be None), from
    the moments of each instance of x, which the library gives as BatchNorm's of a
    batch of one sample (channels first: of all n * c instances at once)."""
    n, c, spatial, _, layout, _ = plan
    moments = torch.empty(2, n, c, dtype=F32)  # mean, m2 of each instance
    mean, m2 = moments.unbind()
    k = kernels(x)
    if layout == _NCHW:
        _check(k.batchnorm_moments(1, n * c, spatial, layout, x.data_ptr(),
                                   mean.data_ptr(), m2.data_ptr()))
    else:
        for i in range(n):
            _check(k.batchnorm_moments(1, c, spatial, layout, x[i].data_ptr(),
                                       mean[i].data_ptr(), m2[i].data_ptr()))
    with torch.no_grad():
        if running_mean is not None:
            _blend(running_mean, mean.mean(0), momentum, momentum)
        if running_var is not None:  # the unbiased variance, m2 / (spatial - 1)
            _blend(running_var, m2.mean(0), momentum / (spatial - 1), momentum)


def _blend(running, batch, alpha, momentum):
    """running = (1 - momentum) * running + alpha * batch, in place, in float32: a half
    running statistic (of a module of half buffers) rounded once."""
    wide = running if running.dtype is F32 else running.float()
    wide.mul_(1 - momentum).add_(batch, alpha=alpha)
    if wide is not running:
        running.copy_(wide)


class GroupNorm(FallbackModule, torch.nn.GroupNorm):
    """torch.nn.GroupNorm on the library: the same constructor arguments (num_groups,
    num_channels, eps=1e-5, affine=True, device, dtype), parameters and state_dict;
    input (N, C, *spatial), channels_last read where it lies. fallback=True sends
    tensors the library does not take to F.group_norm."""

    def forward(self, input):
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps,
                          fallback=self.fallback)


class _InstanceNorm(FallbackModule):
    """What the library's InstanceNorm modules add to PyTorch's (a base before theirs):
    fallback, and a forward on instance_norm as theirs on F.instance_norm."""

    checked = "weight", "running_mean"

    def forward(self, input):
        self._check_input_dim(input)
        unbatched = input.dim() == self._get_no_batch_dim()
        y = instance_norm(input.unsqueeze(0) if unbatched else input, self.running_mean,
                          self.running_var, self.weight, self.bias,
                          self.training or not self.track_running_stats, self.momentum,
                          self.eps, fallback=self.fallback)
        return y.squeeze(0) if unbatched else y


class InstanceNorm1d(_InstanceNorm, torch.nn.InstanceNorm1d):
    """torch.nn.InstanceNorm1d on the library: (N, C, L) or (C, L) input; its
    constructor arguments (num_features, eps, momentum, affine=False,
    track_running_stats=False, device, dtype), parameters, buffers and state_dict."""


class InstanceNorm2d(_InstanceNorm, torch.nn.InstanceNorm2d):
    """torch.nn.InstanceNorm2d on the library: (N, C, H, W) or (C, H, W) input."""


class InstanceNorm3d(_InstanceNorm, torch.nn.InstanceNorm3d):
    """torch.nn.InstanceNorm3d on the library: (N, C, D, H, W) or (C, D, H, W)
    input."""
