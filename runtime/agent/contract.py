"""The one place that names every environment variable, port, label and route both halves use.

The Pulumi components (``components/``) import these names instead of repeating strings, and the
agent reads and writes them. Standard library only.

Conventions borrowed:
    * torchrun (``torch.distributed.run`` and its ``LocalElasticAgent``): ``WORLD_SIZE``, ``RANK``,
      ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``GROUP_WORLD_SIZE``, ``ROLE_NAME``,
      ``ROLE_RANK``, ``ROLE_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_RUN_ID``,
      ``TORCHELASTIC_RESTART_COUNT``, ``TORCHELASTIC_MAX_RESTARTS``, ``TORCHELASTIC_USE_AGENT_STORE``,
      ``TORCHELASTIC_ERROR_FILE``, ``TORCHELASTIC_SIGNALS_TO_HANDLE``,
      ``TORCH_NCCL_ASYNC_ERROR_HANDLING``, ``OMP_NUM_THREADS`` (see ``runtime.agent.execution.torchrun``).
    * JAX: ``jax.distributed.initialize()`` reads ``JAX_COORDINATOR_ADDRESS`` (and
      ``JAX_LOCAL_DEVICE_IDS``) itself, but the process count and id only from a detected cluster:
      ``runtime.jaxcluster`` registers trainplane's, which reads ``JAX_NUM_PROCESSES`` and
      ``JAX_PROCESS_ID``.
    * TensorFlow (``tf.distribute.cluster_resolver.TFConfigClusterResolver``): ``TF_CONFIG``.
    * Ray (``ray.init()`` reads the cluster address from it): ``RAY_ADDRESS``.
    * Kubernetes: Indexed Job ``JOB_COMPLETION_INDEX``, StatefulSet pod name ordinal suffix,
      ``app.kubernetes.io/*`` recommended labels.
"""

from __future__ import annotations

# --- Environment contract of every user process (DESIGN.md, "Environment contract") ---------
WORLD_SIZE = "WORLD_SIZE"
RANK = "RANK"
LOCAL_RANK = "LOCAL_RANK"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
NODE_RANK = "NODE_RANK"
GROUP_RANK = "GROUP_RANK"
NODE_WORLD_SIZE = "NODE_WORLD_SIZE"
GROUP_WORLD_SIZE = "GROUP_WORLD_SIZE"
POD_IPS = "POD_IPS"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
TORCHELASTIC_RUN_ID = "TORCHELASTIC_RUN_ID"
TORCHELASTIC_RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"
TORCHELASTIC_MAX_RESTARTS = "TORCHELASTIC_MAX_RESTARTS"
TORCHELASTIC_USE_AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"
TORCHELASTIC_ERROR_FILE = "TORCHELASTIC_ERROR_FILE"
TORCHELASTIC_SIGNALS_TO_HANDLE = "TORCHELASTIC_SIGNALS_TO_HANDLE"  # also read by the agent: what it forwards
TORCH_NCCL_ASYNC_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
ROLE_NAME = "ROLE_NAME"
ROLE_RANK = "ROLE_RANK"
ROLE_WORLD_SIZE = "ROLE_WORLD_SIZE"
OMP_NUM_THREADS = "OMP_NUM_THREADS"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
JAX_COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"
JAX_NUM_PROCESSES = "JAX_NUM_PROCESSES"
JAX_PROCESS_ID = "JAX_PROCESS_ID"
JAX_LOCAL_DEVICE_IDS = "JAX_LOCAL_DEVICE_IDS"
TF_CONFIG = "TF_CONFIG"
# Single-controller distributions: set on the driver (node 0's one user process) only.
RAY_ADDRESS = "RAY_ADDRESS"  # host:port of the Ray head (its GCS) on node 0
MONARCH_WORKER_ADDRESSES = "MONARCH_WORKER_ADDRESSES"  # comma-separated tcp://addr:port, one per node, node order
# trainplane's own per-process variables.
TRAINPLANE_GENERATION = "TRAINPLANE_GENERATION"
TRAINPLANE_WORLD_FILE = "TRAINPLANE_WORLD_FILE"
JOIN_TIMEOUT = "TRAINPLANE_JOIN_TIMEOUT"
"""Seconds the ranks of a new world wait for each other at its ``env://`` rendezvous, beyond the timeout the
user gives ``init_process_group``: set by the agent on the ranks of an elastic torch batch job (its quorum
timeout), whose joining node's ranks start cold while the survivors re-initialise at once
(``runtime.agent.execution.torchhooks``)."""

