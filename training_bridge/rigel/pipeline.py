"""The four steps of a Rigel run — teacher pass, Phase 1, Phase 2, evaluation — as functions that
read and write a `Store` and report through a `Reporter`.

The Celery tasks (Django side) and the command line (`python -m training_bridge.rigel.cli`, also
under torchrun) call the same `run_step`. A step is idempotent: it returns at once when its outputs
exist, and it picks up its own checkpoints (teacher shards, Phase 2 checkpoints). Layout in the
store, for a run whose prefix is `training/runs/<id>`:

    training/cache/<release>/<backbone fingerprint>/<prompt version>/{train,validation}/...
    training/runs/<id>/artifacts/head.safetensors
    training/runs/<id>/artifacts/adapter/{adapter_model.safetensors,adapter_config.json}
    training/runs/<id>/artifacts/metrics.json, evaluation.json, evaluation.md
    training/runs/<id>/artifacts/scores/<split>.jsonl
    training/runs/<id>/checkpoints/phase2-step-000050.pt
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from training_bridge.rigel.config import Ablation
from training_bridge.rigel.data import (
    ExampleLoader,
    ReleaseRecord,
    TrainingRelease,
)
from training_bridge.rigel.distributed import Distributed
from training_bridge.rigel.run_context import (
    NullReporter,
    Reporter,
    RunSpec,
    load_backbone_for,
    make_engine,
    training_release,
)
from training_bridge.rigel.store import Store

STEPS = ("teacher", "phase1", "phase2", "evaluate")
MULTI_PROCESS_STEPS = ("teacher", "phase2")
TEACHER_SPLITS = ("train", "validation")


def run_step(
    step: str,
    *,
    spec: RunSpec,
    store: Store,
    reporter: Reporter | None = None,
    results: dict[str, Any] | None = None,
    checkpoint: dict[str, Any] | None = None,
    dist: Distributed | None = None,
) -> dict[str, Any]:
    """Run one step; `results` holds the earlier steps' return values, `checkpoint` the last
    checkpoint pointers ({"phase2": {"key", "step"}}). Returns this step's result (JSON-safe)."""
    reporter = reporter or NullReporter()
    results = results or {}
    checkpoint = checkpoint or {}
    dist = dist or Distributed()
    if step == "teacher":
        return step_teacher(spec=spec, store=store, reporter=reporter, dist=dist)
    if step in ("phase1", "evaluate") and dist.enabled:
        # One-process steps inside a torchrun group: rank 0 works, the others wait for its result.
        result = None
        if dist.is_main:
            result = run_step(step, spec=spec, store=store, reporter=reporter, results=results)
        return dist.broadcast_object(result)
    if step == "phase1":
        return step_phase1(spec=spec, store=store, reporter=reporter, results=results)
    if step == "phase2":
        return step_phase2(
            spec=spec,
            store=store,
            reporter=reporter,
            results=results,
            checkpoint=checkpoint.get("phase2"),
            dist=dist,
        )
    if step == "evaluate":
        return step_evaluate(spec=spec, store=store, reporter=reporter, results=results)
    raise ValueError(f"unknown step {step!r}")


def _step_inputs(
    spec: RunSpec,
    store: Store,
    reporter: Reporter,
    dist: Distributed,
    runs: Callable[[str], bool],
    name: str,
) -> tuple[TrainingRelease, Any] | None:
    """A step its ablation leaves out says so and loads nothing (None); one that runs gets the
    release and the backbone."""
    if not runs(spec.config.ablation):
        reporter.log(f"{name} skipped (ablation {spec.config.ablation})")
        return None
    return training_release(spec=spec, store=store, reporter=reporter), load_backbone_for(
        spec.config, dist
    )


# --- teacher pass -----------------------------------------------------------------------------


