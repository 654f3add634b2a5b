"""The dataset card (export.card): its statistics checked against an independent computation from
the database (and, for agreement, against the `krippendorff` package); the release name escaped."""

from __future__ import annotations

import re
from collections import defaultdict
from html import unescape

import krippendorff
import numpy as np
import pytest
import yaml
from markdown_it import MarkdownIt

from annotation.models import Judgment
from datasets_app.models import ReferenceCaption
from export.card import markdown_text, single_line
from tests.export.builders import build_campaign
from tests.export.helpers import build, eligible, jsonl_records, manifest, read_file


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())  # the test data is ASCII


def test_card_statistics_equal_an_independent_computation(db):
    data = build_campaign(slug="card", clips=40, workers=9, candidates_per_clip=(1, 6))
    release = build(campaigns=[data.campaign], seed=4)
    items = eligible(data.campaign)
    split_of = {
        record["candidate_id"]: split
        for split in ("train", "validation")
        for record in jsonl_records(release, split)
    }

    per_clip: dict[int, int] = defaultdict(int)
    for item in items:
        per_clip[item.candidate.clip_id] += 1
    references = list(ReferenceCaption.objects.filter(clip_id__in=per_clip).order_by("pk"))
    kept = list(
        Judgment.objects.filter(campaign_candidate__in=items, is_excluded=False).select_related(
            "participation"
        )
    )
    kept_per_item: dict[int, int] = defaultdict(int)
    for judgment in kept:
        kept_per_item[judgment.campaign_candidate_id] += 1
    candidate_words = [word for item in items for word in words(item.candidate.text)]
    reference_words = [word for reference in references for word in words(reference.text)]

    expected_agreement = {}
    workers = sorted({judgment.participation.worker_id for judgment in kept})
    columns = {item.pk: position for position, item in enumerate(items)}
    for key in data.campaign.question_keys:
        matrix = np.full((len(workers), len(items)), np.nan)
        for judgment in kept:
            matrix[workers.index(judgment.participation.worker_id)][
                columns[judgment.campaign_candidate_id]
            ] = judgment.values[key]
        expected_agreement[key] = krippendorff.alpha(
            reliability_data=matrix, level_of_measurement="ordinal", value_domain=[1, 2, 3, 4, 5]
        )

    stats = manifest(release)["statistics"]
    assert stats == release.stats
    assert stats["clips"] == len(per_clip)
    assert (stats["video_clips"], stats["images"]) == (len(per_clip), 0)
    assert stats["candidates"] == len(items)
    assert stats["candidates_per_clip"] == {
        "min": min(per_clip.values()),
        "max": max(per_clip.values()),
        "mean": len(items) / len(per_clip),
    }
    assert stats["candidate_words"] == {
        "vocabulary": len(set(candidate_words)),
        "total": len(candidate_words),
        "mean_length": len(candidate_words) / len(items),
    }
    assert stats["references"] == len(references)
    assert stats["reference_words"] == {
        "vocabulary": len(set(reference_words)),
        "total": len(reference_words),
        "mean_length": len(reference_words) / len(references),
    }
    assert stats["vocabulary_all_captions"] == len(set(candidate_words) | set(reference_words))
    assert stats["judgments"] == len(kept)
    assert stats["judgments_per_candidate"] == {
        "min": min(kept_per_item[item.pk] for item in items),
        "max": max(kept_per_item[item.pk] for item in items),
        "mean": len(kept) / len(items),
    }
    assert stats["annotators"] == len(workers)
    assert stats["imported_rater_slots"] == 0
    for key, alpha in expected_agreement.items():
        assert stats["agreement"][key]["alpha"] == pytest.approx(alpha, rel=1e-9, abs=1e-12)
        assert stats["agreement"][key]["ratings"] == len(kept)
    for split in ("train", "validation"):
        members = [item for item in items if split_of[item.candidate.external_id] == split]
        histogram = [0] * 8
        classes = [0] * 5
        for item in members:
            histogram[min(int((item.overall - 1) / 0.5), 7)] += 1
            classes[item.training_class - 1] += 1
        entry = stats["splits"][split]
        assert entry["candidates"] == len(members)
        assert entry["clips"] == len({item.candidate.clip_id for item in members})
        assert list(entry["overall_histogram"].values()) == histogram
        assert list(entry["class_histogram"].values()) == classes
        assert entry["mean_overall"] == pytest.approx(
            sum(item.overall for item in members) / len(members), rel=1e-12
        )

    card = read_file(release, "README.md").decode()
    assert card.startswith("---\nlicense:\n- cc-by-4.0\n")
    for line in (
        f"| Clips (videos and still images) | {len(per_clip)} |",
        f"| Video clips | {len(per_clip)} |",
        "| Still images | 0 |",
        f"| Candidate captions | {len(items)} |",
        f"| Candidates per clip (min) | {min(per_clip.values())} |",
        f"| Candidates per clip (max) | {max(per_clip.values())} |",
        f"| Candidates per clip (mean) | {len(items) / len(per_clip):.2f} |",
        f"| Candidate vocabulary (words) | {len(set(candidate_words))} |",
        f"| Candidate total words | {len(candidate_words)} |",
        f"| Candidate mean length (words) | {len(candidate_words) / len(items):.2f} |",
        f"| Reference captions | {len(references)} |",
        f"| Reference vocabulary (words) | {len(set(reference_words))} |",
        f"| Reference total words | {len(reference_words)} |",
        f"| Reference mean length (words) | {len(reference_words) / len(references):.2f} |",
        f"| Judgments (kept) | {len(kept)} |",
        f"| Judgments per candidate (mean) | {len(kept) / len(items):.2f} |",
        f"| Annotators | {len(workers)} |",
        *(
            f"| {key} | {alpha:.4f} | {len(items)} | {len(kept)} |"
            for key, alpha in sorted(expected_agreement.items())
        ),
    ):
        assert line in card, line