# --- Agent settings, read by ``python -m runtime.agent`` (pods) -------------------------------
JOB_NAME = "TRAINPLANE_JOB"
TOKEN = "TRAINPLANE_TOKEN"  # noqa: S105 - the variable's name, not a secret
WORKERS = "TRAINPLANE_WORKERS"
NUM_PROC = "TRAINPLANE_NUM_PROC"
NODE_RANK_SETTING = "TRAINPLANE_NODE_RANK"
COORDINATOR_HOST = "TRAINPLANE_COORDINATOR"
AGENT_PORT_SETTING = "TRAINPLANE_AGENT_PORT"
BIND_ADDRESS = "TRAINPLANE_BIND_ADDRESS"
ADVERTISE_ADDRESS = "TRAINPLANE_ADVERTISE_ADDRESS"
QUORUM_WORKERS = "TRAINPLANE_QUORUM_WORKERS"
QUORUM_TIMEOUT = "TRAINPLANE_QUORUM_TIMEOUT"
TIMEOUT = "TRAINPLANE_TIMEOUT"
HANG_REPORT_AFTER = "TRAINPLANE_HANG_REPORT_AFTER"
MAX_RESTARTS = "TRAINPLANE_MAX_RESTARTS"
DISTRIBUTION = "TRAINPLANE_DISTRIBUTION"
ROLE = "TRAINPLANE_ROLE"  # the workers' role (torchrun's --role): ROLE_NAME; default "default"
VIRTUAL_LOCAL_RANK = "TRAINPLANE_VIRTUAL_LOCAL_RANK"  # "true": LOCAL_RANK 0, one GPU each (torchrun's flag)
REDIRECTS = "TRAINPLANE_REDIRECTS"  # torchrun's --redirects: N or LOCAL_RANK:N,... (0 none, 1 out, 2 err, 3 both)
TEE = "TRAINPLANE_TEE"  # torchrun's --tee, same form
LOCAL_RANKS_FILTER = "TRAINPLANE_LOCAL_RANKS_FILTER"  # torchrun's --local-ranks-filter: 0,1,...
STDOUT_FILTERS = "TRAINPLANE_DUPLICATE_STDOUT_FILTERS"  # torchrun's --duplicate-stdout-filters
STDERR_FILTERS = "TRAINPLANE_DUPLICATE_STDERR_FILTERS"  # torchrun's --duplicate-stderr-filters
FORWARD_STDIN = "TRAINPLANE_FORWARD_STDIN"  # local mode: "true": global rank 0 inherits the agent's stdin
MODE = "TRAINPLANE_MODE"
LOG_DIR = "TRAINPLANE_LOG_DIR"
MONITOR_MEMBERS = "TRAINPLANE_MONITOR_MEMBERS"
MIN_WORKERS = "TRAINPLANE_MIN_WORKERS"
MAX_WORKERS = "TRAINPLANE_MAX_WORKERS"
ENTRYPOINT = "TRAINPLANE_ENTRYPOINT"  # JSON list: the user command after the interpreter
NO_PYTHON = "TRAINPLANE_NO_PYTHON"  # "true": ENTRYPOINT is an argv run as is, not under the interpreter
GRACE_PERIOD = "TRAINPLANE_GRACE_PERIOD"  # seconds between SIGTERM and SIGKILL at teardown
DIE_WITH_PARENT = "TRAINPLANE_DIE_WITH_PARENT"  # local mode: exit when the launcher dies
PARENT_PID = "TRAINPLANE_PARENT_PID"  # pid of the process that started this one (agent/launcher)
PEERS = "TRAINPLANE_PEERS"  # every node index's agent, host[:port], comma-separated; {index} expands
RESOLVE = "TRAINPLANE_RESOLVE"  # JSON object host name -> address, consulted before DNS
HEARTBEAT_INTERVAL = "TRAINPLANE_HEARTBEAT_INTERVAL"  # seconds, first interval after a change
HEARTBEAT_TTL = "TRAINPLANE_HEARTBEAT_TTL"  # seconds: dead after one TTL, removed after two
VERDICT_FILE = "TRAINPLANE_VERDICT_FILE"  # local mode: where agents write the job's final verdict (JSON)
RUN_ROOT = "TRAINPLANE_RUN_ROOT"  # directory for the agent's private run directory (default: system temp)
CONSOLE_FILE = "TRAINPLANE_CONSOLE_FILE"  # local mode: state file of the console the agents share
# Fan-out and liveness aggregation (DESIGN.md, "Fan-out", "Membership").
TREE_THRESHOLD = "TRAINPLANE_TREE_THRESHOLD"  # nodes at or above which fan-out and liveness use a tree
TREE_FANOUT = "TRAINPLANE_TREE_FANOUT"  # children per node in tree mode
ALLOW_PICKLE = "TRAINPLANE_ALLOW_PICKLE"  # accept pickled arguments (authenticated peers only)
SERVICE_FD = "TRAINPLANE_SERVICE_FD"  # set on service worker processes: their channel to the agent
# What user processes inherit from their agent's environment (the agent sets the contract above on
# top): everything except names with these prefixes.
AGENT_ONLY_PREFIXES = ("TRAINPLANE_", "PET_")
"""Prefixes of agent-only variables, never passed on to user processes: ``TRAINPLANE_*`` are the
agent's settings (the job token among them); ``PET_*`` are torchrun's arguments as the Kubeflow
training operator sets them on a PyTorchJob's pods, inputs to the agent that would mislead
torch.distributed.run-aware code in user processes. The only ``TRAINPLANE_*`` variables a user
process has are the ones its agent sets for it: ``TRAINPLANE_GENERATION`` and
``TRAINPLANE_WORLD_FILE`` (read by ``runtime.membership``), ``TRAINPLANE_MONITOR_MEMBERS`` (read by
the bootstrap), ``TRAINPLANE_JOIN_TIMEOUT`` (elastic torch batch jobs) and, on service workers,
``TRAINPLANE_SERVICE_FD``."""
# Single-controller distributions (ray, monarch): the framework daemons the agents run.
DAEMON_ARGS = "TRAINPLANE_DAEMON_ARGS"  # ray: JSON list appended to every `ray start` (e.g. ["--num-cpus=4"])
DAEMON_PREFIX = "TRAINPLANE_DAEMON_PREFIX"  # JSON list put before every daemon's command (a wrapper)
WAIT_FOR = "TRAINPLANE_WAIT_FOR"  # host:port,...: the bootstrap waits until each accepts TCP connections
WAIT_RAY_NODES = "TRAINPLANE_WAIT_RAY_NODES"  # addr,...: a Ray driver's bootstrap waits until each node joined
WAIT_TIMEOUT = "TRAINPLANE_WAIT_TIMEOUT"  # seconds the bootstrap waits for WAIT_FOR and WAIT_RAY_NODES
# Set by Kubeflow Trainer v2's torch plugin on a TrainJob's ``node`` container (kubeflow/trainer v2.3.0
# ``pkg/constants/constants.go``, ``TorchEnv*``): torchrun's arguments, which the agent checks against its own.
PET_NNODES = "PET_NNODES"
PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
PET_NODE_RANK = "PET_NODE_RANK"
PET_MASTER_ADDR = "PET_MASTER_ADDR"
PET_MASTER_PORT = "PET_MASTER_PORT"
TRAINJOB = "TRAINPLANE_TRAINJOB"  # "true" in trainplane's ClusterTrainingRuntime: the PET_* above must agree
# Set by the downward API in pods.
POD_IP = "POD_IP"
POD_NAME = "POD_NAME"
POD_NAMESPACE = "POD_NAMESPACE"
# Set by Kubernetes for Indexed Jobs.
JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"

