"""The simulated rig: GPUs with real physics and an OpenAI-compatible server driven by them.

It runs on virtual time by default (:mod:`.virtual_time`): the client, the simulated server and
the sampler share one event loop whose clock jumps to its next timer when nothing is ready, and
the client reaches the server through in-memory connections (:mod:`.memory_net`). A run's
figures are the model's, never the host's: one seed gives the same run files on any machine.

Every noise source is the model's own, seeded by ``--seed`` (:class:`.options.SimOptions`):

- **per-token jitter** of the server (:mod:`.server`): each token leaves an exponential delay
  after its due time, mean ``TOKEN_JITTER_FRACTION`` (3%) of its step, at most half a step; the
  delays do not accumulate, so the long-run rate is exact, and an inter-token gap's median is the
  step and its 95th percentile about 2.3 x 3% = 7% above it;
- **the power sensor** (:mod:`.gpu`): Gaussian noise of the profile's ``power_noise_pct`` (0.3%,
  1 sigma) on the instant reading and over sqrt(10) on the one-second average, 0.01 W
  resolution, and an energy counter that advances every ``energy_counter_period_s`` (100 ms);
- **the temperature sensor** (:mod:`.gpu`): Gaussian, 0.2 °C, read in whole degrees;
- **a per-request client overhead** (:mod:`.memory_net`): 0.3 ms plus an exponential delay of mean
  0.7 ms between a request's write and its arrival at the server.
"""
