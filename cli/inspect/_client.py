"""AdminClient: pykubelet-inspect's port to the daemon, HTTP over the admin socket (or to a
kubelet's http(s) endpoint). Every failure leaves as an InspectError in the operator's words.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
from collections.abc import Iterator, Sequence
from typing import BinaryIO
from urllib.parse import quote, urlencode

import httpx
import msgspec

from pykubelet.messages.events import EventList
from pykubelet.messages.pod import PodList
from pykubelet.messages.supervision import ActorSnapshot

DEFAULT_SOCKET = "/var/lib/pykubelet/pykubelet.sock"
PROG = "pykubelet-inspect"
# The daemon ends a /run command after 60 s (actors/server/debugging.py RUN_TIMEOUT); the
# answer may take that long.
RUN_TIMEOUT = 60.0


class InspectError(Exception):
    """Something the operator must be told in one line; main() prints it and exits 1."""


class AdminClient:
    """GET/POST against the daemon's admin socket or an http(s) kubelet endpoint.

    Every failure leaves as an InspectError whose message names the socket or URL and
    says what to do about it.
    """

    def __init__(
        self,
        *,
        socket: str = DEFAULT_SOCKET,
        address: str | None = None,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.socket = socket if address is None else None
        self.address = address
        self.timeout = timeout
        if self.socket is not None:
            self.where = f"admin socket {self.socket}"
            transport = transport or httpx.HTTPTransport(uds=self.socket)
            base_url = "http://localhost"
        else:
            self.where = f"kubelet at {address}"
            base_url = address.rstrip("/")
        self._http = httpx.Client(base_url=base_url, transport=transport, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def actors(self) -> tuple[ActorSnapshot, bytes]:
        """The tree snapshot, and its JSON exactly as served."""
        raw = self._request("GET", "/debug/actors")
        return _decode(raw, ActorSnapshot, "GET /debug/actors"), raw

    def pods(self) -> tuple[PodList, bytes]:
        raw = self._request("GET", "/pods")
        kind = _decode(raw, _Kind, "GET /pods", "PodList").kind
        if kind != "PodList":
            raise InspectError(f"GET /pods: the answer is a {kind}, not a PodList")
        return _decode(raw, PodList, "GET /pods"), raw

    def events(self, namespace: str | None = None) -> tuple[EventList, bytes]:
        url = "/events" + (f"?{urlencode({'namespace': namespace})}" if namespace else "")
        raw = self._request("GET", url)
        kind = _decode(raw, _Kind, f"GET {url}", "EventList").kind
        if kind != "EventList":
            raise InspectError(f"GET {url}: the answer is a {kind}, not an EventList")
        return _decode(raw, EventList, f"GET {url}"), raw

    def act(self, path: str, action: str) -> str:
        """POST restart|crash for the actor at path; the daemon's one-word result."""
        path = path.strip("/")
        url = f"/debug/actors/{quote(path, safe='/')}/{action}"
        raw = self._request("POST", url)
        try:
            return str(msgspec.json.decode(raw).get("result", action + "ed"))
        except (msgspec.DecodeError, AttributeError):
            return raw.decode(errors="replace").strip() or action + "ed"

    def logs(
        self,
        namespace: str,
        pod: str,
        container: str,
        out: BinaryIO,
        *,
        follow: bool = False,
        tail_lines: int | None = None,
        timestamps: bool = False,
        previous: bool = False,
    ) -> None:
        """GET /containerLogs, each piece written to `out` as it arrives; with follow,
        until the daemon ends the stream (the container stopped)."""
        query = {
            key: value
            for key, value in (
                ("follow", "true" if follow else None),
                ("tailLines", None if tail_lines is None else str(tail_lines)),
                ("timestamps", "true" if timestamps else None),
                ("previous", "true" if previous else None),
            )
            if value is not None
        }
        url = _container_path("containerLogs", namespace, pod, container)
        if query:
            url += f"?{urlencode(query)}"
        # A followed container may stay quiet for hours: no read timeout then.
        timeout = httpx.Timeout(self.timeout, read=None) if follow else None
        with self._exchange("GET", url, timeout=timeout) as response:
            for chunk in response.iter_raw():
                out.write(chunk)
                out.flush()

    def run(self, namespace: str, pod: str, container: str, command: Sequence[str]) -> bytes:
        """POST /run (CRI ExecSync): the command's stdout then stderr, once it has ended.
        The answer carries no exit code."""
        for argument in command:
            if not argument or argument.split() != [argument]:
                raise InspectError(
                    f"argument {argument!r}: the daemon's /run splits the command on whitespace (as the "
                    "Go kubelet's does), so an argument can be neither empty nor contain whitespace; "
                    "put such a command in a script inside the container and run that"
                )
        url = _container_path("run", namespace, pod, container)
        url += "?" + urlencode({"cmd": " ".join(command)}, quote_via=quote)
        answer_within = httpx.Timeout(self.timeout, read=max(self.timeout, RUN_TIMEOUT + 5))
        return self._request("POST", url, timeout=answer_within)

    def _request(self, method: str, url: str, *, timeout: httpx.Timeout | None = None) -> bytes:
        with self._exchange(method, url, timeout=timeout) as response:
            return response.read()

    @contextlib.contextmanager
    def _exchange(self, method: str, url: str, *, timeout: httpx.Timeout | None = None) -> Iterator[httpx.Response]:
        """The response to one request, its body not yet read; an error status, a timeout
        or a broken connection (also while the body is read) leaves as InspectError."""
        if self.socket is not None:
            self._check_socket_file()
        if timeout is None:
            timeout = httpx.Timeout(self.timeout)
        try:
            with self._http.stream(method, url, timeout=timeout) as response:
                if response.is_error:
                    response.read()
                    raise InspectError(
                        f"{method} {url}: {response.status_code} {response.reason_phrase}: "
                        f"{_error_message(response)}"
                    )
                yield response
        except httpx.TimeoutException:
            raise InspectError(
                f"{method} {url}: the {self.where} did not answer within {timeout.read or timeout.connect:g}s "
                f"(daemon hung or overloaded? try --timeout)"
            ) from None
        except httpx.TransportError as exc:
            raise InspectError(self._explain_transport_error(method, url, exc)) from None

    def _check_socket_file(self) -> None:
        try:
            mode = os.stat(self.socket).st_mode
        except FileNotFoundError:
            raise InspectError(self._missing()) from None
        except PermissionError:
            raise InspectError(self._denied()) from None
        if not stat.S_ISSOCK(mode):
            raise InspectError(
                f"{self.socket} is not a unix socket: pass the daemon's admin socket, "
                f"--socket <root-dir>/pykubelet.sock"
            )

    def _explain_transport_error(self, method: str, url: str, exc: httpx.TransportError) -> str:
        code = _os_errno(exc)
        if self.socket is not None:
            if code in (errno.EACCES, errno.EPERM):
                return self._denied()
            if code == errno.ECONNREFUSED:
                return (
                    f"nothing is listening on {self.socket}: the daemon is not running "
                    f"(stale socket left behind); start it with `pykubelet run`"
                )
            if code == errno.ENOENT:
                return self._missing()
        elif code == errno.ECONNREFUSED:
            return (
                f"nothing answers at {self.address}: is the daemon "
                f"running, with --read-only-port (or --port) set to that port?"
            )
        if isinstance(exc, httpx.ConnectError):
            return f"cannot connect to the {self.where}: {exc}"
        return f"{method} {url}: the {self.where} broke off the exchange: {exc or type(exc).__name__}"

    def _missing(self) -> str:
        return (
            f"no admin socket at {self.socket}: is the daemon running? start it with "
            f"`pykubelet run`, or pass --socket <root-dir>/pykubelet.sock"
        )

    def _denied(self) -> str:
        try:
            owner = f"{pwd.getpwuid(os.stat(self.socket).st_uid).pw_name} (the daemon's user)"
        except (OSError, KeyError):  # e.g. the root dir itself is closed to us
            owner = "the daemon's user"
        return (
            f"permission denied on admin socket {self.socket}: it is mode 0600, owned by "
            f"{owner}; run {PROG} as that user or as root"
        )


