"""``semsched gateway --config FILE``: the OpenAI-compatible front door of several vLLM servers (user guide
docs/gateway.md; the command is :mod:`semsched.cli.gateway`).

It takes the routers (:mod:`semsched.sim.router`), seed 003's SLO guard (:mod:`semsched.policies.slo_guard`),
the predictors (:mod:`semsched.predict`) and the adapter's request validator (:mod:`semsched.vllm.xargs`); never
the simulator's event loop, the calibration lab, the experiments or vLLM itself (``tests/test_layout.py``).

* ``config``: pydantic models of the YAML file; ``GatewayConfigError`` names the field (``backends[1].url``),
  and every tier name is checked against the tier table.
* ``api``: request bodies for the OpenAPI schema (unknown fields passed on), tier and tenant from the API-key map
  or ``x-semsched-tier``/``x-semsched-tenant``, OpenAI-shaped errors.
* ``classify``: ``Classifier``: token count, urgency (``keywords``, or a KTAS model on the prompt), an
  output-length distribution from a :mod:`semsched.predict` length predictor fed by the gateway's finished
  requests; batched in a worker thread, most important prompt first, at most ``max_queued`` waiting, never
  waited for past ``timeout_ms``; distributions cut to the points ``vllm_xargs`` takes and at ``max_tokens``.
* ``admission``: ``Admission`` wraps ``SLOGuard``, fed with the gateway's own TTFT/TPOT: shed tiers get 429;
  ``IdleFloors`` (latencies of requests alone on their server) tells the guard which targets are feasible;
  re-judged on a timer, so the level decays when idle.
* ``backends``: ``BackendPool`` (health and ``/metrics`` polling, in-flight accounting) and ``BackendView``, the
  simulator's ``InstanceView`` attributes, so the simulator's routers run unchanged.
* ``dispatch``: ``Dispatcher``: the router's choice with fallback, and a priority queue for when
  ``max_inflight`` leaves no slot (tier, then urgency, then arrival; bounded per tier: 429; timed: 503).
* ``service``: ``Gateway.handle``, one request's way through: identify, validate, classify, admit, dispatch,
  forward, account (its module docstring lists the steps). ``x-request-id`` kept or made, sent on and
  returned; an attempt that fails before its first token moves to another backend; a stream is answered only
  once its first token is in hand, and one that breaks later ends with an error event; accounting and one
  access-log line once per request however it ends; a request not served misses every target.
* ``metrics``: the ``semsched_gateway_*`` Prometheus families. ``app``: the FastAPI routes.
* ``reload``: SIGHUP and ``POST /admin/reload`` re-read the file; a bad one is refused, a good one swapped in
  whole; backends added, drained, replaced (indices never reused). ``tracing``: OpenTelemetry spans (off by
  default). ``outliers``: a backend whose TTFT p90 is far over the others' leaves the pool for a cool-down.
* ``shared``: state shared by replicas (leases under a limit, windowed counters, a broadcast), in this process or
  in Redis with a local fallback. ``fleet``: what it is used for: fleet-wide in-flight caps per tier and backend,
  the load books routers see, the SLO guard's observations and the prefix-affinity entries of every replica.
  ``quotas``: per-tenant tokens and requests per minute (429 ``quota``). ``prefix``: a request's prompt block
  hashes, for the ``prefix-affinity`` router.
"""
