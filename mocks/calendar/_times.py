"""RFC 3339 date-times as Google Calendar reads and writes them."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ._errors import CalendarError


def parse_instant(value: Any, name: str) -> datetime:
    """An RFC 3339 date-time with its offset (``timeMin``, ``timeMax``): aware, any offset.

    Raises:
        CalendarError: not a date-time, or one without an offset (Google's 400).
    """
    if not isinstance(value, str) or "T" not in value.upper():
        raise CalendarError.bad_request(f"Invalid value for: {name}", "invalid")
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        raise CalendarError.bad_request(f"Invalid value for: {name}", "invalid") from None
    if parsed.tzinfo is None:
        raise CalendarError.bad_request(f"Invalid value for: {name}", "invalid")
    return parsed


def zone(name: Any, where: str) -> ZoneInfo:
    """The IANA time zone ``name``.

    Raises:
        CalendarError: an unknown zone (Google: ``Invalid time zone definition``).
    """
    try:
        if not isinstance(name, str) or not name:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise CalendarError.bad_request(
            f"Invalid time zone definition for {where} time.", "invalid") from None


def parse_when(value: Any, where: str, calendar_zone: str) -> tuple[datetime, dict[str, Any]]:
    """An event's ``start`` or ``end`` (``{"dateTime", "timeZone"}`` or ``{"date"}``): the
    instant it stands for (UTC) and the object the API answers with.

    A ``dateTime`` without an offset is read in its ``timeZone``; with a ``timeZone``
    the answer shows the instant in that zone (as Google does); an all-day ``date``
    starts at midnight in the calendar's zone.

    Raises:
        CalendarError: a missing, malformed or zone-less time.
    """
    if not isinstance(value, dict) or not (value.get("dateTime") or value.get("date")):
        raise CalendarError.bad_request(f"Missing {where} time.", "required")
    if value.get("date") and not value.get("dateTime"):
        try:
            day = date.fromisoformat(str(value["date"]))
        except ValueError:
            raise CalendarError.bad_request(f"Invalid {where} time.", "invalid") from None
        midnight = datetime.combine(day, time(), zone(calendar_zone, where))
        return midnight.astimezone(UTC), {"date": day.isoformat()}
    raw = value["dateTime"]
    if not isinstance(raw, str) or "T" not in raw.upper():
        raise CalendarError.bad_request(f"Invalid {where} time.", "invalid")
    try:
        parsed = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        raise CalendarError.bad_request(f"Invalid {where} time.", "invalid") from None
    named = value.get("timeZone")
    tz: tzinfo | None = zone(named, where) if named else None
    if parsed.tzinfo is None:
        if tz is None:
            raise CalendarError.bad_request(
                f"Missing time zone definition for {where} time.", "required")
        parsed = parsed.replace(tzinfo=tz)
    shown = parsed.astimezone(tz) if tz is not None else parsed
    answer: dict[str, Any] = {"dateTime": rfc3339(shown)}
    if named:
        answer["timeZone"] = named
    return parsed.astimezone(UTC), answer


def rfc3339(moment: datetime) -> str:
    """``2026-03-02T09:00:00+01:00``, or ``...Z`` at UTC; whole seconds."""
    text = moment.replace(microsecond=0).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def stamp(unix: int) -> str:
    """``created``/``updated``: ``2026-01-01T00:00:00.000Z`` from the virtual clock."""
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def at_utc(moment: datetime, tz: tzinfo | None = None) -> str:
    """A free/busy bound: in ``tz`` when the query named one, else UTC (``Z``)."""
    return rfc3339(moment.astimezone(tz or UTC))


__all__ = ["at_utc", "parse_instant", "parse_when", "rfc3339", "stamp", "zone"]
