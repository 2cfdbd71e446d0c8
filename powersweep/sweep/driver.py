"""The sweep driver: set each cap, settle, sample while the load runs, write, restore.

Whatever happens (an error, SIGINT, SIGTERM, SIGHUP), every GPU that was touched gets its
*original* limit back — the user's own setting, not the default TDP — unless ``--no-reset``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from powersweep.clock import Clock
from powersweep.errors import PowersweepError
from powersweep.sweep.gpu import Gpu
from powersweep.sweep.loads import ChatApi, LoadRun, decode_single, warmup
from powersweep.sweep.measure import cap_row
from powersweep.sweep.outputs import RunWriter, utc_now_iso
from powersweep.sweep.sampler import Sampler

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SweepInterrupted(Exception):
    """A signal asked the sweep to stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class SweepPlan:
    """What to measure and how.

    Attributes:
        load_mode: ``decode-single`` (other modes arrive with their loads).
        caps_w: Caps to measure, ascending; measured from the highest down.
        target_cap_s: Run seconds each prompt must cover per cap.
        settle_s: Run seconds to wait after setting a cap before measuring.
        sample_interval_s: Sampler interval, run seconds.
        warmup_requests: Warm-up requests per prompt at the highest cap.
        no_reset: Leave the last cap in force instead of restoring.
        max_failed_caps: Stop after this many consecutive failed caps.
    """

    load_mode: str
    caps_w: tuple[float, ...]
    target_cap_s: float = 10.0
    settle_s: float = 3.0
    sample_interval_s: float = 0.5
    warmup_requests: int = 3
    no_reset: bool = False
    max_failed_caps: int = 3


@dataclass(frozen=True)
class CapProgress:
    """Reported to the progress callback after each cap."""

    index: int
    total: int
    cap_w: float
    status: str
    tps: float
    power_w: float
    tps_per_w: float


@dataclass(frozen=True)
class SweepOutcome:
    """How a sweep ended.

    Attributes:
        status: ``complete``, ``interrupted`` or ``failed``.
        error: One-line reason when not complete.
        signum: The signal that interrupted it, if any.
        caps_done: Caps that finished (any status).
        restored: What was put back.
    """

    status: str
    error: str | None
    signum: int | None
    caps_done: tuple[float, ...]
    restored: tuple[dict[str, Any], ...] = field(default_factory=tuple)


LoadFn = Callable[[ChatApi, Clock, Sampler, float, float], Awaitable[LoadRun]]
LOADS: dict[str, LoadFn] = {"decode-single": decode_single}


