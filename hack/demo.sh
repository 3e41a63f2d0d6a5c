#!/usr/bin/env bash
# make demo / make demo-down: the whole product on one machine (docs/getting-started/demo.md).
#
#   hack/demo.sh up     start a local control plane with fake GPU nodes, the operator with its
#                       webhook, apply the example pools and jobs, show each step; leave it running
#   hack/demo.sh down   stop the operator and the control plane; nothing is left running
#
# Environment: DEMO_DIR (state, default .demo/ in the repo), DEMO_TIMEOUT (seconds per wait,
# default 120), VENV (default .venv), KUBECTL (default kubectl), DEMO_REAL_NODES (1: also a real
# kubelet node, pool np-real, where a core Job runs in a real container and prints ACK's env;
# without root/containerd/kubelet it says so in one line and goes on with kwok only; default 0).
# Exit status: 0 when every step that should succeed did, 1 otherwise (the rejected 33 % job is
# expected to fail; the demo fails if it is admitted).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
DEMO_DIR="${DEMO_DIR:-$REPO/.demo}"
mkdir -p "$DEMO_DIR"
DEMO_DIR="$(cd "$DEMO_DIR" && pwd)"
VENV="${VENV:-$REPO/.venv}"
PY="$VENV/bin/python"
GPUSHARE="$VENV/bin/gpushare"
KUBECTL="${KUBECTL:-kubectl}"
TIMEOUT="${DEMO_TIMEOUT:-120}"
OP_PID_FILE="$DEMO_DIR/operator.pid"
OP_LOG="$DEMO_DIR/operator.log"
WH_PID_FILE="$DEMO_DIR/webhook.pid"
WH_LOG="$DEMO_DIR/webhook.log"
OP_NS=gpushare-system
PLUGIN_SELECTOR=name=gpushare-device-plugin-ds
LABEL_COLUMNS=cgpu,cgpu.disable.isolation,ack.node.gpu.schedule,ack.node.gpu.placement,gpushare.io/pool

bold() { if [[ -t 1 ]]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }
die() {
  echo "demo: FAILED: $*" >&2
  if [[ -f "$OP_LOG" ]]; then echo "demo: operator log: $OP_LOG" >&2; fi
  if [[ -f "$WH_LOG" ]]; then echo "demo: webhook log: $WH_LOG" >&2; fi
  if [[ -f "$DEMO_DIR/supervisor.pid" || -f "$OP_PID_FILE" || -f "$WH_PID_FILE" ]]; then
    echo "demo: what was started is left running for inspection; stop it with: make demo-down" >&2
  fi
  exit 1
}