# --- Ports -------------------------------------------------------------------------------------
AGENT_PORT = 32300
"""The agent's HTTP port (TCP). Same number as Kubetorch's server port."""
DEFAULT_MASTER_PORT = 29500
"""torch.distributed's conventional rendezvous port (TCP), torchrun's default."""
RENDEZVOUS_PORT_SPAN = 32
"""MASTER_PORT of generation g is ``base + (g - 1) % RENDEZVOUS_PORT_SPAN``: a process that survives a
membership change re-initialises against a fresh TCPStore, never the previous generation's
(torch shares one TCPStore server per port within a process, stale keys included).

The job reserves the ports from its base port ``base`` (the ``MASTER_PORT`` setting) upward:

* ``base .. base + SPAN - 1``: torch rendezvous (``MASTER_PORT``), rotating per generation;
* ``base + JAX_PORT_OFFSET ..`` (the next ``SPAN``): the JAX coordinator
  (``JAX_COORDINATOR_ADDRESS``), rotating the same way, so an ``spmd`` process can start both;
* ``base + TF_PORT_OFFSET ..``: TensorFlow workers (``TF_CONFIG``), one port per process sharing
  an address: the local rank when every node has its own address, more when nodes share one;
* single-controller jobs (``ray``, ``monarch``), which set neither the JAX nor the TensorFlow
  variables, use the first ports of the JAX block instead: ``base + CONTROLLER_PORT_OFFSET ..``."""
