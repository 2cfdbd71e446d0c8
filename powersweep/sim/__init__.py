"""The simulated rig: GPUs with real physics and an OpenAI-compatible server driven by them."""