def step_teacher(
    *, spec: RunSpec, store: Store, reporter: Reporter, dist: Distributed
) -> dict[str, Any]:
    from training_bridge.rigel.teacher import (
        backbone_fingerprint,
        cache_prefix,
        prompt_version,
        run_teacher_split,
    )

    config = spec.config
    inputs = _step_inputs(spec, store, reporter, dist, Ablation.runs_teacher, "teacher pass")
    if inputs is None:
        return {"skipped": True}
    release, backbone = inputs
    fingerprint = backbone_fingerprint(backbone)
    version = prompt_version(
        reference_free=config.reference_free,
        frames=config.frames,
        frame_pixels=config.frame_pixels,
        layout=config.prompt_layout,
        images=any(record.is_image for split in TEACHER_SPLITS for record in release[split]),
    )
    prefix = cache_prefix(release_key=spec.release_key, fingerprint=fingerprint, version=version)
    total = sum(len(release[split]) for split in TEACHER_SPLITS)
    engine = make_engine(
        backbone,
        config,
        batch_size=config.teacher_batch_size,
        processes=dist.world_size,
        samples=total // max(1, dist.world_size),
    )
    loader = ExampleLoader(store, frames=config.frames, lazy=engine is not None)
    offsets = {"train": 0, "validation": len(release["train"])}
    computed = 0
    try:
        for split in TEACHER_SPLITS:

            def progress(done: int, _count: int, split: str = split) -> None:
                reporter.progress(
                    (offsets[split] + done) / max(1, total),
                    f"teacher pass: {split} {done}/{_count}",
                )

            computed += run_teacher_split(
                backbone=backbone,
                loader=loader,
                records=release[split],
                store=store,
                prefix=prefix,
                split=split,
                reference_free=config.reference_free,
                batch_size=config.teacher_batch_size,
                shard_size=config.teacher_shard_size,
                on_progress=progress if dist.is_main else None,
                dist=dist,
                log=reporter.log if dist.is_main else None,
                engine=engine,
            )
    finally:
        if engine is not None:
            engine.close()  # process-wide patches and compiled layers go with the step
    reused = computed == 0
    reporter.log(
        f"teacher pass: {'reused the cache' if reused else f'{computed} samples through the backbone'}"
        f" at {prefix}"
    )
    return {
        "cache_prefix": prefix,
        "fingerprint": fingerprint,
        "prompt_version": version,
        "computed": computed,
        "reused": reused,
        "samples": {split: len(release[split]) for split in TEACHER_SPLITS},
        "left_out": release.left_out_dict(),
        "hidden_size": backbone.hidden_size,
    }


# --- Phase 1 ----------------------------------------------------------------------------------


def _human_in_order(records: list[ReleaseRecord], ids: list[str]) -> list[float]:
    by_id = {record.candidate_id: record.normalized for record in records}
    return [by_id[candidate_id] for candidate_id in ids]


def step_phase1(
    *, spec: RunSpec, store: Store, reporter: Reporter, results: dict[str, Any]
) -> dict[str, Any]:
    import numpy as np

    from training_bridge.rigel.head import count_parameters, head_to_bytes
    from training_bridge.rigel.phase1 import train_head
    from training_bridge.rigel.teacher import load_split

    config = spec.config
    if not Ablation.runs_phase1(config.ablation):
        reporter.log(f"phase 1 skipped (ablation {config.ablation})")
        return {"skipped": True}
    head_key = spec.artifact("head.safetensors")
    teacher = results.get("teacher") or {}
    if "cache_prefix" not in teacher:
        raise RuntimeError("phase 1 needs the teacher pass's cache")
    release = training_release(spec=spec, store=store, reporter=reporter)
    train = load_split(store, teacher["cache_prefix"], "train")
    validation = load_split(store, teacher["cache_prefix"], "validation")
    human = np.asarray(_human_in_order(release["validation"], validation.candidate_ids))
    epochs = config.phase1_epochs

    def on_epoch(epoch: int, loss: float, tau: float) -> None:
        reporter.point(
            {
                "phase": "phase1",
                "epoch": epoch,
                "loss": loss,
                "validation_tau": None if math.isnan(tau) else tau,
            }
        )
        reporter.progress(epoch / epochs, f"phase 1: epoch {epoch}/{epochs}, tau {tau:.4f}")

    result = train_head(
        train_hidden=train.hidden,
        train_score_logits=train.score_logits,
        validation_hidden=validation.hidden,
        validation_human=human,
        temperature=config.temperature,
        learning_rate=config.phase1_learning_rate,
        weight_decay=config.phase1_weight_decay,
        batch_size=config.phase1_batch_size,
        epochs=epochs,
        patience=config.phase1_patience,
        dropout=config.head_dropout,
        seed=config.seed,
        objective=config.phase1_objective,
        on_epoch=on_epoch,
        # On a GPU worker the head trains on the GPU: 50 epochs are seconds there.
        device=config.device if config.device.startswith("cuda") else "cpu",
    )
    store.put_bytes(head_key, head_to_bytes(result.head, dropout=config.head_dropout))
    reporter.log(
        f"phase 1 ({config.phase1_objective.upper()}): best epoch {result.best_epoch} (validation tau {result.best_tau:.4f}) after "
        f"{result.epochs_run} epochs in {result.seconds:.1f} s"
    )
    return {
        "head_key": head_key,
        "head_parameters": count_parameters(result.head),
        "objective": config.phase1_objective,
        **result.summary(),
        "best_validation_tau": None if math.isnan(result.best_tau) else result.best_tau,
    }


