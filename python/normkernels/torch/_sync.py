# SPDX-License-Identifier: Apache-2.0
"""SyncBatchNorm over a torch.distributed process group: each process holds a shard of
the batch; BatchNorm's statistics and backward sums are merged across the processes
with the library's steps (moments, merge, running update, normalize; reduce, apply)."""
import torch
import torch.distributed as dist

from .. import _check, _lib
from ._batchnorm import Module, batch_norm, inference, kernels, module_arguments, plan
from ._batchnorm import store_running, taken
from ._tensors import F32, address, backward_once, gradient, parameter
from ._tensors import refuse_unless_fallback


def _merged_moments(x, n, c, spatial, layout, group, world):
    """(count, mean, m2) of the shards of every process: this shard's moments, gathered
    from every process and merged in rank order (the same bits on each)."""
    # The count as an int64 in the first two floats: one all_gather moves all three.
    local = torch.empty(2 + 2 * c, dtype=F32)
    local[:2].view(torch.int64)[0] = n * spatial
    at = local.data_ptr() + 8
    _check(kernels(x).batchnorm_moments(n, c, spatial, layout, x.data_ptr(), at,
                                        at + 4 * c))
    gathered = torch.empty(world, 2 + 2 * c, dtype=F32)
    dist.all_gather(list(gathered.unbind()), local, group=group)
    counts = gathered[:, :2].view(torch.int64)[:, 0].tolist()
    first, *others = (row.data_ptr() + 8 for row in gathered.unbind())
    count = counts[0]
    for other, other_count in zip(others, counts[1:]):
        _check(_lib.nk_moments_merge_f32(c, count, first, first + 4 * c, other_count,
                                         other, other + 4 * c, first, first + 4 * c))
        count += other_count
    return count, gathered[0, 2:2 + c], gathered[0, 2 + c:]


class _SyncBatchNorm(torch.autograd.Function):
    """y of this process's shard, normalized with the statistics of every shard
    (running statistics updated from them); the backward, _gradients, sums the shards'
    backward sums. Arguments come checked (plan); plan's training is True. x (y, dx)
    float32 or half, the rest float32."""

    @staticmethod
    def forward(ctx, x, weight, bias, plan, group, world):
        _, n, c, spatial, layout, eps, momentum, running_mean, running_var = plan
        count, mean, m2 = _merged_moments(x, n, c, spatial, layout, group, world)
        if count < 2:  # PyTorch's words
            raise ValueError("Expected more than 1 value per channel when training, got "
                             f"{count} over the process group")
        if running_mean is not None:
            _check(_lib.nk_batchnorm_update_running_f32(
                c, count, mean.data_ptr(), m2.data_ptr(), momentum,
                running_mean.data_ptr(), running_var.data_ptr()))
        var = m2 / count
        y = inference(x, mean, var, weight, bias, plan, torch.empty_like(x))
        ctx.save_for_backward(x, weight)
        ctx.stats = mean, torch.rsqrt(var + eps)
        ctx.plan = n, c, spatial, layout, count, group
        return y


def _gradients(ctx, dy):
    """dx from the backward sums of every shard; dgamma and dbeta of this shard only,
    as PyTorch's SyncBatchNorm gives them (DistributedDataParallel then averages
    parameter gradients over the processes, as every other parameter's)."""
    need = ctx.needs_input_grad
    x, weight = ctx.saved_tensors
    n, c, spatial, layout, count, group = ctx.plan
    mean, rstd = ctx.stats
    dy = gradient(dy, layout)
    sums = torch.empty(2 * c, dtype=F32)  # sum dy (dbeta), sum dy * x_hat (dgamma)
    at = sums.data_ptr()
    _check(kernels(x).batchnorm_backward_reduce(
        n, c, spatial, layout, x.data_ptr(), dy.data_ptr(), mean.data_ptr(),
        rstd.data_ptr(), at, at + 4 * c))
    dbeta = sums[:c].clone() if need[2] else None
    dgamma = sums[c:].clone() if need[1] else None
    dx = None
    if need[0]:
        dist.all_reduce(sums, group=group)
        dx = torch.empty_like(x)
        _check(kernels(x).batchnorm_backward_apply(
            n, c, spatial, layout, x.data_ptr(), dy.data_ptr(), mean.data_ptr(),
            rstd.data_ptr(), address(weight), count, at, at + 4 * c, dx.data_ptr()))
    return dx, dgamma, dbeta, None, None, None


_SyncBatchNorm.backward = backward_once(_gradients)


class SyncBatchNorm(Module, torch.nn.modules.batchnorm._BatchNorm):
    """torch.nn.SyncBatchNorm on the library, for CPU tensors (PyTorch's takes CUDA
    tensors only): the same constructor arguments (num_features, eps, momentum, affine,
    track_running_stats, process_group, device, dtype), parameters, buffers and
    state_dict. Training normalizes with the statistics of the whole batch, every
    process of process_group (default: the whole world) holding a shard of it;
    evaluation, or a group of one process, is BatchNorm's (no communication).
    fallback=True sends tensors the library does not take (CUDA ones) to
    torch.nn.SyncBatchNorm's own forward. Not an instance of torch.nn.SyncBatchNorm,
    which DistributedDataParallel refuses in a CPU model."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_group=None, device=None, dtype=None,
                 *, fallback=False):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, fallback=fallback)
        self.process_group = process_group

    _check_input_dim = torch.nn.SyncBatchNorm._check_input_dim
    _check_non_zero_input_channels = torch.nn.SyncBatchNorm._check_non_zero_input_channels

    def forward(self, input):
        if not taken(type(self).__name__, self.fallback, input, self.running_mean,
                     self.running_var, self.weight, self.bias):
            return torch.nn.SyncBatchNorm.forward(self, input)
        self._check_input_dim(input)
        self._check_non_zero_input_channels(input)
        running_mean, running_var, training, momentum = module_arguments(self)
        if training and self.training:  # PyTorch's condition for synchronizing
            group = self.process_group or dist.group.WORLD
            world = dist.get_world_size(group)
            if world > 1:
                x, p = plan(input, running_mean, running_var, self.weight, self.bias,
                            True, momentum, self.eps)
                y = _SyncBatchNorm.apply(x, parameter(self.weight),
                                         parameter(self.bias), p, group, world)
                store_running(p, running_mean, running_var)
                return y
        return batch_norm(input, running_mean, running_var, self.weight, self.bias,
                          training, momentum, self.eps)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None, *, fallback=False):
        """torch.nn.SyncBatchNorm.convert_sync_batchnorm into this class: module's
        BatchNorm*D modules (PyTorch's or the library's) become SyncBatchNorm modules
        sharing their parameters and buffers. Returns module, or its replacement when
        module is itself one."""
        converted = module
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            converted = cls(module.num_features, module.eps, module.momentum,
                            module.affine, module.track_running_stats, process_group,
                            fallback=fallback)
            if module.affine:
                with torch.no_grad():
                    converted.weight, converted.bias = module.weight, module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            if hasattr(module, "qconfig"):
                converted.qconfig = module.qconfig
            refuse_unless_fallback(converted, ("weight", "running_mean"))
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group,
                                                                  fallback=fallback))
        return converted
