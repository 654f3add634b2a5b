"""What every step of a Rigel run shares: its spec (where it reads and writes, its config), the
`Reporter` it reports through, the release it trains on, its backbone and its inference engine.

Below `pipeline` (the steps) so that a step can live in its own module. No Django import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol

from training_bridge.rigel.config import RigelConfig, with_stored_layout
from training_bridge.rigel.data import TrainingRelease, read_training_release
from training_bridge.rigel.distributed import Distributed
from training_bridge.rigel.store import Store

# One point of a run's curves: {"phase": "phase1", "epoch": 3, "loss": 0.41, "validation_tau": 0.52}
# or {"phase": "phase2", "step": 12, "loss": 1.2} (JSON-ready; the run's history keeps them).
CurvePoint = dict[str, str | int | float | None]


class Reporter(Protocol):
    def progress(self, fraction: float, message: str) -> None:
        """Overall progress of the step in [0, 1]; may raise to stop the step (cancel)."""

    def point(self, values: CurvePoint) -> None:
        """One point of the run's curves: phase, epoch/step, loss, validation tau."""

    def log(self, message: str) -> None: ...

    def checkpoint(self, phase: str, key: str, step: int) -> None:
        """A checkpoint was stored under `key`; remember it for a resume."""


class NullReporter:
    def progress(self, fraction: float, message: str) -> None:
        pass

    def point(self, values: CurvePoint) -> None:
        pass

    def log(self, message: str) -> None:
        pass

    def checkpoint(self, phase: str, key: str, step: int) -> None:
        pass


@dataclass
class RunSpec:
    run_prefix: str  # "training/runs/<id>"
    release_prefix: str  # where the release's data/*.jsonl live
    release_key: str  # stable identity of the release in the cache path (its id)
    config: RigelConfig

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_prefix": self.run_prefix,
            "release_prefix": self.release_prefix,
            "release_key": self.release_key,
            "config": self.config.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        return cls(
            run_prefix=data["run_prefix"],
            release_prefix=data["release_prefix"],
            release_key=str(data["release_key"]),
            config=RigelConfig.from_dict(with_stored_layout(data["config"])),
        )

    def artifact(self, name: str) -> str:
        return f"{self.run_prefix}/artifacts/{name}"

    def checkpoint_key(self, phase: str, step: int) -> str:
        return f"{self.run_prefix}/checkpoints/{phase}-step-{step:06d}.pt"


def training_release(*, spec: RunSpec, store: Store, reporter: Reporter) -> TrainingRelease:
    """The release's candidates whose clips have a video; the others are named in the log."""
    release = read_training_release(store, spec.release_prefix)
    if release.left_out:
        reporter.log(release.describe_left_out())
    return release


def load_backbone_for(config: RigelConfig, dist: Distributed) -> Any:
    from training_bridge.rigel.backbone import load_backbone, with_frame_budget

    backbone = load_backbone(
        config.backbone, device=dist.device_for(config.device), dtype=config.torch_dtype_name
    )
    backbone.vision = with_frame_budget(
        backbone.vision, frames=config.frames, frame_pixels=config.frame_pixels
    )
    backbone.prompt_layout = config.prompt_layout
    return backbone


def make_engine(
    backbone: Any,
    config: RigelConfig,
    *,
    head: Any | None = None,
    batch_size: int,
    processes: int = 1,
    samples: int | None = None,
) -> Any | None:
    """The fast inference engine when the config asks for it on this device, else None. Under
    torchrun the processes share the machine's cores for their decoding workers. `samples`: how
    many samples this process will run through it, when known (decides `engine_compile` "auto")."""
    if not config.uses_engine(backbone.device.type):
        return None
    from training_bridge.rigel.engine import ScoringEngine

    workers = config.engine_workers
    if workers < 0:
        workers = max(0, min(16, (os.cpu_count() or 1) // max(1, processes) - 1))
    # Compiled, the engine also fuses the element-wise ops left outside the decoder layers (the
    # vision tower's rotary embeddings above all): 8.7 against 10.4 ms/sample on an H100. Those
    # patches are process-wide; `ScoringEngine.close()` undoes them.
    compiled = config.compiles_engine(backbone.device.type, samples)
    return ScoringEngine(
        backbone,
        head,
        batch_size=batch_size,
        reference_free=config.reference_free,
        num_workers=workers,
        compile_layers=compiled,
        fuse_elementwise=compiled,
        fp8=config.engine_fp8,
    )
