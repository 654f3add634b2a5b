"""The release reads (export.reads): one Protocol, two implementations that must agree to the byte,
and the choice between them."""

from __future__ import annotations

import inspect

import krippendorff
import numpy as np
import pytest

from annotation.models import CampaignCandidate, Judgment
from datasets_app.models import CandidateCaption
from export import reads
from export.reads import PortableReleaseReads, PostgresqlReleaseReads, ReleaseReads, release_reads
from tests.export.builders import build_campaign
from tests.export.helpers import all_bytes, build
from tests.export.test_release_files import calibrate_leaving_one_out

PROTOCOL_METHODS = sorted(
    name
    for name, member in vars(ReleaseReads).items()
    if callable(member) and (not name.startswith("_") or name in ("__enter__", "__exit__"))
)


def test_release_reads_chooses_the_implementation_by_database(db, monkeypatch):
    chosen = release_reads(tag="t", campaign_ids=[2, 1])
    assert type(chosen) is PostgresqlReleaseReads
    monkeypatch.setattr(reads, "is_postgresql", lambda: False)
    portable = release_reads(tag="t", campaign_ids=[2, 1])
    assert type(portable) is PortableReleaseReads
    assert portable.campaign_ids == [1, 2]


@pytest.mark.parametrize("implementation", [PostgresqlReleaseReads, PortableReleaseReads])
def test_both_implementations_have_every_method_of_the_protocol_with_its_signature(
    implementation,
):
    assert len(PROTOCOL_METHODS) == 14
    for name in PROTOCOL_METHODS:
        expected = inspect.signature(getattr(ReleaseReads, name))
        actual = inspect.signature(getattr(implementation, name))
        assert list(actual.parameters) == list(expected.parameters), name
        assert [parameter.kind for parameter in actual.parameters.values()] == [
            parameter.kind for parameter in expected.parameters.values()
        ], name


def test_the_postgresql_reads_refuse_to_run_outside_their_block(db):
    data = build_campaign(slug="closed", clips=3, workers=3)
    opened = PostgresqlReleaseReads(tag="closed", campaign_ids=[data.campaign.pk])
    with pytest.raises(RuntimeError, match="outside their `with` block"):
        opened.select_items()
    with opened:
        assert opened.select_items()["released"] > 0
    with pytest.raises(RuntimeError, match="outside their `with` block"):
        opened.select_items()


def test_the_portable_reads_write_the_same_bytes_as_the_postgresql_ones(db, monkeypatch):
    """The portable reads (SQLite demo) build records with json.dumps itself: on the same data
    they must agree with PostgreSQL's SQL to the byte, which also checks the SQL's formatting."""
    data = build_campaign(slug="portable", clips=40, workers=8, candidates_per_clip=(1, 6))
    tricky = CandidateCaption.objects.filter(clip=data.clips[2]).first()
    tricky.text = 'Quotes "x", a comma, — unicode é 😀, a tab\there and \\ a backslash'
    tricky.save()
    calibrate_leaving_one_out(data.campaign)  # calibrated columns, one candidate's null
    sql_built = build(
        campaigns=[data.campaign], seed=6, ratios=(0.7, 0.2, 0.1), include_raw_judgments=True
    )
    monkeypatch.setattr(reads, "is_postgresql", lambda: False)
    portable_built = build(
        campaigns=[data.campaign], seed=6, ratios=(0.7, 0.2, 0.1), include_raw_judgments=True
    )
    assert portable_built.files == sql_built.files
    assert all_bytes(portable_built) == all_bytes(sql_built)
    assert portable_built.stats == sql_built.stats
    records = {
        (record.campaign_candidate_id, record.split, record.overall)
        for record in sql_built.records.all()
    }
    assert {
        (record.campaign_candidate_id, record.split, record.overall)
        for record in portable_built.records.all()
    } == records


def test_agreement_falls_back_to_plain_counts_for_candidates_with_64_or_more_judgments(db):
    """Packed counts (6 bits per value) would overflow here; the result must still equal the
    krippendorff package's and the portable reads'."""
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
    results = []
    for implementation in (PostgresqlReleaseReads, PortableReleaseReads):
        with implementation(tag="crowded", campaign_ids=[data.campaign.pk]) as opened:
            opened.select_items()
            results.append(opened.judgments_and_agreement(question_keys=keys, batch_size=3))
    (sql_statistics, sql_alpha), (portable_statistics, portable_alpha) = results
    assert sql_alpha == portable_alpha
    assert sql_statistics == portable_statistics
    assert sql_statistics["judgments_per_candidate_max"] == 70
    items = list(CampaignCandidate.objects.filter(campaign=data.campaign).order_by("pk"))
    workers = sorted({p.pk for p in data.participations})
    for key in keys:
        matrix = np.full((len(workers), len(items)), np.nan)
        for column, item in enumerate(items):
            for judgment in Judgment.objects.filter(campaign_candidate=item):
                matrix[workers.index(judgment.participation_id), column] = judgment.values[key]
        expected = krippendorff.alpha(
            reliability_data=matrix, level_of_measurement="ordinal", value_domain=[1, 2, 3, 4, 5]
        )
        assert sql_alpha[key]["alpha"] == pytest.approx(expected, rel=1e-9)
        assert sql_alpha[key]["ratings"] == 70 * len(items)
