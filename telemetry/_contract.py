"""The contract check: a call's request and response checked against an OpenAPI document.

openapi-core does the checking; this module builds its validator once per document
(:meth:`Contract.load`) and turns what it reports into one readable line per
problem, such as ``response to GET /messages: 'date' missing from item 0``. A check
never raises: a document openapi-core cannot use, or a fault inside it, is reported
as a :class:`Violation` of kind ``check`` (so nothing about a call's verdict can
depend on it).

A check costs about a millisecond of CPU, and an oracle sends the same requests to
every candidate: most requests, and many responses, are byte for byte ones already
checked. So each side's outcome is remembered (a bounded LRU per document, keyed by
a digest of everything the check reads): a request by its method, path, query,
headers and body; a response by its method, route, status, headers and body. Two
parts are left out of the keys because they cannot change an outcome: ``Host`` (the
harness's address) and the credential after the scheme in ``Authorization`` (an
OpenAPI document cannot constrain it; its security schemes only ask for the
header and its scheme); ``Date`` of a response is left out too.

Most responses are new (ids, timestamps), and openapi-core spends most of a check
outside JSON Schema itself: resolving the document through pathable and copying a
format checker for every call. So a response is first checked by :class:`_Fast`: the
operation found the way openapi-core finds it, the body validated by the same
validator class openapi-core uses, compiled once per response schema. A response it
finds valid has no violations; anything else (an error, a status, media type or
header it does not handle) goes to openapi-core, which words every violation.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import urljoin, urlparse

import yaml
from multidict import CIMultiDict, MultiDict
from openapi_core import Config, OpenAPI
from openapi_core.datatypes import RequestParameters
from openapi_core.templating.datatypes import TemplateResult
from openapi_core.templating.paths.exceptions import OperationNotFound, PathNotFound
from openapi_core.templating.paths.parsers import PathParser
from openapi_core.templating.responses.exceptions import ResponseNotFound
from openapi_schema_validator import OAS30ReadValidator, OAS31Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4, DRAFT202012

log = logging.getLogger("anvil.telemetry")
T = TypeVar("T")

#: The span event a violation becomes, and its attributes.
VIOLATION_EVENT = "contract.violation"
VIOLATION_KIND = "anvil.contract.kind"  # request, response, route or check
VIOLATION_MESSAGE = "anvil.contract.message"
#: Bodies past this size are not checked (a check reads the whole body).
DEFAULT_CONTRACT_BODY_LIMIT = 1 << 20
#: Schema errors reported per request or response (a list of 1000 bad items is one story).
MAX_PER_CALL = 5

_REQUIRED = re.compile(r"^'(?P<name>.+)' is a required property$")


@dataclass(frozen=True)
class Violation:
    """One way a call broke the contract.

    ``kind`` is ``request`` (what the caller sent), ``response`` (what the service
    answered), ``route`` (a method and path the contract does not have) or ``check``
    (the check itself could not run).
    """

    kind: str
    message: str

    def attributes(self) -> dict[str, str]:
        return {VIOLATION_KIND: self.kind, VIOLATION_MESSAGE: self.message}


@dataclass(frozen=True)
class CallRecord:
    """What the contract check needs of one call (bodies whole, or None when unknown)."""

    method: str
    path: str  # decoded, without the query string
    query: Iterable[tuple[str, str]]
    request_headers: Iterable[tuple[str, str]]
    request_body: bytes | None
    status: int | None = None
    response_headers: Iterable[tuple[str, str]] = ()
    response_body: bytes | None = None


class _Request:
    host_url = "http://contract.invalid"

    def __init__(self, call: CallRecord) -> None:
        headers = CIMultiDict(call.request_headers)
        self.method = call.method.lower()
        self.path = call.path
        self.body = call.request_body
        self.content_type = headers.get("Content-Type", "")
        cookies: MultiDict[str] = MultiDict()
        for value in headers.getall("Cookie", []):
            for pair in value.split(";"):
                name, _, text = pair.strip().partition("=")
                if name:
                    cookies.add(name, text)
        self.parameters = RequestParameters(query=MultiDict(call.query), header=headers,
                                            cookie=cookies)
        self.route: str | None = None  # set when the validator finds the path


def _routed(validator: Any) -> Any:
    """``validator`` (an openapi-core request validator class) noting the route it finds."""

    def _find_path(self: Any, request: Any) -> Any:
        found = validator._find_path(self, request)
        if isinstance(request, _Request):
            request.route = str(found.path_result.pattern)
        return found

    return type(f"Routed{validator.__name__}", (validator,), {"_find_path": _find_path})


class _Response:
    def __init__(self, call: CallRecord) -> None:
        assert call.status is not None
        self.headers = CIMultiDict(call.response_headers)
        self.status_code = call.status
        self.content_type = self.headers.get("Content-Type", "")
        self.data = call.response_body


class Contract:
    """A validator for one OpenAPI document: build it once, :meth:`check` every call.

    The document's ``servers`` are ignored: calls are matched on method and path only
    (the service listens wherever the harness put it).

    By default only what the service controls is checked: the response (and whether
    the call's method and path are in the contract at all). ``requests=True`` checks
    each request too. A request is the oracle's: it is the same for every candidate,
    and an oracle sends invalid ones on purpose to test validation, so checking it per
    evaluation says nothing about the candidate and costs more than half of the check.
    """

    def __init__(self, document: Mapping[str, Any], name: str = "openapi.yaml",
                 memo: int = 8192, *, requests: bool = False, fast: bool = True) -> None:
        self.requests = requests
        self.fast_hits = 0  # responses found valid without openapi-core
        self._requests: _Memo[tuple[list[Violation], str | None, bool]] = _Memo(memo)
        self._responses: _Memo[tuple[list[Violation], str | None]] = _Memo(memo)
        spec = dict(document)
        spec["servers"] = [{"url": "/"}]
        self.name = name
        self._api = OpenAPI.from_dict(spec)
        self._fast = _Fast.build(spec) if fast else None
        request_cls = self._api.request_validator_cls
        response_cls = self._api.response_validator_cls
        if all(v is not None and hasattr(v, "_find_path") for v in (request_cls, response_cls)):
            # The path a validator finds is the call's route (``http.route``): kept on
            # the request, so finding it costs nothing more. (A private hook of
            # openapi-core's: if it goes away, calls just have no route.)
            self._api = OpenAPI.from_dict(spec, config=Config(
                request_validator_cls=_routed(request_cls),
                response_validator_cls=_routed(response_cls)))

    @classmethod
    def load(cls, path: Path, *, requests: bool = False) -> Contract | None:
        """The contract in ``path``, or None when there is none or openapi-core cannot use
        it (logged: a task's contract problems are ``anvil tasks check``'s to report)."""
        try:
            document = yaml.safe_load(path.read_text(encoding="utf-8"))
            return cls(document, path.name, requests=requests)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - any unusable document: no contract check
            log.warning("%s: no contract check: %s: %s", path, type(exc).__name__, exc)
            return None

    def check(self, call: CallRecord) -> list[Violation]:
        """Every violation of the call: its request's, then its response's (when it had one)."""
        return self.inspect(call)[0]

    def inspect(self, call: CallRecord) -> tuple[list[Violation], str | None]:
        """The call's violations (see :meth:`check`) and its route (the contract's path
        template it matched, such as ``/items/{key}``; None when it matched none)."""
        request = _Request(call)
        try:
            return list(self._check(call, request)), request.route
        except Exception as exc:  # noqa: BLE001 - a checker fault is never the call's
            log.exception("contract check failed on %s %s", call.method, call.path)
            return [Violation("check", f"{call.method} {call.path}: the contract check "
                                       f"failed: {type(exc).__name__}: {exc}")], request.route

    @property
    def remembered(self) -> int:
        """Checks answered from memory so far (requests and responses)."""
        return self._requests.hits + self._responses.hits

    def _check(self, call: CallRecord, request: _Request) -> Iterator[Violation]:
        what = f"{call.method.upper()} {call.path}"
        routed = True
        if self.requests:
            key = _request_key(call)
            known = self._requests.get(key)
            if known is None:
                violations = list(self._request_violations(call, request))
                routed = not any(v.kind == "route" for v in violations)
                known = (violations, request.route, routed)
                self._requests.put(key, known)
            violations, request.route, routed = known
            yield from violations
        if not routed or call.status is None or call.response_body is None:
            return
        # Remembered by route when the request side found it (a path's own values, such
        # as ids, feed no response check), else by path.
        key = _response_key(call, request.route)
        answered = self._responses.get(key)
        if answered is None and self._fast is not None:
            route = self._fast.valid_route(call)
            if route is not None:
                self.fast_hits += 1
                answered = ([], route)
        if answered is None:
            answered = (list(self._response_violations(call, request)), request.route)
            self._responses.put(key, answered)
        violations, request.route = answered
        for violation in violations:  # a remembered message names this call's own path
            yield Violation(violation.kind, violation.message.replace(_WHAT, what))

    def _request_violations(self, call: CallRecord, request: _Request) -> Iterator[Violation]:
        what = f"{call.method.upper()} {call.path}"
        for error in self._api.iter_request_errors(request):
            if isinstance(error, PathNotFound | OperationNotFound):
                yield Violation("route", f"{what} is not in the contract")
                return
            for phrase in _describe(error):
                yield Violation("request", f"request to {what}: {phrase}")

    def _response_violations(self, call: CallRecord, request: _Request) -> Iterator[Violation]:
        what = _WHAT
        for error in self._api.iter_response_errors(request, _Response(call)):
            if isinstance(error, PathNotFound | OperationNotFound):
                yield Violation("route", f"{what} is not in the contract")
                return
            if isinstance(error, ResponseNotFound):
                yield Violation("response", f"response to {what}: status {call.status} is "
                                            "not one the contract lists")
                continue
            for phrase in _describe(error):
                yield Violation("response", f"response to {what}: {phrase}")


_JSON_MEDIA = frozenset({"application/json", "application/vnd.api+json"})


class _Fast:
    """Says when a response is valid, cheaply, or that it cannot tell (then openapi-core
    checks it): never the other way round, so it can only save work.

    It answers only for what it handles exactly as openapi-core does: the operation
    found by openapi-core's own path templates over the same URL in the same order
    (concrete paths first, then templates by fewer variables; no ``servers`` on a path
    or operation), a status listed as itself, a media type openapi-core parses as JSON
    listed as itself, no response headers declared, and a document whose schemas
    openapi-core validates with OAS30ReadValidator (3.0) or OAS31Validator (3.1, no
    ``jsonSchemaDialect``), both with the 3.0 format checker as openapi-core uses them.
    """

    _URI = "urn:anvil:contract"

    def __init__(self, spec: Mapping[str, Any], validator: Any, registry: Registry[Any]) -> None:
        self._paths: dict[str, Any] = dict(spec.get("paths") or {})
        self._validator = validator
        self._registry = registry
        self._parsers = {p: PathParser(p, post_expression="$") for p in self._paths}
        self._compiled: dict[tuple[str, str, str, str], Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def build(cls, spec: Mapping[str, Any]) -> _Fast | None:
        version = str(spec.get("openapi", ""))
        if version.startswith("3.0."):
            validator: Any = OAS30ReadValidator
            resource: Resource[Any] = DRAFT4.create_resource(spec)
        elif version.startswith("3.1.") and "jsonSchemaDialect" not in spec:
            validator = OAS31Validator
            resource = DRAFT202012.create_resource(spec)
        else:
            return None
        return cls(spec, validator, Registry().with_resource(cls._URI, resource))

    def valid_route(self, call: CallRecord) -> str | None:
        """The call's route when its response is valid; None when this cannot tell."""
        try:
            return self._valid_route(call)
        except Exception:  # noqa: BLE001 - anything unexpected: openapi-core decides
            return None

    def _valid_route(self, call: CallRecord) -> str | None:
        route = self._route(call.method.lower(), call.path)
        if route is None or not call.response_body or call.status is None:
            return None
        content_type = ""
        for name, value in call.response_headers:
            if name.lower() == "content-type":
                content_type = value
        mime = content_type.split(";")[0].lower().rstrip()
        if mime not in _JSON_MEDIA:  # what openapi-core parses as JSON (others: bytes)
            return None
        validator = self._validator_for(route, call.method.lower(), str(call.status), mime)
        if validator is None:
            return None
        body = json.loads(call.response_body)
        return route if validator.is_valid(body) else None

    def _route(self, method: str, path: str) -> str | None:
        # openapi-core's order: the paths the URL ends with, in document order, then the
        # templates that match its end, fewer variables first. It takes the first with
        # the method whose match leaves exactly the server's URL ("/", as the contract is
        # loaded) before it; this answers only when that is the first with the method.
        name = urljoin(_Request.host_url, path)
        concrete, templates = [], []
        for pattern, parser in self._parsers.items():
            if name.endswith(pattern):
                concrete.append(TemplateResult(pattern, {}))
            elif (found := parser.search(name)) is not None:
                templates.append(TemplateResult(pattern, found.named))
        templates.sort(key=lambda t: len(t.variables or {}))
        for result in (*concrete, *templates):
            item = self._paths[result.pattern]
            if not isinstance(item, dict) or method not in item:
                continue
            if "servers" in item or "servers" in (item[method] or {}):
                return None
            before = name.rsplit(result.resolved, 1)[0]
            return result.pattern if urlparse(before).path == "" else None
        return None

    def _validator_for(self, route: str, method: str, status: str, mime: str) -> Any:
        key = (route, method, status, mime)
        with self._lock:
            if key in self._compiled:
                return self._compiled[key]
        responses = self._paths[route][method].get("responses") or {}
        response = responses.get(status)
        validator = None
        if isinstance(response, dict) and "$ref" not in response \
                and not response.get("headers") and mime in (response.get("content") or {}) \
                and isinstance(response["content"][mime].get("schema"), dict) \
                and "$schema" not in response["content"][mime]["schema"]:
            pointer = "/".join(p.replace("~", "~0").replace("/", "~1") for p in (
                "paths", route, method, "responses", status, "content", mime, "schema"))
            validator = self._validator(
                {"$ref": f"{self._URI}#/{pointer}"}, registry=self._registry,
                format_checker=OAS30ReadValidator.FORMAT_CHECKER)
        with self._lock:
            self._compiled[key] = validator
        return validator


