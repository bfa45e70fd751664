# SPDX-License-Identifier: Apache-2.0
"""sync_batchnorm.py: data-parallel training on CPU processes with
normkernels.torch.SyncBatchNorm (torch.distributed, gloo): each process trains on its
shard of every batch, BatchNorm normalizing with the whole batch's statistics.

    torchrun --standalone --nproc_per_node=2 examples/torch/sync_batchnorm.py
    python3 examples/torch/sync_batchnorm.py --processes 2    # torch.multiprocessing

(From a build tree, without the package installed: NK_LIBRARY=build/libnormkernels.so
PYTHONPATH=python before either.) Each process prints its losses; rank 0 then says
whether every process ended with the same parameters and running statistics, which
SyncBatchNorm keeps equal without DistributedDataParallel broadcasting buffers.
"""
import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from normkernels.torch import SyncBatchNorm

BATCH, STEPS = 32, 5


def model():
    torch.manual_seed(0)  # the same initial parameters in every process
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))


def train(rank, world):
    """Trains on shard rank of world of each batch; True when every process ends with
    rank 0's model."""
    torch.set_num_threads(1)  # processes share the cores
    net = SyncBatchNorm.convert_sync_batchnorm(model())
    net = net.to(memory_format=torch.channels_last)
    ddp = torch.nn.parallel.DistributedDataParallel(net, broadcast_buffers=False)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(1)  # the same batches in every process
    shard = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    for step in range(STEPS):
        images = torch.randn(BATCH, 3, 16, 16, generator=data)
        labels = torch.randint(0, 10, (BATCH,), generator=data)
        x = images[shard].contiguous(memory_format=torch.channels_last)
        loss = F.cross_entropy(ddp(x), labels[shard])
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step}: loss {loss.item():.4f}", flush=True)
    state = torch.cat([t.flatten().double() for t in net.state_dict().values()])
    every = [torch.empty_like(state) for _ in range(world)]
    dist.all_gather(every, state)
    return all(torch.equal(s, every[0]) for s in every)


def run(rank, world):
    """One process: joins the group torchrun or main() describes in the environment."""
    dist.init_process_group("gloo", rank=rank, world_size=world)
    same = train(rank, world)
    dist.destroy_process_group()
    if rank == 0:
        print("every process holds the same model" if same
              else "the processes' models differ", flush=True)
    if not same:
        raise SystemExit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, metavar="N",
                        help="start N processes on this machine (without torchrun)")
    args = parser.parse_args()
    if args.processes is None:  # under torchrun, which sets these
        run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
        return
    with socket.socket() as s:  # a free port for the group's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(run, args=(args.processes,), nprocs=args.processes)


if __name__ == "__main__":
    main()
