"""What an evaluation of Rigel runs is asked for: the protocols, the runs, and which run is scored
under which protocol (each in the setting it was trained in; see the package docstring). Shared by
the campaign benchmarks and the image benchmarks (`rigel_image_benchmark`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypedDict

from training_bridge.models import TrainingRun
from training_bridge.rigel.benchmark import FOIL, PROTOCOLS, REFERENCE_FREE
from training_bridge.rigel.foil import NOUN_SWAP

PROTOCOL_CHOICES = (*PROTOCOLS, FOIL, NOUN_SWAP)
FOIL_PROTOCOLS = (FOIL, NOUN_SWAP)  # the two foil benchmarks; one of them per evaluation
CORRELATIONS = ("emscore", "default")
FOIL_SETTINGS = (REFERENCE_FREE, "reference-based")
MAX_RUNS = 8

Progress = Callable[[float, str], None]


class RigelEvaluationError(ValueError):
    """The evaluation cannot be done as asked (explained in the message)."""


# --- inputs -----------------------------------------------------------------------------------


def parse_protocols(values: Sequence[str] | str | None) -> list[str]:
    """Protocol names (repeated or comma-separated) in the table's order; default: the three
    correlation protocols."""
    if values is None or values == []:
        return list(PROTOCOLS)
    if isinstance(values, str):
        values = [values]
    names = [part.strip() for value in values for part in value.split(",") if part.strip()]
    unknown = [name for name in names if name not in PROTOCOL_CHOICES]
    if unknown or not names:
        raise RigelEvaluationError(
            f"unknown protocol(s) {', '.join(unknown) or '(none)'}; "
            f"known: {', '.join(PROTOCOL_CHOICES)}"
        )
    return [name for name in PROTOCOL_CHOICES if name in names]


def check_foil_inputs(protocols: Sequence[str], *, has_file: bool, error: type[Exception]) -> None:
    """One foil benchmark per evaluation; `foil` (ActivityNet-FOIL as published) scores a file,
    `noun-swap` generates its own pairs."""
    if FOIL in protocols and NOUN_SWAP in protocols:
        raise error("choose one foil benchmark per evaluation: foil or noun-swap")
    if FOIL in protocols and not has_file:
        raise error(
            "the foil protocol scores ActivityNet-FOIL as published and needs its file: convert "
            "the official files with `manage.py convert_activitynet_foil` and pass "
            "activitynet_foil.jsonl (or a file of your own pairs); foils generated from the "
            "campaign are the noun-swap protocol"
        )
    if has_file and FOIL not in protocols:
        raise error("a FOIL file needs the foil protocol")


def runs_for(run_ids: Sequence[int]) -> list[TrainingRun]:
    """The runs, in the order given; each must have finished with success."""
    ids = list(dict.fromkeys(int(value) for value in run_ids))
    if not ids:
        raise RigelEvaluationError("give at least one training run")
    if len(ids) > MAX_RUNS:
        raise RigelEvaluationError(f"at most {MAX_RUNS} runs in one table")
    found = {
        run.pk: run for run in TrainingRun.objects.select_related("release").filter(pk__in=ids)
    }
    missing = [str(pk) for pk in ids if pk not in found]
    if missing:
        raise RigelEvaluationError(f"no training run {', '.join(missing)}")
    unfinished = [f"{pk} ({found[pk].status})" for pk in ids if not found[pk].can_score]
    if unfinished:
        raise RigelEvaluationError(
            f"only succeeded runs can be evaluated; not finished: {', '.join(unfinished)}"
        )
    return [found[pk] for pk in ids]


def run_label(run: TrainingRun) -> str:
    return f"Rigel run {run.pk} ({run.ablation})"


REFERENCE_BASED = "reference-based"


def run_setting(run: TrainingRun) -> str:
    """The prompt setting a run was trained in (teacher pass, Phase 1 and Phase 2 alike)."""
    return REFERENCE_FREE if run.reference_free else REFERENCE_BASED


def protocol_setting(protocol: str) -> str:
    """The prompt setting a protocol (or FOIL setting) scores with."""
    return REFERENCE_FREE if protocol == REFERENCE_FREE else REFERENCE_BASED


def foil_key(setting: str) -> str:
    """FOIL's setting as the protocol plan names it ("foil reference-free")."""
    return f"foil {setting}"


def default_protocols(runs: Sequence[TrainingRun]) -> list[str]:
    """The correlation protocols of the runs' own settings, in the table's order."""
    settings = {run_setting(run) for run in runs}
    return [name for name in PROTOCOLS if protocol_setting(name) in settings]


