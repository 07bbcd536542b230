"""The feed's name for grebe.blas (one BLAS thread per serving process)."""

from grebe.blas import one_thread, use_one_thread

__all__ = ["one_thread", "use_one_thread"]
