"""Write docs/configuration.md from the declarations (``--check``: exit 1 if the committed file is not current).

Usage: PYTHONPATH=src python tools/config_reference.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from intact.config_docs import render

TARGET = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file is not current")
    args = parser.parse_args()
    text = render() + "\n"
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            sys.exit(f"{TARGET} is not current: run python tools/config_reference.py")
    else:
        TARGET.write_text(text)
        print(f"wrote {TARGET}")
