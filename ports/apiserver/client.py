"""ApiClient: the kubelet's async port to the Kubernetes API server (httpx over trio).

HTTP/1.1 over TLS with the kubeconfig's credentials; every request but a watch waits for
client-go's token bucket (QPS/burst) and then has `timeout` seconds to be answered. Objects
are plain dicts, so a read-modify-write never drops a field; decode() turns one into a
typed msgspec Struct for reading. Errors are the typed ApiErrors of errors.py.
"""

from __future__ import annotations

import platform
import sys
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import httpx
import msgspec
import trio

from pykubelet.messages.version import VERSION

from .errors import ApiError, ApiUnavailable, ProtocolError, error_from_status, unavailable
from .kubeconfig import Credentials, TokenFile
from .metrics import RestClientMetrics
from .objects import PATCH_CONTENT_TYPES, PatchType, decode
from .ratelimit import TokenBucket
from .reachability import ApiReachability
from .watch import WatchDecoder, WatchEvent

DEFAULT_QPS = 50.0  # KubeletConfiguration kubeAPIQPS
DEFAULT_BURST = 100  # KubeletConfiguration kubeAPIBurst
# The API server gives up on a request after its --request-timeout (1m); waiting longer
# for an answer gains nothing.
DEFAULT_TIMEOUT = 60.0
# kube-apiserver sends a watcher that allows bookmarks one about every minute: a watch
# silent for longer than this is presumed dead.
DEFAULT_WATCH_READ_TIMEOUT = 150.0

_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
           "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x", "i686": "386"}


def default_user_agent() -> str:
    """pykubelet/<version> (<os>/<arch>) kubelet, shaped like client-go's."""
    machine = platform.machine().lower()
    return f"pykubelet/{VERSION} ({sys.platform}/{_GOARCH.get(machine, machine)}) kubelet"


