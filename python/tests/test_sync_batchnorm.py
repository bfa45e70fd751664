# SPDX-License-Identifier: Apache-2.0
"""normkernels.torch.SyncBatchNorm over torch.distributed: 2 and 3 processes on
127.0.0.1 (gloo, torch.multiprocessing), each holding a shard of one batch, against
torch.nn.BatchNorm2d over the whole batch in one process, in float64: y, the running
statistics, the input's gradient and the sums over the processes of the weight's and
bias's (what DistributedDataParallel averages), for two training steps in each memory
format and an eval step; and examples/torch/sync_batchnorm.py (DistributedDataParallel)
run as docs/distributed.md says. A hung process group fails the test after TIMEOUT
seconds."""
import datetime
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import normkernels as nk
from reference import (bn_gradient_bounds, bn_inference_reference, bn_reference,
                       bn_running_reference, data)

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
import normkernels.torch as nkt  # noqa: E402 (needs torch)

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("this PyTorch has no gloo backend", allow_module_level=True)

TIMEOUT = 120  # seconds for a whole run: spawning, importing torch, the steps
SHAPE = (7, 3, 4, 5)  # the whole batch
EPS = 1e-5
STEPS = 2


def batch(k):
    """x and dy of training step k (the eval step: k = STEPS), the whole batch."""
    return data(SHAPE, 30 + k, offset=1.0 + k), data(SHAPE, 40 + k)


def parameters(c):
    return data((c,), 1), data((c,), 2)


def in_layout(a, channels_last):
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t.contiguous(memory_format=torch.channels_last) if channels_last else t


def worker(rank, world, port, cuts, out):
    """One process: its shard x[cuts[rank]:cuts[rank + 1]] of every step, through the
    library's SyncBatchNorm in each memory format; what it gives, saved to out."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    nk.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT // 2))
    rows = slice(cuts[rank], cuts[rank + 1])
    results = {}
    for channels_last in (False, True):
        c = SHAPE[1]
        bn = nkt.SyncBatchNorm(c, momentum=0.3)
        w, b = parameters(c)
        with torch.no_grad():
            bn.weight.copy_(torch.from_numpy(w))
            bn.bias.copy_(torch.from_numpy(b))
        steps = []
        for k in range(STEPS + 1):
            bn.train(k < STEPS)
            bn.zero_grad(set_to_none=True)
            x, dy = (in_layout(a[rows], channels_last) for a in batch(k))
            x.requires_grad_()
            y = bn(x)
            y.backward(dy)
            steps.append({"y": y.detach(), "dx": x.grad, "dweight": bn.weight.grad,
                          "dbias": bn.bias.grad, "running_mean": bn.running_mean.clone(),
                          "running_var": bn.running_var.clone(),
                          "channels_last": y.is_contiguous(
                              memory_format=torch.channels_last) and x.dim() == 4})
        results[channels_last] = steps
        results["batches_tracked"] = int(bn.num_batches_tracked)
    dist.destroy_process_group()
    torch.save(results, os.path.join(out, f"{rank}.pt"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(world, cuts, out):
    """The results of every process of a run, in rank order; fails after TIMEOUT."""
    import torch.multiprocessing as mp
    context = mp.spawn(worker, args=(world, free_port(), cuts, str(out)), nprocs=world,
                       join=False)
    deadline = time.monotonic() + TIMEOUT
    while not context.join(timeout=max(0.0, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for p in context.processes:
                p.kill()
                p.join()
            pytest.fail(f"the {world}-process gloo run did not finish in {TIMEOUT} s")
    return [torch.load(os.path.join(out, f"{r}.pt")) for r in range(world)]


def merged_statistics(x, cuts):
    """The mean and rstd the processes normalize with: their shards' moments merged in
    rank order, var = m2 / count and rstd = rsqrt(var + eps), as SyncBatchNorm's."""
    count, mean, m2 = nk.batch_norm_moments(x[cuts[0]:cuts[1]])
    for a, b in zip(cuts[1:], cuts[2:]):
        count, mean, m2 = nk.moments_merge(
            count, mean, m2, *nk.batch_norm_moments(np.ascontiguousarray(x[a:b])))
    var = torch.from_numpy(m2) / count
    return mean, torch.rsqrt(var + EPS).numpy()


