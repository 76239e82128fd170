"""One torch thread per test process: the CI machine has 2 shared cores and oversubscription is much slower."""
import pytest


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
