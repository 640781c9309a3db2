"""Copy benchmarks/results/latest.md into README.md between the bench markers.

    python -m benchmarks.update_readme [--md benchmarks/results/latest.md] [--readme README.md]
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def update(md: Path = ROOT / "benchmarks" / "results" / "latest.md", readme: Path = ROOT / "README.md") -> None:
    text = Path(readme).read_text()
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise SystemExit(f"{readme} has no {BEGIN} ... {END} markers")
    body = Path(md).read_text().strip()
    Path(readme).write_text(text[:i + len(BEGIN)] + "\n" + body + "\n" + text[j:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--md", type=Path, default=ROOT / "benchmarks" / "results" / "latest.md")
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md")
    a = ap.parse_args(argv)
    update(a.md, a.readme)
    print(f"updated {a.readme} from {a.md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