HOSTILE_NAME = (  # at most 200 characters, as release_create allows
    "[a](https://x.example) ![p](https://x.example/p) <script>alert(1)</script><img src=x>"
    " <https://x.example> *b* _i_ `c` ~~s~~ $m$ # | &amp; \\ www.x.example\n"
    "# injected\r\n[r]: https://x.example\u2028---"
)
assert len(HOSTILE_NAME) <= 200


def card_front_matter_and_body(card: str) -> tuple[dict[str, object], str]:
    _, front, body = card.split("---\n", 2)
    return yaml.safe_load(front), body


def test_a_hostile_release_name_is_shown_literally_and_injects_nothing(db):
    data = build_campaign(slug="hostile", clips=6, workers=4)
    release = build(campaigns=[data.campaign], seed=1, name=HOSTILE_NAME)
    card = read_file(release, "README.md").decode()
    front, body = card_front_matter_and_body(card)
    shown = markdown_text(HOSTILE_NAME)

    # One line each in the YAML front matter and in the heading; no other key, no other heading.
    assert front["pretty_name"] == f"Vid-Lepus: {single_line(HOSTILE_NAME)}"
    assert set(front) == {"license", "language", "pretty_name", "tags", "configs"}
    heading = f"# Vid-Lepus: {shown}\n"
    assert heading in body and "\n" not in shown
    html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(body)
    assert html.count("<h1>") == 1
    for injected in ("<a ", "<img", "<script", "<code>`", "<em>", "<strong>", "<s>", "<hr"):
        assert injected not in html.split("<h2>")[0], injected
    # The heading reads exactly as the name was typed (line breaks as spaces).
    [rendered] = re.findall(r"<h1>(.*?)</h1>", html)
    assert unescape(rendered) == f"Vid-Lepus: {single_line(HOSTILE_NAME)}".strip()
    # No bare URL or www. is left for GitHub's or Hugging Face's autolinking.
    assert "https://" not in heading and "https\\://" in heading
    # The manifest keeps the name as typed (JSON needs no Markdown escaping).
    assert manifest(release)["name"] == HOSTILE_NAME


def test_an_ordinary_release_name_is_written_as_it_is():
    for name in ("vid-lepus-vatex-eval+my_campaign-seed0", "Release 2024 (pilot), v3", "café_ü"):
        assert markdown_text(name) == name.replace(".", "\\.")
    assert markdown_text("_x_ a__b") == "\\_x\\_ a\\_\\_b"
