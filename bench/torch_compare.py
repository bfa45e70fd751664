# SPDX-License-Identifier: Apache-2.0
"""torch_compare.py [--threads 1,2] [--out DIR] [--update DOC] [--quick]:
libnormkernels against PyTorch's CPU operators, per call, on the shapes users run.

Both sides are called from Python on the same float32 data: PyTorch's operators
(F.layer_norm, also after torch.add(x, residual, out=), F.batch_norm, F.group_norm, and
RMSNorm as Hugging Face's Llama writes it, since this PyTorch has no F.rms_norm; on
float32, and on bfloat16 / float16 tensors as PyTorch runs those, see half_cases) and
the normkernels binding with preallocated outputs (PyTorch has no out= for these and
allocates; run this with glibc's mmap turned off, MALLOC_MMAP_MAX_=0, as
scripts/bench.sh does, so that its large outputs are reused memory rather than fresh
pages, as with the caching allocators PyTorch recommends). Training steps (forward,
then backward from a given dy, gradients cleared before each as zero_grad does) of
LayerNorm, RMSNorm, BatchNorm and GroupNorm (both memory formats) set PyTorch's
autograd against two forms of the library: the binding (forward with return_stats, then its backward
function, preallocated y and dx) and normkernels.torch's autograd Functions, which a
PyTorch user runs. Tensors lie on 64-byte boundaries, as PyTorch's allocator places
them. Batches of calls of the sides alternate, so that all see the same drift of the
machine's speed; each figure is the median over the batches, beside the batches'
spread (coefficient of variation), with a warning when the spreads say the machine was
busy. Each case first checks that the sides give the same y, or dx and the
parameters' gradients (within 1e-3, see check). Prints the table; --out writes it to
DIR/torch_compare.md, --update to DOC's torch section (between its torch markers).
--quick (ctest) runs the first three cases of each kind, three batches each.
"""
import argparse
import collections
import os
import re
import sys
import time

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch_compare: PyTorch is not installed (Debian: python3-torch)")
    sys.exit(77)  # ctest: skipped

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import normkernels as nk  # noqa: E402
from normkernels import torch as nk_torch  # noqa: E402
import reporting  # noqa: E402 (beside this file)

EPS = 1e-5
BATCHES = 7
BATCH_SECONDS = 0.02

# A case: PyTorch's function (torch) and the library's (ours: {the op of its row:
# function}); layout turns PyTorch's results into arrays laid out as the library's,
# outputs names them in the message of a failed check, rtol is its tolerance.
Case = collections.namedtuple("Case", "shape torch ours layout outputs rtol",
                              defaults=(torch.Tensor.numpy, ("y",), 1e-3))


