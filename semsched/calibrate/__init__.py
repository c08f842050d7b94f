"""The calibration lab: measures real vLLM against the simulator (``semsched profile``, ``semsched fidelity``).

Kept apart from the adapter users load into vLLM (:mod:`semsched.vllm` never imports it): the lab may import the
adapter, the simulator and everything else. vLLM is imported only when an engine starts.

* ``profiling``: ``semsched profile``: a recording scheduler (``recording_scheduler_cls``, ``StepRecorder``: each
  step's composition as ``(lq, lkv)`` chunks + decodes, execute and iteration time), ``ProfileGrid`` (blocks of
  D decodes at context C, injected P-token prefills, rounds of repeats), the driver (``measure_grid``) that
  steers an in-process engine through the grid and checks every step's composition, the fit (``fit_steps``:
  fastest, median or mean repeat, relative-error non-negative least squares; a step that was the first of its
  batch size is left out and measured as the one-time ``new_shape_s``), ``intake_times_s`` (the profile's
  ``arrival_s``), ``wakeup_times_s`` (its ``idle_wakeup_s``), ``ProfileResult`` (report, engine, profile file,
  steps CSV), and ``InProcessEngine`` (a running ``LLMEngine`` with seeded random prompts), the base of
  ``VllmEngine`` (the recording scheduler) and ``replay.ServedEngine``.
* ``replay``: the real half of ``semsched fidelity``: an open-loop replay (``replay``) through an in-process
  ``LLMEngine`` with ``semsched.vllm.Scheduler`` plus timers (``RequestRecord`` per request, ``StepRecord`` per
  step: composition, schedule/model/update/output time, loop gap, prefix-cache hits), and ``ServedEngine``, the
  same engine as a profiling engine (``warm_batch_sizes`` runs one step of every batch size so that oneDNN's
  per-size matmul primitives are built before the clock starts).
* ``fidelity``, ``fidelity_analysis``, ``fidelity_report``: ``semsched fidelity``: the trace slice (Azure head,
  lengths scaled to the context, seeded tiers, rate), the engine's settings and profile (``ProfileSession``:
  measured on ``ServedEngine`` in parts interleaved with the replays when none is given), the simulated side
  with the engine's limits, ``run_fidelity`` (each policy replayed ``repeats`` times, alternating A B / B A; the
  real side of a statistic is the replays' mean); every replay simulated again at the machine's speed while it
  ran (``machine_speed``, ``compare_given_speed``, also used by ``benchmarks/fidelity_runs.py`` on old runs'
  CSVs through ``read_steps_csv``/``read_real_latencies``); the split of real engine time against the profile
  (``error_sources``: step-time fit by batch class, time outside the profile's timing, prefix-cache hits, idle
  wake-ups, warm-up); comparisons, tables and JSON/CSV files. docs/fidelity.md has the results.
* ``tiny_model``: a random-weight Llama causal LM (2 layers, hidden 128 by default) with the shared Llama-2
  tokenizer, written locally: the model the vLLM tests, the profiler demo and fidelity runs use.
"""
