"""Building a release's files from one consistent read of the database: the split files
(export.release_files), the dataset card (export.card) and manifest.json (export.manifest), with
the statistics of export.statistics. A pure function of (database state, release settings, code
version, pseudonym key): nothing here reads a clock or depends on dict order.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from annotation.quality.calibration_job import calibration_release_facts
from annotation.quality.consistency import retest_release_facts
from common.provenance import code_version
from export.card import write_card
from export.explanations import write_explanations
from export.manifest import write_manifest
from export.models import SPLIT_NAMES, Release
from export.reads import ReleaseReads
from export.records import RecordSchema, pseudonym
from export.release_facts import ReleaseCounts, ReleaseFacts, excluded_workers, release_counts
from export.release_files import (
    ProgressCallback,
    SplitFilesWritten,
    SplitWrite,
    write_split_files,
)
from export.statistics import release_statistics

logger = logging.getLogger(__name__)


class PhaseTimer:
    """Logs how long each phase of a build took and the process's peak memory so far."""

    def __init__(self, release_id: int) -> None:
        self.release_id = release_id
        self.started = self.last = time.perf_counter()

    def done(self, phase: str) -> None:
        now = time.perf_counter()
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        logger.info(
            "release %s: %s in %.2f s (total %.2f s, peak RSS %.0f MiB)",
            self.release_id,
            phase,
            now - self.last,
            now - self.started,
            peak_mib,
        )
        self.last = now


def pseudonym_key() -> bytes:
    configured = settings.LEPUS_RELEASE_PSEUDONYM_SECRET
    if configured:
        return configured.encode()
    return hmac.new(
        settings.SECRET_KEY.encode(), b"lepus-release-pseudonyms", hashlib.sha256
    ).digest()


@dataclass
class BuildOutput:
    files: dict[str, str]
    total_bytes: int
    counts: ReleaseCounts
    stats: dict[str, Any]


def build_release_files(*, release: Release, root: Path, progress: ProgressCallback) -> BuildOutput:
    """Write every file of `release` under `root`; returns their hashes, counts and statistics."""
    split_names = list(SPLIT_NAMES[: len(release.ratios)])
    campaign_ids = list(release.campaigns.values_list("pk", flat=True))
    timer = PhaseTimer(release.pk)
    calibration = calibration_release_facts(campaign_ids=campaign_ids)

    with ReleaseReads(tag=f"{release.pk}_{release.attempts}", campaign_ids=campaign_ids) as reads:
        progress(0.01, "selecting the finalised candidates")
        selection = reads.select_items()
        timer.done("selection")
        keys, campaigns = reads.question_keys()
        split_method = reads.assign_splits(seed=release.seed, ratios=release.ratios)
        reads.check_values(include_raw_judgments=release.include_raw_judgments)
        timer.done("splits")
        per_split = reads.store_records(release_id=release.pk)
        timer.done("release records")
        pseudonyms = _pseudonyms(reads)
        schema, allocation = _prepare_lines(
            reads, release=release, keys=keys, calibrated=bool(calibration), pseudonyms=pseudonyms
        )
        timer.done("clip fragments")
        written, explanation_files, explained = _write_lines(
            SplitWrite(
                reads=reads,
                schema=schema,
                split_names=split_names,
                root=root,
                total=selection["released"],
                progress=progress,
                phase_done=timer.done,
            )
        )
        progress(0.72, "agreement and statistics")
        split_facts = reads.split_statistics(splits=len(split_names))
        timer.done("split statistics")
        judgments, agreement = reads.judgments_and_agreement(
            question_keys=keys, batch_size=settings.LEPUS_RELEASE_BATCH_SIZE
        )
        timer.done("judgments and agreement")
        sources = reads.sources(judgment_batches=judgments["judgment_import_batches"])
        exclusion_facts = reads.exclusions()
        timer.done("sources and exclusions")

    facts = ReleaseFacts(
        release=release,
        split_names=split_names,
        selection=selection,
        question_keys=keys,
        campaigns=campaigns,
        split_method=split_method,
        counts=release_counts(split_names=split_names, selection=selection, per_split=per_split),
        stats=release_statistics(
            split_names=split_names,
            split_facts=split_facts,
            words=written.words,
            judgments=judgments,
            agreement=agreement,
            selection=selection,
        ),
        sources=sources,
        excluded_workers=excluded_workers(
            workers=exclusion_facts["workers"], pseudonyms=pseudonyms
        ),
        judgment_exclusions=exclusion_facts["judgment_exclusions"],
        review_by_campaign=exclusion_facts["audit"],
        code_version=code_version(),
        calibration=calibration,
        retest=retest_release_facts(campaign_ids=campaign_ids),
        explanations=explained,
        allocation=allocation,
    )
    output = _card_and_manifest(
        facts=facts, files={**written.files, **explanation_files}, root=root
    )
    timer.done("card and manifest")
    return output


def _card_and_manifest(*, facts: ReleaseFacts, files: dict[str, str], root: Path) -> BuildOutput:
    """Write the card and the manifest (which lists every file, its own hash aside)."""
    files = {**files, **write_card(facts=facts, root=root)}
    files["manifest.json"] = write_manifest(facts=facts, files=files, root=root)
    return BuildOutput(
        files=dict(sorted(files.items())),
        total_bytes=sum((root / relative).stat().st_size for relative in files),
        counts=facts.counts,
        stats=facts.stats,
    )


def _pseudonyms(reads: ReleaseReads) -> dict[int, str]:
    """Worker -> pseudonym, for the raw judgments and the excluded workers."""
    key = pseudonym_key()
    return {
        worker_pk: pseudonym(key, platform=platform, external_id=external_id)
        for worker_pk, (platform, external_id) in reads.worker_identities().items()
    }


def _prepare_lines(
    reads: ReleaseReads,
    *,
    release: Release,
    keys: list[str],
    calibrated: bool,
    pseudonyms: dict[int, str],
) -> tuple[RecordSchema, list[dict[str, Any]]]:
    """The lines' schema, and the per clip pieces the line queries join (pseudonyms only for a
    release with raw judgments); and the campaigns' allocation facts, read before the lines.

    Optional columns appear only where they carry something, so the files of other releases
    keep their format and no loader meets a column it cannot type (all nulls, all empty lists):
    the calibrated columns only when a campaign of the release has been calibrated, `opened_by`
    only when one allocates judgments adaptively."""
    allocation = reads.allocation()
    adaptive = any(entry["policy"]["kind"] != "fixed" for entry in allocation)
    schema = RecordSchema(
        question_keys=keys,
        include_raw_judgments=release.include_raw_judgments,
        include_calibration=calibrated,
        include_allocation=adaptive,
    )
    reads.prepare_fragments(
        pseudonyms=pseudonyms if release.include_raw_judgments else None, schema=schema
    )
    return schema, allocation


def _write_lines(job: SplitWrite) -> tuple[SplitFilesWritten, dict[str, str], int | None]:
    """The split files, then (with raw judgments) the explanations: (the split files, the
    explanation files, how many candidates have an explanation or None)."""
    batch_size = settings.LEPUS_RELEASE_BATCH_SIZE
    job.progress(0.1, f"writing {job.total} candidates")
    written = write_split_files(job)
    if not job.schema.include_raw_judgments:
        return written, {}, None
    explanation_files, explained = write_explanations(
        rows=job.reads.explanation_rows(batch_size=batch_size),
        root=job.root,
        split_names=job.split_names,
        question_keys=job.schema.question_keys,
        batch_size=batch_size,
    )
    job.phase_done("explanations")
    return written, explanation_files, explained
