"""What version 0.2.0 renamed (CHANGELOG.md, "0.2.0 (breaking)"): each former name is refused in one line that
names what replaced it; nothing answers to it any more.

The former method names are listed here once: a config that names one is refused (:func:`intact.config.validate_config`,
the method registry), and ``intact migrate`` (:mod:`intact.migrate`) renames a results tree that 0.1 stored under them.
"""

from __future__ import annotations

#: version 0.1's method names -> the names that replaced them (its runs were stored under the former ones)
RENAMED_METHODS = {"c_prompt": "compositional_prompt", "cprompt": "consistent_prompt"}

#: what turns a results tree stored by 0.1 into one of 0.2
MIGRATE = "intact migrate <results>"


def renamed_message(what: str, old: str, new: str) -> str:
    """One line: ``old`` is ``new`` since 0.2.0, and how to rename what was stored under it."""
    return (f"{what} {old!r} is named {new!r} since version 0.2.0 (CHANGELOG.md); results stored under the old name: "
            f"`{MIGRATE}`")
