"""Every exception hasten raises, in one tree.

Handlers raise a ``HastenError``; ``hasten.wire.asgi.send_error`` is the one place that renders
it, as OpenAI-shaped JSON (``{"error": {"message", "type", "param", "code"}}``) with the
status (and headers) it carries. The others never reach a client as themselves.

Our exception hierarchy::

    HastenError                  rendered to the client: status, type, code
    +-- InvalidRequest           400 invalid_request_error
    |   +-- InvalidJSON          400 invalid_json
    |   +-- PayloadTooLarge      413
    |   +-- RequestTimeout       408 (the connection layer's body or head timeout)
    |   +-- URLTooLong           414
    |   +-- HeadersTooLarge      431
    |   +-- NotFound             404
    |   |   +-- ModelNotFound    404 model_not_found
    |   +-- MethodNotAllowed     405, with an Allow header
    |   +-- Conflict             409 (a virtual key changed meanwhile, or too many keys)
    +-- Unauthorized             401 authentication_error
    |   +-- CredentialsRequired  401 with WWW-Authenticate: Basic (the dashboard)
    +-- Forbidden                403 permission_error
    |   +-- AdminDisabled
    +-- RateLimited              429 rate_limit_error, Retry-After when known
    |   +-- TooManyConnections
    |   +-- BudgetExceeded       429 insufficient_quota: a key's spend budget is used up
    |   +-- UpstreamBusy         429 upstream_busy: every deployment able to take the
    |                            request is at its max_in_flight (nothing was sent)
    +-- UpstreamError            502 upstream_error
    |   +-- UpstreamConnectError 502 upstream_unreachable: nothing was sent, safe to retry
    |   +-- UpstreamTimeout      504 timeout_error
    +-- RelayedError             another replica's call failed: its status, type and code
    +-- KeyStoreUnavailable      503 key_store_unavailable: virtual keys cannot be read now
    ClientGone                   the client disconnected: nobody left to answer
    ConfigError                  a configuration file or flag is invalid
    FleetUnavailable             the fleet's Redis is away: use the replica's own view
    DoctorError                  `hasten doctor` could not probe the endpoint (says why)
    ModelFileNotFound            (FileNotFoundError) no GGUF file for the local engine
    EngineNotBuilt               (FileNotFoundError) no llama-server binary (make dev builds it)
    DamagedCacheEntry            (ValueError) a cache entry that fails its checksum
    DamagedKeyRecord             (ValueError) a stored virtual key that fails its checksum
    InvalidKeyField              (ValueError) a virtual key's limit or model list is invalid
    OutdatedCacheEntry           (ValueError) a cache entry from before checksums
    MalformedNews                (ValueError) a fleet routing-news entry this replica
                                 cannot read (skipped)
    ReportDependencyMissing      (ImportError) `hasten bench --png` without matplotlib
    SpliceMismatch               (ValueError) a regenerated stream departs from what was sent
"""

from __future__ import annotations

import orjson


class HastenError(Exception):
    """Base of every error hasten renders to a client."""

    status_code: int = 500
    error_type: str = "server_error"
    default_code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        self.retry_after_s = retry_after_s
        # Extra response headers, e.g. the router's x-hasten-upstream account of a failure.
        self.headers: dict[str, str] = {}

    def to_dict(self) -> dict[str, object]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    def detached(self) -> HastenError:
        """This error without its traceback and context, for keeping past the request
        that raised it (a flight's end, an attempt's failure): the frames a traceback holds
        hold what they were reading, and often the keeper itself, a cycle only the cycle
        collector would free."""
        self.__traceback__ = self.__context__ = self.__cause__ = None
        return self

    def copy(self) -> HastenError:
        """The same error as a new object, to raise one that is kept and shared (a flight's,
        raised to each of its waiters): raising adds the raiser's frames to an error."""
        clone = type(self).__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.args = self.args
        clone.headers = dict(self.headers)
        return clone


class InvalidRequest(HastenError):
    status_code = 400
    error_type = "invalid_request_error"


class InvalidJSON(InvalidRequest):
    default_code = "invalid_json"


class PayloadTooLarge(InvalidRequest):
    status_code = 413
    default_code = "payload_too_large"


class RequestTimeout(InvalidRequest):
    status_code = 408
    default_code = "request_timeout"


class URLTooLong(InvalidRequest):
    status_code = 414
    default_code = "url_too_long"


class HeadersTooLarge(InvalidRequest):
    status_code = 431
    default_code = "headers_too_large"


class Unauthorized(HastenError):
    status_code = 401
    error_type = "authentication_error"
    default_code = "invalid_api_key"


