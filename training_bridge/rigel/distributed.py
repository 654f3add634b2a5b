"""Data parallelism under torchrun, with the same code path as a single process.

`Distributed.current()` reads the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK); without it
everything degrades to rank 0 of 1 and the collectives are no-ops. Gloo serves CPU tests, NCCL the
GPUs. Gradients are all-reduced by hand (sum of per-rank losses already scaled by the rank's share
of the global batch), which keeps PEFT models unwrapped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Distributed:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def current(cls) -> Distributed:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return cls(
                rank=torch.distributed.get_rank(),
                world_size=torch.distributed.get_world_size(),
                local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            )
        return cls()

    @classmethod
    def initialise(cls, device: str) -> Distributed:
        """Join the torchrun process group if launched by torchrun; else a single process."""
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return cls()
        if not torch.distributed.is_initialized():
            backend = "nccl" if device.startswith("cuda") else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            torch.distributed.init_process_group(backend=backend)
        return cls.current()

    def device_for(self, device: str) -> str:
        """Each process drives its own GPU (cuda:LOCAL_RANK) under torchrun."""
        if self.enabled and device.startswith("cuda"):
            return f"cuda:{self.local_rank}"
        return device

    def shard(self, items: list[Any]) -> list[Any]:
        return items[self.rank :: self.world_size]

    def barrier(self) -> None:
        if self.enabled:
            torch.distributed.barrier()

    def gather_objects(self, value: Any) -> list[Any]:
        if not self.enabled:
            return [value]
        gathered: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(gathered, value)
        return gathered

    def broadcast_object(self, value: Any) -> Any:
        if not self.enabled:
            return value
        holder = [value]
        torch.distributed.broadcast_object_list(holder, src=0)
        return holder[0]

    def all_reduce_gradients(self, parameters: list[torch.nn.Parameter]) -> None:
        """Sum the gradients of `parameters` over ranks, in one flat float32 buffer."""
        if not self.enabled:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
        flat, back = flat_gradient_sum_buffers(grads)
        torch.distributed.all_reduce(flat)
        for parameter, grad in zip(parameters, back(flat), strict=True):
            parameter.grad = grad

    def all_reduce_sum(self, value: float) -> float:
        if not self.enabled:
            return value
        tensor = torch.tensor([value], dtype=torch.float64)
        if torch.distributed.get_backend() == "nccl":
            tensor = tensor.cuda()
        torch.distributed.all_reduce(tensor)
        return float(tensor.item())

    def all_reduce_sum_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum a tensor over ranks in place, on its device (no read-back to the host: the
        collective is queued on the stream like any kernel)."""
        if self.enabled:
            torch.distributed.all_reduce(tensor)
        return tensor


def flat_gradient_sum_buffers(
    grads: list[torch.Tensor],
) -> tuple[torch.Tensor, Callable[[torch.Tensor], list[torch.Tensor]]]:
    """(one float32 buffer holding every gradient, a function that turns the summed buffer back
    into gradients of the original shapes and dtypes). Where all gradients share one dtype (the
    LoRA adapters: bf16) this is one concatenation and one conversion each way, and the gradients
    come back as views of one buffer: a handful of kernels for the 112 adapters of Phase 2's
    defaults instead of two conversions per adapter; the values are the same either way (a
    conversion commutes with concatenating and splitting)."""
    sizes = [g.numel() for g in grads]
    dtypes = {g.dtype for g in grads}
    if len(dtypes) == 1:
        (dtype,) = dtypes
        flat = torch.cat([g.reshape(-1) for g in grads]).float()

        def back(summed: torch.Tensor) -> list[torch.Tensor]:
            parts = summed.to(dtype).split(sizes)
            return [part.view_as(g) for part, g in zip(parts, grads, strict=True)]

        return flat, back
    flat = torch.cat([g.reshape(-1).float() for g in grads])

    def back_each(summed: torch.Tensor) -> list[torch.Tensor]:
        parts = summed.split(sizes)
        return [part.view_as(g).to(g.dtype) for part, g in zip(parts, grads, strict=True)]

    return flat, back_each