class Sweep:
    """One sweep over a GPU set.

    Args:
        plan: What to measure.
        gpus: The GPU set (every cap is set on each).
        clock: Run clock.
        client: The server client (one per sweep).
        writer: The run directory.
        run_meta: ``run.json`` content known before the sweep; status fields are added.
        progress: Called after each cap.
        warn: Where warnings go (one line each).
    """

    def __init__(
        self,
        plan: SweepPlan,
        gpus: Sequence[Gpu],
        clock: Clock,
        client: ChatApi,
        writer: RunWriter,
        run_meta: dict[str, Any],
        *,
        progress: Callable[[CapProgress], None] | None = None,
        warn: Callable[[str], None] = lambda _m: None,
    ) -> None:
        if plan.load_mode not in LOADS:
            raise PowersweepError(f"load mode {plan.load_mode!r} is not supported yet", 2)
        self.plan = plan
        self.gpus = list(gpus)
        self.clock = clock
        self.client = client
        self.writer = writer
        self.meta = dict(run_meta)
        self.progress = progress
        self.warn = warn
        self.sampler = Sampler(self.gpus, clock, plan.sample_interval_s)
        self._original = {g.index: g.envelope().current_w for g in self.gpus}
        self._touched: set[int] = set()
        self._caps_done: list[float] = []
        self._signum: int | None = None

    # --- public -------------------------------------------------------------------------------

    def run(self) -> SweepOutcome:
        """Run the sweep to the end, an error or a signal; always restore and record."""
        status, error = "complete", None
        self.meta.update(status="running", started_at=utc_now_iso(), caps_done=[], restored=[])
        for g in self.meta.get("gpus", []):
            g["original_limit_w"] = self._original.get(g.get("index"), g.get("original_limit_w"))
        self.writer.write_run_json(self.meta)
        try:
            with _signals_raise():
                self.sampler.start()
                asyncio.run(self._main())
        except SweepInterrupted as exc:
            status, error, self._signum = "interrupted", f"interrupted by {exc}", exc.signum
        except (KeyboardInterrupt, asyncio.CancelledError):
            status = "interrupted"
            self._signum = self._signum or signal.SIGINT
            error = f"interrupted by {signal.Signals(self._signum).name}"
        except PowersweepError as exc:
            status, error = "failed", str(exc)
        except Exception as exc:  # the run must still restore and record; the CLI reports it
            status, error = "failed", f"internal error: {type(exc).__name__}: {exc}"
        finally:
            with _signals_ignored():
                self.sampler.stop()
                self._flush_samples()
                restored = self._restore()
                self.meta.update(
                    status=status,
                    error=error,
                    ended_at=utc_now_iso(),
                    caps_done=list(self._caps_done),
                    restored=list(restored),
                )
                self.writer.write_run_json(self.meta)
        return SweepOutcome(status, error, self._signum, tuple(self._caps_done), tuple(restored))

    # --- internals ----------------------------------------------------------------------------

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_signal(signum: int) -> None:
            self._signum = signum
            task.cancel()

        for sig in HANDLED_SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            await self._measure_all()
        except asyncio.CancelledError:
            if self._signum is not None:
                raise SweepInterrupted(self._signum) from None
            raise
        finally:
            for sig in HANDLED_SIGNALS:
                loop.remove_signal_handler(sig)
            aclose = getattr(self.client, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    async def _measure_all(self) -> None:
        plan = self.plan
        order = sorted(plan.caps_w, reverse=True)
        load = LOADS[plan.load_mode]
        top = order[0]
        if plan.warmup_requests > 0 and self._set_cap(top) is None:
            results = await warmup(self.client, self.sampler, top, plan.warmup_requests)
            self.writer.append_requests(top, results)
            if not any(r.ok for r in results):
                first = next((r.error for r in results if r.error), "no request completed")
                raise PowersweepError(f"the server failed every warm-up request: {first}")
        failed_in_a_row = 0
        for i, cap in enumerate(order):
            rejection = self._set_cap(cap)
            if rejection is not None:
                self.warn(f"cap {cap:g} W rejected: {rejection}")
                row = cap_row(
                    cap_w=cap,
                    load_mode=plan.load_mode,
                    rows=[],
                    requests=[],
                    n_gpus=len(self.gpus),
                    settle_s=0.0,
                    window_s=0.0,
                    status="rejected",
                    error=rejection,
                )
                self._finish_cap(i, len(order), row, [], LoadRun())
                continue
            self.sampler.label(cap, "settle")
            await self.clock.asleep(plan.settle_s)
            run = await load(self.client, self.clock, self.sampler, cap, plan.target_cap_s)
            self.sampler.label(cap, "settle")
            rows = self.sampler.drain()
            row = cap_row(
                cap_w=cap,
                load_mode=plan.load_mode,
                rows=rows,
                requests=run.requests,
                n_gpus=len(self.gpus),
                settle_s=plan.settle_s,
                window_s=run.window_s,
            )
            self._finish_cap(i, len(order), row, rows, run)
            failed_in_a_row = failed_in_a_row + 1 if row["status"] == "failed" else 0
            if failed_in_a_row >= plan.max_failed_caps:
                raise PowersweepError(
                    f"{failed_in_a_row} caps in a row failed (last: {row['error']}); "
                    "stopping — is the server still up?"
                )

    def _set_cap(self, cap: float) -> str | None:
        """Set the cap on every GPU; the reason if any card did not take it."""
        problems = []
        for g in self.gpus:
            self._touched.add(g.index)
            result = g.set_power_limit(cap)
            if not result.accepted:
                problems.append(f"GPU {g.index}: {result.message or 'not applied'}")
        return "; ".join(problems) or None

    def _finish_cap(
        self, i: int, total: int, row: dict[str, Any], rows: Sequence[Any], run: LoadRun
    ) -> None:
        self.writer.append_samples(rows)
        self.writer.append_requests(row["cap_w"], run.requests)
        self.writer.append_cap(row)
        self._caps_done.append(row["cap_w"])
        self.meta["caps_done"] = list(self._caps_done)
        self.writer.write_run_json(self.meta)
        if self.progress:
            tps = row["prefill_tps"] if self.plan.load_mode == "prefill-heavy" else row["narr_tps"]
            self.progress(
                CapProgress(
                    i + 1,
                    total,
                    row["cap_w"],
                    row["status"],
                    tps,
                    row["power_w"],
                    row["tps_per_w"],
                )
            )

    def _flush_samples(self) -> None:
        rows = self.sampler.drain()
        if rows:
            with contextlib.suppress(PowersweepError):
                self.writer.append_samples(rows)

    def _restore(self) -> list[dict[str, Any]]:
        if self.plan.no_reset:
            return []
        restored = []
        for g in self.gpus:
            if g.index not in self._touched:
                continue
            limit = self._original[g.index]
            try:
                result = g.set_power_limit(limit)
                ok, message = result.accepted, result.message
            except Exception as exc:  # keep restoring the other cards
                ok, message = False, str(exc)
            if not ok:
                self.warn(
                    f"could not restore GPU {g.index} to {limit:g} W: {message}; "
                    f"run: sudo nvidia-smi -i {g.index} -pl {limit:g}"
                )
            restored.append({"gpu_index": g.index, "limit_w": limit, "ok": ok, "message": message})
        return restored


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Outside the event loop, turn SIGTERM/SIGHUP into an exception like SIGINT's."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise SweepInterrupted(signum)

    previous = {s: signal.signal(s, handler) for s in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """While restoring, a second Ctrl-C must not leave a card at a sweep cap."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
