"""The release reads (export.reads): the bytes of a small release worked out by hand, the
snapshot's `with` block, and agreement past the packed counts."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import krippendorff
import numpy as np
import pytest

from annotation.models import (
    Campaign,
    CampaignCandidate,
    Judgment,
    Participation,
    Platform,
    Worker,
)
from annotation.quality.aggregation import aggregation_recompute
from datasets_app.models import (
    CandidateCaption,
    CandidateKind,
    CaptioningSystem,
    Clip,
    ControlType,
    ReferenceCaption,
)
from export.reads import ReleaseReads
from tests.export.builders import build_campaign
from tests.export.helpers import all_bytes, build

LEVELS = [{"value": value, "label": str(value)} for value in range(1, 6)]
QUESTIONS = [
    {"key": "relevance", "label": "Relevance", "levels": LEVELS},
    {"key": "fluency", "label": "Fluency", "levels": LEVELS},
]
SECRET = "golden-pseudonym-secret"
TRICKY = 'Quotes "x", a comma, — unicode é 😀, a tab\there, \\ a backslash, \x1f and \u2028end'

# vatex id: (start, end, duration, video key, frames key, references)
CLIPS = {
    "Aa1_000000_000010": (0.0, 10.0, None, "clips/a.mp4", "", ['A man, "quoted", plays.', "two"]),
    "Bb2_000005_000012": (5.0, 12.0, 6.75, "", "frames/b", []),
    "Cc3_000001_000004": (1.5, 4.25, None, "clips/c.mp4", "frames/c", ["é 😀"]),
    "Dd4_000000_000010": (0.0, 10.0, 9.5, "", "", ["a dog"]),
    "Ee5_000003_000013": (3.0, 13.0, None, "clips/e.mp4", "", ["e"]),
}
# candidate external id: (clip, text, [(worker, relevance, fluency, reason, excluded)])
CANDIDATES = {
    "golden:a:0": (
        "Aa1_000000_000010",
        TRICKY,
        [("w1", 4, 5, "", False), ("w2", 4, 4, 'too "short"', False), ("w3", 4, 4, "", False)],
    ),
    "golden:a:1": (
        "Aa1_000000_000010",
        "A dog runs.",
        [("w1", 3, 2, "", False), ("w2", 3, 3, "", False)],
    ),
    "golden:b:0": (
        "Bb2_000005_000012",
        "Line\nbreak.",
        [("w1", 5, 5, "", False), ("w2", 5, 5, "", False), ("w3", 1, 1, "", True)],
    ),
    "golden:c:0": ("Cc3_000001_000004", "C.", [("w2", 2, 1, "", False), ("w3", 2, 2, "", False)]),
    "golden:d:0": ("Dd4_000000_000010", "D.", [("w1", 4, 3, "", False), ("w3", 4, 4, "", False)]),
    "golden:d:1": ("Dd4_000000_000010", "Below quota.", [("w1", 4, 4, "", False)]),
    "golden:e:0": ("Ee5_000003_000013", "E.", [("w1", 3, 3, "", False), ("w2", 3, 4, "", False)]),
}


def golden_campaign() -> Campaign:
    """Five clips, seven model captions (one below its quota of 2) and a control, rated by three
    Prolific workers (one judgment excluded); aggregated by QC's own aggregation."""
    campaign = Campaign.objects.create(
        slug="golden", name="Golden", questions=QUESTIONS, judgments_per_candidate=2
    )
    system = CaptioningSystem.objects.create(name="captioner", version="2.1")
    participations = {
        name: Participation.objects.create(
            campaign=campaign,
            worker=Worker.objects.create(platform=Platform.PROLIFIC, external_id=f"golden-{name}"),
        )
        for name in ("w1", "w2", "w3")
    }
    clips = {}
    for vatex_id, (start, end, duration, video, frames, references) in CLIPS.items():
        clips[vatex_id] = Clip.objects.create(
            vatex_id=vatex_id,
            youtube_id=vatex_id[:3],
            start_seconds=start,
            end_seconds=end,
            duration=duration,
            video_key=video,
            frames_key=frames,
        )
        for position, text in enumerate(references):
            ReferenceCaption.objects.create(clip=clips[vatex_id], position=position, text=text)
    control = CandidateCaption.objects.create(
        clip=clips["Ee5_000003_000013"],
        external_id="golden:control",
        text="a control caption",
        kind=CandidateKind.CONTROL,
        control_type=ControlType.REFERENCE,
    )
    rated = [(control, True, [("w1", 1, 1, "", False), ("w2", 1, 1, "", False)])]
    for position, (external_id, (vatex_id, text, judgments)) in enumerate(CANDIDATES.items()):
        candidate = CandidateCaption.objects.create(
            clip=clips[vatex_id],
            external_id=external_id,
            text=text,
            system=system,
            position=position,
        )
        rated.append((candidate, False, judgments))
    for candidate, is_control, judgments in rated:
        item = CampaignCandidate.objects.create(
            campaign=campaign,
            candidate=candidate,
            clip_id=candidate.clip_id,
            quota=2,
            is_control=is_control,
        )
        for worker, relevance, fluency, reason, excluded in judgments:
            Judgment.objects.create(
                campaign=campaign,
                campaign_candidate=item,
                participation=participations[worker],
                values={"relevance": relevance, "fluency": fluency},
                reason=reason,
                is_excluded=excluded,
                excluded_by="curator" if excluded else "",
            )
    aggregation_recompute(campaign=campaign)
    return campaign


