"""The simulator: a discrete-event loop of vLLM-style engine instances that drive the scheduling core
(:mod:`semsched.core`) with simulated time, priced by a latency model (:mod:`semsched.latency`).

Start with :func:`semsched.sim.runner.run_policy` (one workload, one policy spec, one :class:`ClusterSpec`) or
``compare_policies``: the one entry point the CLI, the experiments and the benchmarks use. ``engine`` and
``executor`` run compiled by mypyc when built (:mod:`semsched.compiled`).

Modules:

* ``runner``: ``ClusterSpec`` (instances, profile, router spec (an unknown router is refused before anything
  runs), PD, ``predictor`` (a ``PredictorCost``), ``length_predictor``, ``speculation`` (on every instance or the
  first ``speculating_instances``), ``ground_truth``, ``allow_stalls``), ``build_simulation``, ``run_policy``,
  ``compare_policies``; ``PolicyRun`` (requests,
  ``SimResult``, ``Summary``, wall time; ``series(bin_s)``).
* ``engine``: ``Simulation``: step completions in an event heap ordered by (time, sequence number), merged
  with the arrival stream sorted by ``handover_time_s`` (a request's ``ready_time_s`` when a predictor must
  process it first, else its arrival; latency metrics still count from arrival); ``Instance`` = scheduler +
  executor, whose step reads schedule -> execute -> update, as nano-vllm's ``LLMEngine.step()``; fast-forward of
  steady decode stretches, which end before the next hand-over, finish or block exhaustion; each run's
  ``MonitorLog`` in ``SimResult.monitor``. See its module docstring for hand-over, PD and router hooks.
* ``executor``: the simulated GPU: the ``Executor`` protocol (``execute(plan, now_s) -> StepResult``,
  ``execute_repeated`` for fast-forward, ``take_arrival``), ``ModelExecutor`` (latency model, ``EngineOverheads``
  (``arrival_s`` charged to the step after an accepted arrival, ``idle_wakeup_s`` too when it found the
  instance idle, ``new_shape_s`` to the first step of each batch size not in ``warm_shapes``), a ``SpeedTrace``
  (``speed``), a ``GroundTruth`` sampler, the ``DraftAcceptance`` seam); a step time that is not finite is a
  ``SimulationError``. Fast-forward only where repeated steps are priced alike (no speed trace, no ground
  truth, no pending overhead).
* ``router``: routers registered with ``@register_router`` (``round-robin``, ``least-outstanding``; ``min-load``
  and ``go-routing`` in ``go_routing``; ``prefix-affinity`` in ``prefix_router``: the instance that served the
  request's prefix recently, bounded by load, its ``PrefixTable`` behind ``lookup``/``record``), each an object
  with its own state that sees instances only through read-only ``InstanceView``s; ``make_router(spec)``,
  ``router_names()``; an unknown name or an out-of-range choice is a ``RouterError``.
  The gateway runs these routers unchanged.
* ``disagg``, ``go_routing``: PD disaggregation (seed 001 section 4.3): ``PDSpec`` (prefill and decode pools,
  ``kv_link_gbps`` default 25, ``model_shape``; errors name ``pd.<field>``), ``KVLink.transfer_time_s``; the
  first instances prefill, the rest decode; a prefill instance ``Scheduler.hand_off``s a request at its first
  token and the decode instance (``route_decode``, else most free blocks) ``Scheduler.add_transferred``s it
  after the transfer, so the prompt is never recomputed. Routers ``min-load`` and ``go-routing`` (Alg. 2;
  alpha/mu/lambda 0.9/0.1/0.9), bound to the latency model and TDG weights by ``bind(RouterContext)``, told
  ``on_first_token``/``on_finish``: only what a gateway could know.
* ``ground_truth``: ``GroundTruth`` (seeded per-instance noise, ``LinearDrift``/``SineDrift``) makes simulated
  step times differ from the profile the scheduler estimates with. ``speed``: ``SpeedTrace``, a measured
  machine's speed over time.
* ``monitor``: ``Monitor``, owned by one ``Simulation.run``: every preemption (time, mode, reason, victim's
  priority and tier), the waiting queue per priority and swap blocks in use on a fixed grid
  (``sample_interval_s`` 1 s; the same in both modes; runs of one state are one ``QueueSample``).
* ``speculative``, ``acceptance``: speculative decoding (seed 004): ``SpeculationSpec`` (drafts per round = the
  scheduler's ``num_lookahead_tokens``, draft and per-round costs as fractions of a decode step, fixed or
  adaptive drafting), ``speculation_preset`` (``eagle``, ``sps-68m``), ``SpeculativeExecutor`` (each request
  replays its ``Request.accept_lengths``, else draws rounds from a generator seeded by the spec's seed and the
  request id, the same under every policy; the next rounds' yields are read ahead for fast-forward,
  ``accepted_rounds``); ``fit_acceptance``, ``FittedAcceptance``, ``yield_statistics``.
* ``prediction``: online output-length prediction in a run (seed 002): ``LengthPredictorSpec``
  (``--predictor length=NAME;...``, ``latency_s`` per request, default 0.5 ms; ``uniform_mix`` noise),
  ``OnlinePrediction`` (a fresh predictor per run; ``Simulation.on_handover`` predicts each request into
  ``predicted_output``; finishes reach ``observe`` before the next prediction, so both modes match).
* ``parallel``: independent simulations in parallel (issue 29): ``SimPoint``, runners ``InProcess``
  (``--workers 1``), ``ProcessPool`` (``--workers N``) and ``RayRunner`` (``--ray [ADDRESS]``, the ``[ray]``
  extra); runs come back in the points' order, so a report is byte-identical for any runner; a failed point
  raises ``PointError`` naming it.

Contracts:

* **Fast-forward is exact.** A stretch's step end times are accumulated left to right as the per-step loop adds
  them and a stretch never crosses a hand-over, a finish or a block exhaustion; tests compare every token time
  of both modes for every policy.
* **No silent stalls.** An instance may go idle only when it holds no work it could run; otherwise the run stops
  with ``SimulationError`` naming the policy, the requests and the engine state (``allow_stalls``: they end
  STALLED, counted). A waiting request an idle engine can never take is dropped, its reason naming the blocks
  (``never schedulable: needs N KV blocks ...``).
"""
