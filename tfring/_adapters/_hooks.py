"""The record every adapter keeps of its hooks (tfring/_adapters/__init__.py)."""

import dataclasses
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Hook:
    name: str            # the private name as the framework spells it
    purpose: str         # what tfring uses it for
    waits_for: str       # the public API that would replace it ("none known" if none)
    probe: Callable[[], str]  # "" while the installed release has it, else what is missing
    # What tfring does on a release that lacks it, where it refuses the feature in words
    # instead ("": nothing: a release without it breaks tfring, and the probe's failure says
    # so).
    when_missing: str = ""


def has_attributes(get_owner, *names):
    """A probe: "" when the object get_owner() returns has every one of `names`."""
    def probe():
        try:
            owner = get_owner()
        except Exception as e:  # the module or class itself is gone
            return f"cannot reach the owner: {type(e).__name__}: {e}"
        missing = [n for n in names if not hasattr(owner, n)]
        return f"{getattr(owner, '__name__', owner)} lacks {', '.join(missing)}" if missing else ""
    return probe


def has_any_attribute(get_owner, *names):
    """A probe: "" when the object has at least one of `names` (releases differ)."""
    def probe():
        try:
            owner = get_owner()
        except Exception as e:
            return f"cannot reach the owner: {type(e).__name__}: {e}"
        if any(hasattr(owner, n) for n in names):
            return ""
        return f"{getattr(owner, '__name__', owner)} has none of {', '.join(names)}"
    return probe
