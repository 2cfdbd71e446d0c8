"""A real OpenAI-compatible HTTP server whose token rates come from a :class:`SimEngine`.

On a virtual clock (the simulated rig's default) it holds a port on 127.0.0.1 (so its URL and the
local-server detection behave as for a real server) and serves the client's in-memory
connections (:mod:`powersweep.sim.memory_net`) with uvicorn's own HTTP protocol, on the sweep's
event loop.

The reasoning: docs/simulated-rig.md, "powersweep.sim.server".
"""

from __future__ import annotations

import asyncio
import math
import random
import socket
import threading
import time
from collections.abc import Callable, Sequence

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from powersweep.sim import faults
from powersweep.sim.engine import SimEngine
from powersweep.sim.faults import ServerFault
from powersweep.sim.memory_net import MemoryNetwork, uvicorn_protocol_factory
from powersweep.sim.server_chunks import (
    ChunkFormat,
    Plan,
    WatchedResponse,
    count_prompt_tokens,
    greedy_key,
    is_greedy,
    message_text,
)
from powersweep.sim.server_meta import MetaRoutes, error_response, json_or_none
from powersweep.sim.server_pacing import Pacing
from powersweep.sim.server_requests import over_context, request_limit
from powersweep.sim.server_streaming import GPU_LOST_MESSAGE, ServerStreaming
from powersweep.sim.sim_options import SIM_SERVER_FLAVOURS
from powersweep.sim.world import World

FLAVOURS = SIM_SERVER_FLAVOURS

# Per-token jitter: a token leaves this share of its step after its due time on average
# (exponential), never more than the cap; a llama.cpp or vLLM stream's inter-token gaps vary by a
# few percent on a steady card.
TOKEN_JITTER_FRACTION = 0.03
TOKEN_JITTER_MAX_FRACTION = 0.5
# The chunks' "created" stamp on virtual time (no wall clock in a simulated run's bytes).
_VIRTUAL_EPOCH = 1_767_225_600