class ApiClient:
    """A client of one API server. Use as `async with ApiClient(credentials) as api:`.

    qps/burst: client-go's rate limit (qps=None: none); timeout: seconds for a request's
    answer, counted after the rate limiter let it through (the lease's heartbeat client
    uses a shorter one than the main client); watch_read_timeout: the longest silence a
    watch may keep. `transport` replaces the HTTPS transport (unit tests of callers).
    """

    def __init__(
        self,
        credentials: Credentials,
        *,
        qps: float | None = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        timeout: float = DEFAULT_TIMEOUT,
        watch_read_timeout: float = DEFAULT_WATCH_READ_TIMEOUT,
        user_agent: str | None = None,
        metrics: RestClientMetrics | None = None,
        reachability: ApiReachability | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.credentials = credentials
        self.server = credentials.server
        self.host = httpx.URL(credentials.server).netloc.decode("ascii")
        self.timeout = timeout
        self.watch_read_timeout = watch_read_timeout
        self.user_agent = user_agent or default_user_agent()
        self.metrics = metrics
        self.reachability = reachability or ApiReachability()
        self.limiter = TokenBucket(qps, burst) if qps is not None else None
        self._token_file = None
        if credentials.token_file is not None and credentials.token is not None:
            self._token_file = TokenFile(credentials.token_file, credentials.token)
        self._extensions = ({"sni_hostname": credentials.tls_server_name}
                            if credentials.tls_server_name else {})
        if transport is None:
            transport = httpx.AsyncHTTPTransport(
                verify=credentials.ssl_context, http1=True, http2=False, retries=0,
                trust_env=False,
                # No cap on connections (each watch holds one); keep 25 idle, as client-go.
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=25),
            )
        self._http = httpx.AsyncClient(transport=transport, trust_env=False,
                                       follow_redirects=False, timeout=timeout)

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._http.aclose()

    # -- the verbs ---------------------------------------------------------------------

    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return await self._request("GET", path, params=params)

    async def list(self, path: str, params: Mapping[str, Any] | None = None
                   ) -> tuple[list[dict[str, Any]], str]:
        """All items (following `continue` when the caller set `limit`) and the list's
        resourceVersion, from which to watch. Gone when a continue token expired."""
        query = dict(params or {})
        items: list[dict[str, Any]] = []
        resource_version: str | None = None
        while True:
            page = await self._request("GET", path, params=query)
            kind, api_version = str(page.get("kind") or ""), page.get("apiVersion")
            for item in page.get("items") or []:
                # A list's items carry no kind; give them the list's, so each is whole.
                if kind.endswith("List"):
                    item.setdefault("kind", kind[: -len("List")])
                if api_version:
                    item.setdefault("apiVersion", api_version)
                items.append(item)
            meta = page.get("metadata") or {}
            if resource_version is None:
                resource_version = str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            if not token:
                return items, resource_version
            query.pop("resourceVersion", None)  # not allowed with continue
            query.pop("resourceVersionMatch", None)
            query["continue"] = token

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._request("POST", path, body=body)

    async def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT: optimistic concurrency on body.metadata.resourceVersion (Conflict on mismatch)."""
        return await self._request("PUT", path, body=body)

    async def patch(self, path: str, body: Mapping[str, Any] | list[Any],
                    patch_type: PatchType = "strategic") -> dict[str, Any]:
        try:
            content_type = PATCH_CONTENT_TYPES[patch_type]
        except KeyError:
            raise ValueError(f"patch {path}: patch_type {patch_type!r} is not one of "
                             f"{', '.join(PATCH_CONTENT_TYPES)}") from None
        return await self._request("PATCH", path, body=body, content_type=content_type)

    async def delete(self, path: str, body: Mapping[str, Any] | None = None
                     ) -> dict[str, Any] | None:
        """DELETE with optional DeleteOptions (gracePeriodSeconds, preconditions.uid).

        Returns the object as the API server left it (a pod being deleted gracefully, with
        deletionTimestamp), or None when the answer is only a Status of success."""
        answer = await self._request("DELETE", path, body=body)
        if isinstance(answer, dict) and answer.get("kind") == "Status":
            return None
        return answer

    def watch(self, path: str, params: Mapping[str, Any] | None = None) -> WatchStream:
        """A watch of `path` (params: resourceVersion, allowWatchBookmarks, fieldSelector,
        timeoutSeconds, ...). Use as
        `async with api.watch(path, params) as events: async for event in events:`.

        Not rate limited (as client-go). An ERROR event is raised as its ApiError (Gone:
        re-list); the iteration ends when the server closes the watch (timeoutSeconds):
        watch again from `events.resource_version`."""
        return WatchStream(self, path, dict(params or {}))

    # -- the request -------------------------------------------------------------------

    def url(self, path: str, params: Mapping[str, Any] | None = None) -> httpx.URL:
        return httpx.URL(self.server + path, params=params or None)

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if content_type is not None:
            headers["Content-Type"] = content_type
        token = self._token_file.current() if self._token_file else self.credentials.token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def _throttle(self, method: str) -> None:
        if self.limiter is None:
            return
        waited = await self.limiter.acquire()
        if self.metrics is not None:
            self.metrics.record_wait(method, self.host, waited)

    async def _request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                       body: Any = None, content_type: str = "application/json") -> Any:
        # Throttle before the timeout starts, as client-go: a throttled client should not
        # time out before it made a single request.
        await self._throttle(method)
        url = self.url(path, params)
        request = self._http.build_request(
            method, url,
            content=msgspec.json.encode(body) if body is not None else None,
            headers=self._headers(content_type if body is not None else None),
            extensions=self._extensions,
        )
        started = time.perf_counter()
        code = "<error>"
        try:
            with trio.move_on_after(self.timeout) as scope:
                try:
                    response = await self._http.send(request)
                except httpx.RequestError as exc:
                    raise self._unavailable(exc, method, path, url, params) from exc
            if scope.cancelled_caught:
                raise self._unavailable(None, method, path, url, params)
            code = str(response.status_code)
        finally:
            if self.metrics is not None:
                self.metrics.record(method, self.host, code, time.perf_counter() - started)
        self.reachability.answered(response.status_code)
        return self._answer(response, method, path, params)

    def _unavailable(self, exc: BaseException | None, method: str, path: str, url: httpx.URL,
                     params: Mapping[str, Any] | None, *, timeout: float | None = None,
                     watch_idle: bool = False) -> ApiUnavailable:
        self.reachability.failed()  # every request (or watch) that got no answer passes here
        return unavailable(exc, method=method, path=path, url=str(url), params=params,
                           credentials=self.credentials,
                           timeout=self.timeout if timeout is None else timeout,
                           watch_idle=watch_idle)

    def _answer(self, response: httpx.Response, method: str, path: str,
                params: Mapping[str, Any] | None) -> Any:
        content = response.content
        if response.status_code >= 300:
            raise self._error(response.status_code, content, response.headers, method, path,
                              params, response.url)
        if not content.strip():
            return None
        try:
            return msgspec.json.decode(content)
        except msgspec.DecodeError as exc:
            raise ProtocolError(
                response.status_code, "NotJSON", str(exc), path, method.lower(), method=method,
                text=f"{method} {response.url}: {response.status_code} but the body is not JSON "
                     f"({exc}): {content[:200]!r}; is this the Kubernetes API server?") from None

    def _error(self, status: int, content: bytes, headers: httpx.Headers, method: str, path: str,
               params: Mapping[str, Any] | None, url: httpx.URL) -> ApiError:
        if status < 400:  # the API server never redirects; something else answers here
            return ProtocolError(
                status, "Redirect", headers.get("Location", ""), path, method.lower(),
                method=method,
                text=f"{method} {url}: {status} redirect to {headers.get('Location', '?')}; "
                     "the kubeconfig's server must be the API server itself")
        try:
            body = msgspec.json.decode(content) if content.strip() else None
        except msgspec.DecodeError:
            body = None
        retry_after = None
        if headers.get("Retry-After", "").strip().isdigit():
            retry_after = float(headers["Retry-After"])
        text = None if isinstance(body, dict) else content.decode("utf-8", "replace")
        return error_from_status(status, body if isinstance(body, dict) else None,
                                 method=method, path=path, params=params, url=str(url),
                                 credentials=self.credentials, retry_after=retry_after,
                                 text=text)


class WatchStream:
    """An open watch: an async iterator of WatchEvents (see ApiClient.watch).

    resource_version is that of the last event or bookmark received (at first the one
    the watch started from), from which the next watch continues.
    """

    def __init__(self, client: ApiClient, path: str, params: dict[str, Any]) -> None:
        self.client = client
        self.path = path
        self.params = {**params, "watch": "true"}
        self.resource_version = str(params.get("resourceVersion") or "")
        self.url = client.url(path, self.params)
        self._response: httpx.Response | None = None
        self._chunks: Any = None
        self._decoder = WatchDecoder()
        self._pending: deque[WatchEvent] = deque()
        self._ended = False

    async def __aenter__(self) -> WatchStream:
        client = self.client
        timeout = httpx.Timeout(client.timeout, read=client.watch_read_timeout)
        request = client._http.build_request(
            "GET", self.url, headers=client._headers(None), timeout=timeout,
            extensions=client._extensions,
        )
        started = time.perf_counter()
        code = "<error>"
        try:
            with trio.move_on_after(client.timeout) as scope:
                try:
                    response = await client._http.send(request, stream=True)
                except httpx.RequestError as exc:
                    raise self._unavailable(exc) from exc
            if scope.cancelled_caught:
                raise self._unavailable(None)
            code = str(response.status_code)
        finally:
            if client.metrics is not None:
                client.metrics.record("GET", client.host, code, time.perf_counter() - started)
        client.reachability.answered(response.status_code)
        if response.status_code >= 300:
            content = b""
            try:
                with trio.move_on_after(client.timeout):
                    content = await response.aread()
            except httpx.RequestError:
                pass  # the status alone still says what went wrong
            finally:
                await _close(response)
            raise client._error(response.status_code, content, response.headers, "GET",
                                self.path, self.params, self.url)
        self._response = response
        self._chunks = response.aiter_bytes()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        response, chunks = self._response, self._chunks
        self._response = self._chunks = None
        if response is not None:
            await _close(response)
        if chunks is not None:
            # httpx reads a body through nested async generators; closing the outer one
            # leaves the inner ones suspended (and warned about when collected). Reading on
            # from the closed stream ends the whole chain at once.
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                try:
                    async for _ in chunks:
                        pass
                except Exception:
                    pass
                await chunks.aclose()

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> WatchEvent:
        if self._chunks is None and not self._pending:
            if self._ended:
                raise StopAsyncIteration
            raise RuntimeError("iterate a watch inside `async with api.watch(...) as events:`")
        while not self._pending:
            if self._ended:
                raise StopAsyncIteration
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                self._ended = True
                self._feed(None)
                continue
            except httpx.TimeoutException as exc:
                raise self._unavailable(exc, watch_idle=True) from exc
            except httpx.RequestError as exc:
                raise self._unavailable(exc) from exc
            self._feed(chunk)
        event = self._pending.popleft()
        if event.type == "ERROR":
            code = event.object.get("code")
            status = code if isinstance(code, int) and code >= 400 else 500
            raise error_from_status(status, event.object, method="GET", path=self.path,
                                    params=self.params, url=str(self.url),
                                    credentials=self.client.credentials)
        if event.resource_version:
            self.resource_version = event.resource_version
        return event

    def _feed(self, chunk: bytes | None) -> None:
        try:
            self._pending.extend(self._decoder.feed(chunk) if chunk is not None
                                 else self._decoder.end())
        except ValueError as exc:
            if chunk is None:  # the connection closed in the middle of an event
                raise self._unavailable(ConnectionError(f"stream ended mid-event: {exc}")) from None
            raise ProtocolError(
                200, "BadWatchEvent", str(exc), self.path, "watch", method="GET",
                text=f"GET {self.url}: {exc}; is this the Kubernetes API server?") from None

    def _unavailable(self, exc: BaseException | None, *, watch_idle: bool = False) -> ApiUnavailable:
        limit = self.client.watch_read_timeout if watch_idle else self.client.timeout
        return self.client._unavailable(exc, "GET", self.path, self.url, self.params,
                                        timeout=limit, watch_idle=watch_idle)


async def _close(response: httpx.Response) -> None:
    # Shielded and bounded: closing must finish even when the caller is being cancelled.
    with trio.CancelScope(shield=True), trio.move_on_after(5):
        await response.aclose()

