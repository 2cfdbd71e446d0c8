"""Write docs/options.md from the option declarations (``--check``: only say whether it is up
to date, exit 1 if not).

    python scripts/gen_options_doc.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

from powersweep.cli.options_doc import options_markdown

DOC = Path(__file__).resolve().parent.parent / "docs" / "options.md"


def main(argv: list[str]) -> int:
    text = options_markdown()
    if "--check" in argv:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is out of date: run python scripts/gen_options_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
