"""Fetching the documents of a URL source: one GET within a total deadline and a size limit, redirects
followed by hand (each hop checked like the first), never to a private, loopback, link-local or
otherwise non-public address unless it lies in an allowed network, and conditional on the ETag /
Last-Modified of the previous fetch (a 304 is ``not_modified``: nothing downloaded).

Plain data in and out: the caller keeps the validators and decides what a result means for its documents.
Each hop resolves its host once, checks the addresses and connects to the checked one (the name goes in
``Host`` and, for HTTPS, in SNI and the certificate check), so a name that resolves to another address
by the time of the connection (DNS rebinding) cannot reach it.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx

from engines.deadline import DeadlineExceeded, within

MAX_REDIRECTS = 5
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
GONE_STATUSES = (404, 410)


class FetchError(Exception):
    """A URL that could not be fetched; the message says why (shown in the sync's run)."""


@dataclass(frozen=True)
class Fetched:
    """What a fetch got. ``status``: ``fetched`` (``content`` holds the body), ``not_modified`` (304 to the
    conditional request) or ``gone`` (404 / 410). ``etag`` / ``last_modified``: send them next time."""

    url: str  # where the answer came from, after redirects
    status: str
    content: bytes = b""
    content_type: str = ""
    etag: str = ""
    last_modified: str = ""


class UrlFetcher:
    def __init__(self, *, timeout_s: float, max_bytes: int, allowed_networks: Sequence[str] = ()):
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.allowed_networks = [ipaddress.ip_network(network, strict=False) for network in allowed_networks]

    def fetch(self, url: str, *, etag: str = "", last_modified: str = "") -> Fetched:
        """GET ``url`` (conditionally when validators are given); ``FetchError`` for anything else
        than a 2xx, 304, 404 or 410 answer, a refused address, a body too large, or the deadline."""
        headers = {"User-Agent": "retrieval-service source sync"}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        try:  # a peer dripping its answer resets every read timeout: the whole fetch has its deadline
            return within(self.timeout_s, lambda: self._fetch(url, headers, time.monotonic() + self.timeout_s))
        except DeadlineExceeded:
            raise FetchError(f"not fetched within {self.timeout_s:g} s") from None

    def _fetch(self, url: str, headers: dict[str, str], deadline: float) -> Fetched:
        try:
            with httpx.Client(follow_redirects=False, trust_env=False) as client:
                for _ in range(MAX_REDIRECTS + 1):
                    target, hop_headers, extensions = self._pinned(url, headers)
                    with client.stream(
                        "GET", target, headers=hop_headers, extensions=extensions, timeout=self._remaining(deadline)
                    ) as response:
                        if response.status_code in REDIRECT_STATUSES and "location" in response.headers:
                            url = urljoin(url, response.headers["location"])
                            continue
                        return self._answer(url, response, deadline)
        except httpx.HTTPError as exc:  # timeouts, refused connections, broken answers
            raise FetchError(f"{type(exc).__name__}: {exc}") from None
        raise FetchError(f"more than {MAX_REDIRECTS} redirects")

    def _answer(self, url: str, response: httpx.Response, deadline: float) -> Fetched:
        validators = {
            "etag": response.headers.get("etag", ""),
            "last_modified": response.headers.get("last-modified", ""),
        }
        if response.status_code == 304:
            return Fetched(url, "not_modified", **validators)
        if response.status_code in GONE_STATUSES:
            return Fetched(url, "gone")
        if not 200 <= response.status_code < 300:
            raise FetchError(f"HTTP {response.status_code}")
        declared = response.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > self.max_bytes:
            raise FetchError(f"larger than the allowed {self.max_bytes} bytes")
        body = bytearray()
        for block in response.iter_bytes():
            body += block
            if len(body) > self.max_bytes:
                raise FetchError(f"larger than the allowed {self.max_bytes} bytes")
            self._remaining(deadline)
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        return Fetched(url, "fetched", bytes(body), content_type, **validators)

    def _remaining(self, deadline: float) -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchError(f"not fetched within {self.timeout_s:g} s")
        return remaining

    def _pinned(self, url: str, headers: dict[str, str]) -> tuple[httpx.URL, dict[str, str], dict[str, str]]:
        """The request of one hop aimed at the address the check accepted: the URL with that address as
        its host, the name in ``Host``, and for HTTPS the name for SNI (httpcore verifies the certificate
        against it)."""
        address = self._checked_address(url)
        parsed = httpx.URL(url)
        extensions = {"sni_hostname": parsed.host} if parsed.scheme == "https" else {}
        return parsed.copy_with(host=str(address)), {**headers, "Host": parsed.netloc.decode("ascii")}, extensions

    def _checked_address(self, url: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        """Only http(s), and only to public addresses (or allowed networks): every address the host
        resolves to is checked, so a name with one private address is refused; the first is the one to
        connect to."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchError(f"not an http(s) URL: {url}")
        try:
            infos = socket.getaddrinfo(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        except (socket.gaierror, UnicodeError) as exc:
            raise FetchError(f"cannot resolve {parts.hostname}: {exc}") from None
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
        for address in addresses:
            if not address.is_global and not any(address in network for network in self.allowed_networks):
                raise FetchError(
                    f"{parts.hostname} resolves to the non-public address {address}, which URL sources may not reach "
                    "(SOURCE_URL_ALLOWED_NETWORKS)"
                )
        return addresses[0]