_WHAT = "\x00call\x00"  # in a remembered response message: the call it is shown for
_NOT_IN_REQUEST_KEY = frozenset({"host"})
_NOT_IN_RESPONSE_KEY = frozenset({"date"})


def _digest(*parts: object) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part if isinstance(part, bytes) else repr(part).encode())
        h.update(b"\x00")
    return h.digest()


def _request_key(call: CallRecord) -> bytes:
    headers = []
    for name, value in call.request_headers:
        lowered = name.lower()
        if lowered in _NOT_IN_REQUEST_KEY:
            continue
        if lowered == "authorization":
            value = value.split(" ", 1)[0]  # the scheme: what a security scheme checks
        headers.append((lowered, value))
    return _digest(call.method, call.path, list(call.query), headers,
                   call.request_body if call.request_body is not None else "<unknown>")


def _response_key(call: CallRecord, route: str | None) -> bytes:
    """A response is checked against its operation: the route stands for the path (the
    path's own values, such as ids, are the request's to check)."""
    headers = [(n.lower(), v) for n, v in call.response_headers
               if n.lower() not in _NOT_IN_RESPONSE_KEY]
    where = route if route is not None else call.path
    return _digest(call.method, where, call.status, headers, call.response_body or b"")


class _Memo(Generic[T]):
    """A thread-safe LRU of check outcomes (checks run on several threads at once)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.hits = 0
        self._items: OrderedDict[bytes, T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes) -> T | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                self.hits += 1
            return found

    def put(self, key: bytes, value: T) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)


def _describe(error: BaseException) -> list[str]:
    """openapi-core's error as readable phrases: one per schema error under it (the
    first :data:`MAX_PER_CALL`), else one for the error itself."""
    cause: BaseException | None = error
    while cause is not None:
        schema_errors = getattr(cause, "schema_errors", None)
        if schema_errors:
            phrases = [_schema_error(e) for e in schema_errors[:MAX_PER_CALL]]
            if len(schema_errors) > MAX_PER_CALL:
                phrases[-1] += f" (and {len(schema_errors) - MAX_PER_CALL} more)"
            return phrases
        if cause.__cause__ is None:
            break
        cause = cause.__cause__
    text = str(cause) if cause is not None else ""
    kind = type(error).__name__
    return [f"{_words(kind)}: {text}" if text and text != kind else _words(kind)]


def _schema_error(error: Any) -> str:
    where = _location(list(error.absolute_path))
    required = _REQUIRED.match(str(error.message))
    if error.validator == "required" and required:
        return f"'{required['name']}' missing from {where}"
    return f"{where}: {error.message}"


def _location(path: list[Any]) -> str:
    """``[0, 'date']`` as ``'date' of item 0``; ``[]`` as ``the body``."""
    if not path:
        return "the body"
    parts = [f"item {p}" if isinstance(p, int) else f"'{p}'" for p in path]
    return " of ".join(reversed(parts))


def _words(name: str) -> str:
    """``InvalidRequestBody`` as ``invalid request body``."""
    return re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower()


def body_of(head: bytes, size: int) -> bytes | None:
    """The whole body when ``head`` holds all ``size`` bytes of it, else None."""
    return bytes(head) if len(head) >= size else None
