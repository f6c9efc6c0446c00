"""``manage.py mcp_stdio --key <api key>``: the MCP server on stdin/stdout, for desktop agents that start
it as a subprocess. The key is checked at start (a bad one exits with status 2 and its error on stderr) and
again on every tool call, with the same scope, rate tier and tenant as over HTTP."""

from __future__ import annotations

import logging
import os
import sys

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import DomainError


class Command(BaseCommand):
    help = "Serve the MCP tools (search, list_knowledge_bases, get_passage, get_document) over stdio."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--key", default=os.environ.get("RETRIEVAL_API_KEY", ""),
            help="the API key (scope search) the tools act as; default: $RETRIEVAL_API_KEY",
        )  # fmt: skip

    def handle(self, *args: object, key: str, **options: object) -> None:
        from retrieval import mcp_tools
        from retrieval.mcp_server import server

        try:
            mcp_tools.authenticated(key.strip() or None)
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}", returncode=2) from exc
        # stdout carries the protocol: every log line goes to stderr.
        for handler in logging.getLogger().handlers:
            if getattr(handler, "stream", None) is sys.stdout:
                handler.setStream(sys.stderr)  # type: ignore[attr-defined]
        server.stdio_key = key.strip()
        server.run("stdio")
