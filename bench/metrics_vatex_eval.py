"""Benchmark: the standard caption metrics on all of VATEX-EVAL (18,000 candidates, 1 and 9
references), one process, per metric: wall and CPU seconds, and the EMScore-protocol correlations.

    flock /tmp/lepus-bench.lock taskset -c 0 python bench/metrics_vatex_eval.py [--no-meteor]

Prints one JSON object, also written as a raw file under bench/results/ (bench/provenance.py).
Pure Python: no database, no Django.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
# imported before anything runs: provenance takes the start load average and time at import
import numpy as np  # noqa: E402
from provenance import input_checksums, write_raw  # noqa: E402

from training_bridge.metrics.bleu import bleu_scores  # noqa: E402
from training_bridge.metrics.cider import cider_scores  # noqa: E402
from training_bridge.metrics.correlation import rater_averaged_correlations  # noqa: E402
from training_bridge.metrics.meteor import MeteorScorer, meteor_unavailable_reason  # noqa: E402
from training_bridge.metrics.rouge import rouge_l_scores  # noqa: E402
from training_bridge.metrics.standard import tokenize_corpus  # noqa: E402

DATA = ROOT / "data" / "vatex_eval" / "vid_cans_score_dict.json"


class Clock:
    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def lap(self) -> dict[str, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        result = {"wall_s": round(wall - self.wall, 2), "cpu_s": round(cpu - self.cpu, 2)}
        self.wall, self.cpu = wall, cpu
        return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-meteor", action="store_true")
    args = parser.parse_args()

    inputs = input_checksums(vatex_eval=DATA)  # stops when the file is missing
    data = json.loads(DATA.read_text(encoding="utf-8"))
    candidates, references, raters = [], [], []
    for entry in data.values():
        for text, rating in zip(entry["cands"], ast.literal_eval(entry["scores"]), strict=True):
            candidates.append(text)
            references.append(entry["refs"][0])
            raters.append(rating)
    rater_scores = np.array(raters, dtype=np.float64)

    report: dict[str, object] = {
        "candidates": len(candidates),
        "pid_cpus": len(os.sched_getaffinity(0)),
    }
    clock = Clock()
    tokenized, tokenized_references = tokenize_corpus(candidates, references)
    report["tokenize"] = clock.lap()
    report["tokens"] = {  # COCO-tokenised words: the metrics' workload
        "candidates": sum(len(text.split()) for text in tokenized),
        "references": sum(len(text.split()) for group in tokenized_references for text in group),
    }

    meteor_reason = None if not args.no_meteor else "skipped (--no-meteor)"
    meteor_reason = meteor_reason or meteor_unavailable_reason()
    scorer = MeteorScorer() if meteor_reason is None else None
    try:
        for count in (1, 9):
            refs = [group[:count] for group in tokenized_references]
            section: dict[str, object] = {}
            scores: dict[str, np.ndarray] = {}
            clock.lap()
            bleu = bleu_scores(tokenized, refs)
            section["bleu1-4"] = clock.lap()
            scores["bleu1"], scores["bleu4"] = bleu.sentence[:, 0], bleu.sentence[:, 3]
            scores["rougeL"] = rouge_l_scores(tokenized, refs)
            section["rougeL"] = clock.lap()
            scores["cider"] = cider_scores(tokenized, refs)
            section["cider"] = clock.lap()
            if scorer is not None:
                scores["meteor"] = scorer.scores(tokenized, refs)
                # CPU of this process only; the jar's CPU is in its own process.
                section["meteor"] = clock.lap()
            else:
                section["meteor"] = meteor_reason
            section["correlations_emscore_protocol"] = {
                metric: {
                    key: round(100 * value, 2)
                    for key, value in rater_averaged_correlations(values, rater_scores).items()
                    if key in ("kendall_b", "spearman")
                }
                for metric, values in scores.items()
            }
            report[f"{count}_ref"] = section
    finally:
        if scorer is not None:
            scorer.close()
    print(json.dumps(report, indent=1))
    write_raw("metrics_vatex_eval", report, inputs=inputs)


if __name__ == "__main__":
    main()
