"""Dashboard pages of training runs: curators only; list, start, detail with SVG curves and the
evaluation table, cancel/resume buttons, comparison. And: web code never imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from annotation.models import Campaign
from annotation.questions import default_questions
from common.models import JobStatus
from tests.support.processes import REPO_ROOT, process_environment
from training_bridge.models import TrainingRun
from training_bridge.services import training_run_create

pytestmark = pytest.mark.django_db

EVALUATION = {
    "result_split": "test",
    "selection_split": "validation",
    "notes": [],
    "splits": {
        "test": {
            "n": 8,
            "role": "result",
            "rows": {
                "rigel": {
                    "kendall_b": 41.24,
                    "kendall_c": 40.5,
                    "spearman": 55.0,
                    "pearson": 57.75,
                },
                "bleu4": {"kendall_b": 12.5, "kendall_c": 11.0, "spearman": 15.0, "pearson": 14.0},
            },
            "notes": ["not computed: METEOR"],
        },
        "validation": {
            "n": 8,
            "role": "model selection",
            "rows": {
                "rigel": {"kendall_b": 77.7, "kendall_c": 70.0, "spearman": 80.0, "pearson": 81.0},
            },
            "notes": ["used for model selection: Phase 1 chose its epoch on this split"],
        },
    },
}
HISTORY = [
    {"phase": "phase1", "epoch": 1, "loss": 0.5, "validation_tau": 0.1},
    {"phase": "phase1", "epoch": 2, "loss": 0.4, "validation_tau": 0.3},
    {"phase": "phase2", "step": 1, "loss": 1.6},
    {"phase": "phase2", "step": 2, "loss": 1.4},
]


def _finished(release, **fields):  # type: ignore[no-untyped-def]
    run = training_run_create(release=release, backbone="tiny", start=False)
    TrainingRun.objects.filter(pk=run.pk).update(
        status=JobStatus.SUCCEEDED,
        history=HISTORY,
        evaluation=EVALUATION,
        metrics={"test": EVALUATION["splits"]["test"]["rows"]["rigel"]},
        completed_steps=["teacher", "phase1", "phase2", "evaluate"],
        **fields,
    )
    run.refresh_from_db()
    return run


def test_pages_are_for_curators_only(client, outsider, published_release):
    run = _finished(published_release)
    for url in (
        "/dashboard/training/",
        f"/dashboard/training/{run.pk}/",
        "/dashboard/training/compare/",
    ):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    client.force_login(outsider)
    for url in (
        "/dashboard/training/",
        f"/dashboard/training/{run.pk}/",
        "/dashboard/training/compare/",
    ):
        assert client.get(url).status_code == 403
    assert client.post(f"/dashboard/training/{run.pk}/resume/").status_code == 403
    assert (
        client.post("/dashboard/training/start/", {"release": published_release.pk}).status_code
        == 403
    )
    assert TrainingRun.objects.count() == 1


def test_the_list_shows_runs_and_the_form_starts_one(
    curator_client, published_release, django_capture_on_commit_callbacks
):
    run = _finished(published_release, name="baseline")
    page = curator_client.get("/dashboard/training/").content.decode()
    assert "baseline" in page and "41.2" in page  # test tau_b x100, one decimal
    assert "77.7" not in page  # the validation figure is not a result
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = curator_client.post(
            "/dashboard/training/start/",
            {"release": published_release.pk, "backbone": "tiny", "device": "cpu", "ablation": "lm_head",
             "name": "from the form"},
        )  # fmt: skip
    created = TrainingRun.objects.exclude(pk=run.pk).get()
    assert (
        response.status_code == 302 and response["Location"] == f"/dashboard/training/{created.pk}/"
    )
    assert (created.ablation, created.name, created.trigger) == (
        "lm_head",
        "from the form",
        "dashboard",
    )
    assert len(callbacks) == 1


def test_the_detail_page_draws_curves_and_the_evaluation_table(curator_client, published_release):
    run = _finished(published_release)
    page = curator_client.get(f"/dashboard/training/{run.pk}/").content.decode()
    assert page.count("<svg") == 3  # Phase 1 loss, Phase 1 tau, Phase 2 loss
    assert page.count("<polyline") == 3
    assert '<tr data-metric="rigel"><th scope="row">Rigel</th>' in page
    assert "<td>41.2</td><td>40.5</td>" in page
    # the test split comes first, as the results; validation only as model selection
    assert page.index("Test split — results") < page.index(
        "Validation split — used for model selection, not a result"
    )
    assert 'data-split="validation" data-role="model selection"' in page
    assert '<tr data-metric="bleu4"><th scope="row">BLEU-4</th>' in page
    assert "not computed: METEOR" in page
    assert "Resume from checkpoint" not in page  # a succeeded run has nothing to resume


def test_a_failed_run_offers_resume_and_the_button_requeues_it(curator_client, published_release):
    run = _finished(published_release)
    TrainingRun.objects.filter(pk=run.pk).update(status=JobStatus.FAILED, error="boom")
    page = curator_client.get(f"/dashboard/training/{run.pk}/").content.decode()
    assert "Resume from checkpoint" in page and "boom" in page
    response = curator_client.post(f"/dashboard/training/{run.pk}/resume/")
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == JobStatus.QUEUED


def test_a_run_on_a_release_without_a_test_split_says_it_has_no_results(
    curator_client, published_release
):
    validation_only = {
        "result_split": None,
        "selection_split": "validation",
        "notes": ["this release has no test split, so the run has no result figures"],
        "splits": {"validation": EVALUATION["splits"]["validation"]},
    }
    run = _finished(published_release)
    TrainingRun.objects.filter(pk=run.pk).update(evaluation=validation_only, metrics={})
    run.refresh_from_db()
    assert run.has_no_test_split and run.result_metric() is None
    page = curator_client.get(f"/dashboard/training/{run.pk}/").content.decode()
    assert 'id="no-test-split"' in page and "has no test split" in page
    assert "Test split — results" not in page
    listing = curator_client.get("/dashboard/training/").content.decode()
    assert "77.7" not in listing
    compare = curator_client.get(f"/dashboard/training/compare/?run={run.pk}").content.decode()
    assert "77.7" not in compare and "Results: test-split correlations" in compare


def test_compare_puts_runs_side_by_side(curator_client, published_release):
    first = _finished(published_release)
    second = _finished(published_release)
    TrainingRun.objects.filter(pk=second.pk).update(
        hyperparameters={**second.hyperparameters, "temperature": 4.0}
    )
    Campaign.objects.create(slug="bench", name="bench", questions=default_questions())
    page = curator_client.get(f"/dashboard/training/compare/?run={first.pk}&run={second.pk}")
    text = page.content.decode()
    assert page.status_code == 200
    assert f"run {first.pk}</a>" in text and f"run {second.pk}</a>" in text
    assert '<tr class="differs"><th scope="row">temperature *</th><td>2.0</td><td>4.0</td>' in text
    # the two runs can be evaluated on one benchmark from here (the ablation matrix)
    assert 'action="/dashboard/training/evaluations/start/"' in text
    assert f'name="run" value="{first.pk}"' in text and 'value="foil"' in text


def test_web_code_never_imports_torch():
    code = (
        "import sys, django; django.setup();"
        "import config.urls, training_bridge.views, training_bridge.apis, training_bridge.services,"
        " training_bridge.selectors, training_bridge.tasks, training_bridge.admin;"
        "print(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=process_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_run_page_starts_a_benchmark_evaluation_job(
    curator_client, published_release, django_capture_on_commit_callbacks
):
    from training_bridge.models import RigelEvaluation

    run = _finished(published_release)
    Campaign.objects.create(slug="bench", name="bench", questions=default_questions())
    page = curator_client.get(f"/dashboard/training/{run.pk}/").content.decode()
    assert 'action="/dashboard/training/evaluations/start/"' in page
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = curator_client.post(
            "/dashboard/training/evaluations/start/",
            {"run": str(run.pk), "campaign": "bench", "protocol": ["1-ref", "noun-swap"]},
        )
    evaluation = RigelEvaluation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/dashboard/training/evaluations/{evaluation.pk}/"
    assert (evaluation.runs, evaluation.protocols) == ([run.pk], ["1-ref", "noun-swap"])
    assert len(callbacks) == 1  # enqueued on the training queue after commit
    detail = curator_client.get(response["Location"]).content.decode()
    assert 'id="evaluation-status"' in detail and "bench" in detail
    # a run that has not finished cannot be evaluated: the form's error comes back
    queued = training_run_create(release=published_release, backbone="tiny", start=False)
    response = curator_client.post(
        "/dashboard/training/evaluations/start/",
        {"run": str(queued.pk), "campaign": "bench"},
        follow=True,
    )
    assert "only succeeded runs can be evaluated" in response.content.decode()
    assert RigelEvaluation.objects.count() == 1


# --- what the machine has (issue 15, point 8) ---------------------------------------------------


@pytest.fixture
def gpu_machine(settings, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    """The NVIDIA driver lists one GPU (a /proc-like folder made here; nothing else is faked)."""
    from training_bridge.services import machine

    gpus = tmp_path / "gpus"
    (gpus / "0000:01:00.0").mkdir(parents=True)
    settings.LEPUS_TRAINING_DEVICES = []
    monkeypatch.setattr(machine, "NVIDIA_GPUS", gpus)


def test_a_cpu_only_machine_offers_cpu_and_the_tiny_backbone_by_default(
    curator_client, published_release, cpu_only_machine
):
    page = curator_client.get("/dashboard/training/").content.decode()
    assert '<option value="cpu" selected>CPU</option>' in page
    assert 'value="cuda"' not in page
    assert '<option value="tiny" selected>' in page
    assert "no GPU: the tiny backbone is the default" in page

    # The form's defaults (only a release): tiny on the CPU, never the 2 B model.
    response = curator_client.post("/dashboard/training/start/", {"release": published_release.pk})
    run = TrainingRun.objects.get()
    assert response.status_code == 302
    assert (run.backbone, run.device) == ("tiny", "cpu")

    # A device the machine does not have is refused, and nothing is created.
    response = curator_client.post(
        "/dashboard/training/start/",
        {"release": published_release.pk, "backbone": "tiny", "device": "cuda"},
    )
    assert response.status_code == 400
    assert "Device: Select a valid choice. cuda is not one of the available choices." in (
        response.content.decode()
    )
    assert TrainingRun.objects.count() == 1


def test_a_large_backbone_asks_for_confirmation_saying_what_it_needs(
    curator_client, published_release, cpu_only_machine, settings
):
    large = settings.LEPUS_DEFAULT_BACKBONE
    response = curator_client.post(
        "/dashboard/training/start/", {"release": published_release.pk, "backbone": large}
    )
    page = response.content.decode()
    assert response.status_code == 400
    assert TrainingRun.objects.count() == 0
    assert f"{large} is a large model." in page
    assert "in the Hugging Face cache (HF_HOME) of the training worker" in page
    assert "<strong>not found on this machine</strong>" in page
    assert "about 4 GB of weights in bf16" in page
    assert 'name="confirm_large"' in page

    response = curator_client.post(
        "/dashboard/training/start/",
        {"release": published_release.pk, "backbone": large, "confirm_large": "on"},
    )
    assert response.status_code == 302
    assert TrainingRun.objects.get().backbone == large

    # A folder given as the other model: the page looks for its config.json.
    response = curator_client.post(
        "/dashboard/training/start/",
        {"release": published_release.pk, "backbone": "other", "backbone_path": "/models/none"},
    )
    assert "in the folder /models/none on the training worker" in response.content.decode()


def test_a_machine_with_a_gpu_offers_cuda_and_the_configured_backbone(
    curator_client, published_release, gpu_machine, settings
):
    page = curator_client.get("/dashboard/training/").content.decode()
    assert '<option value="cuda" selected>GPU (CUDA)</option>' in page
    assert f'<option value="{settings.LEPUS_DEFAULT_BACKBONE}" selected>' in page


TRACEBACK = (
    "teacher: OSError: We couldn't connect to 'https://huggingface.co' to load the files\n\n"
    + (
        "Traceback (most recent call last):\n"
        + "".join(
            f'  File "/srv/lepus/training_bridge/rigel/step_{n}.py", line {n}, in step\n    raise\n'
            for n in range(60)
        )
        + "OSError: We couldn't connect to 'https://huggingface.co' to load the files"
    )
)


def test_a_failed_run_shows_one_line_with_the_traceback_folded_and_resume_only_with_a_checkpoint(
    curator_client, published_release
):
    run = training_run_create(release=published_release, backbone="tiny", start=False)
    TrainingRun.objects.filter(pk=run.pk).update(status=JobStatus.FAILED, error=TRACEBACK)
    page = curator_client.get(f"/dashboard/training/{run.pk}/").content.decode()
    assert (
        '<p class="error" id="run-error">teacher: OSError: We couldn&#x27;t connect to '
        "&#x27;https://huggingface.co&#x27; to load the files</p>"
    ) in page
    assert '<details id="run-traceback"><summary>Traceback</summary>' in page  # closed
    assert "details open" not in page
    assert "Resume from checkpoint" not in page
    assert "No checkpoint was saved, so there is nothing to resume" in page

    TrainingRun.objects.filter(pk=run.pk).update(completed_steps=["teacher"])
    page = curator_client.get(f"/dashboard/training/{run.pk}/").content.decode()
    assert "Resume from checkpoint" in page
    assert "No checkpoint was saved" not in page
    TrainingRun.objects.filter(pk=run.pk).update(
        completed_steps=[], checkpoint={"phase2": {"key": "training/runs/1/phase2", "step": 20}}
    )
    assert (
        "Resume from checkpoint"
        in curator_client.get(f"/dashboard/training/{run.pk}/").content.decode()
    )


def test_a_run_stored_before_prompt_layouts_keeps_its_order(curator_client, published_release):
    from training_bridge.services.runs import training_run_config

    old = _finished(published_release)
    new = _finished(published_release)
    assert new.hyperparameters["prompt_layout"] == "candidate-last"
    stored = {k: v for k, v in old.hyperparameters.items() if k != "prompt_layout"}
    TrainingRun.objects.filter(pk=old.pk).update(hyperparameters=stored)
    old.refresh_from_db()
    # scored (and resumed) with the prompt it was trained on
    assert training_run_config(run=old).prompt_layout == "rubric-last"
    assert training_run_config(run=new).prompt_layout == "candidate-last"
    text = curator_client.get(
        f"/dashboard/training/compare/?run={old.pk}&run={new.pk}"
    ).content.decode()
    assert (
        '<tr class="differs"><th scope="row">prompt_layout *</th>'
        "<td>rubric-last</td><td>candidate-last</td>" in text
    )
