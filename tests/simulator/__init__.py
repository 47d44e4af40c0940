"""The simulated driver against the CUDA driver documentation, its control
API and its launcher."""
