"""PoolMemoryManager: cudamem's memory pool as an EMM memory manager.

The pool itself is C (core/pool.c): best-fit blocks of cuMemAlloc slabs,
split and coalesced, reused at once on the stream that freed them and on
other streams once that stream's work is done. This class turns it on for
a context, and gives it numba's memory-manager surface plus ``set_limit``,
``trim`` and ``stats``. While it is on, pinned arrays come from the host
pool (core/hostpool.c): page-locked blocks kept registered for reuse.
"""
from cudamem import _cudamem, memory

__all__ = ["AsyncMemoryManager", "PoolMemoryManager"]


@memory._native
class PoolMemoryManager(memory.DefaultMemoryManager):
    """PoolMemoryManager(context)

    cudamem's memory pool for one context, selected with
    ``set_memory_manager(cudamem.PoolMemoryManager)``,
    ``using_memory_manager(cudamem.PoolMemoryManager)`` or
    ``CUDAMEM_MEMORY_MANAGER=pool``. Allocations stay in C (no Python per
    allocation). Freed blocks return to the pool at once rather than through
    the pending deallocations, ordered by the stream their array was made
    for; ``trim()`` waits for the streams that free blocks were freed on,
    then gives wholly free slabs back to the driver. Out of memory, the
    pool is trimmed that way and the allocation retried. IPC of a pooled
    array is its slab's handle plus an offset.

    While it is on, ``pinned_array()`` and ``pinned_array_like()`` take
    page-locked blocks from the process-wide host pool, and the last
    reference to such an array gives its block back still page-locked;
    staged cross-device copies always use the host pool. Requests up to
    the round threshold (1 MiB, ``CUDAMEM_PINNED_ROUND_THRESHOLD``) are
    rounded up to a power of two; larger ones get their page-rounded size
    and reuse a cached block at most an eighth larger. The pool keeps at
    most 256 MiB (``CUDAMEM_PINNED_MAX_CACHED``) cached. Cached blocks
    keep the contexts of the devices that page-locked them alive, so
    detaching this manager and ``close()`` free them; ``memory_stats()``
    reports them as ``pinned_pool_cached_bytes``."""

    def _device(self):
        return self.context.device

    def initialize(self):
        """initialize()

        Turns the pool on for the context's device."""
        _cudamem._pool_enable(self._device(), True)

    def _detach(self):
        # using_memory_manager() restoring another manager: new arrays
        # stop coming from the pool; blocks in use still return to it.
        # Cached host blocks retain their devices' contexts: free them.
        _cudamem._pool_enable(self._device(), False)
        _cudamem._hostpool_trim()

    def set_limit(self, nbytes):
        """set_limit(nbytes)

        Caps the bytes of the pool's slabs (None: no cap). An allocation
        that would pass it goes through out-of-memory recovery (which
        trims the pool) first, then raises CudaOutOfMemoryError whose
        ``limit`` and ``pool_used`` say that the limit refused it."""
        _cudamem._pool_set_limit(self._device(), nbytes)

    def set_pinned_limit(self, nbytes):
        """set_pinned_limit(nbytes)

        Caps the bytes of page-locked blocks the host pool keeps for reuse
        (None: no cap; CUDAMEM_PINNED_MAX_CACHED or 256 MiB at first),
        freeing cached blocks, largest first, down to it; a block given
        back beyond it is freed. The host pool is process-wide: the cap is
        every device's."""
        _cudamem._hostpool_set_limit(nbytes)

    def set_pinned_round_threshold(self, nbytes):
        """set_pinned_round_threshold(nbytes)

        Pinned requests of at most ``nbytes`` (0 to 64 MiB;
        CUDAMEM_PINNED_ROUND_THRESHOLD or 1 MiB at first) are rounded up to
        a power of two from now on; larger ones get their page-rounded
        size. Process-wide, like the cap; cached blocks stay."""
        _cudamem._hostpool_set_round_threshold(nbytes)

    def pinned_stats(self):
        """pinned_stats() -> dict

        The host pool's ``limit`` (None: no cap), ``round_threshold``,
        ``cached_blocks`` and ``cached_bytes``, and of the blocks handed
        out ``used_blocks``, ``requested_bytes`` (what was asked for) and
        ``pinned_bytes`` (what they hold page-locked): their difference is
        the rounding's waste."""
        return _cudamem._hostpool_stats()

    def trim(self):
        """trim()

        Waits for the queued work of the streams that free blocks were
        freed on (as PyTorch's ``empty_cache()`` waits for its blocks'
        events), then frees every slab none of whose blocks is in use, and
        every page-locked block the host pool keeps."""
        _cudamem._pool_trim(self._device())
        _cudamem._hostpool_trim()

    def stats(self):
        """stats() -> dict

        The pool's slabs, blocks and bytes: ``slab_bytes``, ``used_bytes``,
        ``cached_bytes`` (free in slabs), their counts and the limit."""
        return _cudamem._pool_stats(self._device())

    def reset(self):
        """reset()

        Frees the pending deallocations and trims the pool."""
        super().reset()
        self.trim()

    def __repr__(self):
        return "<cudamem.PoolMemoryManager of %r>" % (self.context,)


