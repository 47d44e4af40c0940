"""IPC handles of device arrays."""
