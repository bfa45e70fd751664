# SPDX-License-Identifier: Apache-2.0
"""normkernels.torch: LayerNorm, RMSNorm and their fused residual-add forms for
PyTorch training, on libnormkernels' forward and backward (autograd Functions).

Functions (as torch.nn.functional.layer_norm): layer_norm, rms_norm, add_layer_norm and
add_rms_norm, the last two returning (y, x + residual). Modules: LayerNorm (a
torch.nn.LayerNorm: the same constructor arguments, parameters and state_dict),
RMSNorm (Llama's: weight only, eps=1e-6), AddLayerNorm and AddRMSNorm, whose forward
takes (x, residual). Gradients reach x, residual, weight and bias; the gradient of the
returned sum (the residual stream) is added to those of x and residual. No double
backward.

The library computes in float32 on the CPU: tensors of another dtype, device or
layout raise TypeError, unless fallback=True (a keyword of the functions, of the
modules' constructors), which hands them to PyTorch's own operations. A module built
for another dtype or device raises TypeError at once, unless fallback=True. x and
residual are read where they lie when contiguous or row-strided (q of a fused QKV
projection); other layouts are copied with .contiguous() first, as PyTorch's own CPU
LayerNorm does. Outputs are new contiguous tensors.

Importing normkernels does not import this module (nor torch): import
normkernels.torch.
"""
from ._rownorm import (AddLayerNorm, AddRMSNorm, LayerNorm, RMSNorm, add_layer_norm,
                       add_rms_norm, layer_norm, rms_norm)

__all__ = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm", "LayerNorm",
           "RMSNorm", "AddLayerNorm", "AddRMSNorm"]