# --- Phase 2 ----------------------------------------------------------------------------------


def _phase2_head(
    *, spec: RunSpec, store: Store, phase1_head_key: str | None, backbone: Any, dist: Distributed
) -> Any:
    """The frozen head Phase 2 trains under: Phase 1's, a random one (the random-head ablation,
    stored for scoring) or none (the LM-head ablation)."""
    from training_bridge.rigel.head import build_head, head_from_bytes, head_to_bytes

    config = spec.config
    head = None
    if config.ablation == Ablation.RANDOM_HEAD:
        # Metric (iii) of the paper: Phase 2 on a randomly initialised head, no Phase 1.
        head = build_head(backbone.hidden_size, dropout=config.head_dropout, seed=config.seed)
        if dist.is_main:
            store.put_bytes(
                spec.artifact("head.safetensors"), head_to_bytes(head, dropout=config.head_dropout)
            )
    elif Ablation.runs_phase1(config.ablation):  # full, kl_loss: the head Phase 1 distilled
        head = head_from_bytes(store.read_bytes(str(phase1_head_key)))
    if head is not None:
        head = head.to(backbone.device)
    return head


class _Phase2Checkpoints:
    """Stores Phase 2's checkpoints and keeps only the newest (written first, then the old one
    goes); `discard` removes the last once the adapter is stored."""

    def __init__(self, spec: RunSpec, store: Store, reporter: Reporter, key: str | None) -> None:
        self.spec = spec
        self.store = store
        self.reporter = reporter
        self.previous: list[str] = [str(key)] if key else []
        self.resume: bytes | None = None
        if key and store.exists(key):
            self.resume = store.read_bytes(key)

    def on_checkpoint(self, done: int, data: bytes) -> None:
        key = self.spec.checkpoint_key("phase2", done)
        self.store.put_bytes(key, data)
        self.reporter.checkpoint("phase2", key, done)
        self.reporter.log(f"phase 2: checkpoint at step {done}")
        while self.previous:
            old = self.previous.pop()
            if old != key:
                self.store.delete(old)
        self.previous.append(key)

    def discard(self) -> None:
        for old in self.previous:
            self.store.delete(old)


