"""The URL sources' fetcher against a real web server on 127.0.0.1: conditional requests, redirects
checked hop by hop against non-public addresses, size limit and total deadline."""

import socket

import pytest

from engines.url_fetcher import FetchError, UrlFetcher
from tests.peers import Peer, Reply, Website

LOOPBACK = ["127.0.0.1/32"]


@pytest.fixture
def site():
    with Website() as website:
        website.pages["/faq.html"] = (b"<html><body><p>Returns within 30 days.</p></body></html>", "text/html")
        yield website


def fetcher(**options) -> UrlFetcher:
    return UrlFetcher(**{"timeout_s": 5.0, "max_bytes": 10_000, "allowed_networks": LOOPBACK, **options})


def test_a_page_is_fetched_with_its_validators(site):
    fetched = fetcher().fetch(f"{site.url}/faq.html")
    assert (fetched.status, fetched.content_type) == ("fetched", "text/html")
    assert fetched.content == site.pages["/faq.html"][0]
    assert fetched.etag.startswith('"') and fetched.last_modified == site.last_modified


def test_the_validators_make_the_next_fetch_conditional(site):
    first = fetcher().fetch(f"{site.url}/faq.html")
    again = fetcher().fetch(f"{site.url}/faq.html", etag=first.etag, last_modified=first.last_modified)
    assert (again.status, again.content) == ("not_modified", b"")
    assert site.requests[-1].headers["if-none-match"] == first.etag
    assert site.requests[-1].headers["if-modified-since"] == first.last_modified
    only_date = fetcher().fetch(f"{site.url}/faq.html", last_modified=first.last_modified)
    assert only_date.status == "not_modified"
    site.pages["/faq.html"] = (b"<p>Returns within 60 days.</p>", "text/html")  # edited: a new ETag
    changed = fetcher().fetch(f"{site.url}/faq.html", etag=first.etag)
    assert (changed.status, changed.content) == ("fetched", b"<p>Returns within 60 days.</p>")


def test_a_missing_page_is_gone_and_a_server_error_fails(site):
    assert fetcher().fetch(f"{site.url}/nothing.html").status == "gone"
    with Peer(lambda request: Reply(503, b"busy")) as peer, pytest.raises(FetchError, match="HTTP 503"):
        fetcher().fetch(f"{peer.url}/page")


def test_non_public_addresses_are_refused_unless_allowed(site):
    with pytest.raises(FetchError, match="non-public address 127.0.0.1.*SOURCE_URL_ALLOWED_NETWORKS"):
        fetcher(allowed_networks=[]).fetch(f"{site.url}/faq.html")
    assert site.requests == []  # refused before connecting
    with pytest.raises(FetchError, match="not an http"):
        fetcher().fetch("file:///etc/passwd")


def test_redirects_are_followed_but_never_to_a_non_public_address(site):
    site.redirects["/old.html"] = "/faq.html"
    fetched = fetcher().fetch(f"{site.url}/old.html")
    assert (fetched.status, fetched.url) == ("fetched", f"{site.url}/faq.html")
    site.redirects["/metadata"] = "http://169.254.169.254/latest/meta-data/"
    with pytest.raises(FetchError, match="non-public address 169.254.169.254"):
        fetcher().fetch(f"{site.url}/metadata")
    site.redirects["/loop"] = "/loop"
    with pytest.raises(FetchError, match="redirects"):
        fetcher().fetch(f"{site.url}/loop")


def test_the_connection_goes_to_the_address_that_was_checked(site, monkeypatch):
    """DNS rebinding: the name answers an allowed address to the check and a forbidden one afterwards;
    the fetch must connect to the checked address and never resolve the name again."""
    answers = iter(["127.0.0.1"])  # one answer; a second lookup of the name would get the forbidden one
    real_getaddrinfo = socket.getaddrinfo
    lookups = []

    def rebinding_dns(host, port, *args, **kwargs):
        if host != "wiki.rebind.test":
            return real_getaddrinfo(host, port, *args, **kwargs)
        lookups.append(host)
        address = next(answers, "10.255.255.1")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding_dns)
    port = site.url.rsplit(":", 1)[1]
    fetched = fetcher(timeout_s=2.0).fetch(f"http://wiki.rebind.test:{port}/faq.html")
    assert (fetched.status, fetched.url) == ("fetched", f"http://wiki.rebind.test:{port}/faq.html")
    assert fetched.content == site.pages["/faq.html"][0]
    assert lookups == ["wiki.rebind.test"]
    assert site.requests[-1].headers["host"] == f"wiki.rebind.test:{port}"


def test_a_body_over_the_limit_fails(site):
    site.pages["/big.txt"] = (b"x" * 10_001, "text/plain")
    with pytest.raises(FetchError, match="larger than the allowed 10000 bytes"):
        fetcher().fetch(f"{site.url}/big.txt")
    site.pages["/fits.txt"] = (b"x" * 10_000, "text/plain")
    assert len(fetcher().fetch(f"{site.url}/fits.txt").content) == 10_000


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        # one read longer than the time left: the read timeout or the deadline, whichever fires first
        (Reply(200, b"late", delay_s=3), "ReadTimeout|not fetched within 0.5 s"),
        (Reply(200, b"dripping slowly", drip_s=0.2), "not fetched within 0.5 s"),  # no read times out
    ],
)
def test_a_slow_or_dripping_server_misses_the_total_deadline(reply, reason):
    with Peer(lambda request: reply) as peer, pytest.raises(FetchError, match=reason):
        fetcher(timeout_s=0.5).fetch(f"{peer.url}/page")
