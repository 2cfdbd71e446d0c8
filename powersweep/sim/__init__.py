"""The simulated rig: GPUs with real physics and an OpenAI-compatible server driven by them.

It runs on virtual time by default (:mod:`.virtual_time`): the client, the simulated server and
the sampler share one event loop whose clock jumps to its next timer when nothing is ready, and
the client reaches the server through in-memory connections (:mod:`.memory_net`). A run's
figures are the model's, never the host's: one seed gives the same run files on any machine.

Every noise source is the model's own, seeded by ``--seed`` (:class:`.sim_options.SimOptions`):

- **per-token jitter** of the server (:mod:`.server`): each token leaves an exponential delay
  after its due time, mean ``TOKEN_JITTER_FRACTION`` (3%) of its step, at most half a step; the
  delays do not accumulate, so the long-run rate is exact, and an inter-token gap's median is the
  step and its 95th percentile about 2.3 x 3% = 7% above it;
- **the power sensor** (:mod:`.energy_meter`): Gaussian noise of the profile's ``power_noise_pct``
  (0.3%, 1 sigma) on the instant reading and over sqrt(10) on the one-second average, 0.01 W
  resolution, and an energy counter that advances every ``energy_counter_period_s`` (100 ms);
- **the temperature sensor** (:mod:`.sim_gpu`): Gaussian, 0.2 °C, read in whole degrees;
- **a per-request client overhead** (:mod:`.memory_net`): 0.3 ms plus an exponential delay of mean
  0.7 ms between a request's write and its arrival at the server.

That noise is what the estimators assume. ``--sim-world NAME[=PARAM]`` (:mod:`.world`; each off by
default, seeded by ``--seed``; docs/world-noise.md) adds the world's:

- **bursty-draw** (:mod:`.sim_gpu`, :mod:`.physics`, :mod:`.server_pacing`): the card works in
  bursts held at the cap, at its static and memory draw between them, so its one-second average
  sits well under a cap that binds;
- **sensor-lag** (:mod:`.energy_meter`): both power readings average over the trailing second and
  step in whole quanta (5 W);
- **ar-jitter** (:mod:`.server_pacing`): the speed wanders as an Ornstein-Uhlenbeck factor (2%,
  5 s), so neighbouring token gaps are correlated;
- **context-slowdown** (:mod:`.server_pacing`): a token's step grows with its context (0.6% per
  1000 tokens);
- **hiccups** (:mod:`.server_pacing`): another tenant stops the work for 0.4 s every 6 s;
- **drift** (:mod:`.server_pacing`): the speed drifts by 3% over ten minutes;
- **outlier-window** (:mod:`.server_pacing`): 3% of requests decode 1.36 times faster (a repetition
  loop that speculative decoding drafts well).

The truth a point is compared with under them: :mod:`.world_truth`.
"""
