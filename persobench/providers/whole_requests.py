"""Every HTTP request a provider sends leaves the process in one socket write, so a process killed
at any moment (SIGKILL) has sent the server the whole request or nothing of it.

The SDKs' HTTP client (``httpx`` over ``httpcore`` and ``h11``, or their forks ``httpx2`` /
``httpcore2``) writes a request's head and its body with two socket writes, and lets the event loop
run other tasks between them. A run killed in that gap (on a loaded machine the scheduler may stop
it right there) left the server a request head announcing a body, then a closed connection; a
server counting requests as they arrive counted one whose prompt belongs to no sample, and the
resumed run sent that sample again, whole: 25 distinct prompts for a 24-sample run (issue 39 item
15, reproduced in ``tests/test_resume_prompts.py``). Here a connection holds what it is asked to
write until it first reads (HTTP/1.1 sends the whole request before it reads the reply) and then
hands all of it to the kernel in one write; bytes the kernel took are sent even after the process
dies. A request larger than the socket's send buffer gets a buffer that holds it (up to the
system's limit, ``net.core.wmem_max``), so the one write takes it whole.

Only HTTP/1.1 connection pools are wrapped (an HTTP/2 connection interleaves the frames of several
requests, and reads on its own schedule); the SDKs' default clients speak HTTP/1.1.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["WholeRequestBackend", "WholeRequestStream", "send_whole_requests"]


class WholeRequestStream:
    """A network stream (``httpcore``'s ``AsyncNetworkStream`` interface) whose writes are held
    until its next read, then sent in one write.

    ``pause`` (the backend's ``sleep``) is awaited with 0 before that write: the event loop runs
    once, as it did between the head and the body before, so what the loop had scheduled (the
    commit of the replies already received, and their rows) happens before the next request
    leaves, in the order the run had."""

    def __init__(self, stream: Any, pause: Any = None) -> None:
        self._stream = stream
        self._pause = pause
        self._held: list[bytes] = []
        self._timeout: float | None = None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            self._held.append(bytes(buffer))
            self._timeout = timeout

    async def _send_held(self) -> None:
        if not self._held:
            return
        if self._pause is not None:
            await self._pause(0)
        data = b"".join(self._held)
        self._held.clear()
        _make_room(self._stream.get_extra_info("socket"), len(data))
        await self._stream.write(data, timeout=self._timeout)  # a refused write surfaces here, as a WriteError

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        await self._send_held()
        return await self._stream.read(max_bytes, timeout=timeout)

    async def aclose(self) -> None:
        self._held.clear()
        await self._stream.aclose()

    async def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                        timeout: float | None = None) -> "WholeRequestStream":
        await self._send_held()  # a proxy's CONNECT goes out before the handshake
        return WholeRequestStream(await self._stream.start_tls(ssl_context, server_hostname=server_hostname,
                                                               timeout=timeout), self._pause)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class WholeRequestBackend:
    """A network backend (``httpcore``'s ``AsyncNetworkBackend`` interface) whose connections are
    :class:`WholeRequestStream`\\ s."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> WholeRequestStream:
        return WholeRequestStream(await self.backend.connect_tcp(*args, **kwargs), self.backend.sleep)

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> WholeRequestStream:
        return WholeRequestStream(await self.backend.connect_unix_socket(*args, **kwargs), self.backend.sleep)

    async def sleep(self, seconds: float) -> None:
        await self.backend.sleep(seconds)


def send_whole_requests(client: Any) -> Any:
    """``client`` (an ``httpx``-style ``AsyncClient``) with every HTTP/1.1 connection pool of its
    transports (proxies included) connecting through :class:`WholeRequestBackend`; returned."""
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if pool is None or backend is None or getattr(pool, "_http2", False) or isinstance(backend, WholeRequestBackend):
            continue
        pool._network_backend = WholeRequestBackend(backend)  # connections are made with the pool's backend
    return client


def _make_room(sock: socket.socket | None, size: int) -> None:
    """Give ``sock`` a send buffer that takes ``size`` bytes in one write (the kernel's autotuned
    buffer is left alone when it already does)."""
    if sock is None:
        return
    try:
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2 < size:  # Linux reports twice the room
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
    except OSError:
        pass  # not a socket this process may tune: the write is still one call
