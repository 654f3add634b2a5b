"""Scaling curves: quality control (statistics, rules, exclusions, agreement, review queue,
aggregation) and release builds at growing numbers of judgments — wall time, CPU and peak memory
per size, the growth rate between sizes, and a plot.

    python bench/scaling_curves.py --sizes 10000,100000,1000000 --runs 3
    python bench/scaling_curves.py --sizes 10000000 --runs 1 --only qc
    python bench/scaling_curves.py --plot RAW.json [RAW.json ...] --png docs/img/scaling_curves.png

Each size reuses the world builders of `bench/qc_scale.py` (a campaign generated inside
PostgreSQL, 100 judgments per worker, 1 worker in 50 a spammer) and `bench/release_scale.py`
(clips with references, 6 candidates per clip, 3 judgments per candidate), each in its own
scratch database that is dropped afterwards. Every measurement is one of those scripts run as a
child process (which writes its own raw file too); this script adds the 1-minute load average
before and after each child, stores everything in one raw file (`bench/provenance.py`) and
states the growth exponent k of time ∝ size^k between successive sizes (k = 1 is linear).

The plot is drawn with Pillow (a pinned requirement; matplotlib is not installed).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from provenance import write_raw  # noqa: E402

JUDGMENTS_PER_WORKER = 100


def _load1() -> float:
    return round(os.getloadavg()[0], 2)


def _database_url(suffix: str) -> str:
    sys.path.insert(0, str(ROOT))
    from config.env import load_dotenv_file

    load_dotenv_file(str(ROOT / ".env"))
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/lepus")
    parsed = urlparse(base)
    return urlunparse(parsed._replace(path=f"{parsed.path.split('?')[0]}_{suffix}"))


def _drop_database(database_url: str) -> None:
    import psycopg2

    parsed = urlparse(database_url)
    admin = psycopg2.connect(urlunparse(parsed._replace(path="/postgres")))
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{parsed.path.lstrip("/")}" WITH (FORCE)')
    admin.close()


def _run(command: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run a bench script; returns its JSON output and the conditions around it."""
    load_before, started = _load1(), time.perf_counter()
    done = subprocess.run(command, cwd=str(ROOT), capture_output=True, text=True)
    conditions = {
        "command": command[1:],
        "wall_seconds": round(time.perf_counter() - started, 1),
        "load_average_1min": {"start": load_before, "end": _load1()},
    }
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"failed: {' '.join(command)}")
    raw = [line for line in done.stderr.splitlines() if line.startswith("raw result: ")]
    conditions["raw_file"] = raw[-1].split(": ", 1)[1] if raw else None
    stdout = done.stdout.strip()
    try:
        return json.loads(stdout), conditions
    except json.JSONDecodeError:
        return json.loads(stdout.splitlines()[-1]), conditions


