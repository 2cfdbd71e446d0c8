"""The sweep: GPU control, sampling, loads and the driver that ties them together."""
