"""What each worker of a campaign is owed, as CSV files a curator pays from in one step.

* `payments_prolific_bonus_csv`: Prolific's bulk bonus format — one line per participant,
  `<PROLIFIC_PID>,<amount>`, the amount in the study currency with two decimals, no header. Paste it
  into "Bulk bonus payment" on the study's submissions page.
* `payments_full_csv`: every crowd worker (any platform) with assignments submitted, active and
  server time, amount and currency, for the record or other platforms.

The amount owed is `submitted assignments × campaign.pay_per_assignment`. Every submitted
assignment counts, also of workers that quality control excluded later: they did the work (exclude
them from the bonus file by hand if the study's terms say otherwise; the status column says who).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, Q, Sum

from annotation.models import AssignmentStatus, Campaign, Participation, Platform
from common.spreadsheet import spreadsheet_safe

_PROLIFIC_ID = re.compile(r"^[A-Za-z0-9]{1,64}$")
_CENT = Decimal("0.01")
FULL_CSV_COLUMNS = [
    "platform",
    "external_id",
    "status",
    "assignments_submitted",
    "active_minutes",
    "server_minutes",
    "amount",
    "currency",
    "study_id",
    "session_id",
    "joined_at",
    "completed_at",
]


@dataclass(frozen=True)
class PaymentRow:
    platform: str
    external_id: str
    status: str
    assignments_submitted: int
    active_ms: int
    server_ms: int
    amount: Decimal
    currency: str
    study_id: str
    session_id: str
    joined_at: str
    completed_at: str


def payments_rows(*, campaign: Campaign) -> list[PaymentRow]:
    """One row per crowd worker of the campaign (imported rater slots are not people)."""
    submitted = Q(assignments__status=AssignmentStatus.SUBMITTED)
    participations = (
        Participation.objects.filter(campaign=campaign)
        .exclude(worker__platform=Platform.IMPORTED)
        .select_related("worker")
        .annotate(
            done=Count("assignments", filter=submitted),
            active_ms=Sum("assignments__client_active_ms", filter=submitted),
            server_ms=Sum("assignments__server_ms", filter=submitted),
        )
        .order_by("worker__platform", "worker__external_id")
    )
    pay = Decimal(campaign.pay_per_assignment)
    rows = []
    for participation in participations:
        platform_data = participation.platform_data or {}
        rows.append(
            PaymentRow(
                platform=participation.worker.platform,
                external_id=participation.worker.external_id,
                status=participation.status,
                assignments_submitted=participation.done,
                active_ms=int(participation.active_ms or 0),
                server_ms=int(participation.server_ms or 0),
                amount=(pay * participation.done).quantize(_CENT),
                currency=campaign.currency,
                study_id=str(platform_data.get("study_id") or platform_data.get("hit_id") or ""),
                session_id=str(
                    platform_data.get("session_id") or platform_data.get("assignment_id") or ""
                ),
                joined_at=participation.joined_at.isoformat(),
                completed_at=participation.completed_at.isoformat()
                if participation.completed_at
                else "",
            )
        )
    return rows


def payments_prolific_bonus_csv(*, campaign: Campaign) -> tuple[str, list[str]]:
    """Prolific's bulk bonus text, and the external ids left out because they are not Prolific
    participant ids (so the file stays valid)."""
    lines = []
    skipped = []
    for row in payments_rows(campaign=campaign):
        if row.platform != Platform.PROLIFIC or row.amount <= 0:
            continue
        if not _PROLIFIC_ID.match(row.external_id):
            skipped.append(row.external_id)
            continue
        lines.append(f"{row.external_id},{row.amount:.2f}")
    return "".join(f"{line}\n" for line in lines), skipped


def payments_full_csv(*, campaign: Campaign) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(FULL_CSV_COLUMNS)
    for row in payments_rows(campaign=campaign):
        writer.writerow(
            [
                row.platform,
                spreadsheet_safe(row.external_id),
                row.status,
                row.assignments_submitted,
                f"{row.active_ms / 60000:.2f}",
                f"{row.server_ms / 60000:.2f}",
                f"{row.amount:.2f}",
                row.currency,
                spreadsheet_safe(row.study_id),
                spreadsheet_safe(row.session_id),
                row.joined_at,
                row.completed_at,
            ]
        )
    return buffer.getvalue()


def payments_total(*, campaign: Campaign) -> dict[str, object]:
    rows = payments_rows(campaign=campaign)
    return {
        "workers": len(rows),
        "assignments_submitted": sum(row.assignments_submitted for row in rows),
        "amount": f"{sum((row.amount for row in rows), Decimal('0')):.2f}",
        "currency": campaign.currency,
    }
