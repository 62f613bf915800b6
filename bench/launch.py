"""Run one command and record its wall time and its own peak RSS: ``launch.py RESULT CMD...``.

A process started straight from the benchmark's (large) parent inherits the parent's RSS
high-water mark: Linux records the old memory map's peak into ``ru_maxrss`` at ``exec``, and
``subprocess`` forks (or vforks) the parent. This launcher is tiny (run with ``python -S``, stdlib
``os`` only), so the command it spawns inherits at most its few MB; ``wait4`` then gives the
command's own peak. The result (``wall_s maxrss_kb returncode``) goes to the file RESULT.
"""

import os
import sys
import time


def main() -> None:
    result, cmd = sys.argv[1], sys.argv[2:]
    start = time.perf_counter()
    pid = os.posix_spawnp(cmd[0], cmd, os.environ)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    with open(result, "w") as f:
        f.write(f"{wall} {usage.ru_maxrss} {code}\n")
    sys.exit(code if code >= 0 else 1)


if __name__ == "__main__":
    main()