def step_phase2(
    *,
    spec: RunSpec,
    store: Store,
    reporter: Reporter,
    results: dict[str, Any],
    checkpoint: dict[str, Any] | None,
    dist: Distributed,
) -> dict[str, Any]:
    from training_bridge.rigel.phase2 import apply_lora, save_adapter, train_phase2

    config = spec.config
    inputs = _step_inputs(spec, store, reporter, dist, Ablation.runs_phase2, "phase 2")
    if inputs is None:
        return {"skipped": True}
    release, backbone = inputs
    # RANDOM_HEAD runs no Phase 1; the others that do stored its head.
    phase1_head_key = (
        results["phase1"]["head_key"] if Ablation.runs_phase1(config.ablation) else None
    )
    head = _phase2_head(
        spec=spec, store=store, phase1_head_key=phase1_head_key, backbone=backbone, dist=dist
    )
    apply_lora(backbone, config)
    checkpoints = _Phase2Checkpoints(spec, store, reporter, (checkpoint or {}).get("key"))
    # On CUDA the fast engine prepares the micro-batches in worker processes (file paths are
    # decoded there) and caches the frozen vision tower's features per clip.
    engine = make_engine(backbone, config, batch_size=config.phase2_micro_batch_size)

    def on_step(done: int, total: int, loss: float) -> None:
        reporter.point({"phase": "phase2", "step": done, "loss": loss})
        reporter.progress(done / total, f"phase 2: step {done}/{total}, loss {loss:.4f}")

    result = train_phase2(
        backbone=backbone,
        head=head,
        loader=ExampleLoader(store, frames=config.frames, lazy=engine is not None),
        records=release["train"],
        config=config,
        dist=dist,
        on_step=on_step,
        on_checkpoint=checkpoints.on_checkpoint,
        resume=checkpoints.resume,
        log=reporter.log if dist.is_main else None,
        engine=engine,
    )
    adapter_prefix = spec.artifact("adapter")
    if dist.is_main:
        for name, data in save_adapter(backbone.extra["peft_model"]).items():
            if name.endswith((".safetensors", ".json")):  # not PEFT's generated README
                store.put_bytes(f"{adapter_prefix}/{name}", data)
        # The adapter is stored: the resume checkpoints have served their purpose.
        checkpoints.discard()
        reporter.log(
            f"phase 2: {result.steps} steps, mean loss {result.mean_loss:.4f}"
            + (f" (resumed at step {result.resumed_from_step})" if result.resumed_from_step else "")
        )
    dist.barrier()
    return {
        "adapter_prefix": adapter_prefix,
        "head_key": spec.artifact("head.safetensors") if head is not None else None,
        "steps": result.steps,
        "samples": result.samples,
        # Table 4's "1 (image) / 1 (video)": the records of each modality Phase 2 trained on
        "modalities": {
            "video": sum(1 for record in release["train"] if not record.is_image),
            "image": sum(1 for record in release["train"] if record.is_image),
        },
        "mean_loss": result.mean_loss,
        "resumed_from_step": result.resumed_from_step,
    }


# --- evaluation -------------------------------------------------------------------------------


def load_run_model(
    *, spec: RunSpec, store: Store, results: dict[str, Any], dist: Distributed | None = None
) -> Any:
    """The trained metric of a run: backbone + adapter (if Phase 2 ran) + head (unless LM head)."""
    from training_bridge.rigel.scoring import load_trained

    config = spec.config
    backbone = load_backbone_for(config, dist or Distributed())
    adapter_files = None
    phase2 = results.get("phase2") or {}
    if phase2.get("adapter_prefix"):
        prefix = phase2["adapter_prefix"]
        adapter_files = {
            key.rsplit("/", 1)[-1]: store.read_bytes(key) for key in store.list_keys(prefix)
        }
    head_bytes = None
    if config.ablation != Ablation.LM_HEAD:
        head_key = (results.get("phase1") or {}).get("head_key") or phase2.get("head_key")
        if not head_key:
            raise RuntimeError("the run has no scoring head")
        head_bytes = store.read_bytes(head_key)
    model = load_trained(
        backbone=backbone,
        head_bytes=head_bytes,
        adapter_files=adapter_files,
        reference_free=config.reference_free,
    )
    model.engine = make_engine(
        model.backbone, config, head=model.head, batch_size=config.eval_batch_size
    )
    return model


RESULT_SPLIT = "test"
SELECTION_SPLIT = "validation"
SELECTION_NOTE = (
    "used for model selection: Phase 1 chose its epoch on this split, so its correlations are "
    "optimistic and are not results"
)
NO_TEST_NOTE = (
    "this release has no test split, so the run has no result figures; build a release with a "
    "test split (the default ratios 0.8, 0.1, 0.1) or evaluate on a benchmark campaign "
    "(manage.py evaluate_rigel)"
)


