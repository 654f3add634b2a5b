"""An honest simulated crowd on the demo's scene corpus: its ratings are the candidates' intended
quality plus noise, and after QC the platform's aggregates must rank the candidates as they were
written (exact first, unrelated last, broken grammar lowest on fluency)."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from django.core.management import call_command
from scipy.stats import spearmanr

from annotation.models import CampaignCandidate
from datasets_app import demo_scenes

SHIPPED = Path(settings.BASE_DIR) / "data" / "demo_scenes"
CRITERIA = ("descriptiveness", "relevance", "fluency")


def _json_command(name: str, *args: str) -> dict:  # type: ignore[type-arg]
    out = io.StringIO()
    call_command(name, *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def _honest_judgments(
    path: Path, *, raters: int, per_candidate: int, noise: float, seed: int
) -> None:
    """Each candidate rated by `per_candidate` distinct raters, each rating its intended value per
    criterion plus Gaussian noise, rounded and clipped to 1–5."""
    rng = random.Random(seed)
    lines = []
    for record in demo_scenes.load_intended(SHIPPED / "intended.jsonl").values():
        for rater in rng.sample(range(raters), per_candidate):
            values = {
                criterion: min(5, max(1, round(record[criterion] + rng.gauss(0.0, noise))))
                for criterion in CRITERIA
            }
            lines.append(
                {
                    "rater_id": f"honest-{rater:02d}",
                    "candidate_id": record["candidate_id"],
                    "values": values,
                    "response_time_ms": rng.randint(8000, 30000),
                }
            )
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


@pytest.mark.django_db(transaction=True)
def test_an_honest_crowds_aggregates_rank_the_scene_candidates_as_written(tmp_path: Path) -> None:
    _json_command("import_candidates", str(SHIPPED / "scenes.jsonl"))
    judgments = tmp_path / "honest.jsonl"
    _honest_judgments(judgments, raters=12, per_candidate=3, noise=0.7, seed=5)
    imported = _json_command("import_judgments", str(judgments), "--campaign", "scene-crowd")
    assert imported["created"]["judgments"] == 168 * 3
    _json_command("run_qc", "scene-crowd")

    intended = demo_scenes.load_intended(SHIPPED / "intended.jsonl")
    items = list(
        CampaignCandidate.objects.filter(campaign__slug="scene-crowd").select_related("candidate")
    )
    assert len(items) == 168
    assert all(item.means for item in items)

    # Over all candidates: the overall aggregate follows the intended overall quality, and every
    # flaw's mean per criterion lies near what it was written to have (fluency is 5 for all but one
    # flaw, so a rank correlation per criterion would mostly measure ties).
    def overall(values: dict[str, float]) -> float:
        return float(np.mean([values[criterion] for criterion in CRITERIA]))

    measured = [overall(item.means) for item in items]
    planned = [overall(intended[item.candidate.external_id]) for item in items]
    rho = spearmanr(measured, planned).statistic
    assert rho > 0.8, rho
    for flaw in demo_scenes.INTENDED:
        group = [item for item in items if intended[item.candidate.external_id]["flaw"] == flaw]
        assert len(group) == 24
        for criterion in CRITERIA:
            mean = float(np.mean([item.means[criterion] for item in group]))
            assert abs(mean - demo_scenes.INTENDED[flaw][criterion]) < 0.5, (flaw, criterion, mean)

    # Within each clip: the exact caption has the best overall, the unrelated one the worst
    # overall, broken grammar the worst fluency (ties allowed, wrong order not).
    by_clip: dict[str, dict[str, CampaignCandidate]] = {}
    for item in items:
        flaw = intended[item.candidate.external_id]["flaw"]
        by_clip.setdefault(item.clip.vatex_id, {})[flaw] = item
    wrong = {"exact": 0, "unrelated": 0, "broken_grammar": 0}
    for flaws in by_clip.values():
        overall = {flaw: float(np.mean(list(item.means.values()))) for flaw, item in flaws.items()}
        wrong["exact"] += overall["exact"] < max(overall.values())
        wrong["unrelated"] += overall["unrelated"] > min(overall.values())
        wrong["broken_grammar"] += flaws["broken_grammar"].means["fluency"] > min(
            item.means["fluency"] for item in flaws.values()
        )
    assert len(by_clip) == 24
    # With noise 0.7 and three raters a few clips may swap two close candidates; most must not.
    assert wrong["exact"] <= 2, wrong
    assert wrong["unrelated"] <= 1, wrong
    assert wrong["broken_grammar"] <= 2, wrong


def test_a_crowd_that_ignores_the_video_does_not_rank_them() -> None:
    """The check above can fail: ratings drawn without looking (uniform 1–5) give no ranking."""
    rng = random.Random(1)
    intended = list(demo_scenes.load_intended(SHIPPED / "intended.jsonl").values())
    measured = [np.mean([rng.randint(1, 5) for _ in range(3)]) for _ in intended]
    rho = spearmanr(measured, [record["relevance"] for record in intended]).statistic
    assert abs(rho) < 0.3