class SimServer(ServerStreaming):
    """An OpenAI-compatible server paced by a :class:`SimEngine`.

    Args:
        engine: Token rates and the run clock.
        flavour: One of :data:`FLAVOURS`.
        model: Model id served.
        reasoning_tokens: The first this-many generated tokens are reasoning (unless the request
            turns thinking off through ``chat_template_kwargs`` on a flavour that honours it).
        seed: Seed of the generated text.
        fail_after_tokens: Inject an in-stream error event after this many tokens.
        http_error: Answer every chat request with this HTTP status.
        total_slots: Requests processed at once (llama.cpp ``-np``); None: 4 for ``llamacpp``,
            unlimited otherwise.
        rejected_keys: Request keys answered with 422; None: ``chat_template_kwargs`` for
            ``plain``, nothing otherwise.
        hide_num_ctx: ``ollama``: leave ``num_ctx`` out of ``/api/show`` (no Modelfile setting),
            so clients see only the model's training context.
        tokens_per_chunk: Tokens packed into one stream event after the first (vLLM and others
            send several under load); counting events as tokens then reads low by this factor.
        ignore_max_tokens: Generate more tokens than ``max_tokens`` asks for (as a server that
            ignores the limit does).
        fault: A misbehaviour to inject (:mod:`powersweep.sim.faults`).
        current_cap_w: The card's cap now (for a fault limited to one cap).
        network: Where a virtual-time server takes its connections (required when the
            engine's clock runs on its loop; ignored otherwise).
        token_jitter_fraction: Mean per-token delay after its due time, share of its step.
        world: The world's noise models on (None: none); the server paces its work by those
            that stretch it (:mod:`powersweep.sim.server_pacing`).
    """

    def __init__(
        self,
        engine: SimEngine,
        *,
        flavour: str = "llamacpp",
        model: str = "sim-model",
        reasoning_tokens: int = 0,
        seed: int = 0,
        fail_after_tokens: int | None = None,
        http_error: int | None = None,
        total_slots: int | None = None,
        rejected_keys: Sequence[str] | None = None,
        hide_num_ctx: bool = False,
        tokens_per_chunk: int = 1,
        ignore_max_tokens: bool = False,
        fault: ServerFault | None = None,
        current_cap_w: Callable[[], float] | None = None,
        network: MemoryNetwork | None = None,
        token_jitter_fraction: float = TOKEN_JITTER_FRACTION,
        world: World | None = None,
    ) -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"unknown flavour {flavour!r}; expected one of {FLAVOURS}")
        self.engine = engine
        self.flavour = flavour
        self.model = model
        self.reasoning_tokens = max(0, reasoning_tokens)
        self.seed = seed
        self.fail_after_tokens = fail_after_tokens
        self.http_error = http_error
        self.total_slots = total_slots if total_slots else (4 if flavour == "llamacpp" else None)
        if rejected_keys is None:
            rejected_keys = ("chat_template_kwargs",) if flavour == "plain" else ()
        self.rejected_keys = tuple(rejected_keys)
        self.hide_num_ctx = hide_num_ctx
        self.tokens_per_chunk = max(1, tokens_per_chunk)
        self.ignore_max_tokens = ignore_max_tokens
        self.fault = fault
        self._current_cap_w = current_cap_w
        self._fault_spent = False
        self._visit_over = False
        self._busy_left = faults.BUSY_ANSWERS
        self._resets_met = 0
        if fault is not None and fault.kind == "reset":
            faults.quiet_resets()
        # a whole-server pause (fault ``pause``): run-time span in which nothing advances
        self._pause: tuple[float, float] | None = None
        self.requests_processing = 0
        self.requests_deferred = 0
        self.requests_total = 0
        self.tokens_generated = 0
        self._slots: asyncio.Semaphore | None = None
        self._slots_loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self._url = ""
        self._error: BaseException | None = None
        self._network = network
        self._listening: socket.socket | None = None
        self.token_jitter_fraction = max(0.0, token_jitter_fraction)
        self.pacing = Pacing(world) if world is not None and world.paces_server() else None
        self._virtual = engine.clock.runs_on_loop
        self.created = _VIRTUAL_EPOCH if self._virtual else int(time.time())
        # the bodies it writes (a test may count what goes out through it)
        self.chunks = ChunkFormat(flavour, model, self.created, seed)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> str:
        """Start serving and wait until ready.

        Returns:
            The base URL, ``http://127.0.0.1:PORT``.
        """
        if self._thread is not None or self._listening is not None:
            return self._url
        # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose proto
        # says TCP, and without it Nagle + delayed ACKs stall kept-alive streams for ~40 ms.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        if self._virtual:
            return self._listen_in_memory(sock, port)
        config = uvicorn.Config(
            self.app(),
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        server = uvicorn.Server(config)
        self._server = server

        def run() -> None:
            try:
                asyncio.run(server.serve(sockets=[sock]))
            except BaseException as exc:  # reported by start(); the thread must not die silently
                self._error = exc
            finally:
                sock.close()

        self._thread = threading.Thread(target=run, name=f"sim-server-{port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"simulated server did not start: {self._error!r}")
            time.sleep(0.01)
        self._url = f"http://127.0.0.1:{port}"
        return self._url

    def _listen_in_memory(self, sock: socket.socket, port: int) -> str:
        """Hold the port (never accepted on) and serve the in-memory network's connections."""
        if self._network is None:
            sock.close()
            raise RuntimeError("a simulated server on virtual time needs its in-memory network")
        sock.listen()
        self._listening = sock
        self._network.listen("127.0.0.1", port, uvicorn_protocol_factory(self.app()))
        self._url = f"http://127.0.0.1:{port}"
        return self._url

    @property
    def url(self) -> str:
        """Base URL while running, else empty."""
        return self._url

    def stop(self) -> None:
        """Stop serving (idempotent); open streams are cut after a second."""
        if self._listening is not None:
            port = self._listening.getsockname()[1]
            if self._network is not None:
                self._network.unlisten("127.0.0.1", port)
            self._listening.close()
            self._listening = None
        server, thread = self._server, self._thread
        if server is not None:
            server.should_exit = True
        if thread is not None:
            thread.join(timeout=15)
        self._server = None
        self._thread = None
        self._url = ""

    def __enter__(self) -> SimServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the app -----------------------------------------------------------------------------

    def app(self) -> Starlette:
        """The ASGI app (usable without :meth:`start`, e.g. with an ASGI test transport)."""
        routes = [Route("/v1/chat/completions", self._chat, methods=["POST"])]
        return Starlette(routes=routes + MetaRoutes(self).routes())

    # -- chat --------------------------------------------------------------------------------

    async def _chat(self, request: Request) -> Response:
        arrived_s = self.engine.clock.now()
        if self.http_error is not None:
            return error_response(
                self.http_error, f"simulated HTTP {self.http_error}", "server_error"
            )
        fault = self._fault_now()
        if fault == "reset" and self.fault is not None and not self.fault.once:
            self._resets_met += 1
            fault = "reset" if self._resets_met % faults.RESET_EVERY == 0 else None
        if fault == "pause" and self._pause is None:
            start = arrived_s + faults.PAUSE_AFTER_S
            self._pause = (start, start + faults.PAUSE_S)
        if fault == "busy" and self._busy_left > 0:
            self._busy_left -= 1
            response = error_response(503, "Loading model", "unavailable_error")
            # one run second, told in wall seconds as a client waits them
            response.headers["Retry-After"] = f"{1.0 / self.engine.clock.scale:.4g}"
            return response
        body = await json_or_none(request)
        if not isinstance(body, dict):
            return error_response(400, "request body is not a JSON object", "invalid_request_error")
        refused = [k for k in self.rejected_keys if k in body]
        if refused:
            detail = [
                {
                    "type": "extra_forbidden",
                    "loc": ["body", k],
                    "msg": "Extra inputs are not permitted",
                }
                for k in refused
            ]
            return JSONResponse({"detail": detail}, status_code=422)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return error_response(
                400, "'messages' must be a non-empty list", "invalid_request_error"
            )
        prompt_tokens = sum(count_prompt_tokens(message_text(m)) for m in messages)
        slow_factor = 1.0
        if fault == "slow-code" and any("Python" in message_text(m) for m in messages):
            slow_factor = faults.SLOW_CODE_FACTOR
        limit = request_limit(self.flavour, body, ignore_max_tokens=self.ignore_max_tokens)
        if limit is None:
            return error_response(
                400, "max_tokens must be a positive integer", "invalid_request_error"
            )
        ctx = self.engine.context_tokens
        over = over_context(self.flavour, prompt_tokens, limit, ctx)
        if over is not None:
            return over
        if self.flavour == "ollama":
            # Ollama keeps the tail of an over-long prompt and says nothing.
            prompt_tokens = min(prompt_tokens, ctx)
        kwargs = body.get("chat_template_kwargs")
        thinking_off = (
            self.flavour != "ollama"
            and isinstance(kwargs, dict)
            and kwargs.get("enable_thinking") is False
        )
        options = body.get("stream_options")
        self.requests_total += 1
        plan = Plan(
            request_no=self.requests_total,
            prompt_tokens=prompt_tokens,
            completion_tokens=faults.ENDLESS_TOKENS if fault == "endless" else limit,
            reasoning_tokens=0 if thinking_off else min(self.reasoning_tokens, limit),
            stream=body.get("stream") is True,
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
            arrived_s=arrived_s,
            fault=fault,
            slow_factor=slow_factor,
            greedy_key=greedy_key(messages, body.get("seed")) if is_greedy(body) else None,
            logprobs=body.get("logprobs") is True,
        )
        if self.engine.off_bus():
            # a serving card is recovering from a reset: nothing runs on it
            if plan.stream:
                return WatchedResponse(self._off_bus_sse(plan), "text/event-stream")
            return error_response(500, GPU_LOST_MESSAGE, "server_error")
        if plan.stream:
            return WatchedResponse(self._sse(plan), "text/event-stream")
        return WatchedResponse(self._whole(plan), "application/json", hold_headers=True)

    def _fault_now(self) -> str | None:
        """The fault the request arriving now meets (None: it is served normally)."""
        f = self.fault
        if f is None or (f.once and self._fault_spent):
            return None
        if f.after_s is not None and self.engine.clock.now() < f.after_s:
            return None
        if f.at_cap_w is not None:
            cap = self._current_cap_w() if self._current_cap_w is not None else math.nan
            if not abs(cap - f.at_cap_w) < 0.5:
                if self._fault_spent:
                    self._visit_over = True  # the card left the cap after its first visit
                return None
            if f.first_visit and self._visit_over:
                return None
        self._fault_spent = True
        return f.kind

    def _jitter(self, request_no: int) -> Callable[[float], float]:
        """A request's per-token delays (run seconds, given the token's step), seeded by the
        server's seed and the request's number."""
        fraction = self.token_jitter_fraction
        if fraction <= 0:
            return lambda _step: 0.0
        rng = random.Random(f"token-jitter:{self.seed}:{request_no}")
        rate = 1.0 / fraction

        def late(step: float) -> float:
            return step * min(TOKEN_JITTER_MAX_FRACTION, rng.expovariate(rate))

        return late
