"""powersweep: find the GPU power cap with the best LLM tokens per watt."""

__version__ = "0.2.0"
