"""``powersweep apply``: set what a sweep recommended (or a named cap, clock lock, SM or memory
clock offset) on the right GPUs, verify it, and with ``--persist`` install a systemd unit that
sets it again at every boot."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from powersweep.analysis.objectives import OBJECTIVES
from powersweep.cli._boot import BootUnit
from powersweep.cli._common import info, is_root, warn
from powersweep.cli.analyze import MaxItlOpt, MaxTtftOpt
from powersweep.cli.flag_params import shared
from powersweep.cli.help_layout import argument, option
from powersweep.errors import PowersweepError, UsageError
from powersweep.flags import CARD, SAFETY, SIMULATION
from powersweep.sim.sim_options import SimOptions
from powersweep.sweep.options import Backend, CardOptions, SafetyOptions

if TYPE_CHECKING:
    from powersweep.cli.rigs import SettingsRig
    from powersweep.sweep.records.journal import Journal
    from powersweep.sweep.settings.applier import CapChange, CapResult
    from powersweep.sweep.settings.clock_locks import ClockChange, ClockResult
    from powersweep.sweep.settings.clock_offsets import OffsetChange, OffsetResult
    from powersweep.sweep.settings.targets import Target

PERSIST = "Boot persistence"
RECOMMENDATION = "Recommendation"
SETTINGS = "Settings"

# `apply --help`'s last lines
EXAMPLES = """Examples:
  # what would change, then set the run's sweet spot
  sudo powersweep apply powersweep-runs/RUN --dry-run
  sudo powersweep apply powersweep-runs/RUN
  # ... and again at every boot
  sudo powersweep apply powersweep-runs/RUN --persist
  # a named clock lock on GPU 0, then the defaults back
  sudo powersweep apply --sm-clock 1410 --gpus 0
  sudo powersweep apply --reset"""


# Each option of `powersweep apply` (one alias per option keeps the signature short; status
# shares the rig and unit ones).
RunDirArg = Annotated[
    Path | None,
    argument(
        metavar="RUN_DIR",
        help="A run directory: set what it recommends on the GPUs it measured.",
        doc="A run directory: set the cap (for a clock run, the clock locks; for an undervolt "
        "run, the cap, SM lock and SM clock offset) it recommends on the GPUs it measured.",
        show_default=False,
    ),
]


# Which of a run's recommendations to set: an objective's, or ``slo`` (the most efficient point
# that meets the latency targets).
SLO = "slo"
ApplyObjective = StrEnum(  # type: ignore[misc]
    "ApplyObjective", {name: name for name in (*OBJECTIVES, SLO)}
)


ObjectiveOpt = Annotated[
    ApplyObjective | None,
    option(
        help="Which of the run's recommendations (default: its analysis's).",
        doc="Which recommendation of the run (default: the one its analysis made); slo: the "
        "most efficient point whose measured p95 latencies meet --max-ttft-ms/--max-itl-ms.",
        panel=RECOMMENDATION,
    ),
]
EtaOpt = Annotated[
    float,
    option(metavar="0-1", help="cost objective: weight of energy.", panel=RECOMMENDATION),
]
CapOpt = Annotated[
    float | None,
    option(metavar="W", help="Set this power limit per GPU instead of a run's.", panel=SETTINGS),
]
GpusOpt = Annotated[
    str | None,
    option(
        metavar="LIST",
        help="Which GPUs: indices and/or UUIDs, e.g. 0,1 (default: all).",
        doc="Which GPUs: NVML indices and/or UUIDs, e.g. 0,1 (default: all).",
        panel=CARD,
    ),
]
SmClockOpt = Annotated[
    float | None,
    option(
        "--sm-clock",
        metavar="MHZ",
        help="Lock the SM clock at this (snapped to a supported clock).",
        doc="Lock the SM clock at this (snapped to a supported clock), with or without --cap.",
        panel=SETTINGS,
    ),
]
SmClockMinOpt = Annotated[
    float | None,
    option(
        "--sm-clock-min",
        metavar="MHZ",
        help="Bottom of the SM lock (default: the card's lowest clock).",
        doc="Bottom of the SM lock, MHz: an idle card clocks down to it (default: the card's "
        "lowest SM clock, else 210; a run's own when it recorded one).",
        panel=SETTINGS,
    ),
]
MemClockOpt = Annotated[
    float | None,
    option(
        "--mem-clock",
        metavar="MHZ",
        help="Lock the memory clock at this (many GeForce cards refuse).",
        doc="Lock the memory clock at this (snapped to a supported clock; many GeForce cards "
        "refuse).",
        panel=SETTINGS,
    ),
]
SmOffsetOpt = Annotated[
    float | None,
    option(
        "--sm-offset",
        metavar="MHZ",
        help="Set the SM clock offset (an undervolt, with --sm-clock).",
        doc="Set the SM clock offset (an undervolt, with --sm-clock): one an undervolt run "
        "found stable on this card.",
        panel=SETTINGS,
    ),
]
MemOffsetOpt = Annotated[
    float | None,
    option(
        "--mem-offset",
        metavar="MHZ",
        help="Set the memory clock offset, in NVML's unit.",
        doc="Set the memory clock offset, in NVML's unit (twice what Afterburner shows on "
        "GDDR6X/GDDR7): one found stable on this card. Needs no --sm-clock.",
        panel=SETTINGS,
    ),
]
ResetOpt = Annotated[
    bool,
    option(
        "--reset",
        help="Put the default limit back, unlock the clocks, zero the offsets.",
        doc="Put each card's default power limit back, unlock its clocks and put its SM and "
        "memory clock offsets back to 0.",
        panel=SETTINGS,
    ),
]
DryRunOpt = Annotated[
    bool, option("--dry-run", help="Print what would change; change nothing.", panel=SAFETY)
]
StrictOpt = Annotated[
    bool,
    option(
        "--strict",
        help="Refuse a value out of range or a clock not listed (no clamping).",
        doc="Refuse a value outside a card's range, or a clock it does not list (no clamping, "
        "no snapping).",
        panel=SAFETY,
    ),
]
ForceOpt = Annotated[
    bool,
    option(
        "--force",
        help="Apply to a card other than the one measured, or despite a journal.",
        doc="Apply to a card other than the one measured, or while a restore journal exists.",
        panel=SAFETY,
    ),
]
PersistOpt = Annotated[
    bool,
    option(
        "--persist",
        help="Also set the same values at every boot (a systemd unit).",
        doc="Also install and enable powersweep-apply.service, which turns persistence mode "
        "on and sets the same values at boot (with --reset: remove it).",
        panel=PERSIST,
    ),
]
TrustOffsetOpt = Annotated[
    bool,
    option(
        "--trust-offset",
        help="Let --persist set a clock offset at boot (this driver only).",
        doc="Let --persist set an SM or memory clock offset at boot. A driver update moves the "
        "voltage/frequency curve and the memory training, so an offset stable today may not be "
        "after one: the unit records this driver's version and skips the offsets (the cap and "
        "locks still set) at a boot under another driver.",
        panel=PERSIST,
    ),
]
PrintUnitOpt = Annotated[
    bool,
    option(
        "--print-unit",
        help="Print the boot unit instead of installing it; change nothing.",
        doc="Print the boot unit on stdout instead of installing it; change nothing.",
        panel=PERSIST,
    ),
]
UnitDirOpt = Annotated[
    Path | None,
    option(
        metavar="DIR",
        envvar="POWERSWEEP_UNIT_DIR",
        show_envvar=True,
        help="Write the boot unit here, without systemctl.",
        doc="Where the boot unit goes: written there without systemctl (packaging, tests). "
        "Default /etc/systemd/system, then enabled.",
        panel=PERSIST,
    ),
]
SimulateOpt = Annotated[
    str | None,
    option(metavar="PROFILE", help="Simulated GPUs (a profile, a+b for two).", panel=SIMULATION),
]
SimStateOpt = Annotated[Path | None, shared(SimOptions, "state", SIMULATION)]
CardBackendOpt = Annotated[Backend, shared(CardOptions, "backend", CARD)]
SafetyStateDirOpt = Annotated[Path | None, shared(SafetyOptions, "state_dir", SAFETY)]
AtBootOpt = Annotated[bool, typer.Option("--at-boot", hidden=True, help="What the boot unit runs.")]
OffsetDriverOpt = Annotated[
    str | None,
    typer.Option(
        "--offset-driver",
        hidden=True,
        help="With --at-boot: the driver the offsets were persisted under (skipped under another).",
    ),
]


def apply_command(
    run_dir: RunDirArg = None,
    objective: ObjectiveOpt = None,
    eta: EtaOpt = 0.5,
    max_ttft_ms: MaxTtftOpt = None,
    max_itl_ms: MaxItlOpt = None,
    cap: CapOpt = None,
    sm_clock: SmClockOpt = None,
    sm_clock_min: SmClockMinOpt = None,
    mem_clock: MemClockOpt = None,
    sm_offset: SmOffsetOpt = None,
    mem_offset: MemOffsetOpt = None,
    gpus: GpusOpt = None,
    reset: ResetOpt = False,
    dry_run: DryRunOpt = False,
    strict: StrictOpt = False,
    force: ForceOpt = False,
    persist: PersistOpt = False,
    trust_offset: TrustOffsetOpt = False,
    print_unit: PrintUnitOpt = False,
    unit_dir: UnitDirOpt = None,
    state_dir: SafetyStateDirOpt = SafetyOptions.state_dir,
    simulate: SimulateOpt = None,
    sim_state: SimStateOpt = SimOptions.state,
    backend: CardBackendOpt = CardOptions.backend,
    at_boot: AtBootOpt = False,
    offset_driver: OffsetDriverOpt = None,
) -> None:
    """Set a run's recommendation (or named values) on the GPUs.

    A run's power limit, clock locks or undervolt, on the GPUs it measured; or the values
    named (--cap W, --sm-clock, --mem-clock, --sm-offset, --mem-offset MHZ), or --reset: the
    defaults back."""
    from powersweep.cli.rigs import build_settings_rig
    from powersweep.sweep.settings.targets import parse_gpu_selection

    named = _Named(cap, sm_clock, mem_clock, sm_offset, sm_clock_min, mem_offset)
    _check_options(
        run_dir, named, reset, persist, print_unit or dry_run, at_boot, gpus, simulate, sim_state
    )
    _check_offset_trust(trust_offset, offset_driver, persist or print_unit, at_boot)
    if not 0 <= eta <= 1:
        raise UsageError("--eta must be between 0 and 1")
    latency = (max_ttft_ms, max_itl_ms)
    if any(v is not None for v in latency) and (objective != SLO or run_dir is None):
        raise UsageError(
            "--max-ttft-ms and --max-itl-ms choose a run's point: use them with "
            "RUN_DIR --objective slo"
        )
    if reset and print_unit:
        raise UsageError("--reset --persist removes the boot unit; there is no unit to print")
    persist = persist or print_unit
    selection = parse_gpu_selection(gpus) if gpus is not None else None
    changes_nothing = dry_run or print_unit
    sim_node = None
    if run_dir is not None and simulate is None:
        simulate, sim_node = _simulated_run_rig(run_dir, changes_nothing)
    with build_settings_rig(simulate, sim_state, backend.value, sim_node) as rig:
        if not rig.simulated and not changes_nothing and not is_root():
            raise UsageError(
                'applying GPU settings needs root: re-run with sudo "$(command -v powersweep)" '
                "apply ... (or try --dry-run first)"
            )
        if not at_boot and not print_unit:
            _refuse_if_journal(state_dir, force, dry_run)
        from powersweep.sweep.settings.targets import select_gpus

        source = named.source() or "--reset"
        if run_dir is not None:
            choice = objective.value if objective else None
            targets, named, source = _from_run(rig, run_dir, choice, eta, selection, force, latency)
            if sm_clock_min is not None:  # given beside the run: it shapes the run's lock
                named = dataclasses.replace(named, sm_clock_min_mhz=sm_clock_min)
        else:
            targets = select_gpus(rig.backend, selection, warn)
        named = _offsets_for_driver(named, targets, offset_driver)
        caps, clocks, offsets = _plan(targets, named, reset, strict)
        _Apply(
            rig, targets, caps, clocks, source, unit_dir, persist, print_unit, dry_run, reset,
            at_boot, force, journal_for(state_dir, at_boot), offsets, trust_offset,
        ).run()  # fmt: skip


def _from_run(
    rig: SettingsRig,
    run_dir: Path,
    objective: str | None,
    eta: float,
    selection: Sequence[str] | None,
    force: bool,
    latency: tuple[float | None, float | None] = (None, None),
) -> tuple[list[Target], _Named, str]:
    """A run's recommendation (said on stderr), the cards it goes to, and the unit's source."""
    from powersweep.sweep.settings.recommendation import read_recommendation
    from powersweep.sweep.settings.targets import match_run_gpus

    rec = read_recommendation(
        run_dir, objective, eta=eta, max_ttft_ms=latency[0], max_itl_ms=latency[1]
    )
    extra = f", {rec.tps_per_w:.4g} TPS/W" if rec.tps_per_w is not None else ""
    info(f"{run_dir}: {rec.objective} recommendation {rec.describe()}{extra}")
    for note in rec.notes:
        warn(note)
    targets = match_run_gpus(rig.backend, rec.gpus, selection=selection, force=force, warn=warn)
    named = _Named(
        rec.cap_w,
        rec.sm_clock_mhz,
        rec.mem_clock_mhz,
        rec.sm_offset_mhz,
        rec.sm_clock_min_mhz,
        rec.mem_offset_mhz,
    )
    return targets, named, f"{run_dir.resolve()} ({rec.objective})"


@dataclass(frozen=True)
class _Named:
    """The values named on the command line (or read from a run): a cap, clock locks, an SM
    and a memory clock offset."""

    cap_w: float | None
    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    sm_offset_mhz: float | None = None
    # the SM lock's bottom (None: the card's idle floor); not a value of its own: it shapes
    # --sm-clock's lock
    sm_clock_min_mhz: float | None = None
    mem_offset_mhz: float | None = None

    def given(self) -> list[tuple[str, float]]:
        """``[("--cap", 290.0), ...]``: the values given, by option."""
        flags = (
            ("--cap", self.cap_w),
            ("--sm-clock", self.sm_clock_mhz),
            ("--mem-clock", self.mem_clock_mhz),
            ("--sm-offset", self.sm_offset_mhz),
            ("--mem-offset", self.mem_offset_mhz),
        )
        return [(flag, v) for flag, v in flags if v is not None]

    def source(self) -> str:
        """``--cap 290 --sm-clock 1410``: where the values come from, for the unit's comment."""
        low = self.sm_clock_min_mhz
        extra = [("--sm-clock-min", low)] if low is not None and self.sm_clock_mhz else []
        return " ".join(f"{flag} {v:g}" for flag, v in [*self.given(), *extra])


