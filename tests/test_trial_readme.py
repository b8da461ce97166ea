"""The README reads as one document: its in-page links land on headings, and each fact is told in one place."""

from __future__ import annotations

import re

from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_in_page_links_land_on_headings() -> None:
    headings = {anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", README, re.MULTILINE)}
    links = re.findall(r"\]\(#([^)]+)\)", README)
    assert links, "the README links between its sections"
    assert [link for link in links if link not in headings] == []


def test_pinning_the_pathways_images_is_told_once() -> None:
    assert README.count("--proxy-server-image us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:") == 1
    assert README.count("gcloud artifacts docker tags list us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server") == 1
