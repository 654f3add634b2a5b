"""Command line of the method, without Django: one step, or a whole run, on a store.

    # one step (what a Celery task launches under torchrun for several GPUs)
    torchrun --nproc_per_node 4 -m training_bridge.rigel.cli step teacher \
        --spec spec.json --store /srv/lepus/media [--results results.json] [--checkpoint ck.json]

    # a whole run on a release folder, single process
    python -m training_bridge.rigel.cli run --store /srv/lepus/media --release releases/3 \
        --run-prefix training/runs/local-1 --backbone tiny --set phase1_epochs=5

    # an image benchmark's published judgment files -> the generic image JSONL (prints one JSON
    # object: what was written); see training_bridge/rigel/image_converters.py, docs/metrics.md
    python -m training_bridge.rigel.cli convert-images flickr8k-expert \
        --annotations ExpertAnnotations.txt --captions Flickr8k.token.txt --out expert.jsonl

`--store` is a local folder laid out like the storage keys or `s3://bucket/prefix` (endpoint and
region from LEPUS_S3_ENDPOINT_URL / LEPUS_S3_REGION, credentials from the usual AWS variables).
Under torchrun every process runs the same step on its share of the data (DistributedSampler-style
striding, gradients all-reduced); rank 0 writes the outputs. Events go to stdout as JSON lines
prefixed with `@@rigel ` (progress, curve points, log lines, checkpoints, and the final result), so
a parent process can relay them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from training_bridge.rigel.config import RigelConfig
from training_bridge.rigel.distributed import Distributed
from training_bridge.rigel.pipeline import STEPS, RunSpec, run_step
from training_bridge.rigel.run_context import CurvePoint
from training_bridge.rigel.store import store_from_location

EVENT_PREFIX = "@@rigel "


class StdoutReporter:
    """Reports as JSON lines on stdout (rank 0 only)."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled

    def _emit(self, payload: dict[str, Any]) -> None:
        if self.enabled:
            sys.stdout.write(EVENT_PREFIX + json.dumps(payload, sort_keys=True, default=str) + "\n")
            sys.stdout.flush()

    def progress(self, fraction: float, message: str) -> None:
        self._emit({"event": "progress", "fraction": fraction, "message": message})

    def point(self, values: CurvePoint) -> None:
        self._emit({"event": "point", "values": values})

    def log(self, message: str) -> None:
        self._emit({"event": "log", "message": message})

    def checkpoint(self, phase: str, key: str, step: int) -> None:
        self._emit({"event": "checkpoint", "phase": phase, "key": key, "step": step})

    def result(self, step: str, value: dict[str, Any]) -> None:
        self._emit({"event": "result", "step": step, "result": value})


def parse_event(line: str) -> dict[str, Any] | None:
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        return json.loads(line[len(EVENT_PREFIX) :])
    except json.JSONDecodeError:
        return None


def _store(location: str) -> Any:
    return store_from_location(
        location,
        endpoint_url=os.environ.get("LEPUS_S3_ENDPOINT_URL") or None,
        region=os.environ.get("LEPUS_S3_REGION") or None,
    )


def _read_json(path: str | None) -> dict[str, Any]:
    return json.loads(Path(path).read_text()) if path else {}


