"""Validation of the labeler's requests. Each rating request carries the full
state of one completion, so a late request can never mix fields of two clicks."""

from __future__ import annotations

from typing import Any

import orjson
from django import forms

from labeling.work.assignment import MAX_VERSION
from labeling.work.rating import Press

_RATINGS = [("-1", "bad"), ("0", "okay"), ("1", "good")]
_TRUE = {"1", "true", "on"}
_FALSE = {"0", "false", "off", ""}


def _to_rating(raw: str) -> int | None:
    return None if raw == "" else int(raw)


class RateForm(forms.Form):
    # Current state, kept in hidden inputs (the page's script updates them
    # before sending)...
    rating = forms.TypedChoiceField(
        choices=[("", "unrated"), *_RATINGS], coerce=_to_rating, required=False, empty_value=None
    )
    flagged = forms.CharField(required=False)
    # ...and the button that was pressed, when the form is posted without JS.
    set_rating = forms.TypedChoiceField(choices=_RATINGS, coerce=int, required=False, empty_value=None)
    set_flagged = forms.CharField(required=False)
    version = forms.IntegerField(min_value=1, max_value=MAX_VERSION)

    def clean_flagged(self) -> bool:
        return self._boolean("flagged")

    def clean_set_flagged(self) -> bool | None:
        if self.data.get("set_flagged") in (None, ""):
            return None
        return self._boolean("set_flagged")

    def _boolean(self, name: str) -> bool:
        raw = str(self.data.get(name, "")).strip().lower()
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        raise forms.ValidationError("Not a flag value.")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("set_rating") is not None:
            data["rating"] = data["set_rating"]
        if data.get("set_flagged") is not None:
            data["flagged"] = data["set_flagged"]
        return data


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=2000,
        strip=True,
        error_messages={"required": "Say briefly why: a few words are enough."},
        widget=forms.Textarea(attrs={"rows": 2, "required": True}),
    )


class PressesInvalid(ValueError):
    """A batch of key presses that cannot be read: nothing of it is applied."""


def presses_from_json(body: bytes) -> list[Press]:
    """The ordered key presses of a ``presses`` request: ``{"presses": [{"step", "completion", "version",
    and "rating" (-1, 0, 1) or "flag" (true/false)}, ...]}``."""
    try:
        data = orjson.loads(body or b"null")
    except ValueError as exc:  # orjson.JSONDecodeError is one
        raise PressesInvalid("The key presses could not be read (not JSON).") from exc
    items = data.get("presses") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise PressesInvalid("No key presses in the request.")
    presses = []
    for item in items:
        if not isinstance(item, dict):
            raise PressesInvalid("A key press is an object.")
        numbers = [item.get(k) for k in ("step", "completion", "version")]
        step, completion, version = (n if type(n) is int and 0 <= n <= MAX_VERSION else -1 for n in numbers)
        if min(step, completion, version) < 0:
            raise PressesInvalid("A key press names its step, completion and version as integers.")
        has_rating, has_flag = "rating" in item, "flag" in item
        if has_rating == has_flag:
            raise PressesInvalid("A key press sets either a rating or the flag.")
        flag = item.get("flag")
        if has_flag and type(flag) is not bool:
            raise PressesInvalid("A flag is true or false.")
        rating = item.get("rating")
        if has_rating and (type(rating) is not int or rating not in (-1, 0, 1)):
            raise PressesInvalid("A rating is -1, 0 or +1.")
        presses.append(
            Press(step_index=step, completion_index=completion, version=version,
                  rating=rating if has_rating else None, flag=flag if has_flag else None)
        )  # fmt: skip
    return presses
