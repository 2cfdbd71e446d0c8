"""The NVIDIA backend, through NVML (the ``pynvml`` module of nvidia-ml-py).

``api`` names every ``pynvml`` attribute used and is the only module that imports ``pynvml``;
``gpu`` is one card (identity, limits, persistence, processes), ``reads`` its readings, ``clocks``
its clock locks, ``events`` its Xid events, ``backend`` the machine's cards.
:mod:`powersweep.sweep.gpu.nvml` re-exports the public names.
"""
