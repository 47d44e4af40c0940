"""Memory managers: EMM plugins, the device pool and PoolMemoryManager,
deferred deallocation, out-of-memory recovery, memory_stats()."""
