"""Memory managers: the object behind ``Context.memory_manager``.

This module holds cudamem's default manager, which allocates with
``cuMemAlloc`` in C and queues frees in numba's deferred-deallocation queue.
The External Memory Management plugin interface builds on it.
"""

__all__ = ["DefaultMemoryManager"]


class DefaultMemoryManager:
    """DefaultMemoryManager(context)

    numba's ``NumbaCUDAMemoryManager`` surface for one context:
    ``deallocations`` (the memory queue), ``defer_cleanup()``,
    ``get_memory_info()``, ``reset()`` and ``interface_version``."""

    interface_version = 1

    def __init__(self, context):
        self.context = context

    @property
    def deallocations(self):
        """The context's queue of pending memory frees."""
        return self.context._memory_deallocations

    def initialize(self):
        """Nothing to set up: allocation needs no state beyond the
        context."""

    def defer_cleanup(self):
        """A context manager inside which no pending free runs (nests)."""
        return self.deallocations.disable()

    def get_memory_info(self):
        """``MemoryInfo(free, total)`` of the context's device."""
        return self.context.get_memory_info()

    def reset(self):
        """Frees every pending memory deallocation now."""
        self.deallocations.clear()

    def __repr__(self):
        return "<cudamem.DefaultMemoryManager of %r>" % (self.context,)


def _default_memory_manager(context):
    return DefaultMemoryManager(context)