def _simulated_run_rig(run_dir: Path, changes_nothing: bool) -> tuple[str | None, str | None]:
    """A simulated run's own rig, as ``--simulate PROFILE`` builds it (its profile and node, from
    run.json's ``simulation``), for a dry run or a printed unit; ``(None, None)`` for a real run.

    Raises:
        UsageError: A simulated run asked to change a card (its answer is no real card's; which
            flags set it on the simulated rig instead), or a replayed one (no card to show).
    """
    from powersweep.sweep.settings.recommendation import read_run

    try:
        simulation = read_run(run_dir / "run.json").simulation
    except PowersweepError:
        return None, None  # the recommendation reads the run and names what is wrong with it
    profile = simulation.profile if simulation is not None else None
    if not profile:
        return None, None
    if profile.startswith("replay:"):
        raise UsageError(
            f"{run_dir} replayed a measured curve (--simulate {profile}): there is no card to "
            "set; add --simulate PROFILE (e.g. rtx3090-air) to see its answer on a simulated card"
        )
    if not changes_nothing:
        raise UsageError(
            f"{run_dir} was measured on the simulated rig (--simulate {profile}): its answer is "
            f"no real card's; add --dry-run to see what it sets, or --simulate {profile} "
            "--sim-state FILE to set it on the simulated rig"
        )
    info(f"{run_dir} is a simulated run: shown on its own rig (--simulate {profile})")
    return profile, simulation.node if simulation is not None and simulation.node else None


