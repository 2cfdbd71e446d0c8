"""The load modes run at each cap: ``single`` (decode-single), ``concurrent``, ``prefill``.

``base`` holds the :class:`~powersweep.sweep.loads.base.Load` protocol every mode implements and
the chat interface the loads use; ``prompts`` the fixed prompts. A load talks to the server only
through that chat interface and may import ``sweep.sampling.measure`` for the TPS arithmetic.
"""
