"""Write docs/configuration.md from the declarations (``--check``: exit 1 if the committed file is not current).

Usage: PYTHONPATH=src python tools/config_reference.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

from intact.config_docs import render

TARGET = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

if __name__ == "__main__":
    text = render() + "\n"
    if "--check" in sys.argv[1:]:
        if not TARGET.exists() or TARGET.read_text() != text:
            sys.exit(f"{TARGET} is not current: run python tools/config_reference.py")
    else:
        TARGET.write_text(text)
        print(f"wrote {TARGET}")
