"""``python -m tests.servers stop``: stops the Elasticsearch and Neo4j servers a killed test run left
(``./run test`` calls it when it exits, whatever the run's outcome)."""

import sys

from tests.servers.process import stop_leftovers

if __name__ == "__main__":
    if sys.argv[1:] != ["stop"]:
        sys.exit("usage: python -m tests.servers stop")
    for name in stop_leftovers():
        sys.stdout.write(f"stopped the test run's {name}\n")
