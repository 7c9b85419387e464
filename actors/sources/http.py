"""The http source: pods from --manifest-url, a Pod or a PodList polled every
check_frequency (Go's --http-check-frequency). It sends pod config the full set as
SourcePods, at the first poll and then only when the pods or the problems change.

A failed poll (an error status, a timeout, no connection, a bad body) keeps the last good
set, as the Go kubelet does, and reports a ManifestProblem naming the URL and the cause.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from pykubelet.messages.pod import Pod
from pykubelet.messages.pod_updates import ManifestProblem, SourcePods
from pykubelet.pods.manifest import (
    ManifestError,
    check_manifest_size,
    decode_manifests,
    drop_duplicate_pods,
)
from pykubelet.supervisor import ActorContext

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("pykubelet.sources.http")

SOURCE = "http"


@dataclass(frozen=True)
class Fetched:
    """A 200 answer's body."""

    body: bytes


@dataclass(frozen=True)
class FetchFailed:
    """Why a poll got no body: "GET answered 500 Internal Server Error", ..."""

    reason: str


class ManifestURL:
    """What the URL served last, and the set the source reports (pure: fed poll results)."""

    def __init__(self, url: str, *, node_name: str) -> None:
        self.url = url
        self.node_name = node_name
        self._body: bytes | None = None
        self._decoded: tuple[list[Pod] | None, list[ManifestProblem]] = ([], [])
        self._last_good: list[Pod] = []

    def _problem(self, message: str) -> ManifestProblem:
        return ManifestProblem(source=SOURCE, origin=self.url, message=message)

    def observe(self, result: Fetched | FetchFailed) -> SourcePods:
        """The source's set after one poll."""
        if isinstance(result, FetchFailed):
            return SourcePods(source=SOURCE, pods=self._last_good, problems=[self._problem(result.reason)])
        if result.body != self._body:  # the same body again decodes the same: skip it
            self._body = result.body
            self._decoded = self._decode(result.body)
        pods, problems = self._decoded
        if pods is not None:
            self._last_good = pods
        return SourcePods(source=SOURCE, pods=self._last_good, problems=problems)

    def _decode(self, body: bytes) -> tuple[list[Pod] | None, list[ManifestProblem]]:
        if not body.strip():
            # As the Go kubelet: an empty answer is an empty set, and worth a complaint.
            return [], [self._problem("empty response body (no pods)")]
        try:
            pods = decode_manifests(body, origin=self.url, source=SOURCE, node_name=self.node_name)
        except ManifestError as exc:
            return None, [exc.problem(SOURCE)]
        return drop_duplicate_pods([(self.url, pod) for pod in pods], source=SOURCE)


async def fetch(client: httpx.AsyncClient, url: str, *, timeout: float) -> Fetched | FetchFailed:
    """GET the URL with a deadline on the whole exchange (as Go's http.Client.Timeout)."""
    import httpx  # loaded already: the client is one

    try:
        with trio.fail_after(timeout):
            async with client.stream("GET", url) as response:
                if response.status_code != 200:
                    return FetchFailed(f"GET answered {response.status_code} {response.reason_phrase}".rstrip())
                length = response.headers.get("content-length", "")
                if length.isdigit():
                    check_manifest_size(int(length), origin=url)
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    check_manifest_size(len(body), origin=url)
                return Fetched(bytes(body))
    except trio.TooSlowError:
        return FetchFailed(f"GET timed out after {timeout:g}s")
    except ManifestError as exc:
        return FetchFailed(exc.message)
    except httpx.TimeoutException:
        return FetchFailed(f"GET timed out after {timeout:g}s")
    except httpx.ConnectError as exc:
        return FetchFailed(f"GET failed: cannot connect ({exc or 'connection refused'})")
    except httpx.HTTPError as exc:
        return FetchFailed(f"GET failed: {type(exc).__name__}: {exc}")


def http_source_actor(
    url: str,
    headers: dict[str, list[str]],
    *,
    node_name: str,
    check_frequency: float,
    send_to: str = "root/pod-config",
    timeout: float = 10.0,
):
    """The actor function of the http source for one --manifest-url.

    headers: --manifest-url-header, each name with its values. The mailbox at send_to
    (pod config) must exist before this actor starts.
    """
    if check_frequency <= 0 or timeout <= 0:
        raise ValueError("check_frequency and timeout must be positive")
    header_list = [(name, value) for name, values in headers.items() for value in values]

    async def run(ctx: ActorContext) -> None:
        pod_config = ctx.registry.lookup(send_to)
        manifests = ManifestURL(url, node_name=node_name)
        last_sent: SourcePods | None = None
        log.info("polling manifest URL", extra={"url": url})
        import httpx  # here, not with the module: only --manifest-url needs it

        async with httpx.AsyncClient(headers=header_list, follow_redirects=True, timeout=timeout) as client:
            while True:
                update = manifests.observe(await fetch(client, url, timeout=timeout))
                if last_sent is None or update != last_sent:
                    _log_problems(update, last_sent)
                    await pod_config.send(update)
                    last_sent = update
                await trio.sleep(check_frequency)

    return run


def _log_problems(update: SourcePods, previous: SourcePods | None) -> None:
    before = set(previous.problems) if previous is not None else set()
    for problem in update.problems:
        if problem not in before:
            kept = f" (keeping the last {len(update.pods)} pods)" if update.pods else ""
            log.warning("manifest %s: %s%s", problem.origin, problem.message, kept, extra={"url": problem.origin})
    if before and not update.problems:
        log.info("manifest URL reads fine again", extra={"url": next(iter(before)).origin})
