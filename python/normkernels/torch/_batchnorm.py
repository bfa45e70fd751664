# SPDX-License-Identifier: Apache-2.0
"""BatchNorm: the autograd Function on the library's training and inference forwards
and their backward, F.batch_norm's function and the BatchNorm1d / 2d / 3d modules."""
import math

import torch
import torch.nn.functional as F

from .. import _CHANNEL_NORMS, _args, _check
from ._tensors import F32, TYPES, FallbackModule, address, backward_once, channel_layout
from ._tensors import gradient, needs_grad, one_dtype, ours, parameter

NAMES = "input", "running_mean", "running_var", "weight", "bias"
# The dtypes the library takes (one_dtype's message), as PyTorch's BatchNorm: float32
# parameters and running statistics with half input (its mixed precision), or all of
# input's dtype.
RULE = "weight, bias, running_mean and running_var of input's dtype or float32"


def kernels(x):
    """The library's per-channel norms of x's dtype (float32, bfloat16, float16): their
    tensors are of that dtype, the rest float32."""
    return _CHANNEL_NORMS[TYPES[x.dtype]]


def taken(function, fallback, input, running_mean, running_var, weight, bias):
    """Whether the library takes F.batch_norm's tensors (ours() and one_dtype): False
    for others with fallback, which PyTorch's own op then takes."""
    return (ours(function, fallback, NAMES, input, running_mean, running_var, weight,
                 bias)
            and one_dtype(function, fallback, input, (),
                          zip(NAMES[1:], (running_mean, running_var, weight, bias)), RULE,
                          "input"))


def plan(input, running_mean, running_var, weight, bias, training, momentum, eps):
    """(input as the library reads it, the plan of the Functions: (training, n, c,
    spatial, layout, eps, momentum, running_mean, running_var)), every argument checked
    as F.batch_norm checks it, for tensors that taken() took. The plan's running
    statistics are float32: half ones widened (a copy, which store_running rounds back
    after a training forward updated it)."""
    if input.dim() < 2:
        raise ValueError(f"input must have at least 2 dimensions (N, C, ...), not "
                         f"{input.dim()}")
    shape = input.shape
    n, c, spatial = shape[0], shape[1], math.prod(shape[2:])
    for name, t in zip(NAMES[1:], (running_mean, running_var, weight, bias)):
        if t is not None and t.numel() != c:  # PyTorch's words
            raise ValueError(f"{name} should contain {c} elements not {t.numel()}")
    for name, t in zip(NAMES[1:3], (running_mean, running_var)):
        if t is not None and t.dtype is F32 and (t.is_neg() or not t.is_contiguous()):
            raise ValueError(f"{name} must be contiguous: the library reads it, and "
                             "updates it when training, where it lies")
    eps = _args.float32(eps, "eps")
    if training:
        if n * spatial == 1:  # PyTorch's words
            raise ValueError("Expected more than 1 value per channel when training, got "
                             f"input size {shape}")
        momentum = 0.0 if running_mean is None else _args.float32(momentum, "momentum")
    elif running_mean is None or running_var is None:
        raise ValueError("running_mean and running_var are required when not training")
    x, layout = channel_layout(input)
    running_mean, running_var = (t if t is None or t.dtype is F32 else t.float()
                                 for t in (running_mean, running_var))
    return x, (training, n, c, spatial, layout, eps, momentum, running_mean, running_var)


def store_running(plan, running_mean, running_var):
    """Half running statistics (of a module of half buffers) after a training forward
    updated plan's float32 copies of them: those values, rounded once to nearest
    even."""
    if plan[0]:
        with torch.no_grad():
            for t, wide in zip((running_mean, running_var), plan[7:]):
                if t is not wide:
                    t.copy_(wide)


def inference(x, mean, var, weight, bias, plan, y):
    """y = (x - mean) / sqrt(var + eps) * weight + bias per channel (the library's
    inference forward of x's dtype; mean, var, weight and bias float32) of tensors as
    plan says they lie."""
    _, n, c, spatial, layout, eps = plan[:6]
    _check(kernels(x).batchnorm_forward_inference(
        n, c, spatial, layout, x.data_ptr(), mean.data_ptr(), var.data_ptr(),
        address(weight), address(bias), eps, y.data_ptr()))
    return y


class _BatchNorm(torch.autograd.Function):
    """y of the library's training forward (the batch's statistics; running ones
    updated in place) or inference forward (the running statistics), as plan says; the
    backward, _gradients, from the saved x and statistics. Arguments come checked
    (plan): y (dx) has x's dtype, float32 or half; weight, bias and the statistics are
    float32."""

    @staticmethod
    def forward(ctx, x, weight, bias, plan):
        training, n, c, spatial, layout, eps, momentum, running_mean, running_var = plan
        y = torch.empty_like(x)  # x's strides: its layout
        if training:
            stats = torch.empty(2 * c, dtype=F32)  # save_mean, save_rstd
            mean = stats.data_ptr()
            _check(kernels(x).batchnorm_forward_training(
                n, c, spatial, layout, x.data_ptr(), address(weight), address(bias), eps,
                momentum, address(running_mean), address(running_var), y.data_ptr(),
                mean, mean + 4 * c))
        else:
            inference(x, running_mean, running_var, weight, bias, plan, y)
            stats = torch.cat((running_mean, running_var))  # as they are now
        ctx.save_for_backward(x, weight)
        ctx.stats = stats
        ctx.plan = plan[:6]
        return y


