"""Test doubles shared by the unit and integration tests.

``fake_pynvml`` has no imports outside the standard library, so a test can load it by path
(see ``tests/unit/sweep/gpu/nvidia/test_nvml_gpu.py``) whether or not the repository root is on
``sys.path``.
"""