def measure_qc(size: int, runs: int, keep: bool, fresh: bool) -> dict[str, Any]:
    database_url = _database_url(f"scale_qc_{size}")
    workers = max(100, size // JUDGMENTS_PER_WORKER)
    command = [sys.executable, "bench/qc_scale.py", "--judgments", str(size)]
    command += ["--workers", str(workers), "--runs", str(runs), "--json"]
    command += ["--fresh"] if fresh else []
    command += ["--database-url", database_url, "--note", f"bench/scaling_curves.py, {size}"]
    try:
        report, conditions = _run(command)
    finally:
        if not keep:
            _drop_database(database_url)
    return {"size": size, "workers": workers, "conditions": conditions, "report": report}


def measure_release(size: int, runs: int, keep: bool) -> dict[str, Any]:
    builds = []
    for index in range(runs):
        command = [sys.executable, "bench/release_scale.py", "--judgments", str(size), "--keep"]
        if index:
            command.append("--reuse")
        report, conditions = _run(command)
        builds.append({"conditions": conditions, "report": report})
    if not keep:
        base = _database_url("bench_release").rsplit("/", 1)
        suffix = "" if size == 1_000_000 else f"_{size}"
        _drop_database(f"{base[0]}/{base[1]}{suffix}")
    return {"size": size, "builds": builds}


def _stats(values: list[float]) -> dict[str, float] | None:
    values = [value for value in values if value is not None and not math.isnan(value)]
    if not values:
        return None
    return {"median": round(statistics.median(values), 2), "min": min(values), "max": max(values)}


def series(raws: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per curve, one point per size: median/min/max of wall, CPU and peak memory."""
    curves: dict[str, dict[int, dict[str, Any]]] = {"qc_cold": {}, "qc_warm": {}, "release": {}}
    for raw in raws:
        figures = raw.get("figures", raw)
        for entry in figures.get("qc", []):
            for mode in ("cold", "warm"):
                runs = [run[mode] for run in entry["report"]["runs"]]
                curves[f"qc_{mode}"][entry["size"]] = {
                    "runs": len(runs),
                    "seconds": _stats([run["seconds"] for run in runs]),
                    "cpu_seconds": _stats(
                        [
                            run.get("process_cpu_seconds", math.nan)
                            + run.get("postgres_backend_cpu_seconds", math.nan)
                            for run in runs
                        ]
                    ),
                    "peak_mb": _stats([run["peak_rss_mb"] for run in runs]),
                    "load_average_1min": [run.get("load_average_1min") for run in runs],
                }
        for entry in figures.get("release", []):
            reports = [build["report"] for build in entry["builds"]]
            curves["release"][entry["size"]] = {
                "runs": len(reports),
                "judgments": reports[0].get("judgments"),
                "seconds": _stats([report["build_wall_seconds"] for report in reports]),
                "cpu_seconds": _stats(
                    [
                        report["process_cpu_seconds"] + report["postgres_backend_cpu_seconds"]
                        for report in reports
                    ]
                ),
                "peak_mb": _stats([report["peak_rss_mib"] for report in reports]),
                "load_average_1min": [
                    build["conditions"]["load_average_1min"] for build in entry["builds"]
                ],
            }
    return {
        name: [{"size": size, **points[size]} for size in sorted(points)]
        for name, points in curves.items()
    }


def growth(points: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Exponent k of `key` ∝ size^k between successive sizes (medians)."""
    result = []
    for low, high in itertools.pairwise(points):
        a, b = low[key], high[key]
        if a and b and a["median"] > 0 and b["median"] > 0:
            k = math.log(b["median"] / a["median"]) / math.log(high["size"] / low["size"])
            result.append({"from": low["size"], "to": high["size"], "k": round(k, 2)})
    return result


# ----------------------------------------------------------------------------------------------
# The plot (Pillow)
# ----------------------------------------------------------------------------------------------

COLOURS = {"qc_cold": (200, 60, 40), "qc_warm": (230, 150, 30), "release": (40, 90, 190)}
LABELS = {
    "qc_cold": "QC, cold (every aggregate stale)",
    "qc_warm": "QC, warm (recompute)",
    "release": "release build (3 formats)",
}


def _font(size: int) -> Any:
    from PIL import ImageFont

    for path in (
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    ):
        if os.path.exists(path):
            return ImageFont.truetype(path, size)
    return ImageFont.load_default(size=size)


def _panel(draw: Any, box: tuple[int, int, int, int], curves: dict[str, Any], key: str,
           title: str, unit: str, sizes: list[int], reference: bool) -> None:  # fmt: skip
    left, top, right, bottom = box
    font, small = _font(18), _font(14)
    values = [
        bound
        for points in curves.values()
        for point in points
        if point.get(key)
        for bound in (point[key]["min"], point[key]["max"])
    ]
    if not values or not sizes:
        return
    x_low, x_high = math.log10(min(sizes)) - 0.15, math.log10(max(sizes)) + 0.15
    y_low = math.floor(math.log10(min(values)))
    y_high = math.ceil(math.log10(max(values)))
    y_high = max(y_high, y_low + 1)

    def x(size: float) -> float:
        return left + (math.log10(size) - x_low) / (x_high - x_low) * (right - left)

    def y(value: float) -> float:
        return bottom - (math.log10(value) - y_low) / (y_high - y_low) * (bottom - top)

    draw.text((left, top - 58), title, fill="black", font=font)
    draw.rectangle((left, top, right, bottom), outline=(120, 120, 120))
    for exponent in range(y_low, y_high + 1):
        for factor in (1, 2, 5):
            value = factor * 10**exponent
            if 10**y_low <= value <= 10**y_high:
                level = y(value)
                draw.line((left, level, right, level), fill=(225, 225, 225))
                label = f"{value:g}"
                draw.text((left - 8, level), label, fill="black", font=small, anchor="rm")
    for size in sizes:
        draw.line((x(size), top, x(size), bottom), fill=(225, 225, 225))
        label = f"{size / 1e6:g}M" if size >= 1_000_000 else f"{size / 1e3:g}k"
        draw.text((x(size), bottom + 8), label, fill="black", font=small, anchor="mt")
    draw.text(((left + right) / 2, bottom + 30), "judgments (log)", fill="black", font=small,
              anchor="mt")  # fmt: skip
    draw.text((left - 8, top - 12), f"{unit} (log)", fill="black", font=small, anchor="rs")
    for name, points in curves.items():
        drawn = [point for point in points if point.get(key)]
        if not drawn:
            continue
        colour = COLOURS[name]
        line = [(x(point["size"]), y(point[key]["median"])) for point in drawn]
        for point in drawn:
            px = x(point["size"])
            draw.line((px, y(point[key]["min"]), px, y(point[key]["max"])), fill=colour, width=2)
        if len(line) > 1:
            draw.line(line, fill=colour, width=3)
        for px, py in line:
            draw.ellipse((px - 5, py - 5, px + 5, py + 5), fill=colour)
    # A slope-1 reference through the smallest point: what linear growth would look like.
    first = next((points[0] for points in curves.values() if points and points[0].get(key)), None)
    if first is not None and reference:
        start = first[key]["median"]
        end_size = max(sizes)
        end = start * end_size / first["size"]
        clip = 10**y_high
        if end > clip:
            end_size = first["size"] * clip / start
            end = clip
        draw.line((x(first["size"]), y(start), x(end_size), y(end)), fill=(150, 150, 150), width=1)


def plot(curves: dict[str, list[dict[str, Any]]], png: Path, subtitle: str) -> None:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (1900, 640), "white")
    draw = ImageDraw.Draw(image)
    sizes = sorted({point["size"] for points in curves.values() for point in points})
    _panel(draw, (110, 90, 600, 500), curves, "seconds", "Wall time", "seconds", sizes, True)
    _panel(
        draw, (740, 90, 1230, 500), curves, "cpu_seconds",
        "CPU time: the process + its PostgreSQL backend", "seconds", sizes, True,
    )  # fmt: skip
    _panel(
        draw, (1370, 90, 1860, 500), curves, "peak_mb", "Peak memory (ru_maxrss of the process)", "MiB",
        sizes, False,
    )  # fmt: skip
    legend_y = 560
    legend_x = 110
    font = _font(16)
    for name in curves:
        if not curves[name]:
            continue
        draw.line((legend_x, legend_y, legend_x + 30, legend_y), fill=COLOURS[name], width=3)
        draw.text((legend_x + 38, legend_y), LABELS[name], fill="black", font=font, anchor="lm")
        legend_x += 480
    draw.line((110, 600, 140, 600), fill=(150, 150, 150), width=1)
    draw.text(
        (148, 600), "slope 1 (linear growth) from the smallest point (left); bars: min–max of the runs", fill="black",
        font=font, anchor="lm",
    )  # fmt: skip
    draw.text((110, 6), subtitle, fill=(80, 80, 80), font=_font(15))
    png.parent.mkdir(parents=True, exist_ok=True)
    image.save(png, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["qc", "release"], default=None)
    parser.add_argument("--keep", action="store_true", help="Keep the scratch databases.")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="The QC databases were loaded beforehand (qc_scale.py --child load): no reset first.",
    )
    parser.add_argument("--plot", nargs="*", default=None, help="Raw files to draw (no run).")
    parser.add_argument("--png", default=str(ROOT / "docs" / "img" / "scaling_curves.png"))
    options = parser.parse_args()

    if options.plot is not None:
        raws = [json.loads(Path(path).read_text()) for path in options.plot]
        curves = series(raws)
        dates = sorted({raw.get("date_utc", "")[:10] for raw in raws})
        plot(curves, Path(options.png), f"Lepus on {', '.join(dates)}: 2 shared cores; medians")
        summary = {
            name: {
                "points": points,
                "growth_seconds": growth(points, "seconds"),
                "growth_cpu_seconds": growth(points, "cpu_seconds"),
                "growth_peak_mb": growth(points, "peak_mb"),
            }
            for name, points in curves.items()
        }
        print(json.dumps(summary, indent=1))
        return

    sizes = [int(size) for size in options.sizes.split(",")]
    figures: dict[str, Any] = {"sizes": sizes, "runs": options.runs, "qc": [], "release": []}
    for size in sizes:
        if options.only in (None, "qc"):
            figures["qc"].append(measure_qc(size, options.runs, options.keep, options.fresh))
            print(f"qc {size}: done", file=sys.stderr)
        if options.only in (None, "release"):
            figures["release"].append(measure_release(size, options.runs, options.keep))
            print(f"release {size}: done", file=sys.stderr)
    curves = series([figures])
    figures["curves"] = curves
    figures["growth"] = {
        name: {"seconds": growth(points, "seconds"), "peak_mb": growth(points, "peak_mb")}
        for name, points in curves.items()
    }
    path = write_raw("scaling_curves", figures)
    print(json.dumps({"raw": str(path), "growth": figures["growth"]}, indent=1))


if __name__ == "__main__":
    main()
