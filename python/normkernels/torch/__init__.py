# SPDX-License-Identifier: Apache-2.0
"""normkernels.torch: LayerNorm, RMSNorm, their fused residual-add forms, BatchNorm,
SyncBatchNorm, GroupNorm and InstanceNorm for PyTorch training, on libnormkernels'
forward and backward (autograd Functions).

Functions (as torch.nn.functional.layer_norm): layer_norm, rms_norm, add_layer_norm and
add_rms_norm, the last two returning (y, x + residual). Modules: LayerNorm (a
torch.nn.LayerNorm: the same constructor arguments, parameters and state_dict),
RMSNorm (Llama's: weight only, eps=1e-6), AddLayerNorm and AddRMSNorm, whose forward
takes (x, residual). Gradients reach x, residual, weight and bias; the gradient of the
returned sum (the residual stream) is added to those of x and residual. No double
backward.

BatchNorm: batch_norm (as torch.nn.functional.batch_norm) and BatchNorm1d, BatchNorm2d,
BatchNorm3d, which are torch.nn's (the same constructor arguments, parameters, buffers
running_mean, running_var and num_batches_tracked, and state_dict). Training
normalizes with the batch's statistics and updates the running ones in place
(momentum=None: their cumulative average); eval mode normalizes with the running ones
(with the batch's when track_running_stats=False). Gradients reach input, weight and
bias in both modes. A channels_last input (torch.channels_last, channels_last_3d, or
an (N, C, L) view of an (N, L, C) tensor) is read where it lies, and y and the input's
gradient come in its memory format; other layouts are copied with .contiguous() first.

GroupNorm and InstanceNorm: group_norm and instance_norm (as torch.nn.functional's)
and GroupNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, which are torch.nn's
(the same constructor arguments, parameters, buffers and state_dict). Each sample's
groups of channels (InstanceNorm: each channel) are normalized with their own
statistics. InstanceNorm's running statistics, when tracked (track_running_stats=True,
or given to instance_norm), are updated as PyTorch's (with the batch's average of the
instances' means and unbiased variances) and normalize in eval mode
(use_input_stats=False: BatchNorm's inference). channels_last inputs as BatchNorm's.

SyncBatchNorm, as torch.nn.SyncBatchNorm (its constructor, process_group included) but
for CPU tensors over a torch.distributed process group (gloo): each process holds a
shard of the batch; training normalizes every shard with the statistics of the whole
batch, and the input's gradient is the whole batch's. As PyTorch's, weight and bias
get this shard's gradients, which DistributedDataParallel averages over the processes
as it does every parameter's. It is not a torch.nn.SyncBatchNorm, which
DistributedDataParallel refuses in a CPU model. Its classmethod
convert_sync_batchnorm(model) turns a model's BatchNorm modules into it.
docs/distributed.md shows how to launch the processes.

The library computes in float32 on the CPU. Every function and module also takes
bfloat16 and float16 x (and residual, of x's dtype), giving y (and the sum) in that
dtype, each value rounded once to nearest even, and x's gradient in it from the
library's half backward (the float32 backward's on the widened tensors, rounded once).
Weight, bias and running statistics are float32 (as PyTorch's mixed-precision
BatchNorm keeps them) or of x's dtype (a module built with it), widened exactly: half
parameters get their gradients rounded, half running statistics are updated in
float32 and rounded once. Tensors of another dtype, device or layout raise TypeError,
unless fallback=True (a keyword of the functions, of the modules' constructors), which
hands them to PyTorch's own operations. A module built for another dtype or device
raises TypeError at once, unless fallback=True. x and residual are read where they
lie when contiguous or row-strided (q of a fused QKV projection); other layouts are
copied with .contiguous() first, as PyTorch's own CPU LayerNorm does. Outputs are new
contiguous tensors (BatchNorm's and GroupNorm's: in x's layout).

Importing normkernels does not import this module (nor torch): import
normkernels.torch.
"""
from ._batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d, batch_norm
from ._groupnorm import (GroupNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d,
                         group_norm, instance_norm)
from ._rownorm import (AddLayerNorm, AddRMSNorm, LayerNorm, RMSNorm, add_layer_norm,
                       add_rms_norm, layer_norm, rms_norm)
from ._sync import SyncBatchNorm

__all__ = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm", "batch_norm",
           "group_norm", "instance_norm", "LayerNorm", "RMSNorm", "AddLayerNorm",
           "AddRMSNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
           "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]
