"""The code of the user guide's chapters runs and prints what they show."""

import pytest

from tests.docs.pages import code_pages, run_page

PAGES = [p for p in code_pages() if p.startswith("guide/")]


def test_the_chapters_with_code_are_found():
    assert {"guide/blocks.md"} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_the_chapter_runs(page, tmp_path):
    run_page(page, tmp_path)