def _plan(
    targets: Sequence[Target], named: _Named, reset: bool, strict: bool
) -> tuple[list[CapChange], list[ClockChange], list[OffsetChange]]:
    """Each card's limit, locks and offset, checked before any is written (bad input changes
    nothing)."""
    from powersweep.sweep.settings.applier import plan_caps
    from powersweep.sweep.settings.clock_locks import plan_clocks, plan_unlock
    from powersweep.sweep.settings.clock_offsets import plan_offset_reset, plan_offsets

    if reset:
        caps = plan_caps(targets, None, strict=strict, warn=warn)
        return caps, plan_unlock(targets), plan_offset_reset(targets, warn)
    # the offsets first: a card without one is refused before the others' warnings
    offsets = plan_offsets(targets, named.sm_offset_mhz)
    offsets += plan_offsets(targets, named.mem_offset_mhz, "mem")
    caps = (
        plan_caps(targets, named.cap_w, strict=strict, warn=warn) if named.cap_w is not None else []
    )
    clocks = plan_clocks(
        targets,
        named.sm_clock_mhz,
        named.mem_clock_mhz,
        strict=strict,
        warn=warn,
        sm_min_mhz=named.sm_clock_min_mhz,
    )
    return caps, clocks, offsets


def _check_options(
    run_dir: Path | None,
    named: _Named,
    reset: bool,
    persist: bool,
    changes_nothing: bool,
    at_boot: bool,
    gpus: str | None,
    simulate: str | None,
    sim_state: Path | None,
) -> None:
    """Refuse contradictory options and impossible values before anything is read or changed."""
    from powersweep.sweep.settings.clock_locks import check_clock
    from powersweep.sweep.settings.clock_offsets import check_offset

    values = [flag for flag, _ in named.given()]
    asked = [n for n, v in (("RUN_DIR", run_dir), ("--reset", reset)) if v] + values
    # the named values go together (a cap and locks); a run or --reset goes alone
    if not asked or (len(asked) > 1 and asked != values):
        what = " and ".join(asked) if asked else "nothing"
        raise UsageError(
            "give a RUN_DIR, --cap W and/or --sm-clock / --mem-clock / --sm-offset / "
            f"--mem-offset MHZ, or --reset (got {what})"
        )
    check_clock(named.sm_clock_mhz, "--sm-clock")
    check_clock(named.sm_clock_min_mhz, "--sm-clock-min")
    if named.sm_clock_min_mhz is not None and named.sm_clock_mhz is None and run_dir is None:
        raise UsageError("--sm-clock-min is the bottom of an SM lock: give --sm-clock MHZ with it")
    check_clock(named.mem_clock_mhz, "--mem-clock")
    check_offset(named.sm_offset_mhz, "--sm-offset")
    # unlike the SM offset, the memory one needs no SM lock: it raises the memory clock alone
    # and leaves the SM voltage/frequency curve (along which an unlocked card boosts) as it was
    check_offset(named.mem_offset_mhz, "--mem-offset")
    if named.sm_offset_mhz and named.sm_clock_mhz is None:
        # an offset shifts the whole curve: unlocked, the card would boost past its stock clocks
        raise UsageError(
            "--sm-offset shifts the whole voltage/frequency curve, so without an SM clock lock "
            "the card would boost past its stock clocks: give --sm-clock MHZ with it"
        )
    if at_boot and (not values or gpus is None or persist or changes_nothing):
        raise UsageError(
            "--at-boot is what the boot unit runs: it takes --cap, --sm-clock, --mem-clock, "
            "--sm-offset, --mem-offset, --offset-driver and --gpus only"
        )
    if simulate is not None and sim_state is None and not changes_nothing:
        raise UsageError("--simulate needs --sim-state FILE to hold what apply sets")


