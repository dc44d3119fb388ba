"""A real HTTP server that speaks OpenAI's chat completions wire format, for tests and benchmarks.

The LLM is the one boundary engramdb's tests fake; this fakes it at the
socket, so the real client code (httpx, retries, parsing) runs. Replies are
programmable per test::

    def test_something(openai_server: WireServer) -> None:
        openai_server.reply(content='{"facts": []}')              # next reply
        openai_server.reply(status=429, headers={"Retry-After": "0"})
        openai_server.reply(delay=0.5, content="slow")
        openai_server.reply(body=b"<html>oops</html>", status=502)  # raw body
        openai_server.reply(drop=True)                             # hang up
        openai_server.handler = lambda req: f"echo {req.messages[-1]['content']}"
        llm = make_llm("openai_compatible", {"base_url": openai_server.base_url,
                                              "model": "test"})
        ...
        assert openai_server.requests[0].json["model"] == "test"

Each request takes the next queued reply; with none queued, ``handler``
decides (it may return ``None`` to defer); otherwise the default answers
(``"{}"`` when the request asked for JSON, else ``"ok"``). Requests are
served concurrently (a thread each), so concurrency can be tested too.
In tests use the ``openai_server`` fixture (``tests/openai_wire.py``), elsewhere
``with WireServer() as server:``. Benchmarks use it as a zero- or fixed-latency
LLM so the real client code runs; it is not meant for anything else.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "AUTO",
    "Handler",
    "HandlerResult",
    "RecordedRequest",
    "Reply",
    "WireServer",
    "default_handler",
]

AUTO: Any = "auto"
"""Default for :attr:`Reply.usage`: token counts made up from the text lengths."""


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: bytes
    at: float = field(default_factory=time.monotonic)

    @property
    def json(self) -> Any:
        """The body parsed as JSON (``None`` when empty or not JSON)."""
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages sent (empty when the body has none)."""
        data = self.json
        messages = data.get("messages") if isinstance(data, dict) else None
        return messages if isinstance(messages, list) else []

    @property
    def response_format(self) -> dict[str, Any] | None:
        """The ``response_format`` sent, if any."""
        data = self.json
        value = data.get("response_format") if isinstance(data, dict) else None
        return value if isinstance(value, dict) else None

    @property
    def response_format_type(self) -> str | None:
        """``"json_schema"``, ``"json_object"``, or ``None`` when none was sent."""
        fmt = self.response_format
        return fmt.get("type") if fmt else None

    @property
    def authorization(self) -> str | None:
        """The ``Authorization`` header, if sent."""
        return self.headers.get("authorization")