def _gradients(ctx, dy):
    """The gradients of _BatchNorm's inputs from that of y (dy, of y's shape)."""
    need = ctx.needs_input_grad
    x, weight = ctx.saved_tensors
    training, n, c, spatial, layout, eps = ctx.plan
    dy = gradient(dy, layout)
    mean, second = ctx.stats[:c], ctx.stats[c:]
    dx = torch.empty_like(x) if need[0] else None
    if training and dx is not None:
        # Sums over the batch: with no value the library writes nothing, and they are 0.
        new = torch.empty if n * spatial else torch.zeros
        dgamma = new(c, dtype=F32) if need[1] else None
        dbeta = new(c, dtype=F32) if need[2] else None
        _check(kernels(x).batchnorm_backward(
            n, c, spatial, layout, x.data_ptr(), dy.data_ptr(), mean.data_ptr(),
            second.data_ptr(), address(weight), dx.data_ptr(), address(dgamma),
            address(dbeta)))
        return dx, dgamma, dbeta, None
    rstd = second if training else torch.rsqrt(second + eps)
    if dx is not None:
        # Inference is y = x * a + b per channel, a = weight / sqrt(var + eps): dx is
        # dy * a, the inference forward of dy with mean 0 (so b = 0).
        inference(dy, torch.zeros_like(mean), second, weight, None, ctx.plan, dx)
    dgamma = dbeta = None
    if need[1] or need[2]:  # sum dy * x_hat and sum dy: the reduce step
        sums = torch.empty(2 * c, dtype=F32)
        _check(kernels(x).batchnorm_backward_reduce(
            n, c, spatial, layout, x.data_ptr(), dy.data_ptr(), mean.data_ptr(),
            rstd.data_ptr(), sums.data_ptr(), sums[c:].data_ptr()))
        dbeta, dgamma = sums[:c] if need[2] else None, sums[c:] if need[1] else None
    return dx, dgamma, dbeta, None


_BatchNorm.backward = backward_once(_gradients)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5, *, fallback=False):
    """torch.nn.functional.batch_norm on the library (the same arguments): the batch's
    statistics with training (running_mean / running_var, when given, updated in
    place), the running ones without. input float32, bfloat16 or float16 (y of its
    dtype, rounded once); the rest float32 or of input's dtype (widened exactly)."""
    if not taken("batch_norm", fallback, input, running_mean, running_var, weight,
                 bias):
        return F.batch_norm(input, running_mean, running_var, weight, bias, training,
                            momentum, eps)
    x, p = plan(input, running_mean, running_var, weight, bias, training, momentum, eps)
    weight, bias = parameter(weight), parameter(bias)
    if training or needs_grad(x, weight, bias):
        y = _BatchNorm.apply(x, weight, bias, p)
        store_running(p, running_mean, running_var)
        return y
    return inference(x, p[7], p[8], weight, bias, p, torch.empty_like(x))


def module_arguments(module):
    """What torch.nn's BatchNorm modules pass F.batch_norm besides input and the
    parameters: (running_mean, running_var, training, momentum), a training batch
    counted in num_batches_tracked (momentum=None: 1 / the count), as they do."""
    momentum = 0.0 if module.momentum is None else module.momentum
    if (module.training and module.track_running_stats
            and module.num_batches_tracked is not None):
        module.num_batches_tracked.add_(1)
        if module.momentum is None:  # a cumulative average
            momentum = 1.0 / float(module.num_batches_tracked)
    training = module.training or (module.running_mean is None
                                   and module.running_var is None)
    tracked = not module.training or module.track_running_stats
    return (module.running_mean if tracked else None,
            module.running_var if tracked else None, training, momentum)


class Module(FallbackModule):
    """What the library's BatchNorm modules add to PyTorch's (a base before theirs):
    fallback, and a forward on batch_norm."""

    checked = "weight", "running_mean"

    def forward(self, input):
        self._check_input_dim(input)
        running_mean, running_var, training, momentum = module_arguments(self)
        return batch_norm(input, running_mean, running_var, self.weight, self.bias,
                          training, momentum, self.eps, fallback=self.fallback)


class BatchNorm1d(Module, torch.nn.BatchNorm1d):
    """torch.nn.BatchNorm1d on the library: (N, C) or (N, C, L) input."""


class BatchNorm2d(Module, torch.nn.BatchNorm2d):
    """torch.nn.BatchNorm2d on the library: (N, C, H, W) input."""


class BatchNorm3d(Module, torch.nn.BatchNorm3d):
    """torch.nn.BatchNorm3d on the library: (N, C, D, H, W) input."""