class ProtocolPair(TypedDict):
    """A run and a protocol (or FOIL setting) of the other setting than the run was trained in."""

    run: int
    trained: str  # the run's setting
    protocol: str


@dataclass
class ProtocolPlan:
    """Which run is scored under which protocol (and FOIL setting)."""

    scored: dict[str, list[int]]  # protocol or FOIL setting -> run ids scored under it
    mismatches: list[ProtocolPair]  # scored although trained in the other setting
    skipped: list[ProtocolPair]  # not scored: trained in the other setting

    def runs_for(self, name: str) -> list[int]:
        return self.scored.get(name, [])


def protocol_plan(
    runs: Sequence[TrainingRun], protocols: Sequence[str], *, allow_mismatch: bool = False
) -> ProtocolPlan:
    """Pair each run with the protocols of its own setting; refuse a correlation protocol that no
    run was trained for, unless `allow_mismatch` (then every run is scored under every protocol
    and the mismatched pairs are listed)."""
    # (name in the plan, prompt setting): the correlation protocols, then FOIL's two settings
    names = [(name, protocol_setting(name)) for name in protocols if name not in FOIL_PROTOCOLS]
    if any(name in FOIL_PROTOCOLS for name in protocols):
        names += [(foil_key(setting), setting) for setting in FOIL_SETTINGS]
    scored: dict[str, list[int]] = {}
    mismatches: list[ProtocolPair] = []
    skipped: list[ProtocolPair] = []
    for name, setting in names:
        for run in runs:
            trained = run_setting(run)
            pair = ProtocolPair(run=run.pk, trained=trained, protocol=name)
            if trained == setting:
                scored.setdefault(name, []).append(run.pk)
            elif allow_mismatch:
                scored.setdefault(name, []).append(run.pk)
                mismatches.append(pair)
            else:
                skipped.append(pair)
    # FOIL scores each run in its own setting: every run serves one of the two
    unserved = [name for name, _ in names if name in PROTOCOLS and not scored.get(name)]
    if unserved:
        trained = ", ".join(f"run {run.pk} {run_setting(run)}" for run in runs)
        raise RigelEvaluationError(
            "protocol mismatch: no run was trained in the setting of "
            + ", ".join(f"{name} ({protocol_setting(name)})" for name in unserved)
            + f" ({trained}). The paper scores each setting with a model trained on its own "
            "prompt: train one with `manage.py train --reference-free` (or without it for 1-ref "
            "and all-refs) and evaluate that run, or score these runs anyway with `manage.py "
            "evaluate_rigel --allow-protocol-mismatch` (its output then labels every mismatched "
            "row)."
        )
    return ProtocolPlan(scored=scored, mismatches=mismatches, skipped=skipped)


def mismatch_text(pair: ProtocolPair) -> str:
    return (
        f"PROTOCOL MISMATCH: run {pair['run']} was trained {pair['trained']} and is scored here "
        f"under {pair['protocol']}; not comparable with the paper's row for this protocol"
    )


class RunIdentity(TypedDict):
    """The first fields of a run's entry in a result (`runs`); each evaluation adds its own."""

    key: str  # "run:<id>", the key of the run's rows
    run: int
    label: str
    ablation: str


class EvaluationHeader(TypedDict):
    """The part of an evaluation's result that says what was scored with what (the same keys, in
    the same order, for a campaign and an image benchmark)."""

    runs: list[RunIdentity]
    labels: dict[str, str]
    leakage: dict[str, dict[str, int]]
    protocol_runs: dict[str, list[int]]
    protocol_mismatch_allowed: bool
    protocol_mismatch: list[ProtocolPair]
    protocol_skipped: list[ProtocolPair]


def run_identity(run: TrainingRun) -> RunIdentity:
    return RunIdentity(key=f"run:{run.pk}", run=run.pk, label=run_label(run), ablation=run.ablation)


def evaluation_header(
    runs: Sequence[TrainingRun],
    plan: ProtocolPlan,
    leakage: dict[str, dict[str, int]],
    allow_mismatch: bool,
    run_entry: Callable[[TrainingRun], RunIdentity],
) -> EvaluationHeader:
    """The runs (each described by `run_entry`), their labels, the leakage counts and the protocol
    plan, as both kinds of evaluation report them. A mismatched pair is only ever scored when
    asked for, and then listed here (and flagged on its row and in its block's notes)."""
    return EvaluationHeader(
        runs=[run_entry(run) for run in runs],
        labels={f"run:{run.pk}": run_label(run) for run in runs},
        leakage=leakage,
        protocol_runs=plan.scored,
        protocol_mismatch_allowed=bool(allow_mismatch),
        protocol_mismatch=plan.mismatches,
        protocol_skipped=plan.skipped,
    )
