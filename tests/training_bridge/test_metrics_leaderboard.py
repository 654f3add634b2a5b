"""The Metrics leaderboard: `evaluate_metrics --list`, `--save`, and the page, its CSV/JSON and the
API, all showing the stored figures (every registered metric, unavailable ones with their reason)
with the published figures beside (sourced with their place)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from tests.metrics.vatex_eval_data import vatex_eval_subset
from tests.training_bridge.metric_benchmark_data import VATEX_EVAL_SLUG, build_vatex_eval_campaign
from training_bridge.metrics.plugins import METRIC_NAMES
from training_bridge.metrics.published import PUBLISHED
from training_bridge.models import MetricBoardTable
from training_bridge.services.metric_leaderboard import NOT_RUN, metric_leaderboard

pytestmark = pytest.mark.django_db


def run(*args: str) -> dict:  # type: ignore[type-arg]
    stdout = io.StringIO()
    call_command("evaluate_metrics", *args, "--json", stdout=stdout, stderr=io.StringIO())
    return json.loads(stdout.getvalue())


def test_list_names_every_metric_with_its_state(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for env in (
        "LEPUS_CLIP_MODEL",
        "LEPUS_LCLIP_MODEL",
        "LEPUS_JUDGE_MODEL",
        "LEPUS_CAPTIONQA_MODEL",
    ):
        monkeypatch.delenv(env, raising=False)
    listing = run("--list")["metrics"]
    assert sorted(listing) == sorted(METRIC_NAMES)
    assert listing["cider"]["available"] is True and listing["cider"]["unavailable"] is None
    for name in ("expert_judge", "gveval_judge"):
        assert listing[name]["available"] is False
        assert listing[name]["unavailable"].startswith("no weights given: set judge_model=")
    assert listing["captionqa"]["unavailable"].startswith("no weights given: set captionqa_model=")
    assert listing["expert_judge"]["label"] == "EXPERT (judge)"
    with pytest.raises(CommandError, match="judge_unparsed"):
        run("--list", "--set", "judge_unparsed=maybe")


@pytest.fixture
def vatex_campaign():  # type: ignore[no-untyped-def]
    return build_vatex_eval_campaign(vatex_eval_subset(60))


def test_saved_table_is_what_the_page_csv_json_and_api_show(vatex_campaign, curator) -> None:  # type: ignore[no-untyped-def]
    table = run(
        "--campaign", VATEX_EVAL_SLUG, "--protocol", "emscore", "--refs", "1",
        "--metrics", "bleu1,cider,emscore,expert_judge", "--save",
    )  # fmt: skip
    board = MetricBoardTable.objects.get()
    assert board.table == table and board.reference_count == 1 and board.protocol == "emscore"
    assert board.candidates == 60 and board.references_per_candidate == 9

    data = metric_leaderboard()
    (section,) = data["sections"]
    assert section["benchmark"] == "VATEX-EVAL" and section["references_label"] == "first 1"
    rows = {row["metric"]: row for row in section["rows"]}
    assert list(rows) == list(METRIC_NAMES)  # every registered metric has a row
    for key in ("kendall_b", "kendall_c", "spearman", "pearson"):
        assert rows["cider"][key] == table["cider"][key]
    assert rows["expert_judge"]["unavailable"] == table["expert_judge"]["unavailable"]
    assert rows["rougeL"]["unavailable"] == NOT_RUN
    # Published beside ours: CIDEr 1-ref (recalled), EMScore reference-free (seed 000 Table 2).
    assert rows["cider"]["published"][0]["values"] == {"kendall_b": 17.3, "spearman": 22.6}
    assert rows["cider"]["published"][0]["verified"] is False
    assert rows["emscore"]["published"][0]["values"] == {"kendall_b": 23.2, "spearman": 30.3}
    assert rows["emscore"]["published"][0]["place"] == "line 103"
    assert rows["emscore"]["unavailable"]  # no CLIP weights here: the reason, never a number

    client = Client()
    client.force_login(curator)
    api = client.get("/api/v1/training/metrics-leaderboard")
    assert api.status_code == 200 and api.json() == json.loads(json.dumps(data))
    as_json = client.get("/dashboard/training/metrics/?format=json")
    assert as_json.json() == api.json()
    as_csv = client.get("/dashboard/training/metrics/?format=csv")
    assert as_csv["Content-Type"].startswith("text/csv")
    lines = list(csv.DictReader(io.StringIO(as_csv.content.decode())))
    cider = next(line for line in lines if line["metric"] == "cider" and line["campaign"])
    assert float(cider["kendall_b"]) == table["cider"]["kendall_b"]
    assert "kendall_b=17.3" in cider["published"]
    image_rows = [line for line in lines if line["benchmark"] == "Flickr8K-Expert"]
    assert {line["metric"] for line in image_rows} >= {"expert_judge", "clipscore", "cider"}

    page = client.get("/dashboard/training/metrics/")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'data-metric="cider"><th scope="row">CIDEr</th>' in html
    assert f'<td data-key="kendall_b">{table["cider"]["kendall_b"]}</td>' in html
    assert "unavailable: no weights given: set judge_model=" in html
    assert 'href="/dashboard/training/metrics/"' in html  # in the nav


def test_csv_cells_are_formula_neutralised(vatex_campaign, curator) -> None:  # type: ignore[no-untyped-def]
    vatex_campaign.name = "=HYPERLINK(1)"
    vatex_campaign.save()
    run("--campaign", VATEX_EVAL_SLUG, "--metrics", "bleu1", "--save")
    MetricBoardTable.objects.update(campaign=vatex_campaign)
    client = Client()
    client.force_login(curator)
    # A campaign that is not a known benchmark is named by its campaign name.
    vatex_campaign.slug = "mine"
    vatex_campaign.save()
    text = client.get("/dashboard/training/metrics/?format=csv").content.decode()
    assert "'=HYPERLINK(1)" in text and ",=HYPERLINK" not in text


def test_save_needs_a_campaign_alone(vatex_campaign) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match="--save stores a campaign's table"):
        run("--campaign", VATEX_EVAL_SLUG, "--release", "1", "--metrics", "bleu1", "--save")


def test_published_figures_name_their_place() -> None:
    for figure in PUBLISHED:
        assert figure.source and figure.place
        assert figure.verified == ("seed 000" in figure.source)
        assert all(0 < value < 100 for _, value in figure.values)


def test_the_page_needs_the_curator_role(client, django_user_model) -> None:  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user("someone", password="pw-123456789")
    client.force_login(user)
    assert client.get("/dashboard/training/metrics/").status_code in (302, 403)
    assert client.get("/api/v1/training/metrics-leaderboard").status_code == 403


def test_judge_answers_are_saved_and_shown_beside_the_workers_reasons(tmp_path, curator) -> None:  # type: ignore[no-untyped-def]
    """`--save` with the EXPERT judge on a tiny random LLaVA (clips with frames in storage) keeps
    every candidate's answer; the candidate page shows the stored answer beside the workers'
    reasons; an explanation that parsed shows per criterion."""
    import numpy as np

    from annotation.models import CampaignCandidate
    from datasets_app.models import Clip
    from tests.metrics.tiny_generative import save_tiny_llava
    from tests.rigel.release_support import jpeg
    from training_bridge.metrics.judge import JudgeRecord
    from training_bridge.services.metric_leaderboard import metric_board_save
    from training_bridge.store import DjangoStore

    data = vatex_eval_subset(12)  # two clips, six candidates each
    campaign = build_vatex_eval_campaign(data)
    store, rng = DjangoStore(), np.random.default_rng(5)
    for clip in Clip.objects.filter(vatex_id__in=set(data.clip_ids)):
        clip.frames_key = f"clips/{clip.vatex_id}/frames"
        clip.save(update_fields=["frames_key"])
        for index in range(2):
            store.put_bytes(f"{clip.frames_key}/{index:03d}.jpg", jpeg(rng))
    model = save_tiny_llava(tmp_path / "llava")
    table = run(
        "--campaign", VATEX_EVAL_SLUG, "--metrics", "expert_judge", "--save",
        "--set", f"judge_model={model}", "--set", "judge_unparsed=lowest",
        "--set", "judge_max_new_tokens=4", "--set", "frames=2",
    )  # fmt: skip
    assert table["expert_judge"].get("unavailable") is None
    board = MetricBoardTable.objects.get()
    items = CampaignCandidate.objects.filter(campaign=campaign)
    assert set(board.explanations) == {str(item.pk) for item in items}
    for answers in board.explanations.values():
        answer = answers["expert_judge"]
        assert answer["answer"]  # the raw answer (a random model's: no explanation parses)
        assert answer["score"] is None or 0 <= answer["score"] <= 1

    # A judge whose explanation parsed, stored later: the page shows it per criterion.
    item = items.order_by("pk").first()
    assert item is not None
    explained = JudgeRecord(
        "0.7",
        0.7,
        "Fluency: reads well.\nRelevance: the dog is a cat.\nDescriptiveness: no setting.",
        {
            "fluency": "reads well.",
            "relevance": "the dog is a cat.",
            "descriptiveness": "no setting.",
        },
    )
    metric_board_save(
        campaign=campaign, protocol="default", reference_count=None, table={},
        candidates=1, references_per_candidate=9, settings={},
        keys=[item.pk], judged={"expert_judge": [explained]},
    )  # fmt: skip
    client = Client()
    client.force_login(curator)
    html = client.get(f"/dashboard/datasets/candidates/{item.pk}/").content.decode()
    judgments_at = html.index('id="judgments-heading"')
    panel_at = html.index('id="judge-explanations-heading"')
    assert judgments_at < panel_at
    assert '<td class="small" data-criterion="relevance">the dog is a cat.</td>' in html
    assert "<td data-score>0.7</td>" in html
    other = items.order_by("pk")[1]
    html = client.get(f"/dashboard/datasets/candidates/{other.pk}/").content.decode()
    assert "no explanation could be read; the answer:" in html  # the tiny model's answer