def whole_batch(k, module):
    """torch.nn.BatchNorm2d in float64 over step k's whole batch in one process."""
    x, dy = (torch.from_numpy(a).double() for a in batch(k))
    x.requires_grad_()
    module.zero_grad(set_to_none=True)
    y = module(x)
    y.backward(dy)
    return y.detach(), x.grad, module.weight.grad, module.bias.grad


def joined(results, channels_last, k, name):
    """A per-shard result of every process joined along N (or summed: the parameters'
    gradients, as a data-parallel step sums them), as a float64 array."""
    parts = [r[channels_last][k][name].double() for r in results]
    if name in ("dweight", "dbias"):
        return torch.stack(parts).sum(0).numpy()
    return torch.cat(parts).numpy()


@pytest.mark.parametrize("world, cuts", [(2, (0, 4, 7)), (3, (0, 3, 5, 7))])
def test_processes_give_pytorchs_batch_norm_over_the_whole_batch(world, cuts, tmp_path):
    results = run(world, cuts, tmp_path)
    c = SHAPE[1]
    w, b = parameters(c)
    assert all(r["batches_tracked"] == STEPS for r in results)
    for channels_last in (False, True):
        theirs = torch.nn.BatchNorm2d(c, momentum=0.3, dtype=torch.float64)
        with torch.no_grad():
            theirs.weight.copy_(torch.from_numpy(w))
            theirs.bias.copy_(torch.from_numpy(b))
        running = np.zeros(c), np.ones(c), np.zeros(c), np.zeros(c)
        for k in range(STEPS + 1):
            x, dy = batch(k)
            got = [joined(results, channels_last, k, name)
                   for name in ("y", "dx", "dweight", "dbias")]
            assert all(r[channels_last][k]["channels_last"] == channels_last
                       for r in results)
            if k < STEPS:
                want = whole_batch(k, theirs)
                _, mean, var, count, y_bound = bn_reference(x, w, b, EPS, False)
                used = merged_statistics(x, cuts)
                exact = mean, 1 / np.sqrt(var + EPS)
                running = bn_running_reference(x, running, 0.3, EPS)
                for name, bound in (("running_mean", running[2]),
                                    ("running_var", running[3])):
                    for r in results:  # the same on every process
                        ours = r[channels_last][k][name].double().numpy()
                        assert np.all(np.abs(ours - getattr(theirs, name).numpy())
                                      <= bound)
            else:  # eval: the running statistics, no communication
                rm, rv = (results[0][channels_last][k - 1][name].numpy()
                          for name in ("running_mean", "running_var"))
                theirs.eval().running_mean.copy_(torch.from_numpy(rm))
                theirs.running_var.copy_(torch.from_numpy(rv))
                want = whole_batch(k, theirs)
                _, y_bound = bn_inference_reference(x, rm, rv, w, b, EPS, False)
                used = rm, torch.rsqrt(torch.from_numpy(rv) + EPS).numpy()
                exact = rm, 1 / np.sqrt(rv.astype(np.float64) + EPS)
            bounds = [y_bound * (1 + x.size * 2.0 ** -29)]
            bounds += bn_gradient_bounds(dy, x, used, exact, w)
            if k == STEPS:  # dx of the affine map: two roundings
                bounds[1] = 3 * 2.0 ** -24 * np.abs(want[1].numpy()) + 1e-30
            for name, g, theirs_g, bound in zip(("y", "dx", "dweight", "dbias"), got,
                                                want, bounds):
                assert np.all(np.abs(g - theirs_g.numpy()) <= bound), (name, k)


EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "torch" / \
    "sync_batchnorm.py"
# Debian's torchrun (PyTorch 1.13 on Python 3.11) cannot parse its default --redirects
# and --tee ("0"); given as maps of ranks they work.
TORCHRUN = ["--standalone", "--nproc_per_node=3", "--redirects", "0:1", "--tee", "0:1"]


@pytest.mark.parametrize("launcher", ["torch.multiprocessing", "torchrun"])
def test_example_trains_the_same_model_in_every_process(launcher):
    if launcher == "torchrun":
        torchrun = shutil.which("torchrun")
        if torchrun is None:
            pytest.skip("no torchrun on PATH")
        command = [torchrun, *TORCHRUN, str(EXAMPLE)]
    else:
        command = [sys.executable, str(EXAMPLE), "--processes", "2"]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
    run = subprocess.run(command, env=env, capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "every process holds the same model" in run.stdout
    assert "rank 1 step 4: loss" in run.stdout
