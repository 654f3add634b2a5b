"""The create step every dashboard form page shares: a valid form calls its service, and a refusal
of the service (a `ValidationError`) goes back onto the form beside the field errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django import forms
from django.core.exceptions import ValidationError

T = TypeVar("T")


def form_created(
    form: forms.Form, create: Callable[[], T], *, field: str | None = None, joined: bool = False
) -> T | None:
    """What `create` made from the valid `form`, or None when the form is invalid or the service
    refused it; the refusal is then an error of `field` (None: of the whole form), its messages
    as one line where `joined`."""
    if not form.is_valid():
        return None
    try:
        return create()
    except ValidationError as error:
        form.add_error(field, "; ".join(error.messages) if joined else error)
        return None
