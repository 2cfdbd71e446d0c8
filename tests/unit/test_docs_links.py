"""The README and docs/ as a newcomer meets them: every relative link and anchor resolves, the
README stays short with its demo line near the top, and the two set-up lines are the ones CI
extracts (.ci/run) and the integration tests call "the README sweep"."""

from __future__ import annotations

import html
import re
import shlex
from pathlib import Path

import pytest

from tests.integration.test_energy_per_token_e2e import SWEEPS
from tests.integration.test_finding_advice import README as FINDING_ADVICE_SWEEP
from tests.integration.test_virtual_time_e2e import README_SWEEP
from tests.paths import REPO

README = REPO / "README.md"
PAGES = sorted([README, *(REPO / "docs").glob("*.md"), *(REPO / "deploy").rglob("*.md")])
README_MAX_WORDS = 1600
DEMO_WITHIN_LINES = 25
VENV_LINE = "python3 -m venv .venv && "
DEMO_PREFIX = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/powersweep "
TEST_LINE = "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/pytest"

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+).*?\1")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, code spans blanked (a link there is not a link)."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(_CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line))
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, spaces to hyphens."""
    text = html.unescape(heading.replace("`", ""))
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.match(line)
        if m:
            slug = _slug(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    bad = []
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # https:, mailto: ...: not ours to check offline
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            if not dest.exists():
                bad.append(f"{target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_caught(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# The `b` page\n\n## Its part (one)\n", encoding="utf-8")
    page = tmp_path / "a.md"
    page.write_text(
        "# A\n[ok](b.md#its-part-one) [top](#a) [web](https://example.com/x)\n"
        "[gone](c.md) [bad](b.md#nope) [self](#missing)\n"
        "`[code](d.md)`\n```\n[fenced](e.md)\n```\n",
        encoding="utf-8",
    )
    got = broken_links(page)
    assert len(got) == 3, got
    assert got[0].startswith("c.md") and got[1].startswith("b.md#nope")
    assert got[2].startswith("#missing")


def test_slugs_follow_github() -> None:
    assert _slug("Safety and output") == "safety-and-output"
    assert _slug("Contracts (import-linter)") == "contracts-import-linter"
    assert _slug("`powersweep status`") == "powersweep-status"
    assert _slug("Clock locks: `--axis sm-clock|mem-clock|grid`") == (
        "clock-locks---axis-sm-clockmem-clockgrid"
    )


def _readme_lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def test_the_readme_is_short() -> None:
    words = len(README.read_text(encoding="utf-8").split())
    assert words <= README_MAX_WORDS, words


def test_the_demo_line_comes_first_and_creates_the_venv_it_calls() -> None:
    lines = _readme_lines()
    demo = [i for i, ln in enumerate(lines) if ln.startswith(DEMO_PREFIX)]
    assert len(demo) == 1, demo
    assert demo[0] < DEMO_WITHIN_LINES, demo[0] + 1
    # nothing calls .venv/bin/... before the line that creates the venv
    first_call = next(i for i, ln in enumerate(lines) if ".venv/bin/" in ln)
    assert first_call == demo[0] and lines[first_call].startswith(VENV_LINE)


def test_the_demo_is_the_sweep_the_tests_call_the_readme_sweep() -> None:
    (demo,) = [ln for ln in _readme_lines() if ln.startswith(DEMO_PREFIX)]
    args = tuple(shlex.split(demo.removeprefix(DEMO_PREFIX)))
    assert args == FINDING_ADVICE_SWEEP == README_SWEEP == SWEEPS["readme"]


def test_ci_extracts_both_setup_lines_once() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    patterns = re.findall(r'grep -E "([^"]+)" README\.md', ci)
    assert len(patterns) == 2, patterns
    lines = _readme_lines()
    matched = [[ln for ln in lines if re.search(p, ln)] for p in patterns]
    assert [len(m) for m in matched] == [1, 1], matched
    assert matched[0][0].startswith(DEMO_PREFIX)
    assert matched[1] == [TEST_LINE]
    # the demo runs before the tests, as a newcomer would
    assert ci.index(patterns[0]) < ci.index(patterns[1])