JAX_PORT_OFFSET = RENDEZVOUS_PORT_SPAN
"""First JAX coordinator port, relative to the job's base port."""
TF_PORT_OFFSET = 2 * RENDEZVOUS_PORT_SPAN
"""First TensorFlow worker port, relative to the job's base port."""
CONTROLLER_PORT_OFFSET = JAX_PORT_OFFSET
"""Single-controller jobs (``ray``, ``monarch``) listen on ``MASTER_PORT base + CONTROLLER_PORT_OFFSET``
(29532 by default), just above the rendezvous span, in the JAX block (these jobs set no JAX or TF
variables): Ray's head (its GCS) on node 0, Monarch's worker loop on every node."""
RAY_CLIENT_PORT_OFFSET = CONTROLLER_PORT_OFFSET + 1
"""The Ray head's client server (``ray://`` addresses) listens on the base + this (29533 by default)."""
RAY_DASHBOARD_PORT_OFFSET = CONTROLLER_PORT_OFFSET + 2
"""The Ray head's (minimal) dashboard listens on the base + this (29534 by default); the full
dashboard is off."""
AGENT_PORT_NAME = "agent"
MASTER_PORT_NAME = "rendezvous"
RAY_HEAD_PORT_NAME = "ray-head"
RAY_CLIENT_PORT_NAME = "ray-client"
MONARCH_PORT_NAME = "monarch"

# --- HTTP routes and headers -------------------------------------------------------------------
ROUTE_HEALTHZ = "/healthz"
ROUTE_INFO = "/info"
ROUTE_MEMBERS = "/members"
ROUTE_CALL = "/call"
ROUTE_EXEC = "/exec"
ROUTE_WORLD = "/world"
ROUTE_OUTPUT = "/output"
ROUTE_CODE = "/code"
ROUTE_VOTE = "/vote"
ROUTE_PROBE = "/probe"
AUTH_HEADER = "Authorization"
AUTH_SCHEME = "Bearer"
JOB_HEADER = "X-Trainplane-Job"
"""Names the job a request is for. Every agent sends it; an agent refuses a request naming another job
(403) even when the token is right, so a stray connection from another job is never merged into this
one. A driver (``runtime.client``) may leave it out: its token alone binds it."""
MAX_BODY_BYTES = 16 * 1024 * 1024
"""Default cap on an HTTP request body, bytes; larger bodies get 413."""

# --- Kubernetes labels and annotations ---------------------------------------------------------
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_JOB = "trainplane.dev/job"
APP_NAME = "trainplane"

# --- GPU nodes: the cluster components set these, the job components select and tolerate them ---
GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource the NVIDIA device plugin advertises; GPU pods request it as a limit."""
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "true"
"""GPU nodes carry the taint ``nvidia.com/gpu=true:NoSchedule``; GPU pods tolerate it."""
GPU_NODE_LABEL = "nvidia.com/gpu.present"
"""Label ``nvidia.com/gpu.present=true`` on GPU nodes (the device plugin chart's node affinity)."""

# --- The runtime bundle inside a pod -----------------------------------------------------------
BUNDLE_MOUNT_PATH = "/opt/trainplane"
"""Where the runtime bundle ConfigMap is mounted; it is put on PYTHONPATH."""
AGENT_MODULE = "runtime.agent"
"""Run as ``python3 -m runtime.agent`` with the bundle on PYTHONPATH."""
SERVICE_MODULE = "runtime.agent.service.worker"
"""What each user process runs in service mode (under the bootstrap): the call loop."""
INSTANCE_CALL = "runtime.agent.service.instances:call"
"""The function a call on an instance of a user's class runs (``module:qualname``): the workflow API's
``cls`` calls it by this name (``runtime.workflow.classes``)."""

# --- Service mode defaults ---------------------------------------------------------------------
DEFAULT_TREE_THRESHOLD = 100
"""Calls to fewer nodes go out flat from the coordinator; at or above this, along a tree."""
DEFAULT_TREE_FANOUT = 50
"""Children per node in tree fan-out (Kubetorch's width)."""

# --- Exit codes of the agent and the local launcher ---------------------------------------------
EXIT_OK = 0
EXIT_USAGE = 2
"""Bad command-line input (argparse's convention). The launcher's own exit codes (this, 3, 128 + N)
share numbers with a rank's: a rank's code is passed through as the job's. The launcher's last line
says whose a non-zero code is (``runtime.local.outcome.Outcome``)."""
EXIT_RENDEZVOUS = 3
"""Quorum not met, coordinator unreachable, or the world could not be formed."""
EXIT_TIMEOUT = 124
"""The job's time limit (``--timeout``) passed; the last lines name the ranks still running (124, as
coreutils' ``timeout`` exits)."""
EXIT_NODE_LOST = 1
"""A fixed-size job lost a node without a failing process to blame; a daemon-only node whose driver's
node is lost."""
EXIT_JOB_FAILED = 121
"""An agent's own exit code when its elastic job has failed for good (a node's failure budget spent,
fewer than ``min_workers`` left, the time limit passed): distinct from any code a pod exits with while
the job can go on, so the Indexed Job's pod failure policy fails the Job on it (``FailJob``) instead
of replacing the pod, which would start the job again. The verdict, and so the local launcher's exit
code, keeps the root cause's code."""
EXIT_INTERRUPTED_BASE = 128
"""Stopped by a signal: 128 + signal number, the shell's convention."""