def _settings(pairs: list[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for pair in pairs:
        name, _, raw = pair.partition("=")
        try:
            values[name] = json.loads(raw)
        except json.JSONDecodeError:
            values[name] = raw
    return values


def command_step(args: argparse.Namespace) -> int:
    spec = RunSpec.from_dict(_read_json(args.spec))
    dist = Distributed.initialise(spec.config.device)
    reporter = StdoutReporter(enabled=dist.is_main)
    results = _read_json(args.results)
    checkpoint = _read_json(args.checkpoint)
    try:
        for step in args.steps:
            results[step] = run_step(
                step,
                spec=spec,
                store=_store(args.store),
                reporter=reporter,
                results=results,
                checkpoint=checkpoint,
                dist=dist,
            )
            reporter.result(step, results[step])
    finally:
        if dist.enabled:
            import torch

            torch.distributed.destroy_process_group()
    return 0


def command_run(args: argparse.Namespace) -> int:
    config = RigelConfig.from_dict(
        {"backbone": args.backbone, "device": args.device, **_settings(args.set)}
    )
    spec = RunSpec(
        run_prefix=args.run_prefix,
        release_prefix=args.release,
        release_key=args.release_key or args.release.strip("/").replace("/", "-"),
        config=config,
    )
    store = _store(args.store)
    results: dict[str, Any] = {}
    checkpoint: dict[str, Any] = {}

    class Recording(StdoutReporter):
        def checkpoint(self, phase: str, key: str, step: int) -> None:
            checkpoint[phase] = {"key": key, "step": step}
            super().checkpoint(phase, key, step)

    reporter = Recording(enabled=True)
    for step in STEPS:
        results[step] = run_step(
            step, spec=spec, store=store, reporter=reporter, results=results, checkpoint=checkpoint
        )
        reporter.result(step, results[step])
    return 0


def command_convert_images(args: argparse.Namespace) -> int:
    from training_bridge.rigel import image_converters as converters
    from training_bridge.rigel.image_benchmarks import ImageBenchmarkError

    def lines(path: str) -> list[str]:
        return Path(path).read_text(encoding="utf-8", errors="replace").splitlines()

    try:
        if args.format in ("flickr8k-expert", "flickr8k-cf"):
            if not args.annotations or not args.captions:
                raise ImageBenchmarkError(f"{args.format} needs --annotations and --captions")
            captions = converters.read_flickr_captions(lines(args.captions[0]))
            convert = (
                converters.flickr8k_expert
                if args.format == "flickr8k-expert"
                else converters.flickr8k_cf
            )
            (annotations,) = args.annotations
            converted = convert(lines(annotations), captions, name=Path(annotations).name)
        elif args.format == "composite":
            if not args.annotations or not (args.captions or args.coco_captions):
                raise ImageBenchmarkError(
                    "composite needs --annotations (the AMT CSVs) and the references "
                    "(--captions token files and/or --coco-captions)"
                )
            references: dict[str, list[str]] = {}
            for path in args.captions or []:
                references.update(
                    converters.flickr_references(converters.read_flickr_captions(lines(path)))
                )
            for path in args.coco_captions or []:
                data = json.loads(Path(path).read_text(encoding="utf-8"))
                references.update(converters.read_coco_captions(data))
            files = [(Path(path).name, lines(path)) for path in args.annotations]
            converted = converters.composite(files, references)
        else:
            if not args.annotations:
                raise ImageBenchmarkError("nebula needs --annotations (a Parquet or JSONL file)")
            images_out = Path(args.images_out) if args.images_out else None
            if images_out is not None:
                images_out.mkdir(parents=True, exist_ok=True)
            low, high = args.scale
            rows = (
                row for path in args.annotations for row in converters.read_nebula_rows(Path(path))
            )
            converted = converters.nebula(rows, scale=(low, high), images_out=images_out)
        counts = converters.write_jsonl(converted, Path(args.out))
    except (ImageBenchmarkError, OSError, KeyError, json.JSONDecodeError) as error:
        print(json.dumps({"error": str(error)}), file=sys.stderr)
        return 2
    print(json.dumps({"format": args.format, "out": args.out, **counts}, sort_keys=True))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training_bridge.rigel.cli")
    commands = parser.add_subparsers(dest="command", required=True)

    step = commands.add_parser("step", help="run steps of a run, in order (torchrun-aware)")
    step.add_argument("steps", nargs="+", choices=STEPS, metavar="STEP")
    step.add_argument("--spec", required=True, help="JSON file of the RunSpec")
    step.add_argument("--store", required=True, help="folder or s3://bucket/prefix")
    step.add_argument("--results", help="JSON file: results of the earlier steps")
    step.add_argument("--checkpoint", help="JSON file: last checkpoint pointers")
    step.set_defaults(handler=command_step)

    run = commands.add_parser("run", help="a whole run on a release, one process")
    run.add_argument("--store", required=True)
    run.add_argument("--release", required=True, help="storage prefix of the release")
    run.add_argument("--release-key", default="", help="cache identity (default: from --release)")
    run.add_argument("--run-prefix", required=True)
    run.add_argument("--backbone", default="tiny")
    run.add_argument("--device", default="cpu")
    run.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    run.set_defaults(handler=command_run)

    from training_bridge.rigel.image_converters import FORMATS

    convert = commands.add_parser(
        "convert-images", help="an image benchmark's judgment files -> the generic image JSONL"
    )
    convert.add_argument("format", choices=FORMATS)
    convert.add_argument(
        "--annotations",
        nargs="+",
        help="ExpertAnnotations.txt / CrowdFlowerAnnotations.txt, the Composite AMT CSVs, or "
        "Nebula's Parquet (or JSONL) file(s)",
    )
    convert.add_argument(
        "--captions",
        nargs="+",
        help="Flickr token files (Flickr8k.token.txt, results_20130124.token)",
    )
    convert.add_argument(
        "--coco-captions", nargs="+", help="COCO captions_val2014.json (Composite)"
    )
    convert.add_argument("--images-out", help="Nebula: write the Parquet's pictures to this folder")
    convert.add_argument(
        "--scale",
        nargs=2,
        type=float,
        default=(0.0, 1.0),
        metavar=("LOW", "HIGH"),
        help="Nebula: the scale of human_score (default 0 1)",
    )
    convert.add_argument("--out", required=True, help="the image JSONL to write")
    convert.set_defaults(handler=command_convert_images)

    args = parser.parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