def pseudonym(worker: str) -> str:
    """HMAC-SHA256 of "<platform>:<external id>" under the configured secret, 16 hex digits."""
    message = f"prolific:golden-{worker}".encode()
    return "w_" + hmac.new(SECRET.encode(), message, hashlib.sha256).hexdigest()[:16]


def test_a_release_worked_out_by_hand_has_exactly_these_bytes(db, settings):
    """Every figure below is worked out from the data above, not read from the code:

    - released: the six model captions with at least 2 kept judgments; the control and
      golden:d:1 (one judgment) are left out; w3's excluded judgment of golden:b:0 is not counted.
    - scores are the means of the kept judgments, `overall` their mean rounded to 9 decimals,
      `normalized` (overall - 1) / 4, `training_class` overall rounded half up.
    - stop reason: a fixed campaign (so no `opened_by` column), N = the quota 2, review at a
      range of 3: every released caption has at least 2 kept judgments and no question's kept
      ratings span 3 or more (the widest is 1: a0's fluency 5, 4, 4, a1's 2, 3, c0's 1, 2), so
      each stopped at its "maximum".
    - splits (seed 11, 80/20): the five clips form one stratum (fewer than the 25 clips a band
      needs), ordered by md5("11:<clip id>"): D 4027f6e8…, E 461466f7…, B 5d76e1af…,
      C 7b2d4d9c…, A 87ec431c…; laid end to end by released captions (1, 1, 1, 1, 2 of 6), a
      clip is in train while its midpoint lies below 4/5 of 6: D 0.5, E 1.5, B 2.5, C 3.5 are,
      A (midpoint 5) is not, so validation holds clip A's two captions.
    - lines are ordered by clip id, then candidate id.
    """
    settings.LEPUS_RELEASE_PSEUDONYM_SECRET = SECRET
    campaign = golden_campaign()
    release = build(campaigns=[campaign], seed=11, ratios=(0.8, 0.2), include_raw_judgments=True)

    def record(external_id: str, *, duration: float, scores: dict[str, float]) -> dict[str, Any]:
        vatex_id, text, judgments = CANDIDATES[external_id]
        start, end, _, video, frames, references = CLIPS[vatex_id]
        kept = [judgment for judgment in judgments if not judgment[4]]
        overall = round((scores["fluency"] + scores["relevance"]) / 2, 9)
        return {
            "campaign": "golden",
            "candidate_id": external_id,
            "clip_id": vatex_id,
            "duration": duration,
            "end": end,
            "frames_key": frames,
            "image_key": "",
            "judgments": len(kept),
            "modality": "video",
            "normalized": (overall - 1) / 4,
            "overall": overall,
            "raw_judgments": [
                {
                    "reason": reason,
                    "values": {"fluency": fluency, "relevance": relevance},
                    "worker": pseudonym(worker),
                }
                for worker, relevance, fluency, reason, _ in kept
            ],
            "references": references,
            "review_status": "none",
            "scores": scores,
            "start": start,
            "stop_reason": "maximum",
            "system": "captioner",
            "system_version": "2.1",
            "text": text,
            "training_class": int(overall + 0.5),
            "video_key": video,
        }

    b0 = record("golden:b:0", duration=6.75, scores={"fluency": 5.0, "relevance": 5.0})
    c0 = record("golden:c:0", duration=2.75, scores={"fluency": 1.5, "relevance": 2.0})
    d0 = record("golden:d:0", duration=9.5, scores={"fluency": 3.5, "relevance": 4.0})
    e0 = record("golden:e:0", duration=10.0, scores={"fluency": 3.5, "relevance": 3.0})
    a0 = record("golden:a:0", duration=10.0, scores={"fluency": 13 / 3, "relevance": 4.0})
    a1 = record("golden:a:1", duration=10.0, scores={"fluency": 2.5, "relevance": 3.0})
    # The figures the helper derives, written out: a mistake in it must not hide one in the SQL.
    assert [
        (r["overall"], r["normalized"], r["training_class"]) for r in (b0, c0, d0, e0, a0, a1)
    ] == [
        (5.0, 1.0, 5),
        (1.75, 0.1875, 2),
        (3.75, 0.6875, 4),
        (3.25, 0.5625, 3),
        (4.166666667, 0.7916666667500001, 4),
        (2.75, 0.4375, 3),
    ]
    # The canonical line (export.records): sorted keys, no spaces, UTF-8 as it is.
    jsonl = {
        split: "".join(
            json.dumps(line, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
            for line in lines
        ).encode()
        for split, lines in (("train", [b0, c0, d0, e0]), ("validation", [a0, a1]))
    }
    w1, w2, w3 = pseudonym("w1"), pseudonym("w2"), pseudonym("w3")
    header = (
        '"campaign","candidate_id","clip_id","duration","end","frames_key","image_key",'
        '"judgments","modality","normalized","overall","raw_judgments","references",'
        '"review_status","scores.fluency","scores.relevance","start","stop_reason","system",'
        '"system_version","text","training_class","video_key"\n'
    )
    csv = {
        "train": (
            header
            + '"golden","golden:b:0","Bb2_000005_000012",6.75,12.0,"frames/b","",2,"video",1.0,5.0,'
            f'"[{{""reason"":"""",""values"":{{""fluency"":5,""relevance"":5}},""worker"":""{w1}""}},'
            f'{{""reason"":"""",""values"":{{""fluency"":5,""relevance"":5}},""worker"":""{w2}""}}]",'
            '"[]","none",5.0,5.0,5.0,"maximum","captioner","2.1","Line\nbreak.",5,""\n'
            '"golden","golden:c:0","Cc3_000001_000004",2.75,4.25,"frames/c","",2,"video",0.1875,1.75,'
            f'"[{{""reason"":"""",""values"":{{""fluency"":1,""relevance"":2}},""worker"":""{w2}""}},'
            f'{{""reason"":"""",""values"":{{""fluency"":2,""relevance"":2}},""worker"":""{w3}""}}]",'
            '"[""é 😀""]","none",1.5,2.0,1.5,"maximum","captioner","2.1","C.",2,"clips/c.mp4"\n'
            '"golden","golden:d:0","Dd4_000000_000010",9.5,10.0,"","",2,"video",0.6875,3.75,'
            f'"[{{""reason"":"""",""values"":{{""fluency"":3,""relevance"":4}},""worker"":""{w1}""}},'
            f'{{""reason"":"""",""values"":{{""fluency"":4,""relevance"":4}},""worker"":""{w3}""}}]",'
            '"[""a dog""]","none",3.5,4.0,0.0,"maximum","captioner","2.1","D.",4,""\n'
            '"golden","golden:e:0","Ee5_000003_000013",10.0,13.0,"","",2,"video",0.5625,3.25,'
            f'"[{{""reason"":"""",""values"":{{""fluency"":3,""relevance"":3}},""worker"":""{w1}""}},'
            f'{{""reason"":"""",""values"":{{""fluency"":4,""relevance"":3}},""worker"":""{w2}""}}]",'
            '"[""e""]","none",3.5,3.0,3.0,"maximum","captioner","2.1","E.",3,"clips/e.mp4"\n'
        ),
        "validation": (
            header
            + '"golden","golden:a:0","Aa1_000000_000010",10.0,10.0,"","",3,"video",0.7916666667500001,'
            "4.166666667,"
            f'"[{{""reason"":"""",""values"":{{""fluency"":5,""relevance"":4}},""worker"":""{w1}""}},'
            f'{{""reason"":""too \\""short\\"""",""values"":{{""fluency"":4,""relevance"":4}},'
            f'""worker"":""{w2}""}},'
            f'{{""reason"":"""",""values"":{{""fluency"":4,""relevance"":4}},""worker"":""{w3}""}}]",'
            '"[""A man, \\""quoted\\"", plays."",""two""]","none",4.333333333333333,4.0,0.0,'
            '"maximum","captioner","2.1",'
            '"Quotes ""x"", a comma, — unicode é 😀, a tab\there, \\ a backslash, \x1f and '
            '\u2028end",4,"clips/a.mp4"\n'
            '"golden","golden:a:1","Aa1_000000_000010",10.0,10.0,"","",2,"video",0.4375,2.75,'
            f'"[{{""reason"":"""",""values"":{{""fluency"":2,""relevance"":3}},""worker"":""{w1}""}},'
            f'{{""reason"":"""",""values"":{{""fluency"":3,""relevance"":3}},""worker"":""{w2}""}}]",'
            '"[""A man, \\""quoted\\"", plays."",""two""]","none",2.5,3.0,0.0,"maximum","captioner","2.1",'
            '"A dog runs.",3,"clips/a.mp4"\n'
        ),
    }
    written = all_bytes(release)
    for split in ("train", "validation"):
        assert written[f"data/{split}.jsonl"] == jsonl[split], split
        assert written[f"csv/{split}.csv"] == csv[split].encode(), split
        assert release.files[f"data/{split}.jsonl"] == hashlib.sha256(jsonl[split]).hexdigest()
        assert release.files[f"csv/{split}.csv"] == hashlib.sha256(csv[split].encode()).hexdigest()
    assert release.counts["splits"] == {
        "train": {"candidates": 4, "clips": 4},
        "validation": {"candidates": 2, "clips": 1},
    }
    assert release.counts["excluded"] == {
        "control": 1,
        "dropped": 0,
        "under_review": 0,
        "below_quota": 1,
        "not_finalised": 0,
        "no_valid_score": 0,
    }


def test_the_reads_refuse_to_run_outside_their_block(db):
    data = build_campaign(slug="closed", clips=3, workers=3)
    opened = ReleaseReads(tag="closed", campaign_ids=[data.campaign.pk])
    with pytest.raises(RuntimeError, match="outside their `with` block"):
        opened.select_items()
    with opened:
        assert opened.select_items()["released"] > 0
    with pytest.raises(RuntimeError, match="outside their `with` block"):
        opened.select_items()


def test_agreement_falls_back_to_plain_counts_for_candidates_with_64_or_more_judgments(db):
    """Packed counts (6 bits per value) would overflow here; the result must still equal the
    krippendorff package's."""
    data = build_campaign(
        slug="crowded",
        clips=4,
        candidates_per_clip=(1, 2),
        quota=70,
        workers=72,
        controls=0,
        dropped=0,
        below_quota=0,
        under_review=0,
        resolved=0,
        excluded_worker=False,
    )
    keys = sorted(data.campaign.question_keys)
    with ReleaseReads(tag="crowded", campaign_ids=[data.campaign.pk]) as opened:
        opened.select_items()
        statistics, alpha = opened.judgments_and_agreement(question_keys=keys, batch_size=3)
    items = list(CampaignCandidate.objects.filter(campaign=data.campaign).order_by("pk"))
    assert statistics["judgments_per_candidate_max"] == 70
    workers = sorted({p.pk for p in data.participations})
    for key in keys:
        matrix = np.full((len(workers), len(items)), np.nan)
        for column, item in enumerate(items):
            for judgment in Judgment.objects.filter(campaign_candidate=item):
                matrix[workers.index(judgment.participation_id), column] = judgment.values[key]
        expected = krippendorff.alpha(
            reliability_data=matrix, level_of_measurement="ordinal", value_domain=[1, 2, 3, 4, 5]
        )
        assert alpha[key]["alpha"] == pytest.approx(expected, rel=1e-9)
        assert alpha[key]["ratings"] == 70 * len(items)