def _check_offset_trust(
    trust_offset: bool, offset_driver: str | None, persist: bool, at_boot: bool
) -> None:
    """``--trust-offset`` goes with ``--persist``, ``--offset-driver`` with ``--at-boot``."""
    if trust_offset and not persist:
        raise UsageError("--trust-offset lets --persist keep a clock offset: give --persist too")
    if offset_driver is not None and not at_boot:
        raise UsageError("--offset-driver is what the boot unit passes with --at-boot")


def _offsets_for_driver(named: _Named, targets: Sequence[Target], driver: str | None) -> _Named:
    """At boot, the offsets without the ones persisted under another driver than the cards'.

    A driver update moves the voltage/frequency curve and the memory training: an offset found
    stable under the driver the unit recorded may not be under this one. The cap and locks are
    still set; the offsets wait for ``apply --persist --trust-offset`` under this driver.
    """
    if driver is None or (named.sm_offset_mhz is None and named.mem_offset_mhz is None):
        return named
    moved = [t for t in targets if t.identity.driver_version != driver]
    if not moved:
        return named
    now = ", ".join(sorted({t.identity.driver_version for t in moved}))
    warn(
        f"{', '.join(t.label for t in moved)}: the clock offsets were persisted under driver "
        f"{driver}, not this driver {now}: skipped at this boot (the power limit and clock locks "
        "are set); check them again and re-run apply --persist --trust-offset"
    )
    return dataclasses.replace(named, sm_offset_mhz=None, mem_offset_mhz=None)


