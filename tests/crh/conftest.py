"""CRH tests: keep BLAS single-threaded (the CI machine has 2 shared cores; a multithreaded SVD under contention is
100× slower than a single-threaded one)."""
import pytest


@pytest.fixture(autouse=True, scope="session")
def _single_thread_blas():
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        yield
        return
    with threadpool_limits(limits=1):
        yield
