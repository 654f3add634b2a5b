"""Settings of one Rigel training run (paper Section 3, Appendix D), as a plain dataclass.

Every default says where it comes from: *paper* (the place in the Rigel paper, seed 000, with the
line of /work/shared/seeds/000_c090a1d314290d2f.txt; our copy lost the numbers inside formulas and
some table cells, so the learning rates, Adam's betas, the distillation temperature, the frame count
and the prompts of Appendix G are not readable there), or *ours* (with the reason). docs/training.md
carries the same table.

The Django side stores `RigelConfig.to_dict()` on the run row and rebuilds the config with
`RigelConfig.from_dict`, so a run can be re-executed (or resumed) with exactly the settings it
started with. Unknown keys are refused, so a typo in an API request does not silently fall back to a
default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .prompts import DEFAULT_LAYOUT, LEGACY_LAYOUT, PROMPT_LAYOUTS

# LoRA goes on these linear layers of the *language model* only; the vision tower keeps its weights
# (PEFT has no default targets for Qwen-VL models, and Qwen2.5-VL's vision MLP reuses the names
# gate_proj/up_proj/down_proj, hence the `language_model` anchor in `lora_target_regex`).
# The paper's Phase 2 adapts 1.61M parameters (Appendix D): rank 8 on q_proj and v_proj of the 28
# layers of Qwen3-VL-2B is 28 x 8 x ((2048 + 2048) + (2048 + 1024)) = 1,605,632.
DEFAULT_LORA_TARGETS = ("q_proj", "v_proj")
# Every linear layer of the decoder (about 8.7M parameters at rank 8 on Qwen3-VL-2B), one setting
# away: `--set lora_targets='["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj"]'`.
WIDE_LORA_TARGETS = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
# Phase 1's distillation objective (Appendix E): the paper's EMD, or KL divergence (Table 5's (i)).
PHASE1_OBJECTIVES = ("emd", "kl")


STANDARD_METRICS = ("bleu4", "rougeL", "cider", "meteor")
# Below this many Phase 2 samples per process, "auto" trains eagerly on CUDA: at 25 -> 46 samples/s
# (H100) the 60-90 s compile pays for itself from about 3,200-4,500 samples.
PHASE2_COMPILE_MIN_SAMPLES = 4096
# Below this many teacher-pass samples per process, "auto" runs the engine's decoder layers eagerly:
# compiled they save about 3.6 ms per sample on an H100 (14.1 -> 10.4 ms, GPU alone) after a
# compile of about 13 s, which pays for itself from about 3,700 samples.
ENGINE_COMPILE_MIN_SAMPLES = 4096

# How Phase 2 arranges its image and video epochs (`RigelConfig.phase2_modality_order`).
PHASE2_MODALITY_ORDERS = ("mixed", "images-first", "videos-first")


class Ablation:
    """The method-ablation switch; each value reproduces one row of the paper's Table 3 or 5.

    A run differs from the full method only in what its switch names:
    - lm_head: no Phase 1 and no scoring head; Phase 2 trains, and scoring reads, the teacher's own
      LM-head logits of the score tokens "1".."5" (Table 3 (i));
    - phase1_only ("no-phase2"): the frozen backbone with the distilled head (Table 3 (ii));
    - random_head: no Phase 1; Phase 2 under a randomly initialised, frozen head (Table 3 (iii));
    - kl_loss: Phase 1 distils with KL divergence instead of EMD (Table 5 (i)).
    """

    FULL = "full"  # (v) Phase 1 then Phase 2, scored with the scoring head
    LM_HEAD = "lm_head"  # (i) Phase 2 trained and scored through the LM head's "1".."5" logits
    PHASE1_ONLY = "phase1_only"  # (ii) no Phase 2: frozen backbone + distilled head
    RANDOM_HEAD = "random_head"  # (iii) no Phase 1: Phase 2 on a randomly initialised head
    KL_LOSS = "kl_loss"  # Table 5 (i): Phase 1 with KL divergence instead of EMD

    CHOICES = (FULL, LM_HEAD, PHASE1_ONLY, RANDOM_HEAD, KL_LOSS)
    # The command line's spellings (`train --ablation no-phase2`), as the issue and docs name them.
    ALIASES = {
        "lm-head": LM_HEAD,
        "no-phase2": PHASE1_ONLY,
        "random-head": RANDOM_HEAD,
        "kl-loss": KL_LOSS,
        "phase1-only": PHASE1_ONLY,
    }

    @classmethod
    def canonical(cls, name: str) -> str:
        """The stored value of an ablation given in either spelling (unknown names unchanged)."""
        return cls.ALIASES.get(name, name)

    @classmethod
    def runs_teacher(cls, ablation: str) -> bool:
        # The teacher cache feeds Phase 1 only.
        return cls.runs_phase1(ablation)

    @classmethod
    def runs_phase1(cls, ablation: str) -> bool:
        return ablation in (cls.FULL, cls.PHASE1_ONLY, cls.KL_LOSS)

    @classmethod
    def runs_phase2(cls, ablation: str) -> bool:
        return ablation in (cls.FULL, cls.LM_HEAD, cls.RANDOM_HEAD, cls.KL_LOSS)

    @classmethod
    def phase1_objective(cls, ablation: str) -> str:
        return "kl" if ablation == cls.KL_LOSS else "emd"


# The paper's one cost figure: "required an average of 770 GFLOPs per inference" (Appendix D, line
# 239 of the seed text), for the whole Phase 2 model (backbone + head) per scored sample.
PAPER_GFLOPS_PER_INFERENCE = 770.0

# Named presets of the visual input (`train --preset NAME`; `evaluate_rigel` and `score` check
# that a run was trained with the one they name). Each is a set of RigelConfig values.
# - "default" (ours): 8 frames at the checkpoint's own pixel budget (Qwen3-VL-2B-Instruct's
#   video_preprocessor_config.json: 448 px frames stay 448 px, 784 video tokens); with our
#   9-reference prompt about 4.1 TFLOP per sample by `engine.flops.forward_flops`
#   (docs/benchmarks.md, 944 tokens with 484 video tokens).
# - "paper-budget" (ours, reconciling the paper's 770 GFLOPs): one temporal group (2 frames, what
#   Qwen3-VL also makes of a still image, T = 1) at 96 x 96 = 9,216 pixels per frame: 64 x 96
#   (4:3 source) or 64 x 128 (16:9) after the processor's rounding, 6 or 8 video tokens. With our
#   reference-free prompt (about 250 tokens, which alone cost about 695 GFLOPs at Qwen3-VL-2B's
#   2.8 GFLOPs a token) that is 765 / 776 GFLOPs per inference by the same counter
#   (tests/rigel/test_presets.py): the paper's 770 GFLOPs leave room for a tiny picture only,
#   so the paper's prompt must be far shorter than ours (about 270 tokens in all fit in 770
#   GFLOPs). Our 1-ref and 9-ref prompts exceed 770 GFLOPs on text alone.
PRESETS: dict[str, dict[str, int]] = {
    "default": {"frames": 8, "frame_pixels": 0},
    "paper-budget": {"frames": 2, "frame_pixels": 96 * 96},
}


def preset_name(config: RigelConfig) -> str:
    """The preset whose values the config has, or "custom"."""
    for name, values in PRESETS.items():
        if all(getattr(config, key) == value for key, value in values.items()):
            return name
    return "custom"


@dataclass
class RigelConfig:
    """Everything that decides what a run computes; each default marked *paper* (where) or *ours*
    (why), see the module docstring."""

    # paper: Qwen3-VL-2B is the backbone of every reported row (Section 5.3, line 136; Table 3).
    backbone: str = "Qwen/Qwen3-VL-2B-Instruct"  # local dir, HF cache name, or "tiny"
    # ours: CPU runs anywhere; a GPU is asked for per run ("cpu", "cuda", "cuda:1").
    device: str = "cpu"
    # ours: "auto" = bfloat16 on CUDA, float32 on CPU (the paper names no precision); or
    # "float32"/"bfloat16".
    dtype: str = "auto"
    # ours: the paper gives T frames per clip (Section 3, line 36) but its value is not in our
    # copy; 8 is Qwen3-VL's usual small-clip setting. See PRESETS.
    frames: int = 8
    # ours: pixels per frame (the budget the processor resizes each frame to, keeping its aspect
    # ratio, in multiples of 32 px); 0 = the checkpoint's own processor budget. See PRESETS.
    frame_pixels: int = 0
    # ours: reference-based is the default protocol; the paper trains and reports both settings,
    # each with its own prompt (Section 3, line 36; Table 2), so each has its own run
    # (`train --reference-free`).
    reference_free: bool = False
    # ours: the order of the prompt's parts (prompts.PROMPT_LAYOUTS): "candidate-last" puts the
    # candidate after the rubric, so every candidate of a clip shares the prompt up to it (issue
    # 29); "rubric-last" is the order of the runs trained before (a stored setting without this
    # key is read as "rubric-last", `with_stored_layout`).
    prompt_layout: str = DEFAULT_LAYOUT
    # paper: the full method, row (v) of Table 3 (line 109).
    ablation: str = Ablation.FULL
    # ours: any fixed seed (the paper gives none).
    seed: int = 0

    # Inference path of the teacher pass and of scoring: "auto" = the fast `ScoringEngine` on CUDA
    # (worker-process decoding, right padding, batched vision attention) and the plain
    # `build_batch` forward on CPU; "on" / "off" force one. `engine_workers` < 0: the engine's
    # default number of decoding processes (cores - 1). ours (speed only; same numbers).
    engine: str = "auto"
    engine_workers: int = -1
    # The engine's per-sample path runs the language model's decoder layers compiled
    # (`ScoringEngine(compile_layers=True)`): "auto" = on CUDA for a teacher pass of at least
    # ENGINE_COMPILE_MIN_SAMPLES samples per process; "on" / "off" force it (scoring included).
    # ours (speed only).
    engine_compile: str = "auto"
    # FP8 matrix products in the engine's linears (`ScoringEngine(fp8=True)`, engine/fp8.py).
    # Off: FP8's scores have not yet matched bf16's (docs/benchmarks.md, issue 17). ours.
    engine_fp8: bool = False

    # Teacher pass
    teacher_batch_size: int = 8  # ours: fits a CPU; GPU runs raise it (same numbers)
    teacher_shard_size: int = 256  # ours: samples per cached shard (the checkpoint unit)

    # Phase 1: head distillation on the cached teacher outputs
    # ours: the paper has a temperature T (Section 3.1, Eq. 1, lines 39-44) whose value is not in
    # our copy; 2.0 is a common distillation choice.
    temperature: float = 2.0
    # ours: Table 4's learning-rate cells are empty in our copy (lines 208-216).
    phase1_learning_rate: float = 1e-3
    phase1_weight_decay: float = 0.01  # paper: Table 4, weight decay 0.01 (line 214)
    phase1_batch_size: int = 64  # paper: Table 4, batch size 64 (line 213)
    phase1_epochs: int = 50  # paper: Table 4, epoch 50 (line 210)
    # paper: early stopping on validation Kendall tau after five epochs without gain (Appendix D,
    # line 239).
    phase1_patience: int = 5
    # ours: the head's width and dropout are not given (only its 2.63M parameters, line 239).
    head_dropout: float = 0.1

    # Phase 2: LoRA on the language model against the one-hot human class.
    # paper: Table 4, Adam with weight decay 0.01 (lines 211, 214; L2 added to the gradient);
    # "adamw" is the decoupled variant this repository used before.
    phase2_optimizer: str = "adam"
    # ours: Table 4's learning-rate cell is empty in our copy.
    phase2_learning_rate: float = 1e-4
    phase2_weight_decay: float = 0.01  # paper: Table 4 (line 214)
    # paper: Table 4, batch size 8 (line 213); the effective batch (micro batch x accumulation x
    # processes).
    phase2_batch_size: int = 8
    phase2_micro_batch_size: int = 8  # ours: memory only (same numbers by accumulation)
    # paper: Table 4, "1 (image) / 1 (video)" (line 210) and "trained for one epoch" (line 239):
    # one epoch over the video records (Vid-Lepus) and one over the still images (Spica).
    phase2_epochs: int = 1  # the video records' epochs
    phase2_image_epochs: int = 1  # the image records' epochs (0: Phase 2 skips the images)
    # ours: the paper does not say how the image and video epochs are arranged. "mixed": epoch k
    # is one shuffled pass over the records of every modality that has an epoch k;
    # "images-first" / "videos-first": all epochs of one modality, then the other's.
    phase2_modality_order: str = "mixed"
    phase2_checkpoint_every: int = 50  # ours: optimiser steps between Phase 2 checkpoints
    lora_rank: int = 8  # paper: Table 4, LoRA rank 8 (line 215)
    lora_alpha: int = 16  # paper: Table 4, LoRA alpha 16 (line 216)
    lora_dropout: float = 0.05  # ours: not given in the paper; PEFT examples' usual value
    # Dtype of the LoRA weights (and so of their optimiser state): "auto" = float32 always, the
    # master copy (ours: issue 26 found bf16 adapters and Adam state on GPU taking 84-86 % of the
    # fp32 update, so CPU and GPU runs differed). With a bf16 / fp16 backbone Phase 2 runs its
    # forward under autocast, so the matmuls (LoRA's included) stay in that dtype while the 1.6M
    # adapter weights and Adam's moments are float32 (`score_logits.adapter_autocast`). "bfloat16"
    # keeps the old bf16 adapters (benchmarks only); "float32" is the same as "auto".
    lora_dtype: str = "auto"
    # Phase 2 compiles the language model's decoder layers for training (forward and backward, the
    # graphs of the first two layers serve all; `fused.compile_decoder_layers`): 46 against 25
    # samples/s on an H100, after 60-90 s of compiling (docs/benchmarks.md). "auto" = on CUDA when
    # the process trains on at least PHASE2_COMPILE_MIN_SAMPLES samples (fewer: the compile costs
    # more than it saves), never on CPU (inductor's C++ kernels take minutes); or "on" / "off".
    # ours (speed only).
    phase2_compile: str = "auto"
    # paper, by count: Appendix D's "1.61M trainable parameters" (line 239) is rank 8 on q_proj
    # and v_proj of Qwen3-VL-2B's 28 layers (1,605,632); the paper does not name the modules.
    lora_targets: tuple[str, ...] = field(default_factory=lambda: DEFAULT_LORA_TARGETS)

    # Evaluation / scoring
    eval_batch_size: int = 16  # ours: memory only
    # ours: standard metrics computed beside Rigel on the same candidates (METEOR needs Java and
    # costs a JVM start with its paraphrase tables: about 12 s of CPU and 1.2 GB).
    standard_metrics: tuple[str, ...] = field(default_factory=lambda: STANDARD_METRICS)

    def __post_init__(self) -> None:
        self.ablation = Ablation.canonical(self.ablation)
        if isinstance(self.lora_targets, str):
            # "wide" / "paper" presets, or a comma-separated list (`--set lora_targets=wide`)
            presets = {"wide": WIDE_LORA_TARGETS, "paper": DEFAULT_LORA_TARGETS}
            named = self.lora_targets.strip()
            self.lora_targets = presets.get(
                named, tuple(part.strip() for part in named.split(",") if part.strip())
            )
        self.lora_targets = tuple(self.lora_targets)
        self.standard_metrics = tuple(self.standard_metrics)
        self.validate()

    def validate(self) -> None:
        problems: list[str] = []
        if self.ablation not in Ablation.CHOICES:
            problems.append(f"ablation must be one of {', '.join(Ablation.CHOICES)}")
        if self.prompt_layout not in PROMPT_LAYOUTS:
            problems.append(f"prompt_layout must be one of {', '.join(PROMPT_LAYOUTS)}")
        if self.phase2_optimizer not in ("adam", "adamw"):
            problems.append("phase2_optimizer must be adam or adamw")
        if self.engine not in ("auto", "on", "off"):
            problems.append("engine must be auto, on or off")
        if self.engine_compile not in ("auto", "on", "off"):
            problems.append("engine_compile must be auto, on or off")
        if not isinstance(self.engine_fp8, bool):
            problems.append("engine_fp8 must be true or false")
        if self.phase2_compile not in ("auto", "on", "off"):
            problems.append("phase2_compile must be auto, on or off")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            problems.append("dtype must be auto, float32, bfloat16 or float16")
        if self.phase2_modality_order not in PHASE2_MODALITY_ORDERS:
            problems.append(
                f"phase2_modality_order must be one of {', '.join(PHASE2_MODALITY_ORDERS)}"
            )
        if int(self.phase2_image_epochs) < 0:
            problems.append("phase2_image_epochs must not be negative")
        if self.lora_dtype not in ("auto", "float32", "bfloat16"):
            problems.append("lora_dtype must be auto, float32 or bfloat16")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            problems.append("device must be cpu or cuda[:N]")
        for name in (
            "frames",
            "teacher_batch_size",
            "teacher_shard_size",
            "phase1_batch_size",
            "phase1_epochs",
            "phase1_patience",
            "phase2_batch_size",
            "phase2_micro_batch_size",
            "phase2_epochs",
            "phase2_checkpoint_every",
            "lora_rank",
            "lora_alpha",
            "eval_batch_size",
        ):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name} must be at least 1")
        if int(self.frame_pixels) < 0:
            problems.append("frame_pixels must not be negative (0: the processor's own budget)")
        if self.temperature <= 0:
            problems.append("temperature must be positive")
        for name in ("phase1_learning_rate", "phase2_learning_rate"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be positive")
        for name in ("phase1_weight_decay", "phase2_weight_decay"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must not be negative")
        if not 0 <= self.head_dropout < 1 or not 0 <= self.lora_dropout < 1:
            problems.append("dropout must be in [0, 1)")
        if not self.lora_targets:
            problems.append("lora_targets must name at least one module")
        unknown_metrics = sorted(set(self.standard_metrics) - set(STANDARD_METRICS))
        if unknown_metrics:
            problems.append(
                f"standard_metrics: unknown {', '.join(unknown_metrics)} "
                f"(known: {', '.join(STANDARD_METRICS)})"
            )
        if problems:
            raise ValueError("; ".join(problems))

    # --- derived ----------------------------------------------------------------------------
    @property
    def phase1_objective(self) -> str:
        """ "emd" (the paper's), or "kl" for the kl_loss ablation."""
        return Ablation.phase1_objective(self.ablation)

    @property
    def torch_dtype_name(self) -> str:
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if self.device.startswith("cuda") else "float32"

    @property
    def lora_dtype_name(self) -> str:
        """The adapters' dtype: float32 (fp32 master weights) unless "bfloat16" is asked for."""
        return "float32" if self.lora_dtype == "auto" else self.lora_dtype

    def uses_engine(self, device_type: str) -> bool:
        return self.engine == "on" or (self.engine == "auto" and device_type == "cuda")

    def compiles_engine(self, device_type: str, samples: int | None) -> bool:
        """Whether the engine compiles its decoder layers, for a process that runs `samples`
        samples through it (None: not known in advance, as for scoring)."""
        return self.engine_compile == "on" or (
            self.engine_compile == "auto"
            and device_type == "cuda"
            and samples is not None
            and samples >= ENGINE_COMPILE_MIN_SAMPLES
        )

    def compiles_phase2(self, device_type: str, samples: int) -> bool:
        """Whether Phase 2 compiles, for a process training on `samples` samples."""
        return self.phase2_compile == "on" or (
            self.phase2_compile == "auto"
            and device_type == "cuda"
            and samples >= PHASE2_COMPILE_MIN_SAMPLES
        )

    def lora_target_regex(self) -> str:
        """PEFT `target_modules` as a regex (full match): the named projections of the language
        model's decoder layers, never the vision tower."""
        names = "|".join(sorted(set(self.lora_targets)))
        return rf"^(?!.*visual).*language_model.*\.({names})$"

    # --- serialisation ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["lora_targets"] = list(self.lora_targets)
        data["standard_metrics"] = list(self.standard_metrics)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RigelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown Rigel settings: {', '.join(unknown)}")
        values = dict(data)
        for name in ("lora_targets", "standard_metrics"):
            if name in values and not (name == "lora_targets" and isinstance(values[name], str)):
                values[name] = tuple(values[name])
        return cls(**values)

    def replace(self, **changes: Any) -> RigelConfig:
        return dataclasses.replace(self, **changes)


def with_stored_layout(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings stored before prompt layouts existed (a run's hyper-parameters, a run spec's
    config) name none: those runs were trained on the "rubric-last" prompt and are read so."""
    return {"prompt_layout": LEGACY_LAYOUT, **settings}


HYPERPARAMETER_NAMES = tuple(
    f.name
    for f in dataclasses.fields(RigelConfig)
    if f.name not in ("backbone", "device", "ablation", "reference_free")
)
