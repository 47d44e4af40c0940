"""DeviceNDArray: copies and views against NumPy, layouts, records,
read-only memory, reprs, SmartArray."""
