"""Building tfring's library at import, when it is missing or stale.

On the first import in a new environment, or after tfring's sources or TensorFlow changed,
the import builds the library, under a file lock: the ranks of a
job that import tfring at once build it once and the others wait and load it.
TFRING_BUILD_ON_IMPORT=0 turns that off: the import then fails with the command that builds.

A failed build is an ImportError with the compiler's error and the section of BUILD.md that
says what to do. Processes that waited on the failed build fail with the same error instead
of each trying again. (tfring/_process/library.py loads what this builds.)
"""

import json
import os
import sys
import time

from tfring.build import builder, toolchain

REBUILD_COMMAND = "python -m tfring.build"
FAILURE_NAME = "build_failed.json"


def _say(text):
    print(text, file=sys.stderr, flush=True)


def ensure_built(folder, tf_version):
    """Builds the library in `folder` unless it is there, from these sources, for
    TensorFlow `tf_version`; an ImportError when it cannot."""
    reason = toolchain.stale_reason(folder, tf_version)
    if not reason:
        return
    if os.environ.get("TFRING_BUILD_ON_IMPORT", "1").strip().lower() in ("0", "false", "no"):
        raise ImportError(
            f"tfring's C++ library in {folder} cannot be loaded: {reason}. Build it with: "
            f"{REBUILD_COMMAND} (TFRING_BUILD_ON_IMPORT=0 turned off building at import)")
    waited_since = time.time()
    try:
        with builder.EntryLock(folder, say=_say):
            reason = toolchain.stale_reason(folder, tf_version)
            if not reason:
                return  # another process built it while this one waited
            _raise_if_failed_while_waiting(folder, waited_since)
            _say(f"tfring: building its C++ library for TensorFlow {tf_version} into "
                 f"{folder} ({reason}); this takes about a minute, once per environment")
            try:
                builder.build(folder, say=_say)
            except toolchain.BuildError as e:
                builder.write_json(os.path.join(folder, FAILURE_NAME),
                                 {"error": str(e), "section": e.section, "time": time.time()})
                raise
            builder.remove_if_exists(os.path.join(folder, FAILURE_NAME))
    except toolchain.BuildError as e:
        raise ImportError(failure_text(str(e), e.section)) from None
    except OSError as e:  # the build folder cannot be written: no BuildError says so
        raise ImportError(failure_text(f"{folder}: {e}", "Where the build goes")) from None


def _raise_if_failed_while_waiting(folder, waited_since):
    try:
        with open(os.path.join(folder, FAILURE_NAME)) as f:
            failure = json.load(f)
    except (OSError, ValueError):
        return
    if failure.get("time", 0) >= waited_since:
        raise toolchain.BuildError(
            "another process building the same library failed; its error:\n" +
            failure.get("error", "(no message)"), failure.get("section", "When the build fails"))


def failure_text(error, section):
    """The ImportError's text: what failed, and BUILD.md's advice (shipped in the package)."""
    advice = build_doc_section(section)
    text = f"tfring's C++ library could not be built: {error}"
    if advice:
        text += f"\n\nFrom tfring's BUILD.md, '{section}':\n{advice}"
    return text + f"\n\nAfter fixing it, `import tfring` builds again (or run {REBUILD_COMMAND})."


def build_doc_section(title):
    """The text of one '## title' section of BUILD.md ('' when not found)."""
    for path in (os.path.join(toolchain.PACKAGE_DIR, "BUILD.md"),
                 os.path.join(toolchain.ROOT, "BUILD.md")):
        if os.path.exists(path):
            break
    else:
        return ""
    lines, inside = [], False
    for line in open(path, encoding="utf-8"):
        if line.startswith("## "):
            inside = line[3:].strip() == title
            continue
        if inside:
            lines.append(line.rstrip("\n"))
    return "\n".join(lines).strip()
