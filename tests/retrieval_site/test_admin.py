"""The console frame: templates/admin/base_site.html and the admin site's names in retrieval_site/urls.py."""

import re

import pytest


@pytest.mark.django_db
def test_the_console_is_named_and_links_the_api_docs_and_readiness(admin_client):
    page = admin_client.get("/admin/")
    assert page.status_code == 200
    html = page.content.decode()
    assert re.search(r"<title>\s*Console \| Retrieval service\s*</title>", html)
    assert re.search(r'<div id="site-name"><a href="/admin/">Retrieval service</a></div>', html)
    links = dict(re.findall(r'<a href="(/api/docs/|/ready)">([^<]+)</a>', html))
    assert links == {"/api/docs/": "API docs", "/ready": "Readiness"}
    assert "Log out" in html  # Django's own user links are kept
    assert admin_client.get("/api/docs/").status_code == 200
