"""Scheduling policies, one per module, each registered with :func:`register_policy`.

Importing this package imports every policy module, so ``make_policy("name")`` finds them all. A policy is one
class (a subclass of :class:`semsched.core.policy.Policy`) with its frozen config dataclass beside it; adding one
means adding one file. ``registry`` parses specs (``name:key=value;...``, the syntax of
:mod:`semsched.core.specs`) into that dataclass; a repeated policy or parameter is an error. ``params``: documented
config fields and range checks. Policies import only the standard library, numpy, ``yaml``, :mod:`semsched.core`,
:mod:`semsched.latency` and this package (``tests/test_layout.py``): never the simulator, vLLM or predictors.

Every registered policy's class docstring has one ``starvation:`` paragraph (``none``, ``bounded ...`` or
``possible ...``), listed in docs/starvation.md and checked by ``tests/sim/test_stress.py`` in both simulator
modes. ``tests/sim/golden.json`` pins every policy's outcomes (``python -m tests.sim.golden``).

Baselines: ``fcfs`` (vLLM's default), ``priority`` (vLLM's ``--scheduling-policy priority``),
``priority-preempt`` (priority with displacement; victims worst priority, then least progress), ``sjf`` and
``srpt`` (oracle or predicted output length; ``sjf`` evicts the least progress first), ``edf`` (TTFT or E2E
deadline).

Seed 000 (semantic scheduling): ``semantic`` (key ``(urgency level, estimated remaining time)`` priced with a
latency profile; urgent waiting work takes the step's tokens (``running_order``) and displaces less urgent
running work; stage-aware batching through ``step_budget``: ``level``, ``strict``, ``off``; eviction by the same
key; cache-or-recompute by ``preemption_mode``/``swap_tokens``), ``hpjf`` (most urgent level first, FCFS within).

Seed 001 (PROSERVE): ``slide-batching`` (``slide_batching.py``, Alg. 1: each step plans the whole queue with the
corrected batch estimator (:mod:`semsched.latency.correction`, fed by ``on_step``): time budget
max(min remain, eta), URGENT by density then NORMAL by remain, GETMAXCHUNK in closed form; a request not running
is planned only with a free sequence slot and room for its whole sequence; the plan reaches the core as
``step_budget``, ``running_order`` and ``waiting_order``); its baselines ``vllm-fcfs`` (vLLM v0's prefill-first
FCFS; ``WaitingBook``, the lazily pruned waiting list the baselines share), ``sarathi-fcfs`` /
``sarathi-priority`` (decodes first, then the largest prefill the profile prices within the TBT SLO:
``tbt_slo_ms``, else the tightest running TPOT SLO, else ``default_tbt_slo_ms``), ``fairbatching`` (EDF on
per-token TDG deadlines), ``vtc`` (weighted VTC: per-client counters (``Request.client``, else the priority)
charged ``input_cost``/``output_cost`` per token over the priority's weight; the fairness bound is tested).

Seed 002 (SageSched): ``cost_model.py`` (request cost ``resource`` O^2/2+I*O, ``output`` O, ``weighted`` I+2*O;
a predicted length distribution as a cost distribution), ``cost_index.py`` (``CostIndexPolicy``: smallest index
of the remaining cost first, cached in ``policy_state`` and refreshed when attained cost enters a new bucket
(``buckets=10`` or ``bucket_tokens=S``; ``refresh=false``: once); no displacement and least-progress victims by
default, the paper's preemption with ``displace=true;victim=index``; ``slo_slack`` re-keyed every ``check_s``),
``gittins`` (Gittins index, O(k) with prefix sums), ``mean`` (expected remaining cost); baselines ``fastserve``
(skip-join MLFQ, quanta base*2^p, starvation promotion), ``ssjf`` (predicted mean or median first,
non-preemptive), ``ltr`` (predicted score first, preemptive, starvation promotion), ``trail`` (shortest expected
remaining output, preemptive, never past ``protect`` = 0.8 of the prediction).

Seed 003 (tiers): ``tiered`` (displaces only strictly lower tiers; preemption limit with promote or drop; aging;
reserved blocks through ``reservations``; recompute/swap/cheapest preemption priced with
:mod:`semsched.latency.preemption`; TPOT protection ``protect_tpot`` (on) through ``step_budget`` and
``running_order``; the SLO guard and a fair share), ``slo_guard.py`` (``SLOGuard``: rolling TTFT/TPOT per tier
over a window of engine time, shedding of less important tiers with hysteresis, per-tier queue caps,
hopeless-request rejection; every rejection reason prefixed ``shed:``, ``queue full:`` or ``hopeless:``; the
gateway reuses it), ``fair_share.py`` (``ShareMeter``: served output tokens per priority in 1 s buckets over a
window), ``tier_table.py`` (``load_tier_table``, ``tier_table_yaml``: YAML tier tables in and out; a policy given
``tier_table=PATH`` exposes it as ``Policy.tier_table``).

Seed 004 (LAPS-SD): ``attained.py`` (attained service: each step's engine time charged by the scheduler to the
requests that emitted in it, one step at a time even in a fast-forwarded stretch, for a policy that sets
``charges_service``, and the rounds among those steps), ``laps-sd`` (K queues on attained service;
a request becomes perceptible once its acceptance rate settles, then is placed by eq. 6 and ordered SJF; displaces
only non-perceptible requests, swapping their KV; ``order=predicted`` and ``tiers=true`` are ours), ``las``
(least attained service, displacing past ``quantum_s``), ``lp-sjf`` (``ssjf`` under seed 004's name).

Issue 31: ``utility`` (``utility.py``: weight from tier and urgency over the Gittins index of the predicted
remaining cost, keyed once at enqueue; late requests after those in time; optional promotion of TTFT deadlines at
risk with displacement, hard tier/urgency classes, TPOT protection (``tiered.prefill_within``) and hopeless
demotion or rejection; victims by least weighted work lost with a preemption limit; a starvation floor in a share
of admissions; the core gets its order from ``waiting_order`` over heaps and bisected lines, vLLM from
``waiting_key``).
"""

from __future__ import annotations

import importlib
import pkgutil

from semsched.policies.registry import POLICIES, PolicyError, make_policy, register_policy

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "registry":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["POLICIES", "PolicyError", "make_policy", "register_policy"]