def _container_path(prefix: str, namespace: str, pod: str, container: str) -> str:
    return "/".join(["", prefix, *(quote(part, safe="") for part in (namespace, pod, container))])


def _os_errno(exc: BaseException) -> int | None:
    """The errno of the OSError under httpx's and httpcore's wrappers, if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None:
            return seen.errno
        seen = seen.__cause__ or seen.__context__
    return None


def _error_message(response: httpx.Response) -> str:
    text = response.text.strip()
    try:
        body = msgspec.json.decode(response.content)
    except msgspec.DecodeError:
        return text or "(no message)"
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return body["error"]
    if isinstance(body, dict) and isinstance(body.get("message"), str):  # a k8s Status
        return body["message"]
    return text


class _Kind(msgspec.Struct):
    """Any API object's kind: read first, so that the wrong list is named as such."""

    kind: str


def _decode(raw: bytes, type_: type, what: str, expected: str | None = None):
    try:
        return msgspec.json.decode(raw, type=type_)
    except msgspec.ValidationError as exc:
        raise InspectError(f"{what}: the answer is not a {expected or type_.__name__}: {exc}") from None
    except msgspec.DecodeError:
        start = raw[:60].decode(errors="replace")
        raise InspectError(f"{what}: the answer is not JSON (it starts {start!r})") from None
