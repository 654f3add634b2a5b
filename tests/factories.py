"""factory_boy factories for the core models. Add app-specific factories beside the app's tests."""

from __future__ import annotations

import factory
from django.utils import timezone

from annotation.models import (
    Campaign,
    CampaignCandidate,
    CampaignClip,
    Judgment,
    JudgmentSource,
    Participation,
    Platform,
    Worker,
)
from annotation.questions import default_questions
from datasets_app.models import CandidateCaption, CaptioningSystem, Clip, ReferenceCaption


class ClipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Clip

    youtube_id = factory.Sequence(lambda n: f"yt_{n:06d}-x")
    start_seconds = 10.0
    end_seconds = 20.0
    vatex_id = factory.LazyAttribute(
        lambda clip: f"{clip.youtube_id}_{int(clip.start_seconds):06d}_{int(clip.end_seconds):06d}"
    )


class ReferenceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ReferenceCaption

    clip = factory.SubFactory(ClipFactory)
    position = factory.Sequence(lambda n: n)
    text = factory.Sequence(lambda n: f"a person does thing number {n} in a room")


class SystemFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CaptioningSystem
        django_get_or_create = ("name", "version")

    name = "test-captioner"
    version = "1.0"


class CandidateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CandidateCaption

    clip = factory.SubFactory(ClipFactory)
    external_id = factory.Sequence(lambda n: f"test:candidate:{n}")
    text = factory.Sequence(lambda n: f"a man is playing a guitar on stage, take {n}")
    system = factory.SubFactory(SystemFactory)
    position = factory.Sequence(lambda n: n)


class CampaignFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Campaign

    slug = factory.Sequence(lambda n: f"campaign-{n}")
    name = factory.LazyAttribute(lambda campaign: f"Campaign {campaign.slug}")
    questions = factory.LazyFunction(default_questions)


class CampaignCandidateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CampaignCandidate

    campaign = factory.SubFactory(CampaignFactory)
    candidate = factory.SubFactory(CandidateFactory)
    clip = factory.LazyAttribute(lambda item: item.candidate.clip)
    quota = factory.LazyAttribute(lambda item: item.campaign.judgments_per_candidate)


class CampaignClipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CampaignClip
        django_get_or_create = ("campaign", "clip")

    campaign = factory.SubFactory(CampaignFactory)
    clip = factory.SubFactory(ClipFactory)


class WorkerFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Worker

    platform = Platform.PROLIFIC
    external_id = factory.Sequence(lambda n: f"prolific-worker-{n:05d}")


class ParticipationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Participation

    campaign = factory.SubFactory(CampaignFactory)
    worker = factory.SubFactory(WorkerFactory)
    consented_at = factory.LazyFunction(timezone.now)


class JudgmentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Judgment

    campaign_candidate = factory.SubFactory(CampaignCandidateFactory)
    campaign = factory.LazyAttribute(lambda judgment: judgment.campaign_candidate.campaign)
    participation = factory.SubFactory(
        ParticipationFactory, campaign=factory.SelfAttribute("..campaign")
    )
    values = factory.LazyAttribute(
        lambda judgment: {key: 3 for key in judgment.campaign.question_keys}
    )
    source = JudgmentSource.CROWD
    server_ms = 20000
