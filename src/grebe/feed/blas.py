"""NumPy's BLAS on one thread in a process that serves home requests.

The ranker's interest signal is a 1,500 x 384 by 384 x k product. OpenBLAS runs even
that on all its threads, and on a busy 2-core host the spinning threads cost ~4 ms of
CPU for a product of ~0.3 ms (docs/benchmarks.md, feed), so the scorer used `einsum`
(no BLAS, 0.58 ms). A serving process that answers many small requests at once has no
use for BLAS threads: `use_one_thread` limits them once at start-up (threadpoolctl;
limiting per call costs ~20 ms), and from then on the scorer uses `@` (one BLAS thread,
~0.3 ms). Processes that did not call it (tests, `grebe feed`) keep einsum.
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits

_one_thread = False


def use_one_thread() -> None:
    """Limit this process's BLAS libraries to one thread, for good."""
    global _one_thread
    threadpool_limits(1, user_api="blas")
    _one_thread = True


def one_thread() -> bool:
    """Whether `use_one_thread` was called in this process."""
    return _one_thread
