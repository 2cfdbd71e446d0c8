"""The simulated rig: GPUs with real physics and an OpenAI-compatible server driven by them.

It runs on virtual time by default (:mod:`.virtual_time`): the client, the simulated server and
the sampler share one event loop whose clock jumps to its next timer when nothing is ready, and
the client reaches the server through in-memory connections (:mod:`.memory_net`).

The reasoning: docs/simulated-rig.md, "powersweep.sim".
"""