def _refuse_if_journal(state_dir: Path | None, force: bool, dry_run: bool) -> None:
    """A sweep running now, or a killed one's journal, would overwrite what apply sets.

    A sweep that runs owns its cards: apply refuses, ``--force`` or not (the sweep would put
    its originals back over the setting at its end).
    """
    from powersweep.sweep.records.journal import Journal, default_state_dir, owner_state

    journal = Journal(state_dir or default_state_dir())
    if not journal.exists():
        return
    try:
        entry = journal.read()
    except PowersweepError:
        entry = None  # damaged: still a sweep that did not finish
    if entry is not None and owner_state(entry).alive:
        why = (
            f"a sweep is running (PID {entry.pid}) and will put its original limits back when "
            "it ends"
        )
        if dry_run:
            warn(f"{why}: apply would refuse (--force does not override a live sweep)")
            return
        raise UsageError(f"{why}: wait for it to end (--force does not override a live sweep)")
    why = (
        f"a killed sweep left a restore journal ({journal.path}); `powersweep restore` "
        "would overwrite this setting"
    )
    if dry_run and not force:
        warn(f"{why}: apply would refuse (run `powersweep restore` first, or pass --force)")
    elif not force:
        raise UsageError(f"{why}: run `powersweep restore` first, or pass --force")
    else:
        warn(f"{why}; applying anyway (--force)")


