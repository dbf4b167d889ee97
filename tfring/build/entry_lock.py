"""The build entry's lock: every rank of a job may import tfring at once, and one builds."""

import fcntl
import os
import sys
import time

if __package__:
    from tfring.build.toolchain import BuildError
else:  # beside builder.py run as a script (`python tfring/build --native-only`)
    from toolchain import BuildError


class EntryLock:
    """An exclusive lock on a build entry (flock on <entry>/build.lock).

    Every rank of a job may import tfring at the same moment: the first one to take the lock
    builds, the others wait here, then find the library built and load it. The holder's pid
    is written in the file for the waiters' message. A wait ends after
    TFRING_BUILD_WAIT_SECONDS (default 1800) with an error naming the holder.
    """

    def __init__(self, entry, say=None):
        self.path = os.path.join(entry, "build.lock")
        self.say = say or (lambda text: print(text, file=sys.stderr, flush=True))
        self.file = None

    def __enter__(self):
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self.file = open(self.path, "a+")
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._wait()
        except OSError as e:  # a folder this user cannot write, a file system without locks
            raise BuildError(f"cannot lock {self.path}: {e}. Point TFRING_CACHE_DIR at a "
                             "writable folder on a local file system.",
                             "Where the build goes") from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(str(os.getpid()))
        self.file.flush()
        return self

    def _wait(self):
        text = os.environ.get("TFRING_BUILD_WAIT_SECONDS", "1800")
        try:
            limit = float(text)
        except ValueError:
            raise BuildError(f"TFRING_BUILD_WAIT_SECONDS must be a number of seconds. "
                             f"Received: {text!r}") from None
        self.file.seek(0)
        holder = self.file.read().strip() or "unknown"
        self.say(f"tfring: waiting for process {holder} to finish building "
                 f"{os.path.dirname(self.path)}")
        deadline = time.monotonic() + limit
        while True:
            try:
                fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self.file.close()
                    raise BuildError(
                        f"process {holder} has held the build lock {self.path} for more than "
                        f"{limit:g} s (TFRING_BUILD_WAIT_SECONDS). If no build is running, "
                        "a stale lock is impossible (the lock dies with its process): look "
                        "for a hung compiler.")
                time.sleep(0.2)

    def __exit__(self, *exc):
        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()
