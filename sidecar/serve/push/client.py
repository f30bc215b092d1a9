"""Pyroscope's push API over HTTP/1.1: one Connect unary call with a protobuf body.

``POST {URL}/push.v1.PusherService/Push`` with ``Content-Type: application/proto``; an answer
of 200 means accepted. Credentials come from a file: a bearer token, or ``USER:PASSWORD`` for
basic auth (Grafana Cloud's instance ID and access token); a tenant goes in ``X-Scope-OrgID``.
Redirects are not followed, so credentials go to the configured host only. Failures are
sorted for the pusher: a timeout, a refused connection, 408, 429 and 5xx are worth retrying;
any other answer is a rejection of that request.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from sidecar.errors import UsageError

PATH = "/push.v1.PusherService/Push"
#: Bytes of an error answer kept for the message.
_ANSWER_LIMIT = 4096


class PushFailed(Exception):
    """A push that did not get through; ``retry`` says whether trying again may help."""

    def __init__(self, message: str, *, retry: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retry = retry
        self.status = status


@dataclass(frozen=True)
class Endpoint:
    """Where and how to push."""

    scheme: str
    host: str
    port: int
    path: str
    authorization: str | None = None
    tenant: str | None = None
    timeout: float = 10.0

    @property
    def display(self) -> str:
        """The URL without credentials, for logs and /healthz."""
        default = 443 if self.scheme == "https" else 80
        port = "" if self.port == default else f":{self.port}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}{port}{self.path}"


def endpoint(
    url: str, *, token_file: str | None = None, tenant: str | None = None, timeout: float = 10.0
) -> Endpoint:
    """Checks ``--push URL`` and reads the credentials; a bad one is a UsageError."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--push needs an http:// or https:// URL, not {url!r}")
    if parts.username or parts.password:
        raise UsageError("--push URL must not hold credentials: put them in --push-token-file")
    if parts.query or parts.fragment:
        raise UsageError("--push URL must not have a query or a fragment")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as err:
        raise UsageError(f"--push URL has a bad port: {err}") from err
    authorization = _authorization(token_file) if token_file else None
    if tenant is not None and (not tenant.strip() or not tenant.isprintable()):
        raise UsageError("--push-tenant must be printable and not empty")
    return Endpoint(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port,
        path=parts.path.rstrip("/"),
        authorization=authorization,
        tenant=tenant.strip() if tenant else None,
        timeout=timeout,
    )


def _authorization(path: str) -> str:
    try:
        secret = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
        raise UsageError(f"cannot read --push-token-file {path}: {why}") from err
    if not secret or "\n" in secret or not secret.isprintable():
        raise UsageError(f"--push-token-file {path} must hold one line: a token or USER:PASSWORD")
    if ":" in secret:
        return "Basic " + base64.b64encode(secret.encode("utf-8")).decode("ascii")
    return f"Bearer {secret}"


class Client:
    """Sends push requests to one endpoint, one connection kept open between them."""

    def __init__(self, where: Endpoint) -> None:
        self.where = where
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self.where.scheme == "https":
                self._conn = http.client.HTTPSConnection(
                    self.where.host,
                    self.where.port,
                    timeout=self.where.timeout,
                    context=ssl.create_default_context(),
                )
            else:
                self._conn = http.client.HTTPConnection(
                    self.where.host, self.where.port, timeout=self.where.timeout
                )
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def push(self, body: bytes) -> None:
        """One push; raises PushFailed."""
        headers = {
            "Content-Type": "application/proto",
            "Connect-Protocol-Version": "1",
            "Connect-Timeout-Ms": str(int(self.where.timeout * 1000)),
            "User-Agent": "sidecar",
        }
        if self.where.authorization:
            headers["Authorization"] = self.where.authorization
        if self.where.tenant:
            headers["X-Scope-OrgID"] = self.where.tenant
        try:
            conn = self._connection()
            conn.request("POST", self.where.path + PATH, body=body, headers=headers)
            answer = conn.getresponse()
            status = answer.status
            text = answer.read(_ANSWER_LIMIT + 1)
            if len(text) > _ANSWER_LIMIT or answer.will_close:
                self.close()
        except (OSError, http.client.HTTPException) as err:
            self.close()
            what = "timed out" if isinstance(err, TimeoutError) else f"{type(err).__name__}: {err}"
            raise PushFailed(f"{self.where.display}: {what}", retry=True) from err
        if status == 200:
            return
        message = f"{self.where.display}: HTTP {status}{_reason(text)}"
        retry = status in (408, 429) or status >= 500
        raise PushFailed(message, retry=retry, status=status)


def _reason(text: bytes) -> str:
    """The message of a Connect error answer (JSON), else its first line."""
    body = text[:_ANSWER_LIMIT].decode("utf-8", "replace")
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        detail = str(doc.get("code", "")) + ": " + doc["message"]
    else:
        detail = body.strip().splitlines()[0] if body.strip() else ""
    detail = "".join(ch if ch.isprintable() else "?" for ch in detail)[:300]
    return f" ({detail})" if detail else ""
