"""Is a clock offset stable? The undervolt search's check after each step's windows (issue 36).

A voltage too low for its clock does not slow a card down first: it computes wrong.

The reasoning: docs/undervolt.md, "powersweep.sweep.measurement.stability".
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from powersweep.clock import Clock
from powersweep.errors import GpuError, PowersweepError
from powersweep.runformat import as_float
from powersweep.sweep.gpu import OFFSET_GRID_MHZ, Gpu
from powersweep.sweep.loads.prompts import CODE_PROMPT, NARRATIVE_PROMPT
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.verdict import FaultLog

# The request seed every greedy probe carries (servers that sample despite temperature 0, or
# that seed their own noise, then still answer the same).
GREEDY_SEED = 20261202
# Tokens each decode probe generates: long enough that a corrupted step shows in most answers.
# 256 (issue 45: 128 was one short pass where peers run minutes): a probe is still bounded by
# PROBE_BUDGET_S, 51 s at 5 tokens/s.
DECODE_PROBE_TOKENS = 256
# Tokens the prefill probe generates after its long prompt (the prefill is what it checks).
PREFILL_PROBE_TOKENS = 24
# A probe served from the server's cache is sent again this many times, each with a fresh salt.
CACHED_RETRIES = 1
# What a server's error says when the card failed under it (llama.cpp and PyTorch print CUDA's
# errors, the driver's Xids reach the log): such a failure is the offset's, never retried.
CARD_ERROR_MARKERS = ("cuda", "illegal memory access", "xid", "gpu", "device-side assert")
# How far (nats) a token-identical answer's token logprobs may move from offset 0's: beyond
# this many times the reference's own variation between its two runs, and beyond the floor (a
# deterministic server's variation is 0; the floor keeps printed-float noise from counting).
LOGPROB_NOISE_FACTOR = 4.0
LOGPROB_FLOOR_NATS = 0.02
# What each engine needs to report cached prompt tokens, for the note when none is reported.
_CACHE_REPORT_HINT = {
    "vllm": "; start vLLM with --enable-prompt-tokens-details to have it report them",
    "sglang": "; start SGLang with --enable-cache-report to have it report them",
    "ollama": "; Ollama reports none (and has no per-request switch for its cache)",
}
# The prefill probe's prompt, in the simulator's and BPE tokenizers' ~4 characters per token.
PREFILL_PROBE_TOKENS_IN = 2000
# Run seconds one probe may take before it counts as failed (the check is bounded).
PROBE_BUDGET_S = 120.0
# Share of TPS a step may lose against the reference before noise is asked (at a locked clock
# it should lose none; this keeps a tiny, precisely measured difference from ending a search).
MIN_STRETCH_PCT = 1.0
# The reference's TPS uncertainty assumed where a point states none (one window, few requests).
UNKNOWN_U95_PCT = 3.0
# Run seconds a reset card is given to come back on the bus (a driver recovery after an Xid 79
# takes seconds; one that takes minutes needs a reboot), and how often it is asked.
RECOVERY_MAX_S = 120.0
# How much of a failed measurement's error a step's reasons quote (the row keeps it all).
ERROR_QUOTE_CHARS = 160
RECOVERY_POLL_S = 1.0

# What the driver's Xid codes a check may meet say (others are named by number).
XID_NAMES = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement",
    64: "ECC page retirement failure",
    74: "NVLink error",
    79: "fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP timeout",
    120: "GSP error",
}

_PREFILL_TEXT = (
    "The keeper's log records the weather, the lamp's hours, the oil burned and the ships seen "
    "each night; on the third of December the entry reads that the lamp lit itself an hour "
    "before dusk and signalled three short flashes and one long toward the empty north. "
)


@dataclass(frozen=True)
class Probe:
    """One fixed greedy prompt.

    Attributes:
        kind: ``narr``, ``code`` or ``prefill``.
        prompt: The prompt.
        max_tokens: Tokens it asks for.
    """

    kind: str
    prompt: str
    max_tokens: int


def probes(context_tokens: int | None = None, repeats: int | None = None) -> tuple[Probe, ...]:
    """The fixed greedy prompts: two decode prompts and one long prompt whose answer depends on
    its prefill (shortened to half the server's context where that is smaller, at ~4 characters
    a token; ``repeats``: its paragraph this many times instead, as the server's tokenizer
    sized it)."""
    if repeats is None:
        repeats = max(1, round(_prefill_budget(context_tokens) * 4 / len(_PREFILL_TEXT)))
    long_prompt = _PREFILL_TEXT * max(1, repeats) + "\nIn one sentence: what did the lamp do?"
    return (
        Probe("narr", NARRATIVE_PROMPT, DECODE_PROBE_TOKENS),
        Probe("code", CODE_PROMPT, DECODE_PROBE_TOKENS),
        Probe("prefill", long_prompt, PREFILL_PROBE_TOKENS),
    )


def _prefill_budget(context_tokens: int | None) -> int:
    """Prompt tokens the prefill probe may take: its size, at most half the context."""
    if not context_tokens:
        return PREFILL_PROBE_TOKENS_IN
    return max(64, min(PREFILL_PROBE_TOKENS_IN, context_tokens // 2))


async def fitted_probes(client: Any, context_tokens: int | None) -> tuple[Probe, ...]:
    """The probes with the prefill prompt sized by the server's own tokenizer: a tokenizer far
    from ~4 characters a token would otherwise overrun the context.

    Its tokenize API (``count_tokens``) counts the prompt where the server has one: one count,
    and one more after the paragraph count is scaled. Where it has none, one short greedy
    request's ``usage.prompt_tokens`` gives the characters per token (the chat template counted
    in, so the prompt comes out shorter, never longer). Neither: the estimate stands.
    """
    fixed = probes(context_tokens)
    budget = _prefill_budget(context_tokens)
    repeats = fixed[2].prompt.count(_PREFILL_TEXT)
    count = getattr(client, "count_tokens", None)
    counted = False
    for _ in range(2 if callable(count) else 0):
        tokens = await count(probes(context_tokens, repeats)[2].prompt)  # type: ignore[misc]
        if not isinstance(tokens, int) or tokens <= 0:
            break
        counted = True
        if tokens <= budget:
            return probes(context_tokens, repeats)
        repeats = max(1, int(repeats * budget / tokens))
    if counted:
        return probes(context_tokens, repeats)
    short = await client.greedy(NARRATIVE_PROMPT, max_tokens=1, seed=GREEDY_SEED)
    used = getattr(short, "prompt_tokens", None)
    if isinstance(used, int) and used > 0:
        chars_per_token = len(NARRATIVE_PROMPT) / used
        repeats = min(repeats, max(1, int(budget * chars_per_token / len(_PREFILL_TEXT))))
    return probes(context_tokens, repeats)


class GreedyApi(Protocol):
    """The client call the check needs (``ChatClient.greedy``)."""

    async def greedy(
        self,
        prompt: str,
        *,
        max_tokens: int,
        seed: int,
        deadline_s: float | None = None,
        cache_salt: str | None = None,
        logprobs: bool = False,
    ) -> Any:
        """One greedy answer (``text``, ``completion_tokens``, ``error``, and where known
        ``cached_tokens`` and ``logprobs``); never raises."""
        ...


@dataclass(frozen=True)
class Note:
    """What a check met that leaves the step stable but must reach the user.

    Attributes:
        kind: Its ``run.json`` fault kind ("": a warning only).
        text: What it says.
    """

    kind: str
    text: str


@dataclass(frozen=True)
class ProbeRound:
    """One round of the probes' answers, in probe order.

    Attributes:
        texts: Each answer (its token count and text); None where it failed.
        failed: Why the probes that failed did.
        logprobs: Each answer's token logprobs; None where the server returned none.
        notes: What the round met (a probe served from cache, a count the server lacks).
    """

    texts: tuple[str | None, ...]
    failed: tuple[str, ...]
    logprobs: tuple[tuple[float, ...] | None, ...]
    notes: tuple[Note, ...]


@dataclass(frozen=True)
class Verdict:
    """What a step's check found.

    Attributes:
        checked: Greedy answers compared with the reference.
        differ: How many of them were not token-identical to it.
        problems: Why the step is unstable, one line each (empty: stable).
        reset: A card was found reset (its offset or lock back at the default).
        notes: What the check met that does not make the step unstable.
        retry: Why the failure may be the world's, not the offset's: ``stretch`` (TPS fell at
            the locked clock and nothing else was found), ``server`` (its measurement or probes
            failed on the server's errors, the card and every answer fine); empty: the offset's.
    """

    checked: int
    differ: int
    problems: tuple[str, ...] = ()
    reset: bool = False
    notes: tuple[Note, ...] = ()
    retry: str = ""

    @property
    def stable(self) -> bool:
        """True when nothing was found."""
        return not self.problems

    def columns(self) -> dict[str, Any]:
        """Its ``caps.csv`` columns."""
        return {"answers_checked": self.checked, "answers_differ": self.differ}


class StabilityCheck:
    """The stability check of an undervolt search.

    Args:
        client: Sends the greedy probes.
        gpus: The GPU set (each is read after a step).
        clock: The run clock (the probes' deadlines, the wait for a reset card).
        metric: The ``caps.csv`` column whose TPS must not fall (``narr_tps``, ``prefill_tps``).
        context_tokens: The server's context (the prefill probe fits half of it).
        check_stretch: Judge a step by its TPS against offset 0's (False where the TPS does
            not follow the card: a simulated card beside a real server).
    """

    def __init__(
        self,
        client: GreedyApi,
        gpus: Sequence[Gpu],
        clock: Clock,
        *,
        metric: str = "narr_tps",
        context_tokens: int | None = None,
        check_stretch: bool = True,
    ) -> None:
        self.client = client
        self.check_stretch = check_stretch
        self.gpus = list(gpus)
        self.clock = clock
        self.metric = metric
        self.context_tokens = context_tokens
        self.probes = probes(context_tokens)
        self.reference: tuple[str, ...] | None = None
        self.reference_tps: tuple[float, float] | None = None
        # offset 0's token logprobs per probe, and how far its two runs' differed
        self.reference_logprobs: tuple[tuple[float, ...] | None, ...] = ()
        self.logprob_noise: tuple[float | None, ...] = ()
        # each probe request's salt is new: no request can reuse another's cached blocks, this
        # run's or another's
        self._salt = f"powersweep-{secrets.token_hex(8)}"
        self._sent = 0
        self._untold_said = False
        self._no_logprobs_said = False
        # the driver reports only the Xids that come after a card is registered: now, before
        # the first point is set
        self.xids_readable = [g.xid_events() is not None for g in self.gpus]

    async def answers(self) -> ProbeRound:
        """Each probe's answer, computed by the server: one served from its cache is sent again
        (:data:`CACHED_RETRIES` times, a fresh salt each), and noted if still cached."""
        texts: list[str | None] = []
        failed: list[str] = []
        logprobs: list[tuple[float, ...] | None] = []
        notes: list[Note] = []
        for probe in self.probes:
            answer = await self._ask(probe)
            for _ in range(CACHED_RETRIES):
                if answer.error or not _cached(answer):
                    break
                answer = await self._ask(probe)
            if answer.error:
                failed.append(f"the {probe.kind} probe failed: {answer.error}")
                texts.append(None)
                logprobs.append(None)
                continue
            texts.append(f"{answer.completion_tokens}\0{answer.text}")
            logprobs.append(getattr(answer, "logprobs", None))
            notes += self._cache_notes(probe, answer)
        answered = any(t is not None for t in texts)
        if answered and not self._no_logprobs_said and not any(logprobs):
            self._no_logprobs_said = True
            notes.append(
                Note(
                    "",
                    "the server returns no token logprobs: answers are compared token for "
                    "token only",
                )
            )
        return ProbeRound(tuple(texts), tuple(failed), tuple(logprobs), tuple(notes))

    async def _ask(self, probe: Probe) -> Any:
        """One probe sent with a salt no other request had, asking for its logprobs."""
        self._sent += 1
        return await self.client.greedy(
            probe.prompt,
            max_tokens=probe.max_tokens,
            seed=GREEDY_SEED,
            deadline_s=self.clock.now() + PROBE_BUDGET_S,
            cache_salt=f"{self._salt}-{self._sent}",
            logprobs=True,
        )

    def _cache_notes(self, probe: Probe, answer: Any) -> list[Note]:
        """What an answer's cached-token count says: served from cache (after its retries),
        or, once a run, that the server does not say."""
        cached = _cached(answer)
        if cached:
            return [
                Note(
                    "probe_cached",
                    f"the server served the {probe.kind} probe from its cache ({cached} prompt "
                    f"tokens, {1 + CACHED_RETRIES} times, each with a fresh cache salt): its "
                    "prefill was not checked",
                )
            ]
        if cached is not None or self._untold_said:
            return []
        self._untold_said = True
        info = getattr(self.client, "info", None)
        hint = _CACHE_REPORT_HINT.get(str(getattr(info, "engine", "")), "")
        return [
            Note(
                "cache_untold",
                "the server reports no cached prompt tokens (usage.prompt_tokens_details."
                "cached_tokens, llama.cpp timings.cache_n): whether a probe was served from its "
                "cache cannot be told; the probes ask for none (cache_prompt false, a cache_salt "
                f"of their own){hint}",
            )
        ]

    async def take_reference(self, row: Mapping[str, Any]) -> Verdict:
        """Take the reference at offset 0 (the answers twice) and its TPS.

        Raises:
            PowersweepError: The probes fail, or the server's greedy answers differ between two
                runs at offset 0 (no answer could then show corruption).
        """
        self.probes = await fitted_probes(self.client, self.context_tokens)
        first = await self.answers()
        if first.failed:
            raise PowersweepError(
                f"the stability check's reference at offset 0 failed ({first.failed[0]}): an "
                "undervolt search needs the server's greedy answers"
            )
        xids = self._xids()
        if xids:
            raise PowersweepError(
                f"{'; '.join(xids)} at offset 0 (the card's own curve): a card that reports "
                "errors without an undervolt cannot be searched; check it first"
            )
        second = await self.answers()
        pairs = zip(self.probes, first.texts, second.texts, strict=True)
        differ = [p.kind for p, a, b in pairs if a != b]
        if second.failed or differ:
            why = second.failed[0] if second.failed else f"the {', '.join(differ)} answer(s) differ"
            raise PowersweepError(
                f"the server's greedy answers are not repeatable at offset 0 ({why}): they "
                "cannot show corruption, so the undervolt search stops. Run the server with "
                "deterministic sampling (one slot, no speculative decoding) and try again"
            )
        self.reference = tuple(a or "" for a in first.texts)
        self.reference_logprobs = first.logprobs
        self.logprob_noise = tuple(
            _drift(a, b) for a, b in zip(first.logprobs, second.logprobs, strict=True)
        )
        self.reference_tps = (as_float(row.get(self.metric)), as_float(row.get("tps_u95_pct")))
        return Verdict(2 * len(first.texts), 0, notes=first.notes + second.notes)

    async def check(self, point: SweepPoint, row: Mapping[str, Any], read_errors: int) -> Verdict:
        """Check one step after its windows (``read_errors``: the card reads that failed while
        it was measured). Offset 0 read again (a re-base) is checked the same way, but its TPS
        becomes the reference's: the card's own curve as the world is now."""
        server: list[str] = []
        if row.get("status") not in ("ok", None):
            why = str(row.get("error") or "no reason given")
            why = why if len(why) <= ERROR_QUOTE_CHARS else why[: ERROR_QUOTE_CHARS - 3] + "..."
            server.append(f"its measurement {row.get('status')} ({why})")
        card: list[str] = []
        if read_errors:
            card.append(f"{read_errors} GPU read(s) failed while it was measured")
        xids = self._xids()
        card += xids
        reset = self._card_problems(point, card) or any("Xid 79" in x for x in xids)
        got = await self.answers()
        checked, differ, answers = self._compare(got)
        rebase = not point.sm_offset_mhz and not point.mem_offset_mhz
        # a memory step's TPS is the memory phase's to judge (replays past the margin lower it)
        stretch = "" if rebase or point.mem_offset_mhz is not None else self._stretch(row)
        if rebase and not (server or card or answers):
            self.reference_tps = (as_float(row.get(self.metric)), as_float(row.get("tps_u95_pct")))
        # in the order a reader needs them: the measurement, the card, then the answers
        problems = (*server, *card, *got.failed, *answers, *([stretch] if stretch else []))
        server += got.failed
        retry = ""
        if not (card or answers or reset or _card_errors(server)):
            retry = "server" if server else "stretch" if stretch else ""
        return Verdict(checked, differ, problems, reset, got.notes, retry)

    def _compare(self, got: ProbeRound) -> tuple[int, int, list[str]]:
        """Answers compared with the reference's, those that differ, and why (a token that
        differs, or token logprobs moved beyond the reference's own variation)."""
        checked, differ, problems = 0, 0, []
        if self.reference is None:
            return 0, 0, []
        for i, (probe, text) in enumerate(zip(self.probes, got.texts, strict=True)):
            if text is None:
                continue  # a failed probe is a problem already, not a compared answer
            checked += 1
            if text != self.reference[i]:
                differ += 1
                problems.append(f"the {probe.kind} answer differs from offset 0's")
            elif moved := self._logprobs_moved(i, got.logprobs[i]):
                problems.append(f"the {probe.kind} answer's {moved}")
        return checked, differ, problems

    def _logprobs_moved(self, i: int, logprobs: tuple[float, ...] | None) -> str:
        """How a token-identical answer's logprobs moved beyond the reference's own variation
        ("" where they did not, or either side has none)."""
        if i >= len(self.reference_logprobs):
            return ""
        drift = _drift(self.reference_logprobs[i], logprobs)
        noise = self.logprob_noise[i]
        if drift is None or noise is None:
            return ""
        allowed = max(LOGPROB_FLOOR_NATS, LOGPROB_NOISE_FACTOR * noise)
        if drift <= allowed:
            return ""
        return (
            f"token logprobs moved up to {drift:.3g} nats from offset 0's (its two runs there "
            f"differed by {noise:.3g}; allowed {allowed:.3g}): the card computes differently"
        )

    def _xids(self) -> list[str]:
        """The Xids each card reported since the last call, one line per card (empty: none,
        or the backend cannot read them)."""
        out = []
        for g in self.gpus:
            codes = g.xid_events() or ()
            if codes:
                named = ", ".join(
                    f"Xid {c} ({XID_NAMES[c]})" if c in XID_NAMES else f"Xid {c}" for c in codes
                )
                out.append(f"GPU {g.index} reported {named}")
        return out

    async def wait_back(self) -> float:
        """Wait, bounded, until every card reads again after a reset; the run seconds waited.

        Raises:
            PowersweepError: A card stayed off the bus for :data:`RECOVERY_MAX_S`.
        """
        start = self.clock.now()
        while True:
            lost = []
            for g in self.gpus:
                try:
                    g.sm_clock_offset()
                    sample = g.read_sample()
                except GpuError as exc:
                    lost.append(f"GPU {g.index} ({exc})")
                    continue
                # reads tolerate failure: a card off the bus reads nothing, not an error
                if not (math.isfinite(sample.power_w) or math.isfinite(sample.temp_c)):
                    lost.append(f"GPU {g.index} (nothing can be read from it)")
            waited = self.clock.now() - start
            if not lost:
                return waited
            if waited >= RECOVERY_MAX_S:
                raise PowersweepError(
                    f"{', '.join(lost)} did not come back within {RECOVERY_MAX_S:g} s of a reset: "
                    "the driver could not recover it (a reboot may be needed); run `powersweep "
                    "restore` once it is back"
                )
            await self.clock.asleep(RECOVERY_POLL_S)

    def _card_problems(self, point: SweepPoint, problems: list[str]) -> bool:
        """Each card still holds the point's offset and lock (False: none was found reset)."""
        reset = False
        for g in self.gpus:
            try:
                offset = g.sm_clock_offset()
                locks = g.locked_clocks()
            except GpuError as exc:
                problems.append(f"GPU {g.index} cannot be read ({exc}): it may be off the bus")
                reset = True
                continue
            want = point.sm_offset_mhz
            got = offset.sm_offset_mhz
            # within the driver's rounding to its grid, the offset set still holds
            if want is not None and got is not None and abs(got - want) >= OFFSET_GRID_MHZ:
                problems.append(
                    f"GPU {g.index}'s clock offset reads {got:+g} MHz, not {want:+g}: the card "
                    "was reset (a reset puts the offset back at 0)"
                )
                reset = True
            elif self._mem_reset(g, point.mem_offset_mhz, problems):
                reset = True
            elif locks.known and point.sm_lock_mhz is not None and locks.sm_mhz is None:
                problems.append(f"GPU {g.index}'s SM lock is gone: the card was reset")
                reset = True
        return reset

    @staticmethod
    def _mem_reset(g: Gpu, want: float | None, problems: list[str]) -> bool:
        """A memory offset set and found back at 0 (or another value): the card was reset."""
        if not want:
            return False
        try:
            got = g.mem_clock_offset().sm_offset_mhz
        except GpuError:
            return False  # the SM offset's read already said whether the card answers
        if got is None or abs(got - want) < OFFSET_GRID_MHZ:
            return False
        problems.append(
            f"GPU {g.index}'s memory clock offset reads {got:+g} MHz, not {want:+g}: the card was "
            "reset"
        )
        return True

    def _stretch(self, row: Mapping[str, Any]) -> str:
        """Why the step's TPS shows clock stretching ("" where it does not)."""
        if self.reference_tps is None or not self.check_stretch:
            return ""
        ref, ref_u95 = self.reference_tps
        tps, u95 = as_float(row.get(self.metric)), as_float(row.get("tps_u95_pct"))
        if not (math.isfinite(ref) and math.isfinite(tps) and ref > 0):
            return ""
        drop_pct = 100.0 * (1.0 - tps / ref)
        noise_pct = math.hypot(
            ref_u95 if math.isfinite(ref_u95) else UNKNOWN_U95_PCT,
            u95 if math.isfinite(u95) else UNKNOWN_U95_PCT,
        )
        if drop_pct > max(MIN_STRETCH_PCT, noise_pct):
            return (
                f"TPS {tps:.2f} is {drop_pct:.1f}% below offset 0's {ref:.2f} at the same locked "
                f"clock (noise +-{noise_pct:.1f}%): the clock stretches"
            )
        return ""


async def check_step(
    check: StabilityCheck,
    point: SweepPoint,
    row: dict[str, Any],
    read_errors: int,
    faults: FaultLog,
    warn: Callable[[str], None],
) -> PowersweepError | None:
    """Check a step and mark its row: the reference at offset 0 when none is taken yet, else
    the step against it (``unstable`` with the reasons, the answers' columns, a reset's fault).

    Returns:
        The error that ends the sweep when the reference cannot be taken (its row is marked
        ``failed`` and is still written by the caller), else None.
    """
    if check.reference is None:
        if row["status"] != "ok":
            return None  # the search ends here (the schedule reads the status)
        try:
            verdict = await check.take_reference(row)
        except PowersweepError as exc:
            row.update(status="failed", error=str(exc))
            return exc
    else:
        verdict = await check.check(point, row, read_errors)
    row.update(verdict.columns())
    where = point.label()
    for note in verdict.notes:
        if note.kind:
            faults.add(note.kind, f"{where}: {note.text}")
        warn(f"{where}: {note.text}")
    if verdict.reset:
        faults.add("gpu_reset", f"{where}: {'; '.join(verdict.problems)}")
        try:
            waited = await check.wait_back()
        except PowersweepError as exc:
            row.update(status="unstable", error="; ".join((*verdict.problems, str(exc))))
            return exc
        warn(
            f"{where}: a GPU was reset by this offset; it came back after {waited:.0f} s at "
            "offset 0 and its default clocks and limit (the search ends here)"
        )
    if not verdict.stable:
        why = "; ".join(verdict.problems)
        faults.add("unstable_offset", f"{where}: {why}")
        warn(f"{where} unstable: {why}")
        # not a caps.csv column: what the search may do about it (measure once more)
        row.update(status="unstable", error=why, retry_kind=verdict.retry)
    return None


def _card_errors(failures: Sequence[str]) -> bool:
    """Whether a failure's words say the card failed under the server (a CUDA error)."""
    return any(m in f.lower() for f in failures for m in CARD_ERROR_MARKERS)


def _cached(answer: Any) -> int | None:
    """Prompt tokens an answer says the server took from its cache (None: it does not say)."""
    cached = getattr(answer, "cached_tokens", None)
    return cached if isinstance(cached, int) and not isinstance(cached, bool) else None


def _drift(a: Sequence[float] | None, b: Sequence[float] | None) -> float | None:
    """The largest difference between two answers' token logprobs (None: either has none, or
    they are not of one length, so not of one token sequence)."""
    if not a or not b or len(a) != len(b):
        return None
    return max(abs(x - y) for x, y in zip(a, b, strict=True))
