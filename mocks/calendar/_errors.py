"""Google's error format: ``{"error": {"code", "message", "errors": [...], "status"}}``."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from .._base import json_response

#: HTTP status -> Google's canonical ``status`` string.
STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
          404: "NOT_FOUND", 409: "ALREADY_EXISTS", 410: "NOT_FOUND"}
LOGIN = ("Request is missing required authentication credential. Expected OAuth 2 access "
         "token, login cookie or other valid authentication credential. See "
         "https://developers.google.com/identity/sign-in/web/devconsole-project.")


class CalendarError(Exception):
    """An error answer, raised anywhere in a handler and rendered by :meth:`response`."""

    def __init__(self, code: int, message: str, reason: str,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.reason = code, message, reason
        self.extra = dict(extra or {})

    @classmethod
    def bad_request(cls, message: str, reason: str = "invalid") -> CalendarError:
        return cls(400, message, reason)

    @classmethod
    def not_found(cls) -> CalendarError:
        return cls(404, "Not Found", "notFound")

    @classmethod
    def gone(cls) -> CalendarError:
        return cls(410, "Resource has been deleted", "deleted")

    @classmethod
    def unauthenticated(cls) -> CalendarError:
        return cls(401, LOGIN, "required", {"message": "Login Required.",
                                            "location": "Authorization",
                                            "locationType": "header"})

    def body(self) -> dict[str, Any]:
        detail = {"domain": "global", "reason": self.reason, "message": self.message}
        detail.update(self.extra)
        return {"error": {"code": self.code, "message": self.message, "errors": [detail],
                          "status": STATUS.get(self.code, "UNKNOWN")}}

    def response(self) -> Response:
        headers = {"WWW-Authenticate": 'Bearer realm="https://accounts.google.com/"'} \
            if self.code == 401 else None
        return json_response(self.body(), self.code, headers)
