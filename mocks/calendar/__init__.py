"""A Google Calendar API v3 mock: calendars, events (insert, get, list, patch, delete) and
free/busy, on Google's paths, resource shapes and error format (Google's own Python client,
``googleapiclient``, runs against it with ``client_options={"api_endpoint": URL +
"/calendar/v3/"}``)."""

from ._service import CalendarMock as CalendarMock

__all__ = ["CalendarMock"]
