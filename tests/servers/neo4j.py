"""A real Neo4j for the tests: the embeddable server (``org.neo4j:neo4j``) from Maven Central, started by
``Neo4jTestServer.java`` with its Bolt connector on 127.0.0.1, as the unprivileged server user.

Neo4j's calendar versions need Java 21 or newer (the machines have Temurin 25 beside OpenJDK 17). The
Python driver (``neo4j``, under ``neomodel``) speaks Bolt 5, which this server serves, and
``docker-compose.yml`` runs the same server version."""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path

from tests.servers import process

HERE = Path(__file__).resolve().parent
POM = HERE / "neo4j-pom.xml"
LAUNCHER = HERE / "Neo4jTestServer.java"
VERSION = re.search(r"<neo4j.version>([^<]+)<", POM.read_text()).group(1)  # type: ignore[union-attr]
HEAP = "512m"


def libraries() -> Path:
    """The server's jars, resolved by Maven once and copied under ``var/test-servers``."""
    lib = process.STATE_DIR / f"neo4j-{VERSION}" / "lib"
    done = lib.parent / "complete"
    if done.exists():
        return lib
    shutil.rmtree(lib, ignore_errors=True)
    process.maven("-f", str(POM), "dependency:copy-dependencies", f"-DoutputDirectory={lib}")
    shutil.copy(LAUNCHER, lib.parent / LAUNCHER.name)
    process.readable(lib.parent)
    done.touch()
    return lib


def start(name: str = "neo4j") -> tuple[process.Server, str]:
    """Starts a server with an empty database of its own; the server and its ``bolt://`` URL (no auth)."""
    java = process.java_home(21)
    lib = libraries()
    work = process.STATE_DIR / name
    shutil.rmtree(work, ignore_errors=True)
    owner = process.run_as()
    process.hand_over(work / "home", owner)
    port = process.free_port()
    server = process.Server(
        name,
        [
            str(java / "bin" / "java"),
            f"-Xmx{HEAP}",
            "--enable-native-access=ALL-UNNAMED",
            "-cp",
            f"{lib}/*",
            str(lib.parent / LAUNCHER.name),
            str(work / "home"),
            str(port),
        ],
        env={"JAVA_HOME": str(java)},
        log=work / "server.log",
        owner=owner,
    )
    server.wait_until(lambda: _answers(port), timeout_s=240)
    # neomodel's URL carries credentials; with authentication off the server takes any.
    return server, f"bolt://neo4j:neo4j@127.0.0.1:{port}"


def _answers(port: int) -> bool:
    """Bolt accepts connections and the default database answers a query."""
    import neo4j as driver

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
        with driver.GraphDatabase.driver(f"bolt://127.0.0.1:{port}", auth=None, connection_timeout=2) as client:
            client.execute_query("RETURN 1")
        return True
    except (OSError, driver.exceptions.DriverError, driver.exceptions.Neo4jError):
        return False
