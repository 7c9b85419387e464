"""ExecSync through the CRI port against a scripted runtime (a grpc.aio server in this
process): the port keeps an exec probe's request and its usual answer as bytes between
calls, and what it keeps must never stand in for what the runtime was sent or answered."""

from __future__ import annotations

import pytest
from cri_api.v1 import api_pb2, api_pb2_grpc

from pykubelet.ports.cri import CriClient
from tests.support.fake_runtime import serve_runtime


class ScriptedRuntime(api_pb2_grpc.RuntimeServiceServicer):
    """Answers each ExecSync with the next of `answers`, and keeps the requests it got."""

    def __init__(self, answers: list[api_pb2.ExecSyncResponse]) -> None:
        self.answers = answers
        self.requests: list[tuple[str, list[str], int]] = []

    async def Version(self, request, context):
        return api_pb2.VersionResponse(version="0.1.0", runtime_name="scripted", runtime_version="1",
                                       runtime_api_version="v1")

    async def ExecSync(self, request, context):
        self.requests.append((request.container_id, list(request.cmd), request.timeout))
        return self.answers[len(self.requests) - 1]


@pytest.mark.parametrize("long", [False, True], ids=["short", "long"])
async def test_each_exec_sync_gets_its_own_answer_and_sends_its_own_request(long) -> None:
    out = b"x" * 5000 if long else b"ok\n"  # long: past what the port keeps of an answer
    answers = [
        api_pb2.ExecSyncResponse(stdout=out, exit_code=0),
        api_pb2.ExecSyncResponse(stdout=out, exit_code=0),  # the same bytes again
        api_pb2.ExecSyncResponse(stdout=out, stderr=b"failed\n", exit_code=1),  # the same request, answered anew
        api_pb2.ExecSyncResponse(stdout=b"", exit_code=7),
        api_pb2.ExecSyncResponse(stdout=out, exit_code=0),
    ]
    runtime = ScriptedRuntime(answers)
    async with serve_runtime(runtime) as path, CriClient(path) as cri:
        results = [
            await cri.exec_sync("c1", ["cat", "/ready"], 1),
            await cri.exec_sync("c1", ["cat", "/ready"], 1),
            await cri.exec_sync("c1", ["cat", "/ready"], 1),
            await cri.exec_sync("c1", ["cat", "/live"], 2.5),
            await cri.exec_sync("c2", ["cat", "/ready"], 0),
        ]
    assert [(r.stdout, r.stderr, r.exit_code) for r in results] == [
        (out, b"", 0), (out, b"", 0), (out, b"failed\n", 1), (b"", b"", 7), (out, b"", 0),
    ]
    assert runtime.requests == [
        ("c1", ["cat", "/ready"], 1), ("c1", ["cat", "/ready"], 1), ("c1", ["cat", "/ready"], 1),
        ("c1", ["cat", "/live"], 3), ("c2", ["cat", "/ready"], 0),
    ]
