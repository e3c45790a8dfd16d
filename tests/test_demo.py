"""The newcomer's first run (tests/demo.py) works from this clone, as the README promises."""

import re
import subprocess
import sys
from pathlib import Path

from harness import clean_env

REPO = Path(__file__).resolve().parent.parent


def state(path):
    """What a later look at `path` can tell apart: absent, or its size, mtime and inode."""
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    return found.st_size, found.st_mtime_ns, found.st_ino


def test_demo_walks_an_agents_day_and_cleans_up(tmp_path):
    """Built with --output into this test's folder: the clone's dist/ is not the test's
    to rewrite (a kit written next from it would copy what the test built)."""
    # (On Windows also what a process there needs, and its output in UTF-8, not the ANSI code page.)
    env = clean_env(tmp_path, {"TMPDIR": tmp_path, "PYTHONIOENCODING": "utf-8"})
    clones = state(REPO / "dist" / "memprove_mcp.pyz")
    built = tmp_path / "built" / "memprove_mcp.pyz"
    done = subprocess.run([sys.executable, str(REPO / "tests" / "demo.py"), "--output", str(built)],
                          cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=120)
    assert state(REPO / "dist" / "memprove_mcp.pyz") == clones
    assert built.is_file()
    out = done.stdout.decode("utf-8").replace("\r\n", "\n")     # (Windows: a text stream's CR LF)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")[-2000:]
    calls = re.findall(r"^> (\w+) ", out, re.M)
    assert calls == ["tasks", "begin", "checkpoint", "decide", "checkpoint", "complete", "end",
                     "pack", "ledger_verify"]
    assert re.findall(r"^  (r\d) (passed|failed)", out, re.M) == [("r1", "failed"), ("r2", "passed")]
    assert '"status": "done", "evidence": ["r2"]' in out
    assert "  | Task 1: Fix flaky upload retries [done]" in out
    assert "  | - r1 failed (exit 1) pytest -q tests/test_upload.py" in out
    assert '"ok": true' in out
    assert "server exited 0 after 10 messages" in out
    # The session-start hook it installs gives the next session the Pack.
    assert "the next session starts with: Resuming Task 1: " in out
    # It ends with `mcp doctor` against its own daemon: all eight checks pass.
    doctor = out.split("$ python3 memprove_mcp.pyz mcp doctor\n", 1)[1]
    assert re.findall(r"^  (\w+) +(\w+) ", doctor, re.M) == [
        ("ok", name) for name in ("python", "config_dir", "token", "data_dir", "workspace",
                                  "daemon", "client", "hook")]
    assert "the next session starts with the Pack of Task 1" in doctor
    assert ": 1 Task" in doctor
    # Everything it made lived in one temporary folder, now gone.
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("memprove-demo-")]
