"""Host memory: pinned, mapped and managed arrays, registration, the host
pool, the staging pipeline, host memory's lifetime under queued copies."""
