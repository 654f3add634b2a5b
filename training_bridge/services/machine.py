"""What the training machine can run, for the training page: its devices, the default backbone,
and what a backbone needs (weights, memory) before a curator starts a run with it.

torch is not imported (web processes call this): a GPU is seen through the NVIDIA driver's
/proc entries, and weights through the Hugging Face cache's files. `LEPUS_TRAINING_DEVICES`
overrides the detection when the training workers are other machines than the web server.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
# Built locally from random weights (training_bridge.rigel.backbone): nothing to download.
SMALL_BACKBONES = ("tiny", "tiny-qwen2.5-vl")
RANDOM_LARGE_BACKBONES = ("qwen3-vl-2b-random",)
# Qwen3-VL-2B-Instruct: about 2 billion parameters, so about 4 GB of weights in bf16 on a GPU
# and 8 GB in fp32 on a CPU, before activations, optimiser state and the teacher pass.
LARGE_BACKBONE_MEMORY = (
    "about 2 billion parameters: about 4 GB of weights in bf16 on a GPU (a GPU with at least "
    "16 GB is advisable for training), about 8 GB in fp32 on a CPU before activations; on a "
    "CPU a run takes days"
)


def training_devices() -> list[str]:
    """The devices a run may use: the setting, else this machine's (cpu, and cuda with a GPU)."""
    configured = list(settings.LEPUS_TRAINING_DEVICES)
    if configured:
        return configured
    return ["cpu", "cuda"] if _has_nvidia_gpu() else ["cpu"]


def _has_nvidia_gpu() -> bool:
    try:
        return NVIDIA_GPUS.is_dir() and any(NVIDIA_GPUS.iterdir())
    except OSError:
        return False


def training_default_device() -> str:
    return "cuda" if "cuda" in training_devices() else "cpu"


def training_default_backbone() -> str:
    """The configured backbone where a GPU is offered; the tiny one on a CPU-only machine (a 2 B
    model does not train on a CPU, and its weights are rarely there)."""
    if "cuda" in training_devices():
        return str(settings.LEPUS_DEFAULT_BACKBONE or "tiny")
    return "tiny"


@dataclass(frozen=True)
class BackboneNeeds:
    name: str
    is_large: bool
    weights: str  # where its weights come from
    weights_found: bool | None  # None: nothing to find (built locally)
    memory: str

    @property
    def summary(self) -> str:
        found = {True: "found", False: "NOT found", None: "built locally"}[self.weights_found]
        return f"{self.name} needs weights {self.weights} ({found}); memory: {self.memory}."


def backbone_needs(name: str) -> BackboneNeeds:
    """What a backbone needs before a run can use it (nothing is loaded)."""
    if name in SMALL_BACKBONES:
        return BackboneNeeds(
            name=name,
            is_large=False,
            weights="built from random weights on the worker",
            weights_found=None,
            memory="a few hundred MB; runs on a CPU in minutes",
        )
    if name in RANDOM_LARGE_BACKBONES:
        weights = "built from random weights on the worker (for benchmarks; scores mean nothing)"
        return _large_backbone_needs(name, weights=weights, weights_found=None)
    path = Path(name)
    if path.is_absolute():
        return _large_backbone_needs(
            name,
            weights=f"in the folder {name} on the training worker",
            weights_found=(path / "config.json").is_file(),
        )
    weights = (
        "in the Hugging Face cache (HF_HOME) of the training worker, or a local folder given as "
        "the backbone; nothing is downloaded"
    )
    return _large_backbone_needs(name, weights=weights, weights_found=_in_hub_cache(name))


def _large_backbone_needs(name: str, *, weights: str, weights_found: bool | None) -> BackboneNeeds:
    return BackboneNeeds(
        name=name,
        is_large=True,
        weights=weights,
        weights_found=weights_found,
        memory=LARGE_BACKBONE_MEMORY,
    )


def _in_hub_cache(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - installed with transformers
        return False
    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # a name the hub's rules refuse is not in the cache either
        return False