def journal_for(state_dir: Path | None, at_boot: bool) -> Journal | None:
    """The restore journal an apply writes before its first change, so a SIGKILL half way
    leaves what `powersweep restore` needs. None at boot (the boot unit's own settings are the
    ones to keep) and where a killed sweep's journal already is (``--force``: that journal's
    originals stay for `powersweep restore`, as without this apply)."""
    from powersweep.sweep.records.journal import Journal, default_state_dir

    if at_boot:
        return None
    journal = Journal(state_dir or default_state_dir())
    return None if journal.exists() else journal


@dataclass(frozen=True)
class _Apply:
    """The steps after the plan: print, write, verify, persist (each a short method), shared by
    ``apply`` and ``fleet apply``."""

    rig: SettingsRig
    targets: Sequence[Target]
    caps: Sequence[CapChange]
    clocks: Sequence[ClockChange]
    source: str
    unit_dir: Path | None
    persist: bool
    print_unit: bool
    dry_run: bool
    reset: bool
    at_boot: bool
    force: bool
    journal: Journal | None = None
    offsets: Sequence[OffsetChange] = ()
    trust_offset: bool = False

    def run(self) -> None:
        unit = BootUnit(
            self.rig, self.targets, self.caps, self.clocks, self.source, self.unit_dir,
            self.reset, self.force, self.offsets,
        )  # fmt: skip
        boot = None if self.reset or not self.persist else unit.settings()
        if boot is not None:
            from powersweep.sweep.settings.boot_unit import refuse_untrusted_offsets

            refuse_untrusted_offsets(boot, self.trust_offset)
        if self.print_unit:
            assert boot is not None
            for t, b in zip(self.targets, boot, strict=True):
                info(f"{t.label}: the unit sets {b.describe()} at boot")
            typer.echo(unit.text(unit.merged(boot, unit.installed_dir())), nl=False)
            return
        unit_dir = unit.resolve_dir() if self.persist else None
        if self.dry_run:
            from powersweep.sweep.settings.clock_locks import clock_line
            from powersweep.sweep.settings.clock_offsets import coming_off, going_on, offset_line

            lines = [
                *map(self._line, self.caps),
                *map(offset_line, coming_off(self.offsets)),
                *map(clock_line, self.clocks),
                *map(offset_line, going_on(self.offsets)),
            ]
            for line in lines:
                typer.echo(f"{line} (dry run: nothing changed)")
            if self.persist and unit_dir is not None:
                unit.dry_run(unit_dir)
            return
        unit_text = None if boot is None else unit.text(unit.merged(boot, unit_dir))
        results = self._write()
        if self.at_boot or (self.persist and not self.reset):
            self._persistence_on()
        if self.persist:
            unit.install(unit_text, unit_dir, results)
        elif not self.at_boot:
            self._warn_if_not_persistent()
            unit.warn_if_stale()

    @staticmethod
    def _line(c: CapChange, readback_w: float | None = None) -> str:
        line = f"{c.target.label}: power limit {c.before_w:g} W -> {c.after_w:g} W"
        if readback_w is not None:
            line += f" (verified: reads back {readback_w:g} W)"
        return line

    def _write(self) -> tuple[list[CapResult], list[ClockResult], list[OffsetResult]]:
        from powersweep.sweep.records.cardlock import card_key, locks_for
        from powersweep.sweep.records.journal import default_state_dir
        from powersweep.sweep.settings.clock_locks import clock_line
        from powersweep.sweep.settings.clock_offsets import offset_line
        from powersweep.sweep.settings.journaled import apply_all_journaled, journal_entry
        from powersweep.sweep.signals import raise_on_signals

        backend = self.rig.journal_backend
        entry = journal_entry(self.targets, self.caps, self.clocks, backend, self.offsets)
        state_dir = self.journal.state_dir if self.journal else default_state_dir()
        # SIGTERM or SIGHUP half way (scancel, a lost session) puts back what was set, as Ctrl-C
        with raise_on_signals(), locks_for("apply", state_dir) as locks:
            # a sweep from any state directory owns its cards: never write under it
            locks.take((card_key(backend, t.identity.uuid), t.label) for t in self.targets)
            caps, clocks, offsets = apply_all_journaled(
                self.journal, entry, self.caps, self.clocks, self.offsets, warn
            )
        for r in caps:
            typer.echo(self._line(r.change, r.readback_w))
            if r.note:
                warn(r.note)
        # in the order written (apply_all gives the offsets so): an offset comes off before a
        # lock is removed, on after it is set
        for o in (o for o in offsets if not o.change.raises):
            typer.echo(offset_line(o.change, o))
        for c in clocks:
            typer.echo(clock_line(c.change, c))
        for o in (o for o in offsets if o.change.raises):
            typer.echo(offset_line(o.change, o))
        return caps, clocks, offsets

    def _persistence_on(self) -> None:
        from powersweep.sweep.settings.applier import enable_persistence

        for t, before, after in enable_persistence(self.targets, warn):
            if before is not True and after is True:
                typer.echo(f"{t.label}: persistence mode off -> on")

    def _warn_if_not_persistent(self) -> None:
        off = [t for t in self.targets if t.gpu.persistence_mode() is False]
        if off:
            which = ", ".join(f"GPU {t.identity.index}" for t in off)
            warn(
                f"persistence mode is off on {which}: the driver may drop the setting when no "
                "program uses the card, and a reboot always does; --persist keeps it"
            )
