"""More than one process through torch.distributed, started by `torchrun`.

DDP (gloo on CPU, NCCL on GPU) replicates the model; FSDP2 (`fully_shard` on each block, then the root)
shards parameters, gradients and optimizer state for models that do not fit one GPU. A GPU user trains
the 1.3B preset on one 8-GPU node by tokenizing once, then launching 8 processes (global batch
8 x 4 x 8 x 4096 = 1M tokens; 26B tokens = 20 per parameter):
    tlm data prepare hf:HuggingFaceFW/fineweb-edu:train:sample-100BT \
        --tokenizer meta-llama/Meta-Llama-3-8B --out data/fineweb-edu
    torchrun --nproc_per_node 8 cli.py train --preset tlm-1.3b --schedule cosine:1.5:0.5 \
        --data data/fineweb-edu --seq-len 4096 --batch-size 4 --grad-accum 8 --tokens 26000000000 \
        --fsdp --ckpt-interval 1000 --out runs/tlm-1.3b-cosine
(add --compile for speed; Ctrl-C or SIGTERM checkpoints; the same command with --resume continues).
Every rank computes the same batch order (data.stream.BatchOrder) and takes its slice; rank 0 writes.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as td
from torch import nn

from tlm_probe.stats.reduce import world_size


def launched() -> bool:
    """True under torchrun (it sets WORLD_SIZE for every process)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def active() -> bool:
    return td.is_available() and td.is_initialized()


def group_rank() -> int:
    """This process's rank in the process group (0 without one); ranks.rank() reads torchrun's RANK."""
    return td.get_rank() if active() else 0


def is_main() -> bool:
    return group_rank() == 0


def init(device_type: str) -> torch.device | None:
    """Join the process group when launched by torchrun; returns this rank's device (None if single)."""
    if not launched():
        return None
    backend = "nccl" if device_type == "cuda" else "gloo"
    if not active():
        td.init_process_group(backend)
    if device_type == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def shutdown() -> None:
    if active():
        td.barrier()
        td.destroy_process_group()


def barrier() -> None:
    if active():
        td.barrier()


def wrap_ddp(model: nn.Module, device: torch.device) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def wrap_fsdp(model: nn.Module) -> nn.Module:
    """FSDP2: shard each block, then the root (embeddings, final norm, head), as torchtitan does."""
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def sum_scalars(total: torch.Tensor, count: int, device: torch.device) -> tuple[float, int]:
    """Sum a float64 total and an int count over all ranks."""
    if not active():
        return float(total), count
    buf = torch.stack([total.double(), torch.tensor(float(count), dtype=torch.float64, device=device)])
    td.all_reduce(buf)
    return float(buf[0]), int(round(float(buf[1])))


def mean_scalar(value: torch.Tensor) -> float:
    """Mean of a scalar over ranks (for logging the global training loss)."""
    if not active():
        return float(value)
    buf = value.detach().double().reshape(1).clone()
    td.all_reduce(buf)
    return float(buf[0]) / world_size()


def broadcast_flag(flag: bool, device: torch.device) -> bool:
    """True on every rank when any rank raised the flag (so Ctrl-C on one stops all in step)."""
    if not active():
        return flag
    buf = torch.tensor([1.0 if flag else 0.0], device=device)
    td.all_reduce(buf, op=td.ReduceOp.MAX)
    return bool(buf.item() > 0)
