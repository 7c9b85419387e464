"""What kube-apiserver does for pods/log, pods/exec, pods/attach, pods/portforward and
nodes/{name}/proxy/...: it finds the node, dials that node's kubelet where the Node's status
says (InternalIP, daemonEndpoints.kubeletEndpoint.Port) with the API server's own kubelet
client certificate, and relays the kubelet's answer to the client — a streamed body, or an
upgraded connection (SPDY, WebSocket) byte for byte, as the upgrade-aware proxy does.

This lets a real kubectl (`kubectl logs -f`, `exec -i`, `port-forward`, `get --raw
/api/v1/nodes/<n>/proxy/...`) reach pykubelet through the test API server."""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import parse_qsl, urlencode

import trio

from tests.support.apiserver import errors
from tests.support.apiserver.httpserver import Request, Response
from tests.support.apiserver.store import Store

# kubeadm's name for the API server's client certificate toward kubelets.
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"
POD_STREAMS = {"exec": "exec", "attach": "attach", "portforward": "portForward"}
_LOG_PARAMS = ("follow", "previous", "timestamps", "sinceSeconds", "sinceTime", "tailLines", "limitBytes",
               "insecureSkipTLSVerifyBackend")
# Headers that belong to the client's hop: the kubelet gets the API server's identity instead.
_DROPPED = {"host", "authorization", "content-length", "impersonate-user", "impersonate-group"}


class KubeletProxy:
    def __init__(self, store: Store, client_cert_path: str, client_key_path: str) -> None:
        self.store = store
        # kube-apiserver without --kubelet-certificate-authority does not verify the kubelet's
        # serving certificate (pykubelet's is self-signed by default, as the Go kubelet's).
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.load_cert_chain(client_cert_path, client_key_path)
        context.set_alpn_protocols(["http/1.1"])
        self.ssl_context = context

    def pod_log(self, request: Request, pod: dict[str, Any]) -> Response:
        container = self._container(request, pod)
        meta = pod["metadata"]
        query = urlencode([(k, v) for k, v in parse_qsl(request.query_string, keep_blank_values=True)
                           if k in _LOG_PARAMS])
        return self._relay(request, self._node_of(pod),
                           f"/containerLogs/{meta['namespace']}/{meta['name']}/{container}", query)

    def pod_stream(self, request: Request, pod: dict[str, Any], subresource: str) -> Response:
        meta = pod["metadata"]
        path = f"/{POD_STREAMS[subresource]}/{meta['namespace']}/{meta['name']}"
        pairs = parse_qsl(request.query_string, keep_blank_values=True)
        if subresource != "portforward":
            path += f"/{self._container(request, pod)}"
            pairs = [(k, v) for k, v in pairs if k != "container"]
        return self._relay(request, self._node_of(pod), path, urlencode(pairs))

    def node_proxy(self, request: Request, node_name: str, path: str) -> Response:
        return self._relay(request, node_name, "/" + path, request.query_string)

    def _container(self, request: Request, pod: dict[str, Any]) -> str:
        name = request.param("container") or ""
        containers = [c["name"] for c in pod["spec"].get("containers", [])]
        every = [c["name"] for c in pod["spec"].get("initContainers", [])] + containers
        if not name:
            if len(containers) == 1:
                return containers[0]
            raise errors.ApiError(400, f"a container name must be specified for pod {pod['metadata']['name']}, "
                                       f"choose one of: {containers}", reason="BadRequest")
        if name not in every:
            raise errors.ApiError(400, f"container {name} is not valid for pod {pod['metadata']['name']}",
                                  reason="BadRequest")
        return name

    def _node_of(self, pod: dict[str, Any]) -> str:
        node = pod["spec"].get("nodeName", "")
        if not node:
            raise errors.ApiError(400, f"pod {pod['metadata']['name']} does not have a host assigned",
                                  reason="BadRequest")
        return node

    def _location(self, node_name: str) -> tuple[str, int]:
        node = self.store.get("nodes", "", node_name)
        if node is None:
            raise errors.not_found("nodes", "", node_name)
        status = node.get("status", {})
        port = status.get("daemonEndpoints", {}).get("kubeletEndpoint", {}).get("Port", 0)
        addresses = {a.get("type"): a.get("address") for a in status.get("addresses", [])}
        host = addresses.get("InternalIP") or addresses.get("Hostname")
        if not port or not host:
            raise errors.ApiError(503, f"no kubelet endpoint for node {node_name!r}", reason="ServiceUnavailable")
        return host, port

    def _relay(self, request: Request, node_name: str, path: str, query: str) -> Response:
        host, port = self._location(node_name)
        upgrade = "upgrade" in request.headers.get("connection", "").lower()
        head = [f"{request.method} {path}{'?' + query if query else ''} HTTP/1.1", f"Host: {host}:{port}"]
        for name, value in request.raw_headers:  # repeats kept: X-Stream-Protocol-Version is one per version
            name = name.lower()
            if name in _DROPPED or (not upgrade and name in ("connection", "keep-alive")):
                continue
            head.append(f"{name}: {value}")
        if not upgrade:  # one request per kubelet connection: its end is the answer's end
            head.append("Connection: close")
        if request.body:
            head.append(f"Content-Length: {len(request.body)}")
        first = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + request.body

        async def takeover(client: trio.abc.Stream, pending: bytes) -> None:
            try:
                tcp = await trio.open_tcp_stream(host, port)
                kubelet = trio.SSLStream(tcp, self.ssl_context, server_hostname=host)
                await kubelet.do_handshake()
            except (OSError, trio.BrokenResourceError) as exc:
                body = f"error dialing backend: {exc}".encode()
                await client.send_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
                                      b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                return
            async with kubelet:
                await kubelet.send_all(first + pending)
                await _splice(client, kubelet)

        return Response(200, takeover=takeover)


async def _splice(client: trio.abc.Stream, kubelet: trio.abc.Stream) -> None:
    """Copy both ways until either side ends; then both end, as Go's proxy does."""

    async def copy(source: trio.abc.Stream, sink: trio.abc.Stream, done: trio.CancelScope) -> None:
        try:
            while data := await source.receive_some(65536):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError):
            pass
        done.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(copy, client, kubelet, nursery.cancel_scope)
        nursery.start_soon(copy, kubelet, client, nursery.cancel_scope)
