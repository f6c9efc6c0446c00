"""What starting a real Java server for the tests takes: Maven to fetch it, a JDK new enough to run it,
an unprivileged user (Elasticsearch refuses root), a free loopback port, and a process group stopped
at the end of the run whatever happened (its pid file lets ``python -m tests.servers stop`` clean up
after a run that was killed)."""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

# The system user the servers run as when the tests run as root (Elasticsearch refuses root).
SERVER_USER = "retrieval_engines"
ROOT = Path(__file__).resolve().parents[2]
STATE_DIR = ROOT / "var" / "test-servers"
JVM_DIRS = (Path("/usr/lib/jvm"),)


class ServerUnavailable(Exception):
    """This machine cannot run the server (no Java, no Maven): its tests skip and say why."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def java_home(minimum: int, maximum: int = 99) -> Path:
    """A JDK whose major version lies in [minimum, maximum], the lowest such (the most tested)."""
    candidates: list[tuple[int, Path]] = []
    homes = [Path(os.environ["JAVA_HOME"])] if os.environ.get("JAVA_HOME") else []
    for parent in JVM_DIRS:
        if parent.is_dir():
            homes += sorted(p for p in parent.iterdir() if p.is_dir() and not p.is_symlink())
    for home in homes:
        release = home / "release"
        if not (home / "bin" / "java").exists() or not release.exists():
            continue
        found = re.search(r'JAVA_VERSION="(\d+)', release.read_text())
        if found and minimum <= int(found.group(1)) <= maximum:
            candidates.append((int(found.group(1)), home))
    if not candidates:
        raise ServerUnavailable(f"no JDK {minimum}-{maximum} on this machine (looked in JAVA_HOME and /usr/lib/jvm)")
    return min(candidates)[1]


def maven(*args: str) -> None:
    """Runs Maven in batch mode; artifacts stay in ~/.m2 between runs, so later runs fetch nothing."""
    if shutil.which("mvn") is None:
        raise ServerUnavailable("no Maven (mvn) on this machine to fetch the server from Maven Central")
    done = subprocess.run(["mvn", "-B", "-q", *args], capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise RuntimeError(f"mvn {' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")


def local_repository() -> Path:
    return Path(os.environ.get("MAVEN_LOCAL_REPO", Path.home() / ".m2" / "repository"))


def run_as() -> dict[str, int] | None:
    """Who the server runs as: as root, the unprivileged system user (created once); else ourselves."""
    if os.getuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_USER],
            check=True,
            capture_output=True,
        )
        entry = pwd.getpwnam(SERVER_USER)
    return {"user": entry.pw_uid, "group": entry.pw_gid}


def hand_over(path: Path, owner: dict[str, int] | None) -> None:
    """Gives the server's user its directory, and a way through the folders above it to reach it."""
    path.mkdir(parents=True, exist_ok=True)
    if owner is None:
        return
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
            os.chown(name, owner["user"], owner["group"], follow_symlinks=False)
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)  # search only: the user can pass through, not list


def readable(path: Path) -> None:
    """Lets every user read (not write) a tree root owns: the server's program files."""
    for root, _dirs, files in os.walk(path):
        os.chmod(root, 0o755)
        for name in files:
            full = os.path.join(root, name)
            os.chmod(full, os.stat(full).st_mode | 0o444 | (0o111 if os.stat(full).st_mode & 0o100 else 0))
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)


class Server:
    """A server process in its own process group, with its pid recorded under ``var/test-servers``."""

    def __init__(self, name: str, command: list[str], *, env: dict[str, str], log: Path, owner: dict[str, int] | None):
        self.name, self.command, self.env, self.log, self.owner = name, command, env, log, owner
        self.pid_file = STATE_DIR / f"{name}.pid"
        self.ready: Callable[[], bool] = lambda: True
        self.launch()

    def launch(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        owner = self.owner
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                self.command,
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                user=owner["user"] if owner else None,
                group=owner["group"] if owner else None,
                extra_groups=[] if owner else None,
            )
        self.pid_file.write_text(str(self.process.pid))

    def restart(self, timeout_s: float = 240) -> None:
        """The same server again (same port, same data), as after a crash."""
        self.launch()
        self.wait_until(self.ready, timeout_s)

    def wait_until(self, ready: Callable[[], bool], timeout_s: float) -> None:
        self.ready = ready
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.tail()}")
            if ready():
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{self.name} was not ready within {timeout_s:.0f} s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

    def freeze(self) -> None:
        os.killpg(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.killpg(self.process.pid, signal.SIGCONT)

    def kill(self) -> None:
        """As a crash would: SIGKILL to the whole group, no shutdown."""
        stop_group(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        self.pid_file.unlink(missing_ok=True)

    def stop(self) -> None:
        stop_group(self.process.pid)
        self.process.wait(60)
        self.pid_file.unlink(missing_ok=True)


def stop_group(pid: int, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 30.0) -> bool:
    """Stops a server's process group: ``sig`` (TERM: a clean shutdown), then KILL after ``timeout_s``."""
    try:
        os.killpg(pid, signal.SIGCONT)  # a frozen server cannot act on TERM
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return True


def stop_leftovers() -> list[str]:
    """Stops every server a killed test run left behind (their pid files); the names stopped."""
    stopped = []
    for pid_file in sorted(STATE_DIR.glob("*.pid")) if STATE_DIR.is_dir() else []:
        try:
            if stop_group(int(pid_file.read_text())):
                stopped.append(pid_file.stem)
        except ValueError:
            pass
        pid_file.unlink(missing_ok=True)
    return stopped
