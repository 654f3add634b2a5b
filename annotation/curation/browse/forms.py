"""The filter bars of the data browser: every query parameter a table takes, validated and
bounded (a page is at most 200 rows; texts are capped) before a selector sees it."""

from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.core.validators import RegexValidator

from annotation.curation.browse.pagination import DEFAULT_PAGE_SIZE, PAGE_SIZES, Sort
from annotation.models import Campaign, ParticipationStatus, Platform, ReviewState
from annotation.questions import level_values
from datasets_app.models import CaptioningSystem, ClipModality, ClipStatus

_KEY = RegexValidator(r"^[A-Za-z0-9_-]+$", "Letters, digits, - and _ only.")


class TableForm(forms.Form):
    """Sort, direction, page size and cursor; subclasses add their filters and `SORTS`."""

    SORTS: ClassVar[tuple[Sort, ...]] = ()
    DEFAULT_DESCENDING: ClassVar[bool] = True

    sort = forms.CharField(required=False, max_length=30)
    order = forms.ChoiceField(required=False, choices=[("", ""), ("asc", "asc"), ("desc", "desc")])
    size = forms.TypedChoiceField(
        required=False,
        coerce=int,
        empty_value=DEFAULT_PAGE_SIZE,  # type: ignore[arg-type]  # the stubs want a str
        choices=[(str(size), str(size)) for size in PAGE_SIZES],
        label="Rows",
    )
    after = forms.CharField(required=False, max_length=600, widget=forms.HiddenInput)

    def clean_sort(self) -> Sort:
        key = self.cleaned_data.get("sort") or self.SORTS[0].key
        for sort in self.SORTS:
            if sort.key == key:
                return sort
        raise forms.ValidationError(f"Sort by one of: {', '.join(s.key for s in self.SORTS)}.")

    def descending(self) -> bool:
        order = self.cleaned_data.get("order")
        return self.DEFAULT_DESCENDING if not order else order == "desc"

    def filters(self) -> dict[str, Any]:
        """The filter values a person set (empty ones left out)."""
        paging = {"sort", "order", "size", "after"}
        return {
            key: value
            for key, value in self.cleaned_data.items()
            if key not in paging and value not in (None, "")
        }


def _campaign_field() -> forms.ModelChoiceField:
    return forms.ModelChoiceField(
        queryset=Campaign.objects.only("pk", "slug").order_by("slug"),
        to_field_name="slug",
        required=False,
        empty_label="All campaigns",
    )


def _system_field() -> forms.ModelChoiceField:
    return forms.ModelChoiceField(
        queryset=CaptioningSystem.objects.order_by("name", "version"),
        required=False,
        empty_label="All systems",
    )


def _clip_field() -> forms.CharField:
    return forms.CharField(required=False, max_length=200, label="Clip (VATEX id)")


class ClipTableForm(TableForm):
    SORTS = (
        Sort("vatex_id", "Clip", "vatex_id"),
        Sort("created", "Created", "created_at"),
        Sort("id", "Id", "pk"),
    )
    DEFAULT_DESCENDING = False

    campaign = _campaign_field()
    clip = forms.CharField(required=False, max_length=200, label="Clip id starts with")
    system = _system_field()
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *ClipStatus.choices])
    modality = forms.ChoiceField(
        required=False, label="Kind", choices=[("", "Videos and images"), *ClipModality.choices]
    )


class CandidateTableForm(TableForm):
    SORTS = (
        Sort("id", "Id", "pk"),
        Sort("overall", "Overall", "sort_overall"),
        Sort("range", "Range", "sort_range"),
    )

    campaign = _campaign_field()
    clip = _clip_field()
    system = _system_field()
    review = forms.ChoiceField(
        required=False,
        choices=[("", "Any review state"), *[c for c in ReviewState.choices if c[0]]],
    )
    kind = forms.ChoiceField(
        required=False,
        choices=[("", "Models and controls"), ("model", "Model outputs"), ("control", "Controls")],
    )


class JudgmentTableForm(TableForm):
    # By time through the (created_at, id) index; by value a reader filters instead (criterion
    # and rating), which no index on a JSON document would make cheaper than that filter.
    SORTS = (
        Sort("id", "Id", "pk"),
        Sort("created", "Time", "created_at"),
    )

    campaign = _campaign_field()
    clip = _clip_field()
    system = _system_field()
    worker = forms.CharField(required=False, max_length=200, label="Worker id")
    criterion = forms.CharField(required=False, max_length=50, validators=[_KEY])
    rating = forms.IntegerField(required=False, min_value=0, max_value=100)
    state = forms.ChoiceField(
        required=False,
        choices=[("", "Kept and excluded"), ("kept", "Kept"), ("excluded", "Excluded")],
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        criterion, rating = data.get("criterion"), data.get("rating")
        if rating is not None and not criterion:
            self.add_error("criterion", "Choose the criterion the rating is of.")
        if criterion:
            # Only questions (and levels) that exist: a value no judgment can hold would make
            # the page read the whole table before answering that there is nothing.
            campaigns = Campaign.objects.all()
            if data.get("campaign") is not None:
                campaigns = campaigns.filter(pk=data["campaign"].pk)
            levels: set[int] = set()
            known = False
            for questions in campaigns.values_list("questions", flat=True):
                for question in questions:
                    if question.get("key") == criterion:
                        known = True
                        levels.update(level_values(question))
            if not known:
                self.add_error("criterion", "No campaign asks this question.")
            elif rating is not None and rating not in levels:
                choices = ", ".join(str(level) for level in sorted(levels))
                self.add_error("rating", f"This question is rated {choices}.")
        return data


class WorkerTableForm(TableForm):
    SORTS = (
        Sort("joined", "Joined", "joined_at"),
        Sort("submitted", "Assignments", "assignments_submitted"),
        Sort("id", "Id", "pk"),
    )

    campaign = _campaign_field()
    worker = forms.CharField(required=False, max_length=200, label="Worker id starts with")
    platform = forms.ChoiceField(required=False, choices=[("", "Any platform"), *Platform.choices])
    status = forms.ChoiceField(
        required=False, choices=[("", "Any status"), *ParticipationStatus.choices]
    )
