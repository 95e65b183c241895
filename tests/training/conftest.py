from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    # Matrices this small run fastest on one thread; a busy 2-core runner makes OpenMP's
    # threads wait on each other for milliseconds per product.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
