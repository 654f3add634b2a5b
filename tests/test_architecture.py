"""The architecture holds at run time: Rigel and the metrics load without the web stack.

(`make lint` checks the import contracts statically with import-linter; this test checks what a
fresh interpreter really loads, lazy and indirect imports included.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
WEB_STACK = ("django", "celery", "kombu", "rest_framework", "drf_spectacular")
APPS = ("config", "common", "datasets_app", "annotation", "export")

_PROBE = """
import importlib, json, pkgutil, sys
import training_bridge.metrics
import training_bridge.rigel
import training_bridge.rigel.pipeline
imported = ["training_bridge.rigel.pipeline"]
for package in (training_bridge.rigel, training_bridge.metrics):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)
        imported.append(module.name)
print(json.dumps({"imported": imported, "loaded": sorted(sys.modules)}))
"""


def test_the_rigel_pipeline_and_the_metrics_load_no_django_celery_drf_or_app_code():
    environment = {
        key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"
    }
    completed = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert "training_bridge.rigel.pipeline" in report["imported"]
    assert any(name.startswith("training_bridge.metrics.") for name in report["imported"])
    loaded = report["loaded"]
    offending = [
        name for name in loaded if name.split(".")[0] in WEB_STACK or name.split(".")[0] in APPS
    ]
    assert offending == []
    # The pipeline really ran its imports (a probe that loaded nothing would pass vacuously).
    assert "torch" in loaded and "numpy" in loaded


def test_django_setup_loads_no_drf_serializers_and_no_numpy():
    """A release build or a QC run starts with `django.setup()` alone: the admin's form fields
    must not pull DRF's serializers into every process (about 180 modules, 2.6 MiB of RSS), nor
    training_bridge's metric checker (registered at start-up) NumPy and the metric registry
    (about 230 modules, 0.3 s of every process's start)."""
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, json, sys; django.setup(); print(json.dumps(sorted(sys.modules)))",
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    loaded = json.loads(completed.stdout.strip().splitlines()[-1])
    assert "annotation.admin" in loaded and "annotation.crowd.campaign_option_fields" in loaded
    assert "rest_framework.serializers" not in loaded
    assert "training_bridge.apps" in loaded and "common.campaign_metric" in loaded
    assert "numpy" not in loaded and "training_bridge.services.campaign_metric" not in loaded
