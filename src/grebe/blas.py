"""NumPy's BLAS on one thread in a process that does many small products at once.

OpenBLAS runs even a small product on all its threads, and on a busy 2-core host the
spinning threads cost far more CPU than the product: the feed ranker's 1,500 x 384 by
384 x k product cost ~4 ms of CPU for ~0.3 ms of work, and an engine's text heads (a
batch of posts by 384 x hidden) took the engine from 5.3 to 7.1 ms of CPU per post
(docs/benchmarks.md). Serving processes (engines, feed-serve) answer many small
requests at once and have no use for BLAS threads: `use_one_thread` limits them once at
start-up (threadpoolctl; limiting per call costs ~20 ms), and the `grebe` command imports
this module before anything loads NumPy, so its processes start with one BLAS thread.
The feed scorer then uses `@` (one BLAS thread, ~0.3 ms); processes that did not call
`use_one_thread` (tests, `grebe feed`) keep einsum there.
"""

from __future__ import annotations

import os

#: Importing this module sets it for this process and every engine process it starts
#: (they inherit the environment), unless the user set it: OpenBLAS reads it when it
#: loads, and threadpoolctl cannot limit a BLAS that loads after it is called.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

_one_thread = False


def use_one_thread() -> None:
    """Limit this process's BLAS libraries to one thread, for good."""
    from threadpoolctl import threadpool_limits

    global _one_thread
    threadpool_limits(1, user_api="blas")
    _one_thread = True


def one_thread() -> bool:
    """Whether `use_one_thread` was called in this process."""
    return _one_thread
