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
from powersweep.flags import SIMULATION, flag, flagged
from powersweep.sim.vf_stability import DEFAULT_RESET_BEYOND_MHZ
from powersweep.sim.world import parse_world
from powersweep.sweep.options import parse_gpus


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


def _seed(value: int | None) -> int:
    return value or 0


def _serving_gpus(text: str | None) -> tuple[int, ...] | None:
    return parse_gpus(text, "--sim-serving-gpus")


def _world(values: list[str] | None) -> tuple[str, ...]:
    return parse_world(values or ())


@dataclass(frozen=True)
class SimOptions:
    """The simulated rig's settings (each a ``--sim-*`` flag, ``--time-scale`` or ``--seed``;
    each field's meaning is its flag's help and doc; the hidden ones plant faults, see
    :mod:`powersweep.sim.faults`)."""

    time_scale: float | None = flag(
        None,
        "--time-scale",
        metavar="X",
        help="Real time X times faster (default: virtual).",
        doc="Run on scaled real time, this many times faster than the wall (default: virtual "
        "time, as fast as the CPU allows, the same figures on any machine).",
        panel=SIMULATION,
    )
    pace: float | None = flag(
        None,
        "--sim-pace",
        metavar="X",
        help="At most X run seconds per wall second.",
        doc="Virtual time passes at most this many run seconds per wall second (a watchable "
        "run; the figures are those of the unpaced run).",
        panel=SIMULATION,
    )
    seed: int = flag(
        0,
        "--seed",
        metavar="N",
        help="Seed of every noise of the simulated rig.",
        doc="Seed of every noise source of the simulated rig (the same seed, the same run files).",
        panel=SIMULATION,
        takes=int | None,
        given_default=None,  # given or not: --seed works only with --simulate
        parse=_seed,
    )
    server: str = flag(
        SimServerFlavour.LLAMACPP.value,
        "--sim-server",
        help="Simulated server's engine.",
        doc="Simulated server flavour, with its engine's quirks.",
        panel=SIMULATION,
        takes=SimServerFlavour,
        parse=str,
    )
    state: Path | None = flag(
        None,
        "--sim-state",
        metavar="FILE",
        help="File where simulated settings persist.",
        panel=SIMULATION,
    )
    rejects_below_w: float | None = flag(
        None, "--sim-rejects-below", hidden=True, help="Simulation: cards keep caps under W."
    )
    http_error: int | None = flag(
        None, "--sim-http-error", hidden=True, help="Simulation: chat requests get this status."
    )
    slots: int | None = flag(
        None, "--sim-slots", hidden=True, help="Simulation: requests served at once."
    )
    context: int | None = flag(
        None, "--sim-context", hidden=True, help="Simulation: the model's context, tokens."
    )
    hide_num_ctx: bool = flag(
        False, "--sim-hide-num-ctx", hidden=True, help="Simulation (ollama): /api/show no num_ctx."
    )
    reasoning_tokens: int = flag(
        0,
        "--sim-reasoning-tokens",
        hidden=True,
        help="Simulation: reasoning tokens before the answer.",
    )
    node: str | None = flag(
        None,
        "--sim-node",
        metavar="NAME",
        help="Node name seeding a fleet card's spread.",
        doc="Simulation: node name that seeds a fleet card's spread (PROFILE~0.03); "
        "default $POWERSWEEP_SIM_NODE or the host name.",
        panel=SIMULATION,
    )
    mem_locks_refused: bool = flag(
        False, "--sim-mem-locks-refused", hidden=True, help="Simulation: memory locks refused."
    )
    sm_lock_ignored_below_mhz: float | None = flag(
        None,
        "--sim-sm-lock-ignored-below",
        hidden=True,
        help="Simulation: SM locks under MHz silently ignored.",
    )
    tokens_per_chunk: int = flag(
        1,
        "--sim-tokens-per-chunk",
        hidden=True,
        help="Simulation: tokens packed into one stream event.",
    )
    ignore_max_tokens: bool = flag(
        False, "--sim-ignore-max-tokens", hidden=True, help="Simulation: generate past max_tokens."
    )
    serving_gpus: tuple[int, ...] | None = flag(
        None,
        "--sim-serving-gpus",
        hidden=True,
        help="Simulation: the cards the model is loaded on (0,1).",
        takes=str | None,
        parse=_serving_gpus,
    )
    fault: str | None = flag(
        None,
        "--sim-fault",
        hidden=True,
        help="Simulation: the server misbehaves (see sim/faults.py).",
    )
    vf_reset_beyond_mhz: float = flag(
        DEFAULT_RESET_BEYOND_MHZ,
        "--sim-vf-reset-beyond-mhz",
        hidden=True,
        help="Simulation: a card under load resets when its SM clock offset is more than MHz "
        "past its stable margin (0: at any instability).",
    )
    world: tuple[str, ...] = flag(
        (),
        "--sim-world",
        metavar="NAME[=PARAM]",
        help="Add a real-world noise (repeatable).",
        doc="Simulation: give the rig a noise of the real world, NAME[=PARAM], repeatable: "
        "bursty-draw[=DUTY] (0.7), sensor-lag[=STEP_W] (5), ar-jitter[=SD_PCT] (2), "
        "context-slowdown[=PCT_PER_1K_TOKENS] (0.6), hiccups[=PERIOD_S] (6), "
        "drift[=AMPLITUDE_PCT] (3), outlier-window[=FACTOR] (1.36). Off by default; see "
        "docs/world-noise.md.",
        panel=SIMULATION,
        takes=list[str] | None,
        given_default=None,
        parse=_world,
    )

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
FLAGS = {f.name: spec.name for f, spec in flagged(SimOptions)}
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
