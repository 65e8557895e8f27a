"""The code of the home page, the getting-started pages and the other top-level pages
(Coming from Fold, from DyNet) runs and prints what they show."""

import pytest

from tests.docs.pages import code_pages, run_page

PAGES = [p for p in code_pages() if "/" not in p or p.startswith("getting-started/")]


def test_the_pages_with_code_are_found():
    assert {"index.md", "getting-started/quick-start.md", "coming-from-fold.md",
            "coming-from-dynet.md"} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_the_page_runs(page, tmp_path):
    run_page(page, tmp_path)
