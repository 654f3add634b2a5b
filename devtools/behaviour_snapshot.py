"""A snapshot of what a refactor must not change, and the comparison of two snapshots.

    python3 devtools/behaviour_snapshot.py CHECKOUT --database SCRATCH_DB --out FOLDER
    python3 devtools/behaviour_snapshot.py --compare FOLDER_A FOLDER_B

A snapshot runs the checkout's own code (`CHECKOUT/.venv/bin/python manage.py ...`, cwd CHECKOUT)
on a scratch database that it drops and creates first, with a clean environment of fixed settings
(secret key, code version, var and media folders under FOLDER/.scratch), and writes to FOLDER:

- `openapi.yaml`, `openapi.json`: the OpenAPI schema (`manage.py spectacular`, the generator that
  serves /api/schema/);
- `commands/NN-name.out`: the stdout of every command run (the imports of the data the repository
  ships, VATEX-EVAL first, then every command with `--json` that runs without a GPU, model weights,
  ffmpeg or the network), and `commands/NN-name.json`: its argv, exit status, stderr and the stdout
  parsed as JSON;
- `release/files.json`: the sha256 of every file of the release built from the VATEX-EVAL
  campaign (all formats: JSONL, CSV, Parquet, README, manifest, explanations), beside a copy of
  its manifest and README; `payments/`: the payment CSVs;
- `coverage.json`: every command whose `--help` offers `--json`, and for each the steps that ran
  it or why none does.

Normalised, and only these: the scratch folder's and the checkout's absolute paths (written as
`<scratch>` and `<checkout>`); every JSON field `seconds` (how long an import or a calibration fit
took: `"<seconds>"`); and the log records on stderr are left out (time-stamped; the release
builder's carry timings and memory), the rest of stderr (notes, errors) is kept. `meta.json` (the
checkout's commit, the time) is not compared.

`--compare` diffs two snapshot folders file by file, prints every difference and exits 1 when
there is one (0 when they are identical).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_SERVER = "postgres://postgres@127.0.0.1:5432"
NOT_COMPARED = {"meta.json"}
SECONDS = re.compile(r'"seconds": -?[0-9][0-9.eE+-]*')
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")
# Settings that would otherwise make outputs depend on the machine or the run.
FIXED_ENVIRONMENT = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": "behaviour-snapshot-" + "k" * 48,  # release pseudonyms derive from it
    "LEPUS_CODE_VERSION": "behaviour-snapshot",  # named in the release manifest and README
    "TZ": "UTC",
    "PYTHONHASHSEED": "0",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
}
# The caller's configuration must not leak into the run.
DROPPED_PREFIXES = ("LEPUS_", "DJANGO_", "DATABASE_", "CELERY_", "REDIS_", "AWS_", "PG")
VATEX_EVAL = "data/vatex_eval/vid_cans_score_dict.json"
CAMPAIGN = "vatex-eval"

# Commands with --json that no step runs, and why.
SKIPPED = {
    "attach_videos": "needs video files and ffmpeg; the repository ships no videos",
    "make_demo_videos": "draws videos with ffmpeg (encoder bytes depend on the ffmpeg build)",
    "seed_demo": "builds the demo (ffmpeg-drawn videos, simulated crowd with timestamps), not "
    "VATEX-EVAL",
    "backup": "the pg_dump holds created_at timestamps, so its bytes and sha256 change per run",
    "restore": "needs a backup (see backup) and an empty database",
    "score": "scores with a trained Rigel model (weights, a torch backbone)",
    "evaluate_rigel": "needs a trained Rigel model (weights)",
    "train": "trains Rigel (a vision-language backbone's weights; GPU for real runs)",
    "resume_training": "resumes a training run (weights)",
    "convert_lclip": "converts an external benchmark download (not shipped)",
    "convert_activitynet_foil": "converts an external benchmark download (not shipped)",
}


@dataclass
class Step:
    name: str
    argv: list[str]
    # Paths (relative to the scratch folder) of files the command writes, hashed into the record.
    writes: list[str] = field(default_factory=list)


def steps() -> list[Step]:
    """The commands, in order, on the freshly migrated database."""
    return [
        # Imports of the data the repository ships: VATEX-EVAL, then the documented examples.
        Step("import_vatex_eval", ["import_vatex_eval", VATEX_EVAL, "--json"]),
        Step("import_vatex_eval-again", ["import_vatex_eval", VATEX_EVAL, "--json"]),
        Step(
            "import_vatex_eval-refused", ["import_vatex_eval", "docs/examples/vatex.json", "--json"]
        ),
        Step("import_vatex", ["import_vatex", "docs/examples/vatex.json", "--json"]),
        Step(
            "import_candidates-jsonl",
            ["import_candidates", "docs/examples/candidates.jsonl", "--json"],
        ),
        Step(
            "import_candidates-csv", ["import_candidates", "docs/examples/candidates.csv", "--json"]
        ),
        Step(
            "import_candidates-scenes",
            ["import_candidates", "data/demo_scenes/scenes.jsonl", "--json"],
        ),
        Step(
            "import_judgments-jsonl",
            [
                "import_judgments",
                "docs/examples/judgments.jsonl",
                "--campaign",
                "examples-jsonl",
                "--json",
            ],
        ),
        Step(
            "import_judgments-csv",
            [
                "import_judgments",
                "docs/examples/judgments.csv",
                "--campaign",
                "examples-csv",
                "--json",
            ],
        ),
        Step(
            "import_judgments-refused",
            ["import_judgments", "docs/examples/judgments.jsonl", "--campaign", CAMPAIGN, "--json"],
        ),
        Step(
            "import_images",
            [
                "import_images",
                "docs/examples/images/images.jsonl",
                "--images",
                "docs/examples/images",
                "--campaign",
                "images-examples",
                "--json",
            ],
        ),
        # The figures of the VATEX-EVAL campaign.
        Step("stats", ["stats", "--json"]),
        Step("agreement", ["agreement", CAMPAIGN, "--json"]),
        Step("run_qc", ["run_qc", CAMPAIGN, "--json"]),
        Step("calibrate", ["calibrate", CAMPAIGN, "--workers", "--json"]),
        Step("retest", ["retest", CAMPAIGN, "--json"]),
        Step("review_queue", ["review_queue", CAMPAIGN, "--json"]),
        Step("agreement-snapshot", ["agreement", CAMPAIGN, "--snapshot", "--json"]),
        Step(
            "payments_export-full",
            [
                "payments_export",
                "--campaign",
                CAMPAIGN,
                "--format",
                "full",
                "--output",
                "{scratch}/payments/full.csv",
                "--json",
            ],
            writes=["payments/full.csv"],
        ),
        Step(
            "payments_export-prolific",
            [
                "payments_export",
                "--campaign",
                CAMPAIGN,
                "--output",
                "{scratch}/payments/prolific.csv",
                "--json",
            ],
            writes=["payments/prolific.csv"],
        ),
        Step("evaluate_metrics-list", ["evaluate_metrics", "--list", "--json"]),
        Step(
            "evaluate_metrics-lexical",
            [
                "evaluate_metrics",
                "--campaign",
                CAMPAIGN,
                "--metrics",
                "bleu1,bleu4,rougeL,cider",
                "--json",
            ],
        ),
        Step(
            "evaluate_metrics-save",
            [
                "evaluate_metrics",
                "--campaign",
                CAMPAIGN,
                "--metrics",
                "bleu4",
                "--refs",
                "1",
                "--save",
                "--json",
            ],
        ),
        Step(
            "create_campaign",
            [
                "create_campaign",
                "--slug",
                "snapshot-crowd",
                "--system",
                "scene-template-writer",
                "--judgments-per-candidate",
                "3",
                "--json",
            ],
        ),
        Step(
            "create_curator",
            [
                "create_curator",
                "--username",
                "snapshot-curator",
                "--password",
                "snapshot-password-1234",
                "--json",
            ],
        ),
        Step(
            "erase_participant-dry-run",
            ["erase_participant", "--participation", "1", "--dry-run", "--json"],
        ),
        Step("webhooks-list", ["webhooks", "--json", "list"]),
        Step("check_retraining-before", ["check_retraining", "--dry-run", "--json"]),
        # The release (every format; raw judgments bring the explanations file), then its checks.
        Step(
            "build_release",
            ["build_release", "--campaign", CAMPAIGN, "--raw-judgments", "--inline", "--json"],
        ),
        Step("verify_release", ["verify_release", "1", "--json"]),
        Step(
            "evaluate_metrics-release",
            ["evaluate_metrics", "--release", "1", "--metrics", "bleu4,cider", "--json"],
        ),
        Step("fit_metric", ["fit_metric", "--release", "1", "--metric", "bleu4", "--json"]),
        Step("check_retraining-after", ["check_retraining", "--dry-run", "--json"]),
        Step(
            "make_demo_scenes",
            ["make_demo_scenes", "--no-videos", "--out", "{scratch}/scenes", "--json"],
            writes=["scenes/scenes.jsonl", "scenes/intended.jsonl"],
        ),
        Step("stats-after", ["stats", "--json"]),
    ]


def normalised_stdout(stdout: str) -> tuple[str, Any]:
    """The stdout with every `"seconds": <number>` (how long something took) as "<seconds>", and
    that text parsed as JSON (None when it is not JSON)."""
    stdout = SECONDS.sub('"seconds": "<seconds>"', stdout)
    parsed = None
    with contextlib.suppress(ValueError):  # a refusal or a crash prints no JSON
        parsed = json.loads(stdout)
    return stdout, parsed


def normalised_stderr(stderr: str) -> list[str]:
    """The stderr lines without log records (each stamped with its time; the release builder's
    also carry timings and memory): what stays is the commands' own notes and errors."""
    return [line for line in stderr.splitlines() if not LOG_RECORD.match(line)]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Snapshot:
    def __init__(
        self, *, checkout: Path, database: str, out: Path, server: str, python: Path
    ) -> None:
        self.checkout = checkout.resolve()
        self.database = database
        self.out = out.resolve()
        self.scratch = self.out / ".scratch"
        self.server = server.rstrip("/")
        self.python = python
        self.environment = self._environment()

    def _environment(self) -> dict[str, str]:
        kept = {
            key: value for key, value in os.environ.items() if not key.startswith(DROPPED_PREFIXES)
        }
        return {
            **kept,
            **FIXED_ENVIRONMENT,
            "DATABASE_URL": f"{self.server}/{self.database}",
            "LEPUS_VAR_DIR": str(self.scratch / "var"),
            "LEPUS_MEDIA_ROOT": str(self.scratch / "media"),
        }

    def normalise(self, text: str) -> str:
        return text.replace(str(self.scratch), "<scratch>").replace(
            str(self.checkout), "<checkout>"
        )

    def manage(self, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run(
            [str(self.python), "manage.py", *argv],
            cwd=self.checkout,
            env=self.environment,
            capture_output=True,
            text=True,
            check=False,
        )
        if check and completed.returncode != 0:
            raise SystemExit(
                f"manage.py {' '.join(argv)} failed ({completed.returncode}):\n{completed.stderr}"
            )
        return completed

    def run(self) -> None:
        if self.out.exists():
            shutil.rmtree(self.out)
        (self.out / "commands").mkdir(parents=True)
        self.scratch.mkdir()
        self._fresh_database()
        self.manage(["migrate", "--noinput", "-v", "0"])
        self._schema()
        json_commands = self._json_commands()
        ran: dict[str, list[str]] = {}
        for number, step in enumerate(steps(), start=1):
            self._step(number, step)
            ran.setdefault(step.argv[0], []).append(step.name)
        self._release()
        self._coverage(json_commands, ran)
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=self.checkout,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        meta = {
            "checkout": str(self.checkout),
            "commit": commit,
            "database": self.database,
            "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self._write("meta.json", json.dumps(meta, indent=2) + "\n")
        shutil.rmtree(self.scratch)

    def _fresh_database(self) -> None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", self.database):
            raise SystemExit(f"{self.database!r} is not a plain database name")
        maintenance = f"{self.server}/postgres"
        for statement in (
            f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)',
            f'CREATE DATABASE "{self.database}"',
        ):
            subprocess.run(
                ["psql", maintenance, "-v", "ON_ERROR_STOP=1", "-q", "-c", statement],
                check=True,
                env=self.environment,
            )

    def _schema(self) -> None:
        for name, form in (("openapi.yaml", "openapi"), ("openapi.json", "openapi-json")):
            target = self.scratch / name
            self.manage(["spectacular", "--format", form, "--file", str(target)])
            shutil.copyfile(target, self.out / name)

    def _json_commands(self) -> list[str]:
        """Every management command whose --help offers --json (asked of the checkout's Django)."""
        probe = (
            "from django.core.management import get_commands, load_command_class\n"
            "for name, app in sorted(get_commands().items()):\n"
            "    parser = load_command_class(app, name).create_parser('manage.py', name)\n"
            "    if '--json' in parser.format_help():\n"
            "        print('json-command', name)\n"
        )
        lines = self.manage(["shell", "-c", probe]).stdout.splitlines()
        return [line.split()[1] for line in lines if line.startswith("json-command ")]

    def _step(self, number: int, step: Step) -> None:
        argv = [part.replace("{scratch}", str(self.scratch)) for part in step.argv]
        for relative in step.writes:
            (self.scratch / relative).parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        completed = self.manage(argv, check=False)
        elapsed = time.monotonic() - started
        stdout, parsed = normalised_stdout(self.normalise(completed.stdout))
        record = {
            "argv": [self.normalise(part) for part in argv],
            "returncode": completed.returncode,
            "stdout_json": parsed,
            "stderr": normalised_stderr(self.normalise(completed.stderr)),
            "writes": {
                relative: sha256(self.scratch / relative)
                for relative in step.writes
                if (self.scratch / relative).is_file()
            },
        }
        stem = f"commands/{number:02d}-{step.name}"
        self._write(f"{stem}.out", stdout)
        self._write(f"{stem}.json", json.dumps(record, indent=2, sort_keys=True) + "\n")
        for relative in step.writes:
            if (self.scratch / relative).is_file():
                target = self.out / "written" / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.scratch / relative, target)
        status = "ok" if completed.returncode == 0 else f"exit {completed.returncode}"
        print(f"{number:02d} {step.name}: {status} ({elapsed:.1f} s)", file=sys.stderr)

    def _release(self) -> None:
        """Hash every file of the built release as it lies in storage (local media root)."""
        root = self.scratch / "media"
        files = {
            str(path.relative_to(root)): sha256(path)
            for path in sorted(root.rglob("*"))
            if path.is_file() and path.relative_to(root).parts[0] == "releases"
        }
        if not files:
            raise SystemExit(f"no release files under {root}/releases")
        self._write("release/files.json", json.dumps(files, indent=2, sort_keys=True) + "\n")
        for relative in files:
            if relative.endswith(("manifest.json", "README.md")):
                target = self.out / "release" / Path(relative).name
                shutil.copyfile(root / relative, target)

    def _coverage(self, json_commands: list[str], ran: dict[str, list[str]]) -> None:
        coverage = {
            name: {"steps": ran[name]}
            if name in ran
            else {"skipped": SKIPPED.get(name, "NOT PLANNED: add a step or a reason")}
            for name in json_commands
        }
        self._write("coverage.json", json.dumps(coverage, indent=2, sort_keys=True) + "\n")
        unplanned = [
            name for name, entry in coverage.items() if "NOT PLANNED" in entry.get("skipped", "")
        ]
        if unplanned:
            print(
                f"commands with --json that no step runs: {', '.join(unplanned)}", file=sys.stderr
            )

    def _write(self, relative: str, text: str) -> None:
        target = self.out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def compare(first: Path, second: Path) -> int:
    """Print every difference between two snapshot folders; the number of differing files."""

    def files(root: Path) -> set[str]:
        return {
            str(path.relative_to(root))
            for path in root.rglob("*")
            if path.is_file() and str(path.relative_to(root)) not in NOT_COMPARED
        }

    left, right = files(first), files(second)
    differences = 0
    for relative in sorted(left - right):
        print(f"only in {first}: {relative}")
        differences += 1
    for relative in sorted(right - left):
        print(f"only in {second}: {relative}")
        differences += 1
    for relative in sorted(left & right):
        a, b = (first / relative).read_bytes(), (second / relative).read_bytes()
        if a == b:
            continue
        differences += 1
        print(f"differs: {relative}")
        try:
            a_lines, b_lines = a.decode().splitlines(), b.decode().splitlines()
        except UnicodeDecodeError:
            print("  (binary)")
            continue
        diff = list(
            difflib.unified_diff(
                a_lines, b_lines, f"{first}/{relative}", f"{second}/{relative}", lineterm="", n=2
            )
        )
        for line in diff[:200]:
            print(f"  {line}")
        if len(diff) > 200:
            print(f"  ... {len(diff) - 200} more diff lines")
    return differences


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "checkout", nargs="?", type=Path, help="The checkout whose behaviour to record."
    )
    parser.add_argument("--database", help="Scratch database (dropped and created).")
    parser.add_argument("--out", type=Path, help="Snapshot folder (replaced).")
    parser.add_argument(
        "--server", default=DEFAULT_SERVER, help=f"PostgreSQL server URL ({DEFAULT_SERVER})."
    )
    parser.add_argument(
        "--python", type=Path, default=None, help="Interpreter (CHECKOUT/.venv/bin/python)."
    )
    parser.add_argument(
        "--compare", nargs=2, type=Path, metavar=("A", "B"), help="Diff two snapshots."
    )
    options = parser.parse_args(argv)
    if options.compare:
        first, second = options.compare
        for folder in (first, second):
            if not (folder / "coverage.json").is_file():
                parser.error(f"{folder} is not a snapshot folder (no coverage.json)")
        differences = compare(first, second)
        print(f"{differences} differing file(s)" if differences else "identical")
        return 1 if differences else 0
    if options.checkout is None or not options.database or options.out is None:
        parser.error("give CHECKOUT --database NAME --out FOLDER, or --compare A B")
    python = options.python or options.checkout / ".venv" / "bin" / "python"
    Snapshot(
        checkout=options.checkout,
        database=options.database,
        out=options.out,
        server=options.server,
        python=python,
    ).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
