"""Devices and contexts, the driver gate, and work across several
devices."""
