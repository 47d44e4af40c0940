"""Process lifecycle: interpreter exit, fork, spawn, teardown under use,
threads under load."""
