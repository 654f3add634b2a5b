"""The licence of every source in a release, for its dataset card and manifest.

A release mixes data of several origins, each under its own terms, and none of them is Lepus's
code licence (BSD 3-Clause Clear covers the software, not the data it handles):

- judgments collected with Lepus (crowd campaigns): the licence the curator chose for the
  release (`Release.judgments_license`). The default is CC BY 4.0: attribution-only, the licence
  most datasets on the Hugging Face Hub carry, and the licence of VATEX's captions, which most
  releases contain anyway, so a typical release is usable under one attribution-only regime. The
  curator may choose another (e.g. CC0 when the crowd platform's terms give the data away), since
  only they know what the workers agreed to;
- VATEX clips' ids and English captions (`vatex` batches, and the references inside VATEX-EVAL):
  CC BY 4.0, Wang et al. (ICCV 2019); the videos themselves belong to their YouTube uploaders and
  are not part of any licence here (records carry storage keys, not videos);
- VATEX-EVAL judgments (`vatex_eval` batches or the `vatex-eval` campaign): MIT, Shi et al.
  (CVPR 2022), with the notice in NOTICE.md;
- other imported files (the generic candidates and judgments formats): Lepus does not know their
  terms; the card says so, so that the curator checks them before publishing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.db import models


class JudgmentLicense(models.TextChoices):
    CC_BY_4 = "cc-by-4.0", "CC BY 4.0 (attribution)"
    CC_BY_SA_4 = "cc-by-sa-4.0", "CC BY-SA 4.0 (attribution, share-alike)"
    CC0 = "cc0-1.0", "CC0 1.0 (public domain dedication)"
    ODC_BY = "odc-by", "ODC-By 1.0 (attribution, databases)"
    CDLA_PERMISSIVE_2 = "cdla-permissive-2.0", "CDLA-Permissive 2.0"


DEFAULT_JUDGMENT_LICENSE = JudgmentLicense.CC_BY_4
CODE_LICENSE = "BSD 3-Clause Clear"
UNRECORDED = "other"  # the Hub's identifier for terms not in its list

VATEX_ATTRIBUTION = (
    'Wang et al., "VaTeX: A Large-Scale, High-Quality Multilingual Dataset for Video-and-Language '
    'Research", ICCV 2019'
)
VATEX_EVAL_ATTRIBUTION = (
    'Shi et al., "EMScore: Evaluating Video Captioning via Coarse-Grained and Fine-Grained '
    'Embedding Matching", CVPR 2022; notice and licence text in NOTICE.md'
)


@dataclass(frozen=True)
class SourceLicence:
    source: str  # what in the release it covers
    license: str  # a Hub licence identifier, or "other"
    license_name: str
    attribution: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def release_licences(
    *,
    judgments_license: str,
    campaigns: list[dict[str, Any]],
    source_kinds: set[str],
    includes_vatex: bool,
    includes_vatex_eval: bool,
) -> list[SourceLicence]:
    """One row per kind of source the release holds, in a fixed order."""
    rows = []
    collected = [campaign["slug"] for campaign in campaigns if not campaign.get("is_imported")]
    if collected:
        rows.append(
            SourceLicence(
                source="judgments collected with Lepus (campaigns "
                + ", ".join(collected)
                + ") and this release's compilation",
                license=judgments_license,
                license_name=JudgmentLicense(judgments_license).label,
                attribution="the curators of this release",
            )
        )
    if includes_vatex:
        rows.append(
            SourceLicence(
                source="VATEX clip ids, time windows and English reference captions",
                license="cc-by-4.0",
                license_name=JudgmentLicense.CC_BY_4.label,
                attribution=VATEX_ATTRIBUTION,
            )
        )
    if includes_vatex_eval:
        rows.append(
            SourceLicence(
                source="VATEX-EVAL candidate captions and human judgments",
                license="mit",
                license_name="MIT",
                attribution=VATEX_EVAL_ATTRIBUTION,
            )
        )
    for kind, what in (
        ("candidates", "imported candidate files"),
        ("judgments", "imported judgment files"),
    ):
        if kind in source_kinds:
            rows.append(
                SourceLicence(
                    source=f"{what} (listed below with their sha256)",
                    license=UNRECORDED,
                    license_name="not recorded by Lepus: the provider's terms apply",
                    attribution="as the file's provider requires; check before publishing",
                )
            )
    return rows


def hub_license_ids(rows: list[SourceLicence]) -> list[str]:
    """The card's `license:` list: every distinct identifier, in the rows' order."""
    return list(dict.fromkeys(row.license for row in rows)) or [DEFAULT_JUDGMENT_LICENSE.value]
