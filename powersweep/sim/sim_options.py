"""What the simulated rig is asked: its clock, its noise seed, its server and the faults it plants.

The sweep never reads these (it only knows ``--simulate``'s profile, to skip the root check): the
composition root (:mod:`powersweep.cli.rigs`) builds the rig from them.

The reasoning: docs/simulated-rig.md, "powersweep.sim.sim_options".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from powersweep.errors import UsageError
from powersweep.sim.world import parse_world


class SimServerFlavour(StrEnum):
    """The engine whose quirks the simulated server imitates."""

    LLAMACPP = "llamacpp"
    VLLM = "vllm"
    SGLANG = "sglang"
    OLLAMA = "ollama"
    PLAIN = "plain"


SIM_SERVER_FLAVOURS = tuple(f.value for f in SimServerFlavour)
MAX_TIME_SCALE = 1000.0
# A clock slower than this many run seconds per wall second is nobody's intent (a 21-cap sweep
# would take weeks), scaled or paced alike: refused before anything starts, where a slower one
# would hang in the server's discovery before the plan's own time bound is reached (issue 46).
MIN_TIME_SCALE = 0.01
MAX_PACE_RUN_S_PER_S = 1_000_000.0


@dataclass(frozen=True)
class SimOptions:
    """The simulated rig's settings (each a ``--sim-*`` flag, ``--time-scale`` or ``--seed``).

    Attributes:
        time_scale: Scaled real time, this many run seconds per wall second (None: virtual time).
        pace: Virtual time at most this many run seconds per wall second (None: unpaced).
        seed: Noise seed (sensor, per-token jitter, client overhead, prompts).
        server: The simulated server's flavour.
        state: File where the simulated cards' settings persist (None: in memory).
        rejects_below_w: Cards refuse caps under this (hidden).
        http_error: Every chat request answered with this status (hidden).
        slots: Requests the server processes at once (hidden; llama.cpp's ``-np``).
        context: The server's context, tokens (hidden).
        hide_num_ctx: Ollama without ``num_ctx`` in ``/api/show`` (hidden).
        reasoning_tokens: The first this-many tokens of an answer are reasoning.
        node: The node name that seeds a fleet card's spread.
        mem_locks_refused: Cards refuse memory locks (hidden).
        sm_lock_ignored_below_mhz: SM locks under this are silently ignored (hidden).
        tokens_per_chunk: Tokens packed into one stream event (hidden).
        ignore_max_tokens: The server streams past ``max_tokens`` (hidden).
        serving_gpus: The cards the model is loaded on (hidden; None: all).
        fault: A planted server fault (hidden; :mod:`powersweep.sim.faults`).
        vf_reset_beyond_mhz: A card under load resets when its SM clock offset goes more than
            this past its stable margin, MHz (hidden; 0: at any instability; as
            :data:`powersweep.sim.vf_stability.DEFAULT_RESET_BEYOND_MHZ`).
        world: The world's noise models on, ``NAME=PARAM`` each (:mod:`powersweep.sim.world`;
            empty: the simulator's own noise only).
    """

    time_scale: float | None = None
    pace: float | None = None
    seed: int = 0
    server: str = SimServerFlavour.LLAMACPP.value
    state: Path | None = None
    rejects_below_w: float | None = None
    http_error: int | None = None
    slots: int | None = None
    context: int | None = None
    hide_num_ctx: bool = False
    reasoning_tokens: int = 0
    node: str | None = None
    mem_locks_refused: bool = False
    sm_lock_ignored_below_mhz: float | None = None
    tokens_per_chunk: int = 1
    ignore_max_tokens: bool = False
    serving_gpus: tuple[int, ...] | None = None
    fault: str | None = None
    vf_reset_beyond_mhz: float = 50.0
    world: tuple[str, ...] = ()

    def recorded(self) -> dict[str, Any]:
        """The settings as ``run.json`` records them (its ``options``, under the flag names)."""
        out = {_RECORDED.get(f.name, f"sim_{f.name}"): getattr(self, f.name) for f in _FIELDS}
        out["sim_state"] = str(self.state) if self.state is not None else None
        out["sim_world"] = list(self.world)
        return out

    @classmethod
    def from_recorded(cls, recorded: Mapping[str, Any]) -> SimOptions:
        """The settings a run recorded (keys it lacks keep their defaults)."""
        kwargs: dict[str, Any] = {}
        for f in _FIELDS:
            key = _RECORDED.get(f.name, f"sim_{f.name}")
            if recorded.get(key) is not None:
                kwargs[f.name] = recorded[key]
        if kwargs.get("state") is not None:
            kwargs["state"] = Path(kwargs["state"])
        if kwargs.get("serving_gpus") is not None:
            kwargs["serving_gpus"] = tuple(kwargs["serving_gpus"])
        if kwargs.get("world") is not None:
            kwargs["world"] = tuple(kwargs["world"])
        return cls(**kwargs)

    def validate(self, url: str | None) -> None:
        """Reject settings that cannot work, before anything is touched.

        Args:
            url: ``--url`` (a real server with a simulated GPU), or None.

        Raises:
            UsageError: One line naming the bad option.
        """
        if self.server not in SIM_SERVER_FLAVOURS:
            raise UsageError(
                f"--sim-server must be one of {', '.join(SIM_SERVER_FLAVOURS)}, not {self.server!r}"
            )
        _check_range("--time-scale", self.time_scale, MAX_TIME_SCALE, MIN_TIME_SCALE)
        _check_range("--sim-pace", self.pace, MAX_PACE_RUN_S_PER_S, MIN_TIME_SCALE)
        if self.rejects_below_w is not None and not (
            math.isfinite(self.rejects_below_w) and self.rejects_below_w > 0
        ):
            raise UsageError("--sim-rejects-below takes a positive number of watts")
        if self.slots is not None and not 1 <= self.slots <= 4096:
            raise UsageError(
                "--sim-slots must be at least 1"
                if self.slots < 1
                else "--sim-slots must be at most 4096"
            )
        if self.context is not None and not 256 <= self.context <= 10_000_000:
            raise UsageError(
                "--sim-context must be at least 256 tokens"
                if self.context < 256
                else "--sim-context must be at most 10000000 tokens"
            )
        if self.tokens_per_chunk < 1:
            raise UsageError("--sim-tokens-per-chunk must be at least 1")
        if self.reasoning_tokens < 0:
            raise UsageError("--sim-reasoning-tokens must be 0 or more")
        if self.reasoning_tokens > 100_000:
            raise UsageError(
                "--sim-reasoning-tokens must be 0 or more and at most 100000, "
                f"got {self.reasoning_tokens}"
            )
        if self.http_error is not None and not 400 <= self.http_error <= 599:
            raise UsageError("--sim-http-error takes an HTTP error status (400-599)")
        if not (math.isfinite(self.vf_reset_beyond_mhz) and self.vf_reset_beyond_mhz >= 0):
            raise UsageError("--sim-vf-reset-beyond-mhz takes 0 or more MHz")
        parse_world(self.world)
        self._validate_clock(url)

    def _validate_clock(self, url: str | None) -> None:
        if self.pace is not None and (self.time_scale is not None or url):
            raise UsageError(
                "--sim-pace paces the simulated rig's virtual time: not with --time-scale "
                "(scaled real time) or --url (a real server, real time)"
            )
        if url and self.time_scale is not None and self.time_scale != 1:
            raise UsageError(
                "--time-scale needs the simulated server: with --url a real server answers "
                "in real time (drop --time-scale or --url)"
            )
        if url and self.http_error is not None:
            raise UsageError("--sim-http-error needs the simulated server: drop --url")
        if url and self.fault is not None:
            raise UsageError("--sim-fault needs the simulated server: drop --url")
        if url and self.world:
            raise UsageError("--sim-world models a simulated card and server together: drop --url")


_FIELDS = dataclasses.fields(SimOptions)
# The command-line flag of each setting.
FLAGS = {
    "time_scale": "--time-scale",
    "pace": "--sim-pace",
    "seed": "--seed",
    "server": "--sim-server",
    "state": "--sim-state",
    "rejects_below_w": "--sim-rejects-below",
    "http_error": "--sim-http-error",
    "slots": "--sim-slots",
    "context": "--sim-context",
    "hide_num_ctx": "--sim-hide-num-ctx",
    "reasoning_tokens": "--sim-reasoning-tokens",
    "node": "--sim-node",
    "mem_locks_refused": "--sim-mem-locks-refused",
    "sm_lock_ignored_below_mhz": "--sim-sm-lock-ignored-below",
    "tokens_per_chunk": "--sim-tokens-per-chunk",
    "ignore_max_tokens": "--sim-ignore-max-tokens",
    "serving_gpus": "--sim-serving-gpus",
    "fault": "--sim-fault",
    "vf_reset_beyond_mhz": "--sim-vf-reset-beyond-mhz",
    "world": "--sim-world",
}
# run.json's names for the settings whose flag has no ``--sim-`` prefix
_RECORDED = {"time_scale": "time_scale", "seed": "seed"}


def _check_range(flag: str, value: float | None, high: float, low: float = 0.0) -> None:
    if value is not None and not (math.isfinite(value) and low < value <= high):
        what = f"more than {low:g}" if low > 0 else "more than 0"
        raise UsageError(f"{flag} must be {what} and at most {high:.0f}, got {value:g}")


def refuse_without_simulate(sim: SimOptions) -> None:
    """Without ``--simulate``, any simulation setting given is a mistake.

    Raises:
        UsageError: Names the first one given.
    """
    default = SimOptions()
    given = [FLAGS[f.name] for f in _FIELDS if getattr(sim, f.name) != getattr(default, f.name)]
    if not given:
        return
    if given[0] in ("--time-scale", "--sim-pace", "--seed", "--sim-state"):
        raise UsageError(f"{given[0]} works only with --simulate")
    raise UsageError("--sim-* options work only with --simulate")
