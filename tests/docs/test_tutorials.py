"""The tutorials run as written and print what they show."""

import pytest

from tests.docs.pages import code_pages, run_page

PAGES = [p for p in code_pages() if p.startswith("tutorials/")]


def test_the_tutorials_are_found():
    assert set(PAGES) == {"tutorials/sentiment.md", "tutorials/parser.md", "tutorials/bugs.md"}


@pytest.mark.parametrize("page", PAGES)
def test_the_tutorial_runs(page, tmp_path):
    run_page(page, tmp_path)
