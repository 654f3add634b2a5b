"""The assignment engine on PostgreSQL: what `assignment_claim_next` hands out, leases, slots."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from annotation.crowd.services.assignment import (
    assignment_claim_next,
    assignments_expire,
    campaign_candidate_slots_release,
    campaign_candidate_slots_take,
)
from annotation.crowd.services.campaigns import campaign_create, campaign_items_add
from annotation.crowd.services.offers import assignment_offer_payload
from annotation.models import (
    Assignment,
    AssignmentItem,
    AssignmentStatus,
    CampaignCandidate,
    CampaignClip,
    CampaignStatus,
    ParticipationStatus,
)
from annotation.tasks import expire_leases
from datasets_app.models import CandidateKind, Clip, ClipStatus, ControlType
from tests.annotation.crowd_factories import crowd_campaign, crowd_join, ready_clip
from tests.factories import CandidateFactory, ClipFactory

pytestmark = pytest.mark.django_db


def _slots(campaign) -> dict[int, int]:
    return dict(
        CampaignCandidate.objects.filter(campaign=campaign).values_list("id", "slots_taken")
    )


def _open_slots(campaign) -> dict[int, int]:
    return dict(CampaignClip.objects.filter(campaign=campaign).values_list("clip_id", "open_slots"))


def test_claim_gives_one_clip_with_all_its_candidates_and_takes_one_slot_each():
    campaign = crowd_campaign(clips=2, candidates_per_clip=3, judgments_per_candidate=3)
    _token, participation = crowd_join(campaign, "worker-a")

    offer = assignment_claim_next(participation=participation)

    assert offer is not None
    assert Assignment.objects.get(pk=offer.assignment_id).status == AssignmentStatus.LIVE
    stored_order = list(
        AssignmentItem.objects.filter(assignment_id=offer.assignment_id)
        .order_by("position")
        .values_list("campaign_candidate_id", flat=True)
    )
    # The offer shows the candidates in the order the lease stored them.
    assert [candidate_id for candidate_id, _text in offer.candidates] == stored_order
    item_ids = set(stored_order)
    clip_items = set(
        CampaignCandidate.objects.filter(campaign=campaign, clip_id=offer.clip_id).values_list(
            "id", flat=True
        )
    )
    assert item_ids == clip_items and len(item_ids) == 3
    slots = _slots(campaign)
    assert {pk: slots[pk] for pk in item_ids} == {pk: 1 for pk in item_ids}
    assert sum(slots.values()) == 3
    assert _open_slots(campaign)[offer.clip_id] == 6
    lease = (offer.expires_at - offer.issued_at).total_seconds()
    assert lease == campaign.lease_seconds


def test_nearly_complete_clips_are_served_first():
    campaign = crowd_campaign(clips=3, candidates_per_clip=2, judgments_per_candidate=3)
    _t, first = crowd_join(campaign, "worker-a")
    _t, second = crowd_join(campaign, "worker-b")
    _t, third = crowd_join(campaign, "worker-c")

    clip_a = assignment_claim_next(participation=first).clip_id
    clip_b = assignment_claim_next(participation=second).clip_id
    clip_c = assignment_claim_next(participation=third).clip_id

    # After the first claim that clip has 4 open slots, the others 6: it is served again.
    assert clip_b == clip_a
    assert clip_c == clip_a
    assert _open_slots(campaign)[clip_a] == 0


def test_a_reload_gets_the_same_live_assignment_and_burns_nothing():
    campaign = crowd_campaign(clips=2)
    _t, participation = crowd_join(campaign, "worker-a")
    first = assignment_claim_next(participation=participation)
    slots_before = _slots(campaign)

    again = assignment_claim_next(participation=participation)

    assert again.assignment_id == first.assignment_id
    assert again == first  # the same clip, candidates in the same order, references and lease
    assert _slots(campaign) == slots_before
    assert Assignment.objects.filter(participation=participation).count() == 1
    payload = assignment_offer_payload(offer=again, campaign=campaign)
    fresh_payload = assignment_offer_payload(offer=first, campaign=campaign)
    assert [c["id"] for c in payload["candidates"]] == [
        c["id"] for c in fresh_payload["candidates"]
    ]


def test_no_worker_gets_a_clip_twice_and_none_is_answered_when_done():
    campaign = crowd_campaign(clips=3, judgments_per_candidate=3)
    _t, participation = crowd_join(campaign, "worker-a")
    seen = []
    for _ in range(3):
        offer = assignment_claim_next(participation=participation)
        seen.append(offer.clip_id)
        Assignment.objects.filter(pk=offer.assignment_id).update(status=AssignmentStatus.SUBMITTED)

    assert len(set(seen)) == 3
    assert assignment_claim_next(participation=participation) is None


def test_quota_is_never_exceeded_and_full_candidates_are_not_offered():
    campaign = crowd_campaign(clips=2, candidates_per_clip=2, judgments_per_candidate=1)
    _t, first = crowd_join(campaign, "worker-a")
    _t, second = crowd_join(campaign, "worker-b")
    _t, third = crowd_join(campaign, "worker-c")

    clip_a = assignment_claim_next(participation=first).clip_id
    clip_b = assignment_claim_next(participation=second).clip_id

    assert clip_a != clip_b
    assert assignment_claim_next(participation=third) is None
    assert set(_slots(campaign).values()) == {1}
    assert set(_open_slots(campaign).values()) == {0}


def test_only_candidates_with_a_free_slot_are_offered():
    campaign = crowd_campaign(clips=1, candidates_per_clip=3, judgments_per_candidate=2)
    full = CampaignCandidate.objects.filter(campaign=campaign).order_by("id").first()
    CampaignCandidate.objects.filter(pk=full.pk).update(slots_taken=2)
    CampaignClip.objects.filter(campaign=campaign).update(open_slots=4)
    _t, participation = crowd_join(campaign, "worker-a")

    offer = assignment_claim_next(participation=participation)

    offered = set(
        AssignmentItem.objects.filter(assignment_id=offer.assignment_id).values_list(
            "campaign_candidate_id", flat=True
        )
    )
    assert full.pk not in offered
    assert len(offered) == 2
    assert _open_slots(campaign)[offer.clip_id] == 2


def test_clips_without_a_servable_video_are_never_served():
    pending = ClipFactory(status=ClipStatus.PENDING)
    broken = ClipFactory(status=ClipStatus.ERROR, error_reason="source missing")
    for clip in (pending, broken):
        CandidateFactory(clip=clip)
    campaign = campaign_create(
        slug="unready", name="Unready", clip_vatex_ids=[pending.vatex_id, broken.vatex_id]
    )
    _t, participation = crowd_join(campaign, "worker-a")

    assert CampaignClip.objects.filter(campaign=campaign).count() == 2
    assert assignment_claim_next(participation=participation) is None
    assert Assignment.objects.count() == 0

    # Once the pipeline made the video, the clip is served.
    pending.status, pending.video_key = ClipStatus.READY, "clips/late.mp4"
    pending.save()
    assert assignment_claim_next(participation=participation).clip_id == pending.pk


def test_expired_leases_return_their_slots_and_the_clip_goes_to_someone_else():
    campaign = crowd_campaign(clips=1, candidates_per_clip=2, judgments_per_candidate=1)
    _t, first = crowd_join(campaign, "worker-a")
    _t, second = crowd_join(campaign, "worker-b")
    lapsed = assignment_claim_next(participation=first)
    assert assignment_claim_next(participation=second) is None
    Assignment.objects.filter(pk=lapsed.assignment_id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    assert assignments_expire() == 1

    assert Assignment.objects.get(pk=lapsed.assignment_id).status == AssignmentStatus.EXPIRED
    assert set(_slots(campaign).values()) == {0}
    assert _open_slots(campaign) == {lapsed.clip_id: 2}
    assert assignments_expire() == 0
    taken = assignment_claim_next(participation=second)
    assert taken.clip_id == lapsed.clip_id
    # The worker whose lease lapsed never gets that clip again.
    assert assignment_claim_next(participation=first) is None


def test_expire_leases_task_calls_the_service():
    campaign = crowd_campaign(clips=1)
    _t, participation = crowd_join(campaign, "worker-a")
    lapsed = assignment_claim_next(participation=participation)
    Assignment.objects.filter(pk=lapsed.assignment_id).update(
        expires_at=timezone.now() - timedelta(1)
    )

    assert expire_leases.apply().get() == 1
    assert Assignment.objects.get(pk=lapsed.assignment_id).status == AssignmentStatus.EXPIRED


def test_a_worker_coming_back_after_its_lease_lapsed_gets_a_new_clip_and_slots_return():
    campaign = crowd_campaign(clips=2, candidates_per_clip=2, judgments_per_candidate=1)
    _t, participation = crowd_join(campaign, "worker-a")
    lapsed = assignment_claim_next(participation=participation)
    Assignment.objects.filter(pk=lapsed.assignment_id).update(
        expires_at=timezone.now() - timedelta(1)
    )

    fresh = assignment_claim_next(participation=participation)

    assert fresh.clip_id != lapsed.clip_id
    assert Assignment.objects.get(pk=lapsed.assignment_id).status == AssignmentStatus.EXPIRED
    assert _open_slots(campaign) == {lapsed.clip_id: 2, fresh.clip_id: 0}


@pytest.mark.parametrize("status", [ParticipationStatus.PAUSED, ParticipationStatus.EXCLUDED])
def test_paused_or_excluded_workers_get_nothing(status):
    campaign = crowd_campaign(clips=2)
    _t, participation = crowd_join(campaign, "worker-a")
    participation.__class__.objects.filter(pk=participation.pk).update(status=status)

    assert assignment_claim_next(participation=participation) is None
    assert Assignment.objects.count() == 0


@pytest.mark.parametrize("status", [CampaignStatus.PAUSED, CampaignStatus.CLOSED])
def test_no_work_from_a_campaign_that_is_not_active(status):
    campaign = crowd_campaign(clips=2)
    _t, participation = crowd_join(campaign, "worker-a")
    campaign.status = status
    campaign.save()
    participation.refresh_from_db()

    assert assignment_claim_next(participation=participation) is None
    assert Assignment.objects.count() == 0


def test_max_assignments_per_worker_is_honoured():
    campaign = crowd_campaign(clips=3, max_assignments_per_worker=1)
    _t, participation = crowd_join(campaign, "worker-a")
    first = assignment_claim_next(participation=participation)
    Assignment.objects.filter(pk=first.assignment_id).update(status=AssignmentStatus.SUBMITTED)
    participation.__class__.objects.filter(pk=participation.pk).update(assignments_submitted=1)

    assert assignment_claim_next(participation=participation) is None


def test_control_items_flow_through_the_engine_without_a_flag():
    campaign = crowd_campaign(clips=1, candidates_per_clip=2)
    clip_id = CampaignClip.objects.get(campaign=campaign).clip_id
    control = CandidateFactory(
        clip_id=clip_id,
        kind=CandidateKind.CONTROL,
        control_type=ControlType.REFERENCE,
        text="a reference shown as a candidate",
        system=None,
    )
    assert campaign_items_add(campaign=campaign, candidate_ids=[control.pk], is_control=True) == 1
    control_item = CampaignCandidate.objects.get(campaign=campaign, candidate=control)
    assert _open_slots(campaign) == {clip_id: 9}
    _t, participation = crowd_join(campaign, "worker-a")

    payload = assignment_offer_payload(
        offer=assignment_claim_next(participation=participation), campaign=campaign
    )

    assert control_item.pk in {candidate["id"] for candidate in payload["candidates"]}
    assert all(set(candidate) == {"id", "text"} for candidate in payload["candidates"])
    assert "control" not in str(payload).lower()


def test_payload_shape_and_reference_free_condition():
    campaign = crowd_campaign(clips=1, candidates_per_clip=2)
    _t, participation = crowd_join(campaign, "worker-a")
    offer = assignment_claim_next(participation=participation)

    payload = assignment_offer_payload(offer=offer, campaign=campaign)

    clip = Clip.objects.get(pk=offer.clip_id)
    assert list(payload) == [
        "assignment_id",
        "expires_at",
        "clip",
        "references",
        "candidates",
        "questions",
    ]
    assert payload["references"] == [
        f"reference 0 of {clip.vatex_id}",
        f"reference 1 of {clip.vatex_id}",
    ]
    assert [question["key"] for question in payload["questions"]] == [
        "descriptiveness",
        "relevance",
        "fluency",
    ]
    assert [level["value"] for level in payload["questions"][1]["levels"]] == [1, 2, 3, 4, 5]
    assert payload["questions"][1]["levels"][3]["label"] == "Good"

    campaign.reference_free = True
    campaign.save()
    assert "references" not in assignment_offer_payload(offer=offer, campaign=campaign)


def test_claiming_a_new_assignment_takes_a_bounded_number_of_queries(
    django_assert_max_num_queries,
):
    campaign = crowd_campaign(clips=5, candidates_per_clip=4)
    _t, participation = crowd_join(campaign, "worker-a")

    # 9 statements and, inside the test's transaction, a savepoint pair (BEGIN/COMMIT in a request).
    with django_assert_max_num_queries(11):
        offer = assignment_claim_next(participation=participation)
        assignment_offer_payload(offer=offer, campaign=campaign)
    with django_assert_max_num_queries(7):  # the live one again (reload)
        again = assignment_claim_next(participation=participation)
        assignment_offer_payload(offer=again, campaign=campaign)


def test_slot_release_and_take_keep_the_clip_counter_in_step():
    campaign = crowd_campaign(clips=1, candidates_per_clip=2, judgments_per_candidate=1)
    _t, participation = crowd_join(campaign, "worker-a")
    offer = assignment_claim_next(participation=participation)
    items = list(
        AssignmentItem.objects.filter(assignment_id=offer.assignment_id).values_list(
            "campaign_candidate_id", flat=True
        )
    )

    assert campaign_candidate_slots_release(campaign_candidate_ids=items[:1]) == 1
    assert _open_slots(campaign) == {offer.clip_id: 1}
    assert campaign_candidate_slots_take(campaign_candidate_ids=items) == [items[0]]
    assert _open_slots(campaign) == {offer.clip_id: 0}
    assert set(_slots(campaign).values()) == {1}


def test_database_refuses_over_quota_and_repeated_clips_as_the_last_line():
    campaign = crowd_campaign(clips=1, judgments_per_candidate=1)
    item = CampaignCandidate.objects.filter(campaign=campaign).first()
    with pytest.raises(IntegrityError), transaction.atomic():
        CampaignCandidate.objects.filter(pk=item.pk).update(slots_taken=2)
    _t, participation = crowd_join(campaign, "worker-a")
    offer = assignment_claim_next(participation=participation)
    with pytest.raises(IntegrityError), transaction.atomic():
        Assignment.objects.create(
            campaign=campaign,
            participation=participation,
            clip_id=offer.clip_id,
            status=AssignmentStatus.EXPIRED,
            expires_at=timezone.now(),
        )
    other = ready_clip()
    with pytest.raises(IntegrityError), transaction.atomic():
        Assignment.objects.create(  # a second live lease for the same worker
            campaign=campaign,
            participation=participation,
            clip=other,
            expires_at=timezone.now() + timedelta(minutes=5),
        )
