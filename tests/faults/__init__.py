"""Errors and faults: every driver row and error exit reached by fault
injection, hostile input, sticky errors."""