def per_call(fns, batches):
    """(median seconds per call, cv) of each function in fns, batches alternating."""
    repeats = []
    for fn in fns:  # warm up, then size a batch to about BATCH_SECONDS
        fn()
        t = time.perf_counter()
        fn()
        repeats.append(max(1, int(BATCH_SECONDS / max(time.perf_counter() - t, 1e-7))))
    times = [[] for _ in fns]
    for _ in range(batches):
        for k, fn in enumerate(fns):
            t = time.perf_counter()
            for _ in range(repeats[k]):
                fn()
            times[k].append((time.perf_counter() - t) / repeats[k])
    return [(sorted(ts)[len(ts) // 2], reporting.cv(ts)) for ts in times]


def aligned(a):
    """A copy of a on a 64-byte boundary, as PyTorch's CPU allocator places tensors
    (NumPy's large arrays lie 16 bytes past one)."""
    raw = np.empty(a.size + 16, np.float32)
    start = (-raw.ctypes.data % 64) // 4
    out = raw[start:start + a.size].reshape(a.shape)
    out[...] = a
    return out


def llama_rms_norm(x, weight):
    """RMSNorm as Hugging Face's Llama writes it (this PyTorch has no F.rms_norm)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight


def arrays(tensors):
    return tuple(t.numpy() for t in tensors)


def row_inputs(rng, rows, cols):
    """x, a second array of its shape (residual or dy), gamma and beta: aligned."""
    x, other = (aligned(rng.standard_normal((rows, cols), dtype=np.float32))
                for _ in range(2))
    return (x, other, aligned(1 + 0.1 * rng.standard_normal(cols)),
            aligned(0.1 * rng.standard_normal(cols)))


def rownorm_cases(rng):
    """The LayerNorm family's cases. Each case is timed before the next is made, so
    the functions may use the loops' variables."""
    for rows, cols, what in [(8, 4096, "decode, 7B"), (512, 768, "BERT-base"),
                             (256, 4096, "4 MiB"), (2048, 4096, "prefill, 7B")]:
        x, r, g, b = row_inputs(rng, rows, cols)
        y, s = aligned(x), aligned(x)
        tx, tr, tg, tb, ts = (torch.from_numpy(a) for a in (x, r, g, b, s))
        shape = f"{rows}x{cols} ({what})"

        yield Case(shape, lambda: F.layer_norm(tx, (cols,), tg, tb, EPS),
                   {"layer_norm": lambda: nk.layer_norm(x, g, b, EPS, out=y)})
        yield Case(shape, lambda: llama_rms_norm(tx, tg),
                   {"rms_norm": lambda: nk.rms_norm(x, g, EPS, out=y)})

        def add_layer_norm():  # the sum into a preallocated tensor, as the library's
            torch.add(tx, tr, out=ts)
            return F.layer_norm(ts, (cols,), tg, tb, EPS)

        yield Case(shape, add_layer_norm, {"add_layer_norm": lambda: nk.add_layer_norm(
            x, r, g, b, EPS, out=y, sum_out=s)[0]})


def half_cases(rng):
    """LayerNorm and RMSNorm on bfloat16 and float16 tensors, as PyTorch 1.13 runs them
    on a CPU: bf16 LayerNorm with bf16 parameters (it refuses float32 ones), fp16
    LayerNorm in float32 (it has no fp16 kernel) rounded back, RMSNorm as Hugging
    Face's Llama writes it (variance in float32, the product in the tensor's type).
    The library: the NumPy binding (float16; NumPy has no bfloat16) and
    normkernels.torch (both), float32 parameters. Checked within two steps of the
    type (both round once, PyTorch's bf16 arithmetic more often)."""
    for rows, cols, what in [(8, 4096, "decode, 7B"), (512, 768, "BERT-base"),
                             (256, 4096, "4 MiB fp32"), (2048, 4096, "prefill, 7B")]:
        x, _, g, b = row_inputs(rng, rows, cols)
        tg, tb = torch.from_numpy(g), torch.from_numpy(b)
        for dtype, step_ in ((torch.bfloat16, 2.0 ** -7), (torch.float16, 2.0 ** -10)):
            tx = torch.from_numpy(x).to(dtype)
            name = "bf16" if dtype == torch.bfloat16 else "fp16"
            shape = f"{rows}x{cols} {name} ({what})"
            widened = lambda t: t.float().numpy()  # noqa: E731
            ours_ln = {f"layer_norm {name}, normkernels.torch":
                       lambda: nk_torch.layer_norm(tx, (cols,), tg, tb, EPS)}
            ours_rms = {f"rms_norm {name}, normkernels.torch":
                        lambda: nk_torch.rms_norm(tx, (cols,), tg, EPS)}
            if dtype == torch.float16:
                nx = tx.numpy()
                y = np.empty_like(nx)
                ours_ln[f"layer_norm {name}"] = lambda: nk.layer_norm(nx, g, b, EPS, out=y)
                ours_rms[f"rms_norm {name}"] = lambda: nk.rms_norm(nx, g, EPS, out=y)
                theirs_ln = lambda: F.layer_norm(  # noqa: E731
                    tx.float(), (cols,), tg, tb, EPS).to(dtype)
            else:
                hg, hb = tg.to(dtype), tb.to(dtype)
                theirs_ln = lambda: F.layer_norm(tx, (cols,), hg, hb, EPS)  # noqa: E731
            hw = tg.to(dtype)

            def theirs_rms():
                variance = tx.float().pow(2).mean(-1, keepdim=True)
                return hw * (tx.float() * torch.rsqrt(variance + EPS)).to(dtype)

            yield Case(shape, theirs_ln, ours_ln, widened, rtol=2 * step_)
            yield Case(shape, theirs_rms, ours_rms, widened, rtol=2 * step_)


def step(norm, leaves, dy):
    """One autograd step: gradients cleared, forward, backward from dy; the gradients of
    the leaves."""
    for t in leaves:
        t.grad = None
    norm(*leaves).backward(dy)
    return tuple(t.grad for t in leaves)


def leaves(*tensors):
    """Leaves of the same memory for each autograd side, each with its own .grad."""
    return ([t.detach().requires_grad_() for t in tensors] for _ in range(2))


def train_cases(rng):
    """Training steps of LayerNorm and RMSNorm: PyTorch's autograd, the binding and
    normkernels.torch's autograd, each giving the gradients of x and the parameters.
    The library's two forms are rows of their own beside the same PyTorch figure."""
    for rows, cols, what in [(8, 4096, "7B, 8 tokens"), (512, 768, "BERT-base"),
                             (256, 4096, "4 MiB"), (4096, 4096, "7B, 4096 tokens")]:
        x, dy, g, b = row_inputs(rng, rows, cols)
        y, dx = aligned(x), aligned(x)
        tdy = torch.from_numpy(dy)
        theirs, ours = leaves(*(torch.from_numpy(a) for a in (x, g, b)))
        shape = f"{rows}x{cols} ({what})"

        def layer_norm():
            _, mean, rstd = nk.layer_norm(x, g, b, EPS, out=y, return_stats=True)
            return nk.layer_norm_backward(dy, x, mean, rstd, g, out=dx)

        def rms_norm():
            _, rrms = nk.rms_norm(x, g, EPS, out=y, return_stats=True)
            return nk.rms_norm_backward(dy, x, rrms, g, out=dx)

        def torch_layer_norm(t, weight, bias):
            return F.layer_norm(t, (cols,), weight, bias, EPS)

        def ours_layer_norm(t, weight, bias):
            return nk_torch.layer_norm(t, (cols,), weight, bias, EPS)

        def ours_rms_norm(t, weight):
            return nk_torch.rms_norm(t, (cols,), weight, EPS)

        yield Case(shape, lambda: step(torch_layer_norm, theirs, tdy), {
            "layer_norm train": layer_norm,
            "layer_norm train, normkernels.torch": lambda: step(ours_layer_norm, ours,
                                                                tdy)},
            arrays, ("dx", "dgamma", "dbeta"))
        yield Case(shape, lambda: step(llama_rms_norm, theirs[:2], tdy), {
            "rms_norm train": rms_norm,
            "rms_norm train, normkernels.torch": lambda: step(ours_rms_norm, ours[:2],
                                                              tdy)},
            arrays, ("dx", "dgamma"))


def bn_layouts(rng, shapes=((32, 64, 56, 56), (256, 256, 14, 14), (8, 512, 7, 7))):
    """For each (N, C, H, W) of shapes and layout: (shape label, channels_last, x as a
    tensor laid out so, the binding's array of the same memory ((N, H, W, C) for
    channels_last), the tensors' layout as the binding's, gamma, beta)."""
    for n, c, h, w in shapes:
        x = aligned(rng.standard_normal((n, c, h, w), dtype=np.float32))
        g = aligned(1 + 0.1 * rng.standard_normal(c))
        b = aligned(0.1 * rng.standard_normal(c))
        for channels_last in (False, True):
            tx = torch.from_numpy(x)
            layout = torch.Tensor.numpy
            if channels_last:
                tx = tx.contiguous(memory_format=torch.channels_last)
                layout = lambda t: t.permute(0, 2, 3, 1).numpy()  # noqa: E731
            yield (f"{n}x{c}x{h}x{w} {'NHWC' if channels_last else 'NCHW'}",
                   channels_last, tx, layout(tx), layout, g, b)


def upstream_grad(rng, nx, channels_last, layout):
    """A training step's dy: as autograd gives it after a network of this layout (a
    channels_last tensor for channels_last), and as the binding's array of it."""
    tdy = torch.from_numpy(rng.standard_normal(nx.shape, dtype=np.float32))
    if channels_last:
        tdy = tdy.permute(0, 3, 1, 2)
    return tdy, aligned(layout(tdy))


def as_nchw(grads, channels_last):
    """The binding's (dx, dgamma, dbeta) with dx as (N, C, H, W), PyTorch's shape."""
    return (np.moveaxis(grads[0], -1, 1) if channels_last else grads[0], *grads[1:])


def batchnorm_cases(rng):
    """The same for BatchNorm, both layouts."""
    for shape, channels_last, tx, nx, layout, g, b in bn_layouts(rng):
        c = g.size
        tg, tb = torch.from_numpy(g), torch.from_numpy(b)
        y = aligned(nx)
        # Training updates running statistics of its own; inference reads fixed ones.
        i_mean = aligned(np.arange(c, dtype=np.float32))
        i_var = aligned(1 + np.arange(c, dtype=np.float32) % 3)
        stats = {True: (torch.zeros(c), torch.ones(c), np.zeros(c, np.float32),
                        np.ones(c, np.float32)),
                 False: (torch.from_numpy(i_mean), torch.from_numpy(i_var), i_mean,
                         i_var)}
        for training in (True, False):
            t_mean, t_var, n_mean, n_var = stats[training]
            op = f"batch_norm {'training' if training else 'inference'}"
            yield Case(shape, lambda: F.batch_norm(tx, t_mean, t_var, tg, tb, training,
                                                   0.1, EPS),
                       {op: lambda: nk.batch_norm(nx, n_mean, n_var, g, b, training,
                                                  0.1, EPS, channels_last, out=y)},
                       layout)


def batchnorm_train_cases(rng):
    """Training steps of BatchNorm, both layouts: F.batch_norm's autograd, the binding
    (batch_norm with return_stats, then batch_norm_backward, preallocated y and dx) and
    normkernels.torch's batch_norm, each with running statistics of its own."""
    for shape, channels_last, tx, nx, layout, g, b in bn_layouts(rng):
        c = g.size
        tdy, ndy = upstream_grad(rng, nx, channels_last, layout)
        y, dx = aligned(nx), aligned(nx)
        theirs, ours = leaves(tx, torch.from_numpy(g), torch.from_numpy(b))
        running = [(torch.zeros(c), torch.ones(c)) for _ in range(2)]
        n_mean, n_var = np.zeros(c, np.float32), np.ones(c, np.float32)

        def binding():
            _, mean, rstd = nk.batch_norm(nx, n_mean, n_var, g, b, True, 0.1, EPS,
                                          channels_last, out=y, return_stats=True)
            grads = nk.batch_norm_backward(ndy, nx, mean, rstd, g, channels_last, out=dx)
            return as_nchw(grads, channels_last)

        def torch_batch_norm(t, weight, bias):
            return F.batch_norm(t, *running[0], weight, bias, True, 0.1, EPS)

        def ours_batch_norm(t, weight, bias):
            return nk_torch.batch_norm(t, *running[1], weight, bias, True, 0.1, EPS)

        yield Case(shape, lambda: step(torch_batch_norm, theirs, tdy), {
            "batch_norm train": binding,
            "batch_norm train, normkernels.torch": lambda: step(ours_batch_norm, ours,
                                                                tdy)},
            arrays, ("dx", "dgamma", "dbeta"))


# GroupNorm's shapes: 32 groups (a diffusion U-Net's, a late CNN stage, batch 1), and
# InstanceNorm (groups == C).
GN_SHAPES = {(8, 256, 64, 64): 32, (32, 512, 14, 14): 32, (1, 64, 128, 128): 32,
             (8, 64, 56, 56): 64}


def gn_layouts(rng):
    """bn_layouts of GroupNorm's shapes, each with its groups and its op's name."""
    for shape, groups in GN_SHAPES.items():
        op = "instance_norm" if groups == shape[1] else "group_norm"
        for case in bn_layouts(rng, [shape]):
            yield (*case, groups, op)


def groupnorm_cases(rng):
    """GroupNorm's forward: F.group_norm against the binding (preallocated y) and
    normkernels.torch's group_norm."""
    for shape, channels_last, tx, nx, layout, g, b, groups, op in gn_layouts(rng):
        tg, tb = torch.from_numpy(g), torch.from_numpy(b)
        y = aligned(nx)
        yield Case(shape, lambda: F.group_norm(tx, groups, tg, tb, EPS), {
            op: lambda: nk.group_norm(nx, groups, g, b, EPS, channels_last, out=y),
            # (as the binding's layout: a view, as layout makes PyTorch's)
            f"{op}, normkernels.torch": lambda: layout(nk_torch.group_norm(
                tx, groups, tg, tb, EPS))},
            layout)


def groupnorm_train_cases(rng):
    """Training steps of GroupNorm: F.group_norm's autograd, the binding (group_norm
    with return_stats, then group_norm_backward, preallocated y and dx) and
    normkernels.torch's group_norm."""
    for shape, channels_last, tx, nx, layout, g, b, groups, op in gn_layouts(rng):
        tdy, ndy = upstream_grad(rng, nx, channels_last, layout)
        y, dx = aligned(nx), aligned(nx)
        theirs, ours = leaves(tx, torch.from_numpy(g), torch.from_numpy(b))

        def binding():
            _, mean, rstd = nk.group_norm(nx, groups, g, b, EPS, channels_last, out=y,
                                          return_stats=True)
            grads = nk.group_norm_backward(ndy, nx, mean, rstd, groups, g,
                                           channels_last, out=dx)
            return as_nchw(grads, channels_last)

        yield Case(shape, lambda: step(
            lambda t, w, bias: F.group_norm(t, groups, w, bias, EPS), theirs, tdy), {
            f"{op} train": binding,
            f"{op} train, normkernels.torch": lambda: step(
                lambda t, w, bias: nk_torch.group_norm(t, groups, w, bias, EPS), ours,
                tdy)},
            arrays, ("dx", "dgamma", "dbeta"))


def torch_isa():
    """The instruction set PyTorch's own CPU kernels run at, as its build reports it."""
    found = re.search(r"CPU capability usage: (\S+)", torch.__config__.show())
    return found.group(1) if found else "?"


HEAD = ["| op | shape | threads | PyTorch us | cv % | normkernels us | cv % | speed-up |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]


def check(case):
    """Exits unless each of the library's functions gives PyTorch's outputs: within
    the case's rtol (1e-3; half tensors two steps of their type) relative, or rtol of
    the output's largest magnitude (a sum over a batch that
    cancels to near 0: PyTorch's channels-last BatchNorm sums dgamma over 32x56x56
    values with errors of 0.01 where the float64 one is 531, ours 1e-4)."""
    theirs = case.layout(case.torch())
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    for op, fn in case.ours.items():
        ours = fn()
        ours = ours if isinstance(ours, tuple) else (ours,)
        for name, a, b in zip(case.outputs, ours, theirs, strict=True):
            a = a.float().numpy() if torch.is_tensor(a) else np.asarray(a, np.float32)
            scale = max(1.0, float(np.abs(b).max(initial=0.0)))
            if not np.allclose(a, b, rtol=case.rtol, atol=case.rtol * scale):
                sys.exit(f"torch_compare: {op} {case.shape}: the two sides' {name} "
                         "differ")


def table(threads, batches, quick):
    """The table's rows, printed as they are measured, and the spreads by case."""
    rng = np.random.default_rng(0)
    lines, cvs = [], {}
    for t in threads:
        torch.set_num_threads(t)
        nk.set_num_threads(t)
        for cases in (rownorm_cases, half_cases, train_cases, batchnorm_cases,
                      batchnorm_train_cases, groupnorm_cases, groupnorm_train_cases):
            for k, case in enumerate(cases(rng)):
                if quick and k >= 3:
                    break
                check(case)
                (torch_s, torch_cv), *ours = per_call(
                    [case.torch, *case.ours.values()], batches)
                for op, (nk_s, nk_cv) in zip(case.ours, ours):
                    name = f"{op} {case.shape}, {t} threads"
                    cvs[f"PyTorch {name}"], cvs[f"normkernels {name}"] = torch_cv, nk_cv
                    lines.append(f"| {op} | {case.shape} | {t} | {torch_s * 1e6:.1f} | "
                                 f"{torch_cv * 100:.1f} | {nk_s * 1e6:.1f} | "
                                 f"{nk_cv * 100:.1f} | {torch_s / nk_s:.2f} |")
                    print(lines[-1], flush=True)
    return lines, cvs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default=f"1,{os.cpu_count()}")
    parser.add_argument("--out", metavar="DIR", help="write DIR/torch_compare.md")
    parser.add_argument("--update", metavar="DOC", help="rewrite DOC's torch section")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.update:
        reporting.check_section(args.update, "torch")
    threads = sorted({int(t) for t in args.threads.split(",")})
    batches = 3 if args.quick else BATCHES
    print("\n".join(HEAD), flush=True)
    lines, cvs = table(threads, batches, args.quick)
    warning = reporting.busy_warning(cvs)
    text = "\n".join(reporting.with_warning([
        f"PyTorch {torch.__version__} (its kernels at {torch_isa()}), normkernels at "
        f"{nk.isa()}; microseconds per call from Python, medians of {batches} "
        "alternating batches (cv: their coefficient of variation, standard deviation "
        "over mean; `bench/torch_compare.py`, run by `scripts/bench.sh`).", "",
        *HEAD, *lines], warning))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "torch_compare.md")
        with open(path, "w") as f:
            f.write(text + "\n")
        print(f"wrote {path}")
    if args.update:
        reporting.rewrite_section(args.update, "torch", text)
    reporting.warn("torch_compare", warning)


if __name__ == "__main__":
    main()
