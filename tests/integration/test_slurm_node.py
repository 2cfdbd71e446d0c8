"""deploy/slurm/node.sh outside Slurm: what it passes to powersweep (options, not environment,
so a sudo that resets it loses nothing), the server start hook, and fleet apply's step.
The real Slurm, sudo and sweeps are in scripts/ci_slurm.sh."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from tests.integration.conftest import REPO

NODE_SH = REPO / "deploy" / "slurm" / "node.sh"


def _run_slurm_step(tmp: Path, *args: str, hook: str | None = None) -> tuple[int, list[str], Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    record = tmp / "args.txt"
    fake = tmp / "powersweep"
    # stands in for powersweep: records the arguments it was given, one per line
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {record}\n')
    fake.chmod(0o755)
    env = {
        **os.environ,
        "SLURM_PROCID": "1",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_STEP_NUM_NODES": "1",
        "POWERSWEEP_FLEET_RUN_DIR": str(tmp / "fleet"),
        "POWERSWEEP_BIN": str(fake),
        "POWERSWEEP_STATE_DIR": str(tmp / "journal" / "{node}"),
    }
    env.pop("POWERSWEEP_SIM_NODE", None)
    if hook is not None:
        script = tmp / "hook"
        script.write_text(f"#!/usr/bin/env bash\n{hook}\n")
        script.chmod(0o755)
        env["POWERSWEEP_SERVER_HOOK"] = str(script)
    done = subprocess.run(
        ["bash", str(NODE_SH), *args], env=env, capture_output=True, text=True, timeout=60
    )
    passed = record.read_text().splitlines() if record.exists() else []
    node = f"{socket.gethostname().split('.')[0]}-1"
    return done.returncode, passed, tmp / "fleet" / "nodes" / node


def test_options_not_environment_and_the_hook_s_url(tmp_path: Path) -> None:
    hook = 'echo "starting on $2 (rank $3)"; echo "http://10.0.0.7:8080"; [ "$1" = start ]'
    rc, args, node_dir = _run_slurm_step(
        tmp_path, "--simulate", "rtx4090-air~0.03", "--cooling", "air", hook=hook
    )
    assert rc == 0, (node_dir / "powersweep.log").read_text()
    node = node_dir.name
    assert args[:4] == ["sweep", "--out", str(node_dir), "--quiet"]
    # the state directory as an option, filled in for this node
    i = args.index("--state-dir")
    assert args[i + 1] == str(tmp_path / "journal" / node)
    # the hook's last line is the URL; a simulated card is seeded by the node, as an option
    assert args[args.index("--url") + 1] == "http://10.0.0.7:8080"
    assert args[args.index("--sim-node") + 1] == node
    assert (node_dir / "status").read_text().strip() == "ok"


def test_url_template_and_a_failing_hook(tmp_path: Path) -> None:
    rc, args, _ = _run_slurm_step(
        tmp_path / "a", "--url", "{url}/v1", "--model", "m-{rank}", hook="echo http://h:9"
    )
    assert rc == 0 and args[args.index("--url") + 1] == "http://h:9/v1"
    assert args.count("--url") == 1 and "m-1" in args and "--sim-node" not in args
    rc, args, node_dir = _run_slurm_step(tmp_path / "b", "--cooling", "air", hook="exit 3")
    assert rc == 2 and args == []  # powersweep never ran
    assert (node_dir / "status").read_text().strip() == "failed"
    assert "server hook" in (node_dir / "powersweep.log").read_text()


def test_apply_step_runs_fleet_apply_with_the_node_and_its_record(tmp_path: Path) -> None:
    report = tmp_path / "report"
    rc, args, node_dir = _run_slurm_step(
        tmp_path, "--apply", str(report), "--dry-run", "--sim-node", "{node}"
    )
    assert rc == 0
    node = node_dir.name
    assert args[:3] == ["fleet", "apply", str(report)]
    assert args[args.index("--node") + 1] == node
    assert args[args.index("--record") + 1] == str(node_dir / "fleet-apply.json")
    assert args[args.index("--sim-node") + 1] == node and "--dry-run" in args
