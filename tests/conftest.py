"""Suite-wide ordering: the longest tests first.

The suite runs on two processes (`pytest -n 2 --dist load --maxschedchunk 1`): each starts on
two tests, then takes one more whenever it comes free. Started last, an audit of a bundled
example leaves one process busy for minutes while the other idles; started first, the two share
them out and the many short tests fill in around them. (Without `--maxschedchunk 1` the first
eighth of the suite goes to one process in a block, long tests and all.)
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # sorted() is stable: within each group the collection order stays as it was
    items[:] = sorted(items, key=lambda item: item.get_closest_marker("long") is None)