@memory._native
class AsyncMemoryManager(memory.DefaultMemoryManager):
    """AsyncMemoryManager(context)

    The driver's stream-ordered allocator for one context, selected with
    ``set_memory_manager(cudamem.AsyncMemoryManager)``,
    ``using_memory_manager(cudamem.AsyncMemoryManager)`` or
    ``CUDAMEM_MEMORY_MANAGER=async``. Device arrays come from the device's
    current memory pool (its default pool unless another library set one)
    with ``cuMemAllocAsync`` on the array's stream, and their last
    reference frees them with ``cuMemFreeAsync`` on that stream: the free
    is ordered after the work queued there (and after work other streams
    did on the array), not deferred through the pending deallocations. An
    array made without a stream uses the default stream, as CuPy's
    ``MemoryAsyncPool`` does (the legacy one, or the per-thread one under
    ``CUDAMEM_PER_THREAD_DEFAULT_STREAM``). An array that outlives its
    stream is freed on the legacy default stream after the work that
    stream's release recorded. The pool keeps freed memory reserved for
    reuse up to its release threshold; ``trim()`` gives it back.

    Initializing it raises CudaSupportError on a device without memory
    pools (``CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`` 0). Arrays of
    the default pool cannot be shared with IPC (``get_ipc_handle()``
    raises NotImplementedError); after ``set_ipc(True)`` arrays come from
    an exportable pool and can be."""

    def _device(self):
        return self.context.device

    def initialize(self):
        """initialize()

        Turns stream-ordered allocation on for the context's device."""
        _cudamem._asyncpool_enable(self._device(), True)

    def _detach(self):
        # using_memory_manager() restoring another manager: new arrays
        # stop coming from the pool; those out still free on their stream.
        _cudamem._asyncpool_enable(self._device(), False)

    def set_ipc(self, enabled=True):
        """set_ipc(enabled=True)

        From now on allocates from the device's exportable pool, whose
        arrays ``get_ipc_handle()`` shares with other processes (a
        ``PoolIpcHandle``, which travels through ``multiprocessing``). The
        first call makes the pool (``cuMemPoolCreate`` with POSIX file
        descriptor handles, on the device, with the current pool's release
        threshold) and exports its descriptor; both are kept for the
        process. ``trim()``, ``set_release_threshold()`` and ``stats()``
        apply to the pool in use. ``set_ipc(False)`` goes back to the
        device's current pool; arrays keep the pool they came from, and
        those of the default pool keep raising NotImplementedError from
        ``get_ipc_handle()``. A context teardown turns it off with the
        manager. Raises CudaSupportError on a device whose pools cannot be
        exported as POSIX file descriptors
        (``CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES``)."""
        _cudamem._asyncpool_set_ipc(self._device(), enabled)

    def set_release_threshold(self, nbytes):
        """set_release_threshold(nbytes)

        Sets the pool's ``CU_MEMPOOL_ATTR_RELEASE_THRESHOLD``: the unused
        memory it keeps reserved past a synchronization, for reuse (None:
        all of it; the driver's default is 0). Not a cap on what is in
        use: ``set_limit()`` and ``cudamem.set_memory_limit()`` are."""
        _cudamem._asyncpool_set_release_threshold(self._device(), nbytes)

    def set_limit(self, nbytes):
        """set_limit(nbytes)

        Caps the bytes this manager's arrays hold from the pool on the
        device, counted by cudamem (the pool's own attributes count other
        libraries' use too); None: no cap. An allocation that would pass
        it goes through out-of-memory recovery (which trims the pool)
        first, then raises CudaOutOfMemoryError without calling the
        driver: ``call`` is None, ``limit`` is the cap and ``pool_used``
        the bytes held. An array counts until its last reference goes
        (its free is then queued on its stream). Lowering the cap frees
        nothing; the cap stays with the device across managers and
        contexts."""
        _cudamem._asyncpool_set_limit(self._device(), nbytes)

    def trim(self, min_bytes_to_keep=0):
        """trim(min_bytes_to_keep=0)

        Waits for the context's work (queued frees give their memory back
        only when they run), then ``cuMemPoolTrimTo``: the pool keeps at
        most *min_bytes_to_keep* bytes of unused memory reserved."""
        _cudamem._asyncpool_trim(self._device(), min_bytes_to_keep)

    def stats(self):
        """stats() -> dict

        The pool's attributes: ``enabled``, ``release_threshold`` (None:
        keeps all), ``limit`` (``set_limit()``'s; None: no cap) and
        ``held_bytes`` (what the limit caps: the bytes this manager's
        arrays hold), ``reserved_bytes`` and ``reserved_bytes_high``
        (``CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`` / ``_HIGH``: what the
        driver holds for the pool) and ``used_bytes`` and
        ``used_bytes_high`` (``USED_MEM_CURRENT`` / ``_HIGH``: handed
        out)."""
        return _cudamem._asyncpool_stats(self._device())

    def get_ipc_handle(self, memory):
        """get_ipc_handle(memory) -> PoolIpcHandle

        A ``PoolIpcHandle`` of *memory* (a MemoryPointer of this manager's
        exportable pool: see ``set_ipc()``), after waiting for the
        device's work. Raises NotImplementedError for memory of the
        device's default pool, which is not exportable."""
        if not getattr(memory, "size", None):
            from cudamem.ipc import IpcHandle

            # Zero-size memory shares nothing, as GetIpcHandleMixin's.
            return IpcHandle(memory, None, 0, self._device().uuid)
        return _cudamem._ipc_pool_handle(memory)

    def reset(self):
        """reset()

        Frees the pending deallocations and trims the pool."""
        super().reset()
        self.trim()

    def __repr__(self):
        return "<cudamem.AsyncMemoryManager of %r>" % (self.context,)
