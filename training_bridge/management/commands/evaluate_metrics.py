"""`manage.py evaluate_metrics`: correlation of the caption metrics of the registry
(`training_bridge.metrics.plugins`: BLEU, ROUGE-L, METEOR, CIDEr-D, CLIP-S, RefCLIP-S, EMScore,
L-CLIPScore, the generative judges, CaptionQA) with the human scores of a campaign or a release,
without training anything. `--list` lists every metric with whether it can run here; `--save`
stores a campaign's table for the Metrics leaderboard page.

    python manage.py evaluate_metrics --campaign vatex-eval --refs 1 --protocol emscore --json \
        --set clip_model=/models/clip-vit-base-patch32 \
        --emscore-idf-corpus /data/vatex/vatex_training_v1.0.json
    -> {"bleu1": {"kendall_b": 12.2, "kendall_c": ..., "spearman": ..., "pearson": ...}, ...}

Values are x100. A metric that cannot run here (METEOR without Java, a learned metric without its
weights, a video metric on clips without video) keeps its row with null values and an
"unavailable" reason.
"""

from __future__ import annotations

from typing import Any, cast

from django.core.management.base import CommandError

from annotation.management.campaign_command import campaign_by_slug
from common.management.arguments import command_errors
from common.management.base import LepusCommand
from common.management.declared import Arg, flag
from training_bridge.management.options import METRIC_SETTING, METRICS, REFS, RELEASE
from training_bridge.metrics.benchmark import CORRELATION_KEYS, PROTOCOLS, Protocol
from training_bridge.metrics.plugins import (
    LABELS,
    METRIC_NAMES,
    SETTING_KEYS,
    TABLE_METRICS,
    available_metrics,
)
from training_bridge.services.metric_benchmark import MetricBenchmarkError, metric_benchmark_compute
from training_bridge.services.metric_leaderboard import metric_board_save


def _reference_count(value: str) -> int | None:
    if value == "all":
        return None
    try:
        count = int(value)
    except ValueError:
        raise CommandError(f"--refs must be a positive number or 'all', not {value!r}")
    if count < 1:
        raise CommandError("--refs must be at least 1")
    return count


def _metric_list(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in METRIC_NAMES]
    if unknown or not names:
        raise CommandError(
            f"unknown metric(s) {', '.join(unknown) or '(none)'}; known: {', '.join(METRIC_NAMES)}"
        )
    return names


def _settings(values: list[str] | None) -> dict[str, str]:
    settings: dict[str, str] = {}
    for value in values or []:
        key, separator, setting = value.partition("=")
        key = key.strip()
        if not separator or key not in SETTING_KEYS:
            raise CommandError(
                f"--set takes KEY=VALUE with KEY one of {', '.join(SETTING_KEYS)}, not {value!r}"
            )
        settings[key] = setting.strip()
    return settings


