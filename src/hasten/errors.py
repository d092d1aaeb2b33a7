"""One exception tree for the whole gateway.

Handlers raise these; a single ASGI middleware renders them as OpenAI-shaped JSON
(``{"error": {"message", "type", "param", "code"}}``) with the status they carry.
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


class MethodNotAllowed(InvalidRequest):
    status_code = 405
    default_code = "method_not_allowed"

    def __init__(self, message: str, *, allow: str) -> None:
        super().__init__(message)
        self.headers["allow"] = allow  # RFC 9110: a 405 lists the methods that would work


class RateLimited(HastenError):
    status_code = 429
    error_type = "rate_limit_error"
    default_code = "rate_limit_exceeded"


class TooManyConnections(RateLimited):
    default_code = "too_many_connections"


class UpstreamError(HastenError):
    """The upstream could not be reached or failed in a way we cannot pass through."""

    status_code = 502
    error_type = "upstream_error"
    default_code = "upstream_unavailable"


class UpstreamTimeout(UpstreamError):
    status_code = 504
    error_type = "timeout_error"
    default_code = "upstream_timeout"


class DamagedCacheEntry(ValueError):
    """A stored cache entry fails its checksum or does not parse; a miss, never rendered."""


class OutdatedCacheEntry(ValueError):
    """A stored cache entry in a format before checksums; a miss, never rendered."""


class ConfigError(Exception):
    """A configuration file or flag is invalid; never rendered to clients."""
