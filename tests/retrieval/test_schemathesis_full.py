"""The full schemathesis run the issue-51 tester made, bounded: every phase (examples, coverage, fuzzing,
stateful), every check, a fixed seed and few examples per operation, through the real CLI against the
live server (threads, real HTTP), with a key that holds every scope over a tiny knowledge base."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tenants.models import Scope
from tenants.services import create_api_key, create_tenant
from tests.factories import give_unlimited_rate_tier
from tests.retrieval.api_corpus import ingest, write_files

HERE = Path(__file__).resolve().parent
SEED = 12345
EXAMPLES_PER_OPERATION = 2  # ~3 minutes on 2 shared cores


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_full_bounded_schemathesis_run_finds_nothing(live_server, tmp_path, embedder):
    tenant = create_tenant("schemathesis-tenant")
    folder = write_files(
        tmp_path / "corpus",
        {
            "returns.md": ("# Returns\n\nUnopened items may be returned within 30 days for a full refund.", None),
            "kettle.txt": ("The PPR-9087 kettle boils 1.7 litres of water in four minutes.", {"tags": ["product"]}),
        },
    )
    ingest(folder, tenant, "fuzz")
    give_unlimited_rate_tier(tenant)  # a 429 leaves an operation's logic untested
    key = create_api_key(tenant=tenant, scopes=list(Scope.values)).raw_key
    command = [
        str(Path(sys.executable).with_name("schemathesis")), "run", f"{live_server.url}/api/schema/?format=json",
        "--url", live_server.url, "--include-path-regex", "^/api/v1/",
        "--phases", "examples,coverage,fuzzing,stateful", "--checks", "all",
        "--max-examples", str(EXAMPLES_PER_OPERATION), "--seed", str(SEED),
        "--header", f"Authorization: Bearer {key}", "--no-color",
    ]  # fmt: skip
    command[1:1] = ["--config-file", str(HERE / "schemathesis.toml")]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.retrieval.schemathesis_hooks"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=HERE.parent.parent)
    found = failures(result.stdout)
    assert result.returncode == 0 or (found and found <= KNOWN), result.stdout + result.stderr[-3000:]


# What the run still reports, each for a reason the schema cannot change: Dify's protocol answers a missing
# Authorization header with 403 and error_code 1001 (what Dify shows its user), where schemathesis expects 401.
KNOWN = {("POST /api/v1/dify/retrieval", "ST203")}


def failures(output: str) -> set[tuple[str, str]]:
    """(operation, check code) of each failure the CLI's report lists (``____ POST /path ____`` then ``- ST201 ...``)."""
    found, operation = set(), ""
    for line in output.splitlines():
        if heading := re.fullmatch(r"_{3,} (.+?) _{3,}", line.strip()):
            operation = heading.group(1)
        elif code := re.match(r"- (ST\d+) ", line.strip()):
            found.add((operation, code.group(1)))
    return found
