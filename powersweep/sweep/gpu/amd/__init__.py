"""The AMD backend: AMD GPUs (Instinct, Radeon) through ``amdsmi``, the Python wrapper of
ROCm's libamd_smi.

Only this package touches ``amdsmi``: :mod:`.amdsmi_api` imports it lazily (the package is the
optional extra ``powersweep[amd]``, and it needs ROCm's ``libamd_smi.so`` to load), or a module is
injected: the tests drive the backend with a fake (``tests/fakes/fake_amdsmi.py``) and the
simulator with its own (:mod:`powersweep.sim.amd_cards`). :mod:`.amd_gpu` is one card (identity,
caps, readings), :mod:`.amd_clocks` its clock locks, :mod:`.amd_backend` the machine's cards.

amdsmi reports power caps in microwatts, socket power in whole watts, energy as a counter of
``counter_resolution`` microjoule ticks, clocks in MHz (supported levels in Hz) and temperatures
in degrees Celsius. A value it cannot read comes back as the string ``"N/A"``.

What differs from NVML, and how the backend deals with it:

* Draw: a card fills ``current_socket_power`` (MI300X), ``average_socket_power`` (MI210,
  Radeon) or both. A sample's ``power_instant_w`` is the current one, its ``power_w`` the
  average (the current one where there is no average), so the figures use the instant reading
  where the card has it, as on NVIDIA. The average's window is firmware's and not documented
  (unverified: about a second on RDNA3, as amdgpu's ``power1_average``). The second die of an
  MI250X reads 0 W (its module's draw is on the first die): it keeps 0 W, so summing both dies
  counts the module once, and :attr:`AmdsmiGpu.power_reported_by` names the die that carries it.
* Energy: a counter that runs backwards (a firmware reset or a wrap) is not used again; the
  sweep then integrates the sampled draw.
* Clock locks: a locked clock is a range ``min = max`` (``amdsmi_set_gpu_clk_range``) in the
  performance level ``MANUAL``; unlocking is the level ``AUTO``, which frees both clocks.
* No persistence mode: amdgpu keeps a card's settings while the driver is loaded.
* A VM guest cannot set caps or clocks (the host owns them): the error says so.
"""

from powersweep.sweep.gpu.amd.amd_backend import AmdsmiBackend
from powersweep.sweep.gpu.amd.amd_gpu import AmdsmiGpu
from powersweep.sweep.gpu.amd.amdsmi_api import AMDSMI_API_USED, INSTALL_HINT, import_amdsmi

__all__ = ["AMDSMI_API_USED", "INSTALL_HINT", "AmdsmiBackend", "AmdsmiGpu", "import_amdsmi"]