# step "one line explaining it" command...: explain, echo the command, run it, fail the demo if it fails.
step() {
  local what="$1"; shift
  echo
  bold "# $what"
  local shown=("${@#"$VENV/bin/"}")  # show "gpushare ...", not the venv path
  echo "\$ ${shown[*]}"
  "$@" 2>&1 || die "step failed (exit $?): $*"
}

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# pid_in FILE: the live process whose pid FILE holds.
pid_in() {
  local pid
  pid="$(cat "$1" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

operator_pid() { pid_in "$OP_PID_FILE"; }
webhook_pid() { pid_in "$WH_PID_FILE"; }

# stop_process FILE NAME: SIGTERM the process of FILE, SIGKILL it after 10 s.
stop_process() {
  local pid
  if pid="$(pid_in "$1")"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    echo "# stopped the $2 (pid $pid)" >&2
  fi
  rm -f "$1"
}

stop_operator() { stop_process "$OP_PID_FILE" operator; }
stop_webhook() { stop_process "$WH_PID_FILE" webhook; }

PROM_DIR="$DEMO_DIR/prometheus"

# A real Prometheus (Debian's package) with the shipped alert rules, scraping the operator's
# /metrics and the kube-apiserver (docs/how-to/monitoring.md); its URL is printed, demo-down stops it.
start_prometheus() {
  local port url
  port="$(free_port)"
  if ! url="$("$PY" -m gpushare.devcluster.prometheus up --dir "$PROM_DIR" --port "$port" \
      --operator "127.0.0.1:$1" --webhook "127.0.0.1:$2" --cluster-dir "$DEMO_DIR" 2>&1)"; then
    echo "demo: no Prometheus ($url); run 'make promtool' (Debian's prometheus package) for it"
    return 0
  fi
  echo "Prometheus $url (alerts: $url/alerts, rules: $url/api/v1/rules, targets: $url/api/v1/targets)"
}

prometheus_url() { cat "$PROM_DIR/prometheus.url" 2>/dev/null; }

down() {
  "$PY" -m gpushare.devcluster.prometheus down --dir "$PROM_DIR" || true
  stop_webhook
  stop_operator
  "$PY" -m gpushare.devcluster down --dir "$DEMO_DIR"
  rm -rf "$DEMO_DIR/webhook-certs"
}

# wait_until "what" command...: retry the command every second until it succeeds or TIMEOUT passes.
wait_until() {
  local what="$1"; shift
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    operator_pid >/dev/null || die "the operator exited while waiting for $what; last lines of $OP_LOG:
$(tail -n 20 "$OP_LOG" 2>/dev/null)"
    [[ ! -f "$WH_PID_FILE" ]] || webhook_pid >/dev/null || die "the webhook exited while waiting for $what; last lines of $WH_LOG:
$(tail -n 20 "$WH_LOG" 2>/dev/null)"
    ((SECONDS < deadline)) || die "timed out after ${TIMEOUT}s waiting for $what"
    sleep 1
  done
}

# The GPU columns of the nodes of one ACK node pool: labelled mode and what the device plugin advertises.
GPU_COLUMNS='NAME:.metadata.name,SCHEDULE:.metadata.labels.ack\.node\.gpu\.schedule,GPU-MEM:.status.allocatable.aliyun\.com/gpu-mem,GPU-COUNT:.status.allocatable.aliyun\.com/gpu-count,GPU-CORE%:.status.allocatable.aliyun\.com/gpu-core\.percentage,PLUGIN-SAW:.metadata.annotations.gpushare\.io/simulated-plugin'

pool_condition_reason() {  # pool_condition_reason POOL TYPE REASON: the condition has that reason
  local got
  got="$("$KUBECTL" get gsp "$1" -o jsonpath="{.status.conditions[?(@.type==\"$2\")].reason}")"
  [[ "$got" == "$3" ]]
}

pod_unschedulable() {  # pod_unschedulable JOB: the job's pod was refused by kube-scheduler
  local got
  got="$("$KUBECTL" get pods -l "job-name=$1" -o jsonpath='{.items[0].status.conditions[?(@.type=="PodScheduled")].reason}')"
  [[ "$got" == Unschedulable ]]
}

restart_plugins_on() {  # what ACK's documentation tells you to do after relabelling: delete the plugin pod
  local node
  for node in "$@"; do
    "$KUBECTL" -n kube-system delete pod -l "$PLUGIN_SELECTOR" --field-selector "spec.nodeName=$node"
  done
}

core_job_yaml() {
  cat <<'EOF'
# 4 GiB and 50 % of one GPU on the np-cgpu node pool (needs aliyun.com/gpu-core.percentage there)
apiVersion: batch/v1
kind: Job
metadata:
  name: core-on-np-cgpu
  namespace: default
spec:
  template:
    spec:
      nodeSelector:
        alibabacloud.com/nodepool-id: np-cgpu
      containers:
      - name: cuda-sample
        image: registry.cn-beijing.aliyuncs.com/ai-samples/gpushare-sample:benchmark-tensorflow-2.2.3
        resources:
          limits:
            aliyun.com/gpu-mem: 4
            aliyun.com/gpu-core.percentage: 50
      restartPolicy: Never
EOF
}

REAL_NODES="${DEMO_REAL_NODES:-0}"

real_node_part() {
  echo
  bold "# Part 3: a real kubelet node (realnode-0, node pool np-real): containerd, runc, the project's device plugin"
  step "The real node beside the kwok nodes" "$KUBECTL" get nodes -l gpushare.io/real-node=true -o wide
  echo "\$ kubectl apply -f - (GPUSharePool real: np-real, computeAllocation: true)"
  "$KUBECTL" apply -f - <<'EOF' || die "applying pool real failed"
apiVersion: gpushare.io/v1alpha1
kind: GPUSharePool
metadata:
  name: real
spec:
  nodeSelector:
    matchLabels:
      alibabacloud.com/nodepool-id: np-real
  computeAllocation: true
EOF
  step "Wait until pool real is Ready: labels written, the plugin pod replaced, the kubelet advertising core_mem" \
    "$KUBECTL" wait gsp real --for=condition=Ready --timeout="${TIMEOUT}s"
  step "What the real kubelet advertises now" "$KUBECTL" get nodes realnode-0 -o custom-columns="$GPU_COLUMNS"
  echo "\$ kubectl apply -f - (Job core-on-real-node: 4 GiB and 50 % of a GPU on np-real)"
  "$KUBECTL" apply -f - <<'EOF' || die "applying the core job failed"
apiVersion: batch/v1
kind: Job
metadata:
  name: core-on-real-node
  namespace: default
spec:
  backoffLimit: 0
  template:
    spec:
      nodeSelector:
        alibabacloud.com/nodepool-id: np-real
      containers:
      - name: main
        image: localhost/gpushare/workload:1.0
        imagePullPolicy: Never
        resources:
          limits:
            aliyun.com/gpu-mem: 4
            aliyun.com/gpu-core.percentage: 50
      restartPolicy: Never
EOF
  step "Wait for the core Job to run to completion in a real container" \
    "$KUBECTL" wait job core-on-real-node --for=condition=Complete --timeout="${TIMEOUT}s"
  step "Its environment, from the device plugin's Allocate answer (ACK's variables)" \
    bash -c "\"$KUBECTL\" logs job/core-on-real-node | grep -E 'ALIYUN_COM_GPU_MEM|CGPU_DISABLE|NVIDIA_VISIBLE'"
}

NVIDIA_STEP=0
NVIDIA_COLUMNS='NAME:.metadata.name,POOL:.metadata.labels.gpushare\.io/pool,CONFIG:.metadata.labels.nvidia\.com/device-plugin\.config,CGPU:.metadata.labels.cgpu,SCHEDULE:.metadata.labels.ack\.node\.gpu\.schedule,NVIDIA-GPU:.status.allocatable.nvidia\.com/gpu'

agent_published() {  # the node agent on the real node has published its GPU count
  [[ -n "$("$KUBECTL" get node realnode-0 -o jsonpath='{.metadata.labels.gpushare\.io/gpu\.count}')" ]]
}

# nvidia_job NAME NODEPOOL RESOURCE WAIT-STEP ENV-STEP PATTERN: a Job of one pod asking for one RESOURCE
# on the real node (node pool NODEPOOL), waited for; its pod's log lines matching PATTERN printed.
nvidia_job() {
  local name="$1" nodepool="$2" resource="$3" waiting="$4" env_step="$5" pattern="$6"
  echo "\$ kubectl apply -f - (Job $name: one $resource on $nodepool)"
  "$KUBECTL" apply -f - <<EOF || die "applying job $name failed"
apiVersion: batch/v1
kind: Job
metadata:
  name: $name
  namespace: default
spec:
  # NVIDIA's plugin registers several times as its pod starts: a pod bound meanwhile can be refused
  # by the kubelet ("no healthy devices"; docs/concepts/backends.md). The Job makes another.
  backoffLimit: 3
  template:
    spec:
      nodeSelector:
        alibabacloud.com/nodepool-id: $nodepool
      containers:
      - name: main
        image: localhost/gpushare/workload:1.0
        imagePullPolicy: Never
        resources:
          limits:
            $resource: 1
      restartPolicy: Never
EOF
  step "$waiting" "$KUBECTL" wait job "$name" --for=condition=Complete --timeout="${TIMEOUT}s"
  step "$env_step" \
    bash -c "\"$KUBECTL\" logs \$(\"$KUBECTL\" get pods -l job-name=$name --field-selector status.phase=Succeeded -o name) | grep -E '$pattern'"
}

nvidia_part() {
  echo
  bold "# Part 4: the real node moves to an NVIDIA time-slicing pool: NVIDIA's real device plugin and"
  bold "# config-manager over the project's libnvidia-ml.so.1, which pretends 2 GPUs"
  echo "\$ kubectl apply -f - (GPUSharePool real-nvidia: np-real-nvidia, nvidia: TimeSlicing x 4)"
  "$KUBECTL" apply -f - <<'EOF' || die "applying pool real-nvidia failed"
apiVersion: gpushare.io/v1alpha1
kind: GPUSharePool
metadata:
  name: real-nvidia
spec:
  nodeSelector:
    matchLabels:
      alibabacloud.com/nodepool-id: np-real-nvidia
  nvidia:
    strategy: TimeSlicing
    replicas: 4
    # NVIDIA's plugin pod on realnode-0 starts only once the node leaves its ACK pool (the
    # DaemonSet skips cgpu=true nodes), so it mounts the pool's config at start: no 90 s wait.
    configPropagationSeconds: 10
EOF
  step "GPU Feature Discovery's label on the real node (it has GPUs): NVIDIA's plugin stays off while the node is in an ACK pool (cgpu=true)" \
    "$KUBECTL" label node realnode-0 nvidia.com/gpu.present=true
  wait_until "the node agent to publish the real node's GPUs" agent_published
  step "The node agent's inventory of the real node, read through pynvml over the library" \
    "$KUBECTL" get node realnode-0 -L gpushare.io/gpu.count,gpushare.io/gpu.product,gpushare.io/gpu.memory-mib
  step "Move the real node to node pool np-real-nvidia: the operator restores ACK's labels and writes NVIDIA's config label in one guarded patch" \
    "$KUBECTL" label node realnode-0 alibabacloud.com/nodepool-id=np-real-nvidia --overwrite
  step "Wait until pool real-nvidia is Ready: ACK's plugin gone, NVIDIA's started on the pool's config" \
    "$KUBECTL" wait gsp real-nvidia --for=condition=Ready --timeout="$((TIMEOUT * 2))s"
  step "The real node now: ACK's labels as before its ACK pool, NVIDIA's config, nvidia.com/gpu = 4 replicas x 2 GPUs" \
    "$KUBECTL" get nodes realnode-0 -o custom-columns="$NVIDIA_COLUMNS"
  step "The device plugin pods on the real node: NVIDIA's only" \
    "$KUBECTL" get pods -A -o wide --field-selector spec.nodeName=realnode-0 -l 'app.kubernetes.io/name=nvidia-device-plugin'
  step "ACK's stand-in plugin pods on the real node: none" \
    "$KUBECTL" -n kube-system get pods -o wide --field-selector spec.nodeName=realnode-0 -l "$PLUGIN_SELECTOR"
  wait_until "NVIDIA's plugin pod on the real node to be Ready" \
    "$KUBECTL" -n nvidia-device-plugin wait pods -l app.kubernetes.io/name=nvidia-device-plugin \
    --field-selector spec.nodeName=realnode-0 --for=condition=Ready --timeout=5s
  nvidia_job gpu-on-real-node np-real-nvidia nvidia.com/gpu "Wait for the Job to run to completion in a real container" \
    "Its environment, from NVIDIA's plugin's Allocate answer: one pretend GPU's UUID" 'NVIDIA_VISIBLE|ALIYUN_COM_GPU_MEM'
}

MIG_STEP=0
MIG_COLUMNS='NAME:.metadata.name,POOL:.metadata.labels.gpushare\.io/pool,MIG-CONFIG:.metadata.labels.nvidia\.com/mig\.config,STATE:.metadata.labels.nvidia\.com/mig\.config\.state,MIG-1G.5GB:.status.allocatable.nvidia\.com/mig-1g\.5gb,MIG-2G.10GB:.status.allocatable.nvidia\.com/mig-2g\.10gb,MIG-3G.20GB:.status.allocatable.nvidia\.com/mig-3g\.20gb,NVIDIA-GPU:.status.allocatable.nvidia\.com/gpu'

mig_part() {
  echo
  bold "# Part 5: the real node moves to a MIG pool: NVIDIA's MIG manager, deployed as the GPU Operator deploys it,"
  bold "# cuts the library's 2 pretend A100-40GB into slices; NVIDIA's plugin advertises each profile"
  echo "\$ kubectl apply -f - (GPUSharePool real-mig: np-real-mig, nvidia: MIG, 3g.20gb + 2g.10gb + 2 x 1g.5gb per GPU)"
  "$KUBECTL" apply -f - <<'EOF' || die "applying pool real-mig failed"
apiVersion: gpushare.io/v1alpha1
kind: GPUSharePool
metadata:
  name: real-mig
spec:
  nodeSelector:
    matchLabels:
      alibabacloud.com/nodepool-id: np-real-mig
  nvidia:
    strategy: MIG
    mig:
      geometry:
        - profiles: {3g.20gb: 1, 2g.10gb: 1, 1g.5gb: 2}
    # The MIG manager's and the plugin's pods run already: their ConfigMap volumes take the pool's
    # configs at the kubelet's next pod sync (every 15 s on this real node, 1 min by default).
    configPropagationSeconds: 40
EOF
  step "Move the real node to node pool np-real-mig: the operator gives it back its own plugin config and writes the pool's MIG config" \
    "$KUBECTL" label node realnode-0 alibabacloud.com/nodepool-id=np-real-mig --overwrite
  step "Wait until pool real-mig is Ready: the configs propagated, the MIG manager's state success, each profile advertised" \
    "$KUBECTL" wait gsp real-mig --for=condition=Ready --timeout="$((TIMEOUT * 3))s"
  step "The real node in the MIG pool: its MIG config, the manager's state, the profiles the kubelet advertises (2 GPUs)" \
    "$KUBECTL" get nodes realnode-0 -o custom-columns="$MIG_COLUMNS"
  nvidia_job mig-on-real-node np-real-mig nvidia.com/mig-1g.5gb "Wait for the MIG Job to run to completion in a real container" \
    "Its environment, from NVIDIA's plugin's Allocate answer: one MIG device's UUID" 'NVIDIA_VISIBLE'
}

switch_cgpu_to_core_mem() {
  echo
  bold "# Part 2: switch pool cgpu to core_mem. ACK's device plugin reads the labels only when it starts"
  bold "# (here: the plugin simulator, gpushare.devcluster.pluginsim), so labels alone change nothing."
  step "The np-cgpu nodes now: labelled cgpu, advertising GPU memory and no gpu-core.percentage" \
    "$KUBECTL" get nodes -l alibabacloud.com/nodepool-id=np-cgpu -o custom-columns="$GPU_COLUMNS"
  step "Switch the pool to core_mem with devicePlugin.restart: Never: the operator relabels the nodes, restarts nothing" \
    "$KUBECTL" patch gsp cgpu --type merge -p '{"spec":{"computeAllocation":true,"devicePlugin":{"restart":"Never"}}}'
  wait_until "pool cgpu to report the nodes whose plugin needs a restart" \
    pool_condition_reason cgpu Degraded PluginRestartNeeded
  step "Labelled core_mem, but the plugins still advertise what they saw at start: no gpu-core.percentage" \
    "$KUBECTL" get nodes -l alibabacloud.com/nodepool-id=np-cgpu -o custom-columns="$GPU_COLUMNS"
  step "The pool does not claim Ready: it names the nodes that still need a device plugin restart" \
    "$GPUSHARE" inspect cgpu
  core_job_yaml >"$DEMO_DIR/job-core-on-np-cgpu.yaml"
  step "Submit a job asking for 50 % of a GPU on np-cgpu: admitted (the pool is core_mem now)" \
    "$KUBECTL" apply -f "$DEMO_DIR/job-core-on-np-cgpu.yaml"
  wait_until "kube-scheduler to leave the core job Pending" pod_unschedulable core-on-np-cgpu
  step "It stays Pending: no np-cgpu node advertises aliyun.com/gpu-core.percentage yet" \
    "$KUBECTL" get pods -l job-name=core-on-np-cgpu \
    -o custom-columns='NAME:.metadata.name,STATUS:.status.phase,NODE:.spec.nodeName,WHY:.status.conditions[?(@.type=="PodScheduled")].message'
  step "Restart the device plugin on each np-cgpu node, as ACK's documentation says (delete the pod; the DaemonSet recreates it)" \
    restart_plugins_on gpu-cgpu-0 gpu-cgpu-1
  step "Wait until the pool is Ready: the operator sees every node advertise core_mem resources" \
    "$KUBECTL" wait gsp cgpu --for=condition=Ready --timeout="${TIMEOUT}s"
  step "The new plugins read core_mem at start: gpu-core.percentage 100 per GPU" \
    "$KUBECTL" get nodes -l alibabacloud.com/nodepool-id=np-cgpu -o custom-columns="$GPU_COLUMNS"
  step "The job that was Pending is scheduled onto an np-cgpu node and runs (kwok completes it)" \
    "$KUBECTL" wait job/core-on-np-cgpu --for=condition=Complete --timeout="${TIMEOUT}s"
  step "Where it ran" "$KUBECTL" get pods -l job-name=core-on-np-cgpu -o wide
}

# The operator and the webhook as two processes, as the chart's two containers run them.
# setsid: each outlives this script and gets no SIGINT from the terminal; demo-down stops them.
start_operator() {
  setsid "$GPUSHARE" run --kubeconfig "$KUBECONFIG" --metrics-port "$1" </dev/null >>"$OP_LOG" 2>&1 &
  echo $! >"$OP_PID_FILE"
}

start_webhook() {  # start_webhook METRICS_PORT WEBHOOK_PORT
  setsid "$GPUSHARE" webhook --kubeconfig "$KUBECONFIG" --metrics-port "$1" \
    --webhook-local --webhook-port "$2" --webhook-namespace "$OP_NS" \
    --webhook-cert-dir "$DEMO_DIR/webhook-certs" </dev/null >>"$WH_LOG" 2>&1 &
  echo $! >"$WH_PID_FILE"
}

policy_rejects_33() {
  local out
  out="$("$KUBECTL" apply --dry-run=server -f examples/invalid/cuda-sample-33.yaml 2>&1)" && return 1
  grep -q "ValidatingAdmissionPolicy.*GS001-core-percentage-step" <<<"$out"
}

# A bare Pod asking for 33 % of a GPU (what a controller creates, or `kubectl run`).
BARE_POD_33='{"spec":{"nodeSelector":{"gpushare.io/pool":"gpu-core"},"containers":[{"name":"cuda","image":"x","resources":{"limits":{"aliyun.com/gpu-mem":"2","aliyun.com/gpu-core.percentage":"33"}}}]}}'

pod_policy_rejects_33() {
  local out
  out="$("$KUBECTL" run cuda-33 --dry-run=server --image=x --restart=Never --overrides="$BARE_POD_33" 2>&1)" \
    && return 1
  grep -q "ValidatingAdmissionPolicy.*GS001-core-percentage-step" <<<"$out"
}

webhook_answers() {  # a GPU pod that passes the stateless rules: only the webhook can deny it
  local out
  out="$("$KUBECTL" run probe --dry-run=server --image=x --restart=Never \
    --overrides='{"spec":{"containers":[{"name":"probe","image":"x","resources":{"limits":{"aliyun.com/gpu-mem":"2"}}}]}}' 2>&1)" \
    && return 1
  grep -q "GS007-pool-target-missing" <<<"$out"
}

webhook_rejects_33() {
  local out
  out="$("$KUBECTL" apply --dry-run=server -f examples/invalid/cuda-sample-33.yaml 2>&1)" && return 1
  grep -q GS001-core-percentage-step <<<"$out"
}



up() {
  local started=$SECONDS
  [[ -x "$GPUSHARE" ]] || die "$GPUSHARE not found: run 'make setup' (make demo does it)"
  command -v "$KUBECTL" >/dev/null || die "$KUBECTL not found on PATH"

  bold "# gpushare demo: a real kube-apiserver, etcd, controller-manager, scheduler and kwok on 127.0.0.1"
  echo "# state, logs and kubeconfig: $DEMO_DIR"
  if operator_pid >/dev/null || webhook_pid >/dev/null || [[ -f "$DEMO_DIR/supervisor.pid" ]]; then
    echo "# an earlier demo is still running in $DEMO_DIR: stopping it first"
    down
  fi

  echo
  bold "# Start the local control plane; it installs the GPUSharePool CRD and the stand-in device plugin DaemonSet"
  if [[ "$REAL_NODES" != 0 ]]; then
    local why
    if ! why="$("$PY" -c 'from gpushare.devcluster.realnode import RealNodeUnavailable, preflight
try:
    preflight(1)
except RealNodeUnavailable as exc:
    raise SystemExit(str(exc))' 2>&1)"; then
      echo "demo: no real node ($why); kwok nodes only"
      REAL_NODES=0
    fi
  fi
  local nvidia_args=()
  if [[ "$REAL_NODES" != 0 ]]; then
    local archive
    if ! why="$("$PY" -c 'from gpushare.devcluster import nvidia as nv
missing = [f"{p} (make {t})" for p, t in ((nv.plugin_bin_dir() / "nvidia-device-plugin", "nvidia-plugin"), (nv.fake_nvml_lib(), "fake-nvml")) if not p.exists()]
raise SystemExit(", ".join(missing) if missing else 0)' 2>&1)"; then
      echo "demo: no NVIDIA pool on the real node (missing $why)"
    elif ! archive="$(bash hack/build-image-local.sh 2>/dev/null | tail -n 1)" || [[ ! -f "$archive" ]]; then
      echo "demo: no NVIDIA pool on the real node (no image for the node agent: make image-local)"
    else
      NVIDIA_STEP=1
      nvidia_args=(--nvidia-plugin --real-node-plugin ack --agent-image "$archive")
      if ! why="$("$PY" -c 'from gpushare.devcluster import migmanager
missing = migmanager.missing()
raise SystemExit(", ".join(missing) if missing else 0)' 2>&1)"; then
        echo "demo: no MIG pool on the real node (missing $why)"
      else
        MIG_STEP=1
        nvidia_args+=(--mig-manager)
      fi
    fi
  fi
  echo "\$ python -m gpushare.devcluster up --dir $DEMO_DIR --nodes 0 --pools 0 --real-nodes $REAL_NODES ${nvidia_args[*]}"
  "$PY" -m gpushare.devcluster up --dir "$DEMO_DIR" --nodes 0 --pools 0 --real-nodes "$REAL_NODES" \
    "${nvidia_args[@]}" >/dev/null \
    || die "the control plane did not start (see $DEMO_DIR/supervisor.log)"
  export KUBECONFIG="$DEMO_DIR/kubeconfig"

  step "Add 6 fake GPU nodes in 3 ACK node pools (kwok), and run the node agent once on each (NVML stand-in)" \
    "$PY" -m gpushare.devcluster.demo nodes --kubeconfig "$KUBECONFIG"

  local metrics_port webhook_port webhook_metrics_port
  metrics_port="$(free_port)"
  webhook_port="$(free_port)"
  webhook_metrics_port="$(free_port)"
  echo
  bold "# Start the operator (log: $OP_LOG) and, as a process of its own, its admission webhook on https://127.0.0.1:$webhook_port (log: $WH_LOG)"
  "$KUBECTL" create namespace "$OP_NS" --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null \
    || die "cannot create namespace $OP_NS"
  echo "\$ gpushare run --metrics-port $metrics_port &"
  start_operator "$metrics_port"
  echo "operator pid $(cat "$OP_PID_FILE"), metrics http://127.0.0.1:$metrics_port/metrics"
  echo "\$ gpushare webhook --webhook-local --webhook-port $webhook_port --metrics-port $webhook_metrics_port &"
  start_webhook "$webhook_metrics_port" "$webhook_port"
  echo "webhook pid $(cat "$WH_PID_FILE"), metrics http://127.0.0.1:$webhook_metrics_port/metrics"
  wait_until "the webhook to answer (kubectl apply --dry-run=server of a 33 % job)" webhook_rejects_33
  echo "webhook registered and answering"
  echo
  bold "# Start Prometheus with the shipped alert rules, scraping the operator, the webhook and the API server"
  start_prometheus "$metrics_port" "$webhook_metrics_port"

  wait_until "the device plugin pods to be Ready" \
    "$KUBECTL" -n kube-system rollout status ds/gpushare-device-plugin-ds --timeout=5s
  step "The nodes' GPU-sharing labels BEFORE: none yet (nodes are grouped by alibabacloud.com/nodepool-id)" \
    "$KUBECTL" get nodes -L alibabacloud.com/nodepool-id,$LABEL_COLUMNS
  step "The stand-in device plugin pods BEFORE (note names and ages)" "$KUBECTL" -n kube-system get pods -l "$PLUGIN_SELECTOR" -o wide --sort-by=.spec.nodeName

  step "Apply the example GPUSharePools: cgpu (isolation), cgpu-no-isolation (sharing), gpu-core (memory + compute)" \
    "$KUBECTL" apply -f examples/pool-cgpu.yaml -f examples/pool-cgpu-no-isolation.yaml -f examples/pool-gpu-core.yaml
  step "Wait until the operator has labelled every node and restarted its device plugin" \
    "$KUBECTL" wait gsp --all --for=condition=Ready --timeout="${TIMEOUT}s"
  step "The pools: schedule (mode), backend, nodes, Ready nodes, why Ready" "$KUBECTL" get gsp
  step "The nodes' labels AFTER: the ACK labels each node pool needs, set by the operator" \
    "$KUBECTL" get nodes -L alibabacloud.com/nodepool-id,$LABEL_COLUMNS
  wait_until "the device plugin pods to be Ready again" \
    "$KUBECTL" -n kube-system rollout status ds/gpushare-device-plugin-ds --timeout=5s
  step "The device plugin pods AFTER: each one was replaced (new names, seconds old) so it rereads the labels" \
    "$KUBECTL" -n kube-system get pods -l "$PLUGIN_SELECTOR" -o wide --sort-by=.spec.nodeName
  step "A pool in detail: spec, per-node status, conditions and the operator's Events" \
    "$KUBECTL" describe gsp gpu-core

  step "Submit the seed jobs: admitted by the webhook (the no-isolation one with a warning)" \
    "$KUBECTL" apply -f examples/job-cgpu-test.yaml -f examples/job-cgpu-test-no-isolation.yaml -f examples/job-cuda-sample.yaml
  step "Wait for the jobs: the scheduler places each pod on its pool's nodes; kwok (no real GPU) runs it to completion" \
    "$KUBECTL" wait job/cgpu-test job/cgpu-test-no-isolation job/cuda-sample --for=condition=Complete --timeout="${TIMEOUT}s"
  step "Where each seed job ran: cgpu-test on np-cgpu, cgpu-test-no-isolation on np-cgpu-no-isolation, cuda-sample on np-gpu-core" \
    "$KUBECTL" get pods -o wide

  echo
  bold "# Submit a bad job asking for 33 % of a GPU: the webhook rejects it (gpu-core.percentage must be a multiple of 5)"
  echo "\$ $KUBECTL apply -f examples/invalid/cuda-sample-33.yaml"
  local out rc=0
  out="$("$KUBECTL" apply -f examples/invalid/cuda-sample-33.yaml 2>&1)" || rc=$?
  printf '%s\n' "$out"
  if ((rc == 0)); then
    die "the 33 % job was admitted; the webhook should have rejected it"
  fi
  grep -q "denied the request" <<<"$out" || die "kubectl failed, but not with the webhook's denial"
  echo "(rejected as expected: kubectl exit code $rc)"

  step "gpushare inspect (also kubectl gpushare inspect): per pool and node, mode, isolation, GPU memory and compute" \
    "$GPUSHARE" inspect

  switch_cgpu_to_core_mem

  # The demo's local webhook fails open (it deletes its configuration when it stops), so the Pods
  # policy goes in too, as the chart installs it for failurePolicy Ignore: a bare Pod stays guarded.
  step "Install the ValidatingAdmissionPolicies: the stateless rules, evaluated inside the kube-apiserver itself" \
    "$KUBECTL" apply -f manifests/webhook/policy.yaml -f manifests/webhook/policy-pods.yaml
  # The dashboard's warnings panel (a rate) needs the webhook's warned counter scraped twice before
  # the webhook stops: this process is the only one that counted the seed job's warning.
  local prom_now
  if prom_now="$(prometheus_url)"; then
    wait_until "Prometheus to scrape the webhook's warning count twice" \
      "$PY" -m gpushare.devcluster.prometheus scraped --url "$prom_now" \
      --series 'gpushare_admission_requests_total{decision="warned"}' --samples 2
  fi
  echo
  bold "# Stop the webhook, as in an outage (the operator keeps reconciling the pools)"
  stop_webhook 2>&1
  local deadline=$((SECONDS + TIMEOUT))
  until policy_rejects_33 && pod_policy_rejects_33; do  # a new policy loads within a second or so
    ((SECONDS < deadline)) || die "timed out after ${TIMEOUT}s waiting for the policies to deny 33 %"
    sleep 1
  done
  step "Webhook down: a Deployment without GPU requests is admitted (matchConditions never send it to the webhook)" \
    "$KUBECTL" create deployment web --image=registry.invalid/web:1
  echo
  bold "# Webhook down: the 33 % job is still denied, by the policy (rule GS001-core-percentage-step)"
  echo "\$ $KUBECTL apply -f examples/invalid/cuda-sample-33.yaml"
  rc=0
  out="$("$KUBECTL" apply -f examples/invalid/cuda-sample-33.yaml 2>&1)" || rc=$?
  printf '%s\n' "$out"
  ((rc != 0)) || die "the 33 % job was admitted while the webhook was down; the policy should have denied it"
  grep -q "ValidatingAdmissionPolicy" <<<"$out" || die "kubectl failed, but not with the policy's denial"
  echo "(rejected as expected: kubectl exit code $rc)"
  echo
  bold "# Webhook down: a bare Pod asking for 33 % is denied too, by the Pods policy"
  echo "\$ $KUBECTL run cuda-33 --image=x --restart=Never --overrides='$BARE_POD_33'"
  rc=0
  out="$("$KUBECTL" run cuda-33 --image=x --restart=Never --overrides="$BARE_POD_33" 2>&1)" || rc=$?
  printf '%s\n' "$out"
  ((rc != 0)) || die "the 33 % pod was admitted while the webhook was down; the Pods policy should have denied it"
  grep -q "ValidatingAdmissionPolicy" <<<"$out" || die "kubectl failed, but not with the policy's denial"
  echo "(rejected as expected: kubectl exit code $rc)"

  echo
  bold "# Start the webhook again: it answers GPU workloads again"
  start_webhook "$webhook_metrics_port" "$webhook_port"
  echo "webhook pid $(cat "$WH_PID_FILE")"
  wait_until "the webhook to answer again" webhook_answers
  echo "webhook answering again"

  if [[ "$REAL_NODES" != 0 ]]; then real_node_part; fi
  if [[ "$NVIDIA_STEP" != 0 ]]; then nvidia_part; fi
  if [[ "$MIG_STEP" != 0 ]]; then mig_part; fi

  local prom
  if prom="$(prometheus_url)"; then
    echo
    bold "# The dashboard's queries over the demo so far, run by Prometheus ($prom)"
    "$PY" -m gpushare.devcluster.prometheus panels --url "$prom" --since $((SECONDS - started + 60)) \
      --empty-by-design "Evictions for mode switches=no GPU pod ran on a node whose mode switched, so none was evicted" \
      || die "the dashboard's queries failed against $prom"
  fi

  echo
  bold "# Demo ready in $((SECONDS - started))s. The cluster and the operator keep running. Explore:"
  cat <<EOF
export KUBECONFIG=$KUBECONFIG
kubectl get gsp
kubectl get nodes -L $LABEL_COLUMNS
kubectl describe gsp cgpu
kubectl delete gsp cgpu-no-isolation      # the operator restores those nodes' labels
$GPUSHARE inspect -d
tail -f $OP_LOG $WH_LOG
$(prometheus_url || echo "(no Prometheus: make promtool)")                   # Prometheus: alerts, rules, targets
make demo-down                            # stop everything
EOF
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 [up|down]" >&2; exit 2 ;;
esac
