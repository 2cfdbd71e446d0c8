"""Readings: the GPU sampler, the settle detector, and per-cap figures made from samples and
request results. May import ``sweep.gpu`` (the protocol) and the base modules.
"""
