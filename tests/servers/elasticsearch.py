"""A real Elasticsearch node for the tests: Elasticsearch's own test distribution (``integ-test-zip``:
the server and its core modules, no bundled JDK) from Maven Central, one node on 127.0.0.1 with
security off, as the unprivileged server user.

The version is the newest one Maven Central serves of that distribution (no 9.x is published there);
``requirements.txt`` pins the Python client of the same major version, and ``docker-compose.yml`` runs
the same server version."""

from __future__ import annotations

import shutil
import urllib.request
import zipfile
from pathlib import Path

from tests.servers import process

VERSION = "8.19.21"
ARTIFACT = f"org.elasticsearch.distribution.integ-test-zip:elasticsearch:{VERSION}:zip"
HEAP = "512m"


def distribution() -> Path:
    """The unpacked server, fetched through Maven once and kept under ``var/test-servers``."""
    home = process.STATE_DIR / f"elasticsearch-{VERSION}"
    if (home / "bin" / "elasticsearch").exists():
        return home
    process.maven("dependency:get", f"-Dartifact={ARTIFACT}", "-Dtransitive=false")
    archive = (
        process.local_repository()
        / "org/elasticsearch/distribution/integ-test-zip/elasticsearch"
        / VERSION
        / f"elasticsearch-{VERSION}.zip"
    )
    unpacking = process.STATE_DIR / f"elasticsearch-{VERSION}.unpacking"
    shutil.rmtree(unpacking, ignore_errors=True)
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(unpacking)
    for member in (unpacking / f"elasticsearch-{VERSION}" / "bin").iterdir():
        member.chmod(0o755)
    process.readable(unpacking)
    (unpacking / f"elasticsearch-{VERSION}").rename(home)
    shutil.rmtree(unpacking, ignore_errors=True)
    return home


def start(name: str = "elasticsearch") -> tuple[process.Server, str]:
    """Starts a node with its own data folder (emptied first); the server and its URL."""
    java = process.java_home(17, 24)
    home = distribution()
    work = process.STATE_DIR / name
    shutil.rmtree(work, ignore_errors=True)
    config = work / "config"
    shutil.copytree(home / "config", config)
    port = process.free_port()
    (config / "elasticsearch.yml").write_text(
        "\n".join(
            [
                f"cluster.name: retrieval-tests-{name}",
                "node.name: node-1",
                "network.host: 127.0.0.1",
                f"http.port: {port}",
                f"transport.port: {process.free_port()}",
                "discovery.type: single-node",
                f"path.data: {work / 'data'}",
                f"path.logs: {work / 'logs'}",
                "xpack.security.enabled: false",
                # The test machine's disk may be fuller than a production node's watermarks allow.
                "cluster.routing.allocation.disk.threshold_enabled: false",
                "action.destructive_requires_name: true",
                "",
            ]
        )
    )
    owner = process.run_as()
    process.hand_over(work, owner)
    server = process.Server(
        name,
        [str(home / "bin" / "elasticsearch")],
        env={
            "ES_JAVA_HOME": str(java),
            "ES_PATH_CONF": str(config),
            "ES_JAVA_OPTS": f"-Xms{HEAP} -Xmx{HEAP}",
            "ES_TMPDIR": str(work / "tmp"),
        },
        log=work / "server.log",
        owner=owner,
    )
    (work / "tmp").mkdir(exist_ok=True)
    process.hand_over(work / "tmp", owner)
    url = f"http://127.0.0.1:{port}"
    server.wait_until(lambda: _healthy(url), timeout_s=180)
    return server, url


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_cluster/health?wait_for_status=yellow&timeout=1s", timeout=3) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False