class CredentialsRequired(Unauthorized):
    """A 401 a browser answers with its own login prompt, then repeats on same-origin
    fetches: how the dashboard gets the admin key without putting it in a URL."""

    def __init__(self, message: str, *, realm: str = "hasten") -> None:
        super().__init__(message)
        self.headers["www-authenticate"] = f'Basic realm="{realm}", charset="UTF-8"'


class Forbidden(HastenError):
    """A known caller asking for something its key does not allow."""

    status_code = 403
    error_type = "permission_error"
    default_code = "permission_denied"


class AdminDisabled(Forbidden):
    default_code = "admin_api_disabled"


class NotFound(InvalidRequest):
    status_code = 404
    default_code = "not_found"


class ModelNotFound(NotFound):
    default_code = "model_not_found"


class ResponseNotFound(InvalidRequest):
    """A stored Responses API response this tenant does not hold: never stored, expired,
    deleted, or another tenant's (all alike to the caller). OpenAI's 404 has no code."""

    status_code = 404


class MethodNotAllowed(InvalidRequest):
    status_code = 405
    default_code = "method_not_allowed"

    def __init__(self, message: str, *, allow: str) -> None:
        super().__init__(message)
        self.headers["allow"] = allow  # RFC 9110: a 405 lists the methods that would work


class Conflict(InvalidRequest):
    status_code = 409
    default_code = "conflict"


class RateLimited(HastenError):
    status_code = 429
    error_type = "rate_limit_error"
    default_code = "rate_limit_exceeded"


class TooManyConnections(RateLimited):
    default_code = "too_many_connections"


class BudgetExceeded(RateLimited):
    """A gateway key spent its budget for the period (OpenAI's out-of-quota 429)."""

    error_type = "insufficient_quota"
    default_code = "insufficient_quota"


class UpstreamBusy(RateLimited):
    """An attempt refused before sending: its upstream is at ``max_in_flight``
    (``hasten.routing.gate``). The router tries another deployment; with none left, the
    client gets this 429 (with Retry-After) in its own API's shape, as an upstream's 429."""

    default_code = "upstream_busy"


class UpstreamError(HastenError):
    """The upstream could not be reached or failed in a way we cannot pass through."""

    status_code = 502
    error_type = "upstream_error"
    default_code = "upstream_unavailable"


class RelayedError(HastenError):
    """The error another replica's upstream call ended with, as its own clients saw it."""

    def __init__(
        self, message: str, *, status_code: int, error_type: str, code: str | None
    ) -> None:
        super().__init__(message, code=code)
        self.status_code = status_code
        self.error_type = error_type


class UpstreamConnectError(UpstreamError):
    """No connection could be made: safe to retry, nothing was sent."""

    default_code = "upstream_unreachable"


class UpstreamTimeout(UpstreamError):
    status_code = 504
    error_type = "timeout_error"
    default_code = "upstream_timeout"


class KeyStoreUnavailable(HastenError):
    """The virtual key store cannot be read or written now (Redis away, SQLite failing)."""

    status_code = 503
    error_type = "server_error"
    default_code = "key_store_unavailable"


class ClientGone(Exception):
    """The client disconnected: seen while reading its body, while answering it (see
    ``hasten.wire.asgi.DisconnectWatcher``) or when a send failed. Never rendered."""


class ModelFileNotFound(FileNotFoundError):
    """No GGUF file at the configured path, and no bundled model package installed."""


class EngineNotBuilt(FileNotFoundError):
    """No ``llama-server`` binary where hasten looks for it (``make dev`` builds it)."""


class DamagedCacheEntry(ValueError):
    """A stored cache entry fails its checksum or does not parse; a miss, never rendered."""


class OutdatedCacheEntry(ValueError):
    """A stored cache entry in a format before checksums; a miss, never rendered."""


class DamagedKeyRecord(ValueError):
    """A stored virtual key fails its checksum or its fields do not parse: never trusted."""


class InvalidKeyField(ValueError):
    """A key's limit or model list is out of range; ``field`` names it (config or API)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class ConfigError(Exception):
    """A configuration file or flag is invalid; never rendered to clients."""


class ReportDependencyMissing(ImportError):
    """An optional package a bench report needs (matplotlib for --png) is not installed."""


class DoctorError(Exception):
    """``hasten doctor`` could not probe the endpoint; the message says why, for a person."""


class FleetUnavailable(Exception):
    """The fleet's Redis failed or is backing off; callers fall back to local state."""


class SpliceMismatch(ValueError):
    """A regenerated stream does not continue what the client got (``hasten.proxy.splice``)."""


class MalformedNews(ValueError):
    """An entry of the fleet's routing news that cannot be read; it is skipped whole."""