def step_evaluate(
    *, spec: RunSpec, store: Store, reporter: Reporter, results: dict[str, Any]
) -> dict[str, Any]:
    """Score the release's test split (the results) and its validation split (shown only as
    what Phase 1 selected its epoch on). A release without a test split gives no results."""
    import numpy as np

    from training_bridge.rigel.evaluate import evaluate_split, table_markdown

    config = spec.config
    release = training_release(spec=spec, store=store, reporter=reporter)
    splits = [split for split in (RESULT_SPLIT, SELECTION_SPLIT) if split in release]
    model = load_run_model(spec=spec, store=store, results=results)
    loader = ExampleLoader(store, frames=config.frames, lazy=model.engine is not None)
    total = sum(len(release[split]) for split in splits)
    done = 0
    has_test = RESULT_SPLIT in release
    table: dict[str, Any] = {
        "splits": {},
        "ablation": config.ablation,
        "result_split": RESULT_SPLIT if has_test else None,
        "selection_split": SELECTION_SPLIT,
        "notes": ([] if has_test else [NO_TEST_NOTE])
        + ([release.describe_left_out()] if release.left_out else []),
    }
    metrics: dict[str, Any] = {}
    for split in splits:
        records = release[split]
        scores: list[float] = []
        for start in range(0, len(records), config.eval_batch_size):
            chunk = records[start : start + config.eval_batch_size]
            scores.extend(model.score(loader.examples(chunk), batch_size=len(chunk)).tolist())
            done += len(chunk)
            reporter.progress(done / max(1, total), f"evaluation: {split} {done}/{total}")
        human = np.asarray([record.normalized for record in records])
        block = evaluate_split(
            rigel_scores=np.asarray(scores),
            human=human,
            candidates=[record.text for record in records],
            references=[list(record.references) for record in records],
            standard_metrics=config.standard_metrics,
        )
        if split == RESULT_SPLIT:
            block["role"] = "result"
            # The run's headline figures: the test split's only.
            metrics[split] = block["rows"]["rigel"]
        else:
            block["role"] = "model selection"
            block["notes"] = [SELECTION_NOTE, *block["notes"]]
        table["splits"][split] = block
        lines = [
            json.dumps(
                {"candidate_id": r.candidate_id, "score": s, "human": r.normalized}, sort_keys=True
            )
            for r, s in zip(records, scores, strict=True)
        ]
        store.put_bytes(spec.artifact(f"scores/{split}.jsonl"), ("\n".join(lines) + "\n").encode())
    metrics_key = spec.artifact("metrics.json")
    table_key = spec.artifact("evaluation.json")
    markdown_key = spec.artifact("evaluation.md")
    store.put_bytes(metrics_key, json.dumps(metrics, sort_keys=True, indent=2).encode())
    store.put_bytes(table_key, json.dumps(table, sort_keys=True, indent=2).encode())
    store.put_bytes(markdown_key, table_markdown(table).encode())
    if has_test:
        reporter.log(
            "evaluation: test Kendall tau_b "
            f"{metrics[RESULT_SPLIT]['kendall_b']:.1f}, tau_c {metrics[RESULT_SPLIT]['kendall_c']:.1f}"
        )
    else:
        reporter.log(f"evaluation: {NO_TEST_NOTE}")
    return {
        "metrics": metrics,
        "table": table,
        "metrics_key": metrics_key,
        "table_key": table_key,
        "markdown_key": markdown_key,
    }


ArtifactList = Callable[[dict[str, Any]], dict[str, str]]


def artifact_keys(results: dict[str, Any]) -> dict[str, str]:
    """Name -> storage key of every artifact the steps produced so far."""
    keys: dict[str, str] = {}
    phase1 = results.get("phase1") or {}
    phase2 = results.get("phase2") or {}
    evaluation = results.get("evaluate") or {}
    head_key = phase1.get("head_key") or phase2.get("head_key")
    if head_key:
        keys["head"] = head_key
    if phase2.get("adapter_prefix"):
        keys["adapter_weights"] = f"{phase2['adapter_prefix']}/adapter_model.safetensors"
        keys["adapter_config"] = f"{phase2['adapter_prefix']}/adapter_config.json"
    for name in ("metrics", "table", "markdown"):
        if evaluation.get(f"{name}_key"):
            keys[{"table": "evaluation", "markdown": "evaluation_markdown"}.get(name, name)] = (
                evaluation[f"{name}_key"]
            )
    return keys
