"""The image benchmark converters on small samples written here in each published format
(Flickr8K's token, expert and CrowdFlower files; Composite's AMT CSVs with COCO's captions JSON;
Nebula's Parquet with picture bytes), through the command line, into the generic image JSONL that
the benchmark reader then checks; and the benchmark protocol against hand computations."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import stats

from training_bridge.rigel.cli import main
from training_bridge.rigel.image_benchmarks import (
    IMAGE_BENCHMARKS,
    ImageBenchmarkError,
    benchmark_row,
    flat_candidates,
    paper_row,
    read_image_benchmark,
)

TOKENS = [
    "1000_a.jpg#0\tA child in a pink dress climbs stairs .",
    "1000_a.jpg#1\tA girl going into a wooden building .",
    "1000_a.jpg#2\tA little girl climbing into a wooden playhouse .",
    "1000_a.jpg#3\tA little girl climbing the stairs to her playhouse .",
    "1000_a.jpg#4\tA little girl in a pink dress going into a wooden cabin .",
    "2000_b.jpg#0\tA black dog and a spotted dog are fighting",
    "2000_b.jpg#1\tA black dog and a tri-colored dog playing with each other on the road .",
    "2000_b.jpg#2\tA black dog and a white dog with brown spots are staring at each other .",
    "2000_b.jpg#3\tTwo dogs of different breeds looking at each other on the road .",
    "2000_b.jpg#4\tTwo dogs on pavement moving toward each other .",
]
# image TAB caption id TAB three expert scores 1-4
EXPERT = [
    "1000_a.jpg\t2000_b.jpg#2\t1\t1\t1",
    "1000_a.jpg\t1000_a.jpg#3\t4\t4\t3",
    "2000_b.jpg\t2000_b.jpg#0\t3\t4\t4",
    "2000_b.jpg\t1000_a.jpg#1\t1\t2\t1",
]
# image TAB caption id TAB share of yes TAB yes TAB no
CROWD = [
    "1000_a.jpg\t1000_a.jpg#0\t1.0\t3\t0",
    "1000_a.jpg\t2000_b.jpg#4\t0.0\t0\t3",
    "2000_b.jpg\t2000_b.jpg#1\t0.75\t3\t1",
    "2000_b.jpg\t1000_a.jpg#2\t0.333333\t1\t2",
]


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _convert(capsys, *args: str) -> dict:  # type: ignore[no-untyped-def]
    assert main(["convert-images", *args]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_flickr8k_expert(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    tokens = _write(tmp_path / "Flickr8k.token.txt", TOKENS)
    expert = _write(tmp_path / "ExpertAnnotations.txt", EXPERT)
    out = tmp_path / "expert.jsonl"
    summary = _convert(
        capsys, "flickr8k-expert", "--annotations", expert, "--captions", tokens, "--out", str(out)
    )
    assert summary == {
        "format": "flickr8k-expert", "out": str(out), "images": 2, "candidates": 4,
        "judgments": 12,
    }  # fmt: skip
    lines = _read(out)
    first = lines[0]
    assert first["image"] == "1000_a.jpg" and first["image_id"] == "flickr8k_1000_a"
    assert first["scale"] == [1.0, 4.0]
    assert [c["caption"] for c in first["candidates"]] == [
        "A black dog and a white dog with brown spots are staring at each other .",
        "A little girl climbing the stairs to her playhouse .",
    ]
    # the image's own captions less the candidate that is one of them
    assert len(first["references"]) == 4
    assert "A little girl climbing the stairs to her playhouse ." not in first["references"]
    assert [j["overall"] for j in first["candidates"][1]["judgments"]] == [4.0, 4.0, 3.0]
    items = read_image_benchmark(out.read_text().splitlines())
    assert items[0].candidates[1].judgments == (1.0, 1.0, 2 / 3)


def test_flickr8k_cf_votes_average_to_the_published_share(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    tokens = _write(tmp_path / "Flickr8k.token.txt", TOKENS)
    crowd = _write(tmp_path / "CrowdFlowerAnnotations.txt", CROWD)
    out = tmp_path / "cf.jsonl"
    summary = _convert(
        capsys, "flickr8k-cf", "--annotations", crowd, "--captions", tokens, "--out", str(out)
    )
    assert (summary["images"], summary["candidates"], summary["judgments"]) == (2, 4, 13)
    items = read_image_benchmark(out.read_text().splitlines())
    shares = [float(np.mean(c.judgments)) for _, c in flat_candidates(items)]
    assert shares == pytest.approx([1.0, 0.0, 0.75, 1 / 3])
    bad = _write(tmp_path / "bad.txt", ["1000_a.jpg\t1000_a.jpg#0\t0.5\t3\t0"])
    assert main(["convert-images", "flickr8k-cf", "--annotations", bad, "--captions", tokens,
                 "--out", str(tmp_path / "x.jsonl")]) == 2  # fmt: skip
    assert "disagrees" in capsys.readouterr().err


def _composite_csv(path: Path, rows: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["HITId", "WorkerId", "AssignmentStatus", "Input.text", "Answer"])
    for number, field in enumerate(rows):
        writer.writerow([f"hit{number}", f"w{number}", "Approved", field, "done"])
    writer.writerow(["", "", "", "", ""])  # the trailing summary rows the files end with
    writer.writerow(["total", str(len(rows)), "", "", ""])
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return str(path)


def test_composite_from_amt_csvs_and_coco_captions(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    tokens = _write(tmp_path / "Flickr8k.token.txt", TOKENS)
    eight = _composite_csv(
        tmp_path / "8k_correctness.csv",
        [
            "http://example.org/flickr8k/1000_a.jpg;a girl in pink on stairs;"
            "A girl going into a wooden building .;a cat sleeping;5;4;1",
            "http://example.org/flickr8k/2000_b.jpg;two dogs on a road;a dog;a man cooking;4;3;1",
        ],
    )
    coco = tmp_path / "captions_val2014.json"
    coco.write_text(
        json.dumps(
            {
                "images": [{"id": 42, "file_name": "COCO_val2014_000000000042.jpg"}],
                "annotations": [
                    {"image_id": 42, "caption": "A plate of food with broccoli."},
                    {"image_id": 42, "caption": "Some vegetables on a white plate."},
                ],
            }
        )
    )
    coco_csv = _composite_csv(
        tmp_path / "coco_correctness.csv",
        [
            "http://example.org/coco/COCO_val2014_000000000042.jpg;broccoli on a plate;a plate;"
            "a dog;a plate of vegetables;5;3;1;4"
        ],
    )
    out = tmp_path / "composite.jsonl"
    summary = _convert(
        capsys, "composite", "--annotations", eight, coco_csv, "--captions", tokens,
        "--coco-captions", str(coco), "--out", str(out),
    )  # fmt: skip
    # the Flickr8K candidate equal to a reference is left out (5 of 6 kept), COCO keeps all 4
    assert (summary["images"], summary["candidates"], summary["judgments"]) == (3, 9, 9)
    lines = _read(out)
    assert [line["image_id"] for line in lines] == [
        "composite_8k_1000_a", "composite_8k_2000_b", "composite_coco_COCO_val2014_000000000042",
    ]  # fmt: skip
    assert [c["caption"] for c in lines[0]["candidates"]] == [
        "a girl in pink on stairs",
        "a cat sleeping",
    ]
    assert [c["judgments"][0]["overall"] for c in lines[2]["candidates"]] == [5.0, 3.0, 1.0, 4.0]
    assert lines[2]["references"] == [
        "A plate of food with broccoli.", "Some vegetables on a white plate.",
    ]  # fmt: skip
    assert lines[0]["scale"] == [1, 5] and len(lines[0]["references"]) == 5
    read_image_benchmark(out.read_text().splitlines())


def test_nebula_from_parquet_writes_the_pictures(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    def png(value: int) -> bytes:
        buffer = io.BytesIO()
        Image.fromarray(np.full((20, 30, 3), value, dtype=np.uint8)).save(buffer, format="PNG")
        return buffer.getvalue()

    table = pa.table(
        {
            "file_name": ["n1.jpg", "n1.jpg", "n2.jpg"],
            "image": [{"bytes": png(10), "path": None}, {"bytes": png(10), "path": None},
                      {"bytes": png(200), "path": None}],
            "refs": [["a red bus", "a bus on a street"]] * 2 + [["a beach"]],
            "mt": ["a bus", "a red double decker bus", "people on a beach"],
            "human_score": [0.5, 0.875, 0.75],
        }
    )  # fmt: skip
    parquet = tmp_path / "test-00000.parquet"
    pq.write_table(table, parquet)
    out = tmp_path / "nebula.jsonl"
    pictures = tmp_path / "nebula_images"
    summary = _convert(
        capsys, "nebula", "--annotations", str(parquet), "--images-out", str(pictures),
        "--out", str(out),
    )  # fmt: skip
    assert (summary["images"], summary["candidates"], summary["judgments"]) == (2, 3, 3)
    assert sorted(p.name for p in pictures.iterdir()) == ["n1.jpg", "n2.jpg"]
    assert np.asarray(Image.open(pictures / "n2.jpg")).mean() == 200
    items = read_image_benchmark(out.read_text().splitlines())
    assert [c.judgments for _, c in flat_candidates(items)] == [(0.5,), (0.875,), (0.75,)]
    assert items[0].references == ("a red bus", "a bus on a street")


def test_benchmark_rows_follow_each_protocol_by_hand() -> None:
    lines = [
        json.dumps({"image_id": "a", "image": "a.jpg", "references": ["r"], "scale": [1, 4],
                    "candidates": [{"caption": "x", "judgments": [{"rater": "e1", "overall": 1},
                                                                   {"rater": "e2", "overall": 2}]},
                                   {"caption": "y", "judgments": [{"rater": "e1", "overall": 4},
                                                                   {"rater": "e2", "overall": 3}]}]}),
        json.dumps({"image_id": "b", "image": "b.jpg", "references": [], "scale": [1, 4],
                    "candidates": [{"caption": "z", "judgments": [{"rater": "e1", "overall": 2},
                                                                   {"rater": "e2", "overall": 4}]},
                                   {"caption": "w"}]}),
    ]  # fmt: skip
    items = read_image_benchmark(lines)
    pairs = flat_candidates(items)
    scores = [0.1, 0.9, 0.4, 0.3]
    # Flickr8K-Expert: every judgment a point (the candidate's score repeated); "w" is unjudged
    expert = benchmark_row(IMAGE_BENCHMARKS["flickr8k-expert"], pairs, scores)
    metric, human = [0.1, 0.1, 0.9, 0.9, 0.4, 0.4], [0, 1 / 3, 1, 2 / 3, 1 / 3, 1]
    assert expert["points"] == 6
    tau_b = stats.kendalltau(metric, human).statistic
    tau_c = stats.kendalltau(metric, human, variant="c").statistic
    assert expert["kendall_b"] == pytest.approx(100 * tau_b, abs=1e-4)  # the table's 4 decimals
    assert expert["kendall_c"] == pytest.approx(100 * tau_c, abs=1e-4)
    # Composite / CF / Nebula: one point per candidate, its mean judgment
    composite = benchmark_row(IMAGE_BENCHMARKS["composite"], pairs, scores)
    means = [1 / 6, 5 / 6, 2 / 3]
    assert composite["points"] == 3
    assert composite["kendall_b"] == pytest.approx(
        100 * stats.kendalltau([0.1, 0.9, 0.4], means).statistic, abs=1e-4
    )
    # the paper's rows, with their place
    assert paper_row(IMAGE_BENCHMARKS["nebula"], "reference-free", "full") == {
        "kendall_b": 58.1, "kendall_c": 55.1, "where": "seed 000, Table 1, line 88",
    }  # fmt: skip
    assert paper_row(IMAGE_BENCHMARKS["composite"], "all-refs", "full")["kendall_c"] == 66.1  # type: ignore[index]
    assert paper_row(IMAGE_BENCHMARKS["flickr8k-expert"], "reference-free", "phase1_only") == {
        "kendall_b": 22.3, "kendall_c": 22.6, "where": "seed 000, Table 3 (ii), line 112",
    }  # fmt: skip
    # ablations were run reference-free only; Flickr8K-CF is in no ablation table
    assert paper_row(IMAGE_BENCHMARKS["nebula"], "all-refs", "kl_loss") is None
    assert paper_row(IMAGE_BENCHMARKS["flickr8k-cf"], "reference-free", "lm_head") is None


def test_reader_refuses_bad_lines() -> None:
    good = {"image_id": "a", "image": "a.jpg", "references": [],
            "candidates": [{"caption": "x", "judgments": [{"rater": "r", "overall": 3}]}]}  # fmt: skip
    read_image_benchmark([json.dumps(good)], scale=[1, 5])
    cases = [
        ({}, "judgments need a scale"),
        ({"scale": [1, 2]}, "outside"),
        ({"image": "../etc/passwd", "scale": [1, 5]}, "file name in the folder"),
        ({"image": "/abs.jpg", "scale": [1, 5]}, "file name in the folder"),
        ({"candidates": [], "scale": [1, 5]}, "candidates"),
        ({"scale": [5, 1]}, "low < high"),
    ]
    for change, message in cases:
        with pytest.raises(ImageBenchmarkError, match=message):
            read_image_benchmark([json.dumps({**good, **change})])
    with pytest.raises(ImageBenchmarkError, match="twice"):
        read_image_benchmark([json.dumps(good)] * 2, scale=[1, 5])
