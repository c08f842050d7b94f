"""The scheduling core: state and results go in, a batch plan comes out. One core, several drivers (the
simulator, :mod:`semsched.vllm`); the rules a policy sees are the same under each.

Imports only the standard library, numpy, ``mypy_extensions`` (mypyc's class markers) and itself; never reads a
clock (time is an argument: simulated time in the simulator, ``time.time()`` in the vLLM adapter), never imports
torch or an HTTP library (``tests/test_layout.py``). ``emission``, ``kv``, ``plan``, ``displacement`` and
``scheduler`` run compiled by mypyc when built (:mod:`semsched.compiled`); ``policy`` and ``request`` stay
interpreted.

Modules:

* ``errors``: :class:`SemschedError`, the base of every user-facing error (the CLI catches only it).
* ``tiers``: :class:`TierSpec` (SLOs, traffic weight, fair share, reserve fraction), the default tier table
  (seed 003's SLOs) and ``UNTIERED``, ``tier_index``; a deployment's table from a mapping
  (``tier_table_from_mapping``: every field checked, named as ``tiers[2].ttft_slo_ms``) and back
  (``tier_table_document``); YAML in and out is :mod:`semsched.policies.tier_table`.
* ``request``: :class:`Request` (static fields validated on construction, ``InvalidRequestError`` naming the
  field; ``client`` names the sender for per-client fairness; progress is owned by the scheduler),
  ``RequestState`` (terminal: FINISHED, REJECTED, DROPPED, STALLED), ``LengthDistribution`` (a predicted output
  length) and ``TokenTimeline`` (step end times; a request keeps step-index ranges, so k identical steps cost
  O(1) to record, and a speculative round's tokens after its first as one ``round_extras`` entry;
  ``emission.record_tokens`` and ``emission.record_round`` keep them, native calls from the compiled scheduler).
* ``specs``: ``SpecSyntax``, the one ``name:key=value;key=value`` syntax of policy, workload, router and
  predictor specs (values coerced by the config dataclass's field annotations, ``/``-separated tuples,
  ``| None``; a repeated key or an unknown parameter is an error naming kind, spec and parameter);
  ``describe_parameters`` (name, type, default, doc) for listings.
* ``kv``: ``BlockManager``: GPU and CPU (swap) block pools, per-request block tables with real block ids, the
  admission watermark, ``Reservation`` (blocks kept for important priorities: a request that could only fit in
  blocks reserved for others is rejected at arrival); ``blocks_for``. With ``enable_prefix_caching`` (vLLM's
  automatic prefix caching, off by default) computed full blocks named by a request's ``prefix_hashes`` stay
  cached (shared, reference-counted; evictable LRU once released, counted as free) and a request whose leading
  hashes are cached starts with them computed.
* ``prefix``: chained block hashes (``token_block_hashes``, ``text_block_hashes``, ``regroup_block_hashes`` for
  a Mooncake trace's 512-token ``hash_ids``), the same in every process.
* ``plan``: the typed messages: ``BatchPlan`` (prefill ``ScheduledChunk``s, decodes with their summed context,
  ``Preemption``s, swap traffic) out of the scheduler, ``StepResult`` back in; ``Admission``,
  ``PreemptionMode`` (RECOMPUTE, SWAP, DROP), ``PreemptionReason``.
* ``displacement``: the two rules both schedulers (this one and the vLLM adapter) apply to waiting requests,
  as pure functions of plain numbers: displacement (``Need``, ``Room``, ``Release``, ``fits``, ``take``,
  ``victims_to_displace``: how many of the policy's named victims must give way) and class gating
  (``best_class``, ``excluded``). Each scheduler turns its own KV state into these numbers.
* ``policy``: the ``Policy`` base class (every hook, with vLLM-FCFS defaults), ``PolicyConfig``,
  ``StepBudget``, ``SchedulerView`` (the read-only state a policy sees) and ``next_rekey_s``.
* ``scheduler``: ``Scheduler`` + ``SchedulerConfig``. ``schedule(now_s)`` forms a batch as vLLM v1 does:
  running requests first (most protected first, by ``victim_key``, unless ``running_order`` says otherwise),
  then waiting ones in policy order, under one token budget and a sequence cap, with chunked prefill and, with
  ``reserve_full_prompt``, whole-sequence admission (vLLM's ``scheduler_reserve_full_isl``); KV-pressure
  preemption of the largest ``victim_key``; displacement of the running requests ``victims_for`` names (only
  if together they make room); class-exclusive batching; no admission in a step that preempted under KV
  pressure. ``update(plan, result)`` applies a step; ``steady_decode_steps`` / ``update_steady`` are the
  fast-forward pair; ``hand_off`` / ``add_transferred`` move a request between PD instances with its KV;
  ``static_victim_order`` (the running list is re-sorted only after admissions when the class that defines
  ``victim_key`` promises ``static_victim_key``, and when the policy's ``victim_key_changes`` count moved).

Contracts:

* **Token accounting is vLLM v1's.** ``num_tokens = prompt + generated``; ``num_computed_tokens`` catches up
  under the step's token budget, and when it catches up one token is emitted: no separate prefill and decode
  phases. Recompute preemption resets ``num_computed_tokens`` to 0 (prompt *and* generated tokens are
  recomputed in one prefill pass); swap keeps it and charges the latency model's ``swap_time_s`` both ways.
* **Policy hooks** (``policy.Policy``): ``waiting_key(request, now_s)`` (computed at enqueue; with
  ``rekey_interval_s`` the whole queue is re-keyed at the multiples of the interval, ``next_rekey_s``, so the
  times do not depend on when the scheduler happened to be called; a policy whose ``aging_class`` groups
  requests a re-key never reorders among themselves, arrival order within a class, has one request per class
  keyed at a re-key, and one whose ``waiting_key_until`` says when each key may change has only those due and
  those enqueued since, in the same pop order); ``waiting_order(view, now_s)`` (optional:
  a lazy admission order made afresh each step, for a policy whose waiting order is a per-step plan; the core
  then keys and re-keys nothing); ``admit`` (explicit rejection); ``victims_for`` (a waiting request displaces
  running ones only if the whole list makes room); ``victim_key`` (KV pressure: largest first);
  ``preemption_mode`` + ``swap_tokens`` (swap all, part or none of a victim's KV; ``DROP`` ends it, DROPPED,
  with a reason its client is told); ``running_order`` (which running requests get this step's budget);
  ``exclusive_class``; ``step_budget``; ``reservations`` (asked once); ``on_arrival``, ``on_tokens`` (a
  speculative round's tokens in one call), ``on_preempt``, ``on_finish``, ``on_leave`` (handed off with its
  KV), ``on_step`` (each executed step's composition and duration). ``uses_hook(name)`` says which hooks a
  policy needs; schedulers skip the others on their hot paths, and skip ``on_tokens`` for a request until its
  ``num_output_tokens`` reaches its ``notify_tokens_at`` (the policy's promise that nothing changes before).
* **Victims.** Under KV pressure the running request with the largest ``victim_key`` goes: vLLM's rules for
  ``fcfs`` (latest arrival) and ``priority`` (worst priority, then latest arrival).
* **Fast-forward.** ``stable_between_events = True`` promises that decisions do not drift during a decode-only
  stretch; only then (or when nothing waits) does the simulator execute a stretch in one event. A policy with
  ``rekey_interval_s`` or a ``running_order`` leaves it False, or makes it a property true only while its plan
  cannot change.
* **Speculative decoding.** ``SchedulerConfig.num_lookahead_tokens`` reserves KV slots for draft tokens and
  ``StepResult.accepted_tokens`` says how many tokens each decode emitted; those tokens share one emission
  time. ``steady_decode_steps`` ends a stretch at the round in which a request reaches its target or the
  lookahead blocks run out, and ``update_steady`` applies the rounds one by one, as per-round updates would.
* **Nothing is lost.** Every request ends FINISHED, REJECTED (with a reason: too large for the KV cache, or the
  policy's admission) or DROPPED (aborted, or preempted with DROP); STALLED only in a simulation run that
  allows stalls (:mod:`semsched.sim`).
"""