@dataclass
class Reply:
    """What the server sends back for one request.

    By default a chat completion whose message content is ``content``
    (``None`` sends ``"content": null``; a dict or list is sent as its JSON
    text). ``body`` replaces the whole body (bytes/str as is, dict/list as
    JSON). Error statuses without a body get an OpenAI-style error object
    with ``error`` as its message.
    """

    content: str | Mapping[str, Any] | list[Any] | None = "ok"
    status: int = 200
    delay: float = 0.0
    """Seconds to wait before answering (to test timeouts and concurrency)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | str | Mapping[str, Any] | list[Any] | None = None
    error: str | None = None
    usage: Mapping[str, Any] | None = AUTO
    """``None`` leaves ``usage`` out of the reply."""
    model: str | None = None
    """Model named in the reply; by default the one requested."""
    finish_reason: str = "stop"
    refusal: str | None = None
    drop: bool = False
    """Close the connection without answering."""
    content_type: str = "application/json"

    def render(self, request: RecordedRequest) -> bytes:
        """Return the body bytes for ``request``."""
        if self.body is not None:
            if isinstance(self.body, bytes):
                return self.body
            if isinstance(self.body, str):
                return self.body.encode("utf-8")
            return json.dumps(self.body).encode("utf-8")
        if self.status >= 400:
            text = self.error or f"simulated HTTP {self.status}"
            return json.dumps(
                {"error": {"message": text, "type": "test_error", "code": self.status}}
            ).encode("utf-8")
        content = self.content
        if content is not None and not isinstance(content, str):
            content = json.dumps(content)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if self.refusal is not None:
            message["refusal"] = self.refusal
        data: dict[str, Any] = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model or _requested_model(request),
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        }
        if self.usage is AUTO:
            prompt = sum(len(str(m.get("content") or "")) for m in request.messages) // 4
            completion = len(content or "") // 4
            data["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        elif self.usage is not None:
            data["usage"] = dict(self.usage)
        return json.dumps(data).encode("utf-8")


def _requested_model(request: RecordedRequest) -> str:
    data = request.json
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else "test-model"


HandlerResult = Reply | str | Mapping[str, Any] | None
Handler = Callable[[RecordedRequest], HandlerResult]


def default_handler(request: RecordedRequest, models: list[str]) -> Reply:
    """Answer like a small, always-healthy OpenAI-compatible server."""
    if request.method == "GET" and request.path.rstrip("/") == "/v1/models":
        return Reply(
            body={
                "object": "list",
                "data": [{"id": m, "object": "model", "owned_by": "test"} for m in models],
            }
        )
    if request.method == "POST" and request.path.rstrip("/") == "/v1/chat/completions":
        wants_json = request.response_format is not None
        return Reply(content="{}" if wants_json else "ok")
    return Reply(status=404, error=f"no route for {request.method} {request.path}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Many clients connect at once in concurrency tests; the default backlog
    # of 5 would make the kernel drop SYNs and delay them by a second.
    request_queue_size = 128

    def __init__(self, owner: WireServer) -> None:
        self.owner = owner
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (timeout tests) closes its socket mid-reply;
        # that is expected, not a test failure.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like real servers
    # Headers and body go out in separate writes; with Nagle's algorithm on,
    # the client's delayed ACK would stall every reply by ~40 ms.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request = RecordedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        owner._enter(request)
        try:
            reply = owner._decide(request)
            if reply.delay > 0 and owner._stopping.wait(reply.delay):
                self.close_connection = True
                return
            if reply.drop:
                self.close_connection = True
                return
            payload = reply.render(request)
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        finally:
            owner._leave()


class WireServer:
    """A programmable OpenAI-compatible HTTP server on 127.0.0.1 (free port).

    Attributes:
        handler: optional function deciding replies when none is queued;
            returns a :class:`Reply`, a content string or dict, or ``None``
            for the default reply.
        models: model ids listed by ``GET /v1/models``.
    """

    def __init__(self) -> None:
        self.handler: Handler | None = None
        self.models: list[str] = ["test-model"]
        self._queue: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._errors: list[str] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._in_flight = 0
        self._max_in_flight = 0
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------- lifecycle

    def start(self) -> WireServer:
        """Start serving in a background thread; returns ``self``."""
        self._httpd = _Server(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="openai-wire-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut open connections and wait for handler threads."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        with httpd.connections_lock:
            open_connections = list(httpd.connections)
        for conn in open_connections:
            # Wakes handler threads blocked reading the next keep-alive request.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> WireServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------- programming

    @property
    def port(self) -> int:
        """The port the server listens on."""
        if self._httpd is None:
            raise RuntimeError("the server is not running")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what clients take as ``base_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    url = base_url

    def reply(self, content: str | Mapping[str, Any] | list[Any] | None = "ok", **kw: Any) -> Reply:
        """Queue one reply (see :class:`Reply` for the options) and return it."""
        reply = Reply(content=content, **kw)
        with self._lock:
            self._queue.append(reply)
        return reply

    def replies(self, *replies: Reply | str) -> None:
        """Queue several replies (strings are contents)."""
        with self._lock:
            self._queue.extend(r if isinstance(r, Reply) else Reply(content=r) for r in replies)

    def reset(self) -> None:
        """Forget queued replies, recorded requests, the handler and the counters."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self._errors.clear()
            self._max_in_flight = self._in_flight
        self.handler = None

    @property
    def pending(self) -> int:
        """Queued replies not yet sent."""
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """The ``/v1/chat/completions`` requests received so far."""
        return [r for r in self.requests if r.path.rstrip("/").endswith("/chat/completions")]

    @property
    def last(self) -> RecordedRequest:
        """The most recent request."""
        with self._lock:
            if not self._requests:
                raise AssertionError("the server has received no request")
            return self._requests[-1]

    @property
    def max_in_flight(self) -> int:
        """The most requests that were being handled at the same moment."""
        with self._lock:
            return self._max_in_flight

    @property
    def errors(self) -> list[str]:
        """Tracebacks of exceptions raised by :attr:`handler` (answered with HTTP 500)."""
        with self._lock:
            return list(self._errors)

    # ------------------------------------------------------ internals

    def _enter(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _decide(self, request: RecordedRequest) -> Reply:
        with self._lock:
            queued = self._queue.popleft() if self._queue else None
        if queued is not None:
            return queued
        handler = self.handler
        if handler is not None:
            try:
                result = handler(request)
            except Exception:
                text = traceback.format_exc()
                with self._lock:
                    self._errors.append(text)
                return Reply(status=500, error=f"test handler raised: {text.splitlines()[-1]}")
            if isinstance(result, Reply):
                return result
            if result is not None:
                return Reply(content=result)
        return default_handler(request, self.models)