class Command(LepusCommand):
    """Correlate caption metrics (BLEU, ROUGE-L, METEOR, CIDEr-D, CLIP-S, RefCLIP-S, EMScore,
    L-CLIPScore) with the human scores of a campaign or a release: Kendall tau_b and tau_c,
    Spearman, Pearson (x100)."""

    arguments = (
        Arg("--campaign", help="Campaign slug (with --release: only its records)."),
        RELEASE.but(help="Release id: use the release's records."),
        Arg(
            "--split",
            action="append",
            dest="splits",
            help="With --release: only this split (repeatable; default: every split).",
        ),
        REFS.but(help="References per candidate: the first N (e.g. 1), or 'all' (default)."),
        Arg(
            "--protocol",
            choices=[protocol for protocol in PROTOCOLS if protocol != "default"],
            help="emscore: the VATEX-EVAL protocol of the EMScore paper (scores rounded to 4 "
            "decimals, correlations per rater slot, averaged). Default: against the overall score.",
        ),
        METRICS.but(
            help=f"Comma-separated metrics (default {','.join(TABLE_METRICS)}; "
            f"known: {','.join(METRIC_NAMES)}).",
        ),
        METRIC_SETTING.but(
            dest="metric_settings",
            help="A metric setting (repeatable): clip_model=PATH|MODEL_ID, lclip_model=..., "
            "clip_prompt=..., emscore_idf=true|false, device=cpu|cuda, batch_size=N, frames=N, "
            "meteor_jar=PATH, judge_model=..., captionqa_model=..., captionqa_questions=FILE. "
            "Weights are never downloaded (see docs/metrics.md).",
        ),
        Arg(
            "--emscore-idf-corpus",
            metavar="PATH",
            help="A file of captions EMScore takes its IDF from (text, one caption a line, or "
            "JSON: a list, {id: [captions]} or VATEX's vatex_training_v1.0.json). The EMScore "
            "authors' VATEX-EVAL protocol uses the VATEX training captions; without this the IDF "
            "comes from the scored batch (said loudly under --protocol emscore).",
        ),
        flag(
            "--save",
            help="Store the table for the Metrics leaderboard page (needs --campaign, no "
            "--release): the page shows the latest per campaign, protocol and --refs.",
        ),
        flag(
            "--list",
            help="List every metric with whether it can run here (with the --set settings) and, "
            "if not, why; scores nothing.",
        ),
    )

    def _list(self, settings: dict[str, str]) -> None:
        with command_errors(ValueError):
            available, unavailable = available_metrics(settings, METRIC_NAMES)
        listing = {
            name: {
                "label": LABELS.get(name, name),
                "available": name in available,
                "unavailable": unavailable.get(name),
                "in_table": name in TABLE_METRICS,
            }
            for name in METRIC_NAMES
        }
        width = max(len(name) for name in listing)
        lines = [
            f"{name:<{width}} {entry['label']:<22} "
            + ("available" if entry["available"] else f"unavailable: {entry['unavailable']}")
            for name, entry in listing.items()
        ]
        self.emit({"metrics": listing}, human="\n".join(lines))

    def handle(self, *args: Any, **options: Any) -> None:
        if options["list"]:
            self._list(_settings(options["metric_settings"]))
            return
        campaign = campaign_by_slug(options["campaign"]) if options["campaign"] else None
        if campaign is None and options["release"] is None:
            raise CommandError("give --campaign SLUG, --release ID, or both")
        if options["save"] and (campaign is None or options["release"] is not None):
            raise CommandError(
                "--save stores a campaign's table: give --campaign without --release"
            )
        protocol = cast(Protocol, options["protocol"] or "default")
        reference_count = _reference_count(str(options["refs"]))
        metrics = _metric_list(options["metrics"])
        settings = _settings(options["metric_settings"])
        if options["emscore_idf_corpus"]:
            settings["emscore_idf_corpus"] = options["emscore_idf_corpus"]
        emscore_rows = {"emscore", "emscore_ref"} & set(metrics)
        if protocol == "emscore" and emscore_rows and not settings.get("emscore_idf_corpus"):
            self.stderr.write(
                self.style.WARNING(
                    "WARNING: EMScore's IDF falls back to the scored batch: the EMScore authors' "
                    "VATEX-EVAL protocol takes it from the VATEX training captions, which this "
                    "repository does not ship; give --emscore-idf-corpus PATH to reproduce it."
                )
            )
        self.note(
            f"scoring {', '.join(metrics)} with {options['refs']} reference(s), "
            f"protocol {protocol} ..."
        )
        judged: dict[str, Any] = {}

        def keep_answers(name: str, metric: Any) -> None:
            # A generative judge's answers (score, per-criterion explanation) for --save.
            if getattr(metric, "records", None):
                judged[name] = list(metric.records)

        with command_errors(MetricBenchmarkError):
            table, benchmark = metric_benchmark_compute(
                campaign=campaign,
                release_id=options["release"],
                splits=options["splits"],
                reference_count=reference_count,
                protocol=protocol,
                metrics=metrics,
                settings=settings,
                progress=lambda step: self.note(f"  {step} ..."),
                scored=keep_answers,
            )
        if options["save"]:
            assert campaign is not None
            board = metric_board_save(
                campaign=campaign,
                protocol=protocol,
                reference_count=reference_count,
                table=table,
                candidates=len(benchmark.candidates),
                references_per_candidate=max((len(r) for r in benchmark.references), default=0)
                or None,
                settings=settings,
                keys=benchmark.keys,
                judged=judged if len(benchmark.keys) == len(benchmark.candidates) else {},
            )
            self.note(f"saved as metrics table {board.pk} (the Metrics page shows it)")
        self.emit(table, human=_human_table(table, candidates=len(benchmark.candidates)))


def _human_table(table: dict[str, dict[str, Any]], *, candidates: int) -> str:
    width = max([8, *(len(metric) for metric in table)])
    lines = [f"{'metric':<{width}} " + " ".join(f"{key:>10}" for key in CORRELATION_KEYS)]
    for metric, row in table.items():
        if row.get("unavailable"):
            lines.append(f"{metric:<{width}} unavailable: {row['unavailable']}")
            continue
        cells = [
            "      n/a" if row[key] is None else f"{row[key]:>10.2f}" for key in CORRELATION_KEYS
        ]
        lines.append(f"{metric:<{width}} " + " ".join(cells))
        if row.get("idf"):
            lines.append(f"{'':<{width}} IDF {row['idf']}; {row['frames']} frames per clip")
    lines.append(f"({candidates} candidates; values x100)")
    return "\n".join(lines)
