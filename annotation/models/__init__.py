"""The models of the annotation app, one module per wing (campaigns, crowd, quality, calibration,
imports); every model is importable from here, as migrations and the other apps import them."""

from __future__ import annotations

from annotation.models.calibration import (
    CalibrationOutput,
    CalibrationRun,
    CandidateCalibration,
    WorkerSeverity,
)
from annotation.models.campaigns import (
    Campaign,
    CampaignCandidate,
    CampaignClip,
    CampaignStatus,
    ErasureMode,
    ReviewState,
)
from annotation.models.crowd import (
    Assignment,
    AssignmentItem,
    AssignmentStatus,
    BarReason,
    BarredIdentity,
    Judgment,
    JudgmentQuerySet,
    JudgmentSource,
    Participation,
    ParticipationStatus,
    Platform,
    Repeat,
    RepeatJudgment,
    Worker,
)
from annotation.models.imports import ImportUpload, UploadKind
from annotation.models.quality import (
    AgreementSnapshot,
    AuditEntry,
    QCRun,
    ReviewAction,
    ReviewItem,
    ReviewStatus,
    WorkerExclusion,
    WorkerQCStats,
)

__all__ = [
    "AgreementSnapshot",
    "Assignment",
    "AssignmentItem",
    "AssignmentStatus",
    "AuditEntry",
    "BarReason",
    "BarredIdentity",
    "CalibrationOutput",
    "CalibrationRun",
    "Campaign",
    "CampaignCandidate",
    "CampaignClip",
    "CampaignStatus",
    "CandidateCalibration",
    "ErasureMode",
    "ImportUpload",
    "Judgment",
    "JudgmentQuerySet",
    "JudgmentSource",
    "Participation",
    "ParticipationStatus",
    "Platform",
    "QCRun",
    "Repeat",
    "RepeatJudgment",
    "ReviewAction",
    "ReviewItem",
    "ReviewState",
    "ReviewStatus",
    "UploadKind",
    "Worker",
    "WorkerExclusion",
    "WorkerQCStats",
    "WorkerSeverity",
]
