"""Programs written for JAX, TensorFlow and Ray run unmodified under the launcher, started as their
own tools start them: real JAX (``jax.distributed.initialize()`` with no arguments), real TensorFlow
(``MultiWorkerMirroredStrategy`` from ``TF_CONFIG``) and a real Ray cluster, all on CPU. Monarch's
worker is the stand-in the single-controller tests use (its wheel needs a CUDA build of torch)."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import launch
from tests.runtime.agent.execution.test_single_controller import (
    RAY_ARGS,
    RAY_TIMEOUT,
    STANDIN,
    gone,
    launch_monarch,
    monarch_env,
)

pytestmark = pytest.mark.process

JAX_ALLGATHER = """
import os
import jax
jax.distributed.initialize()  # no arguments: trainplane's cluster is detected
import numpy as np
from jax._src import clusters
from jax.experimental import multihost_utils
assert clusters.ClusterEnv._cluster_types[0].name == "trainplane"
assert not [k for k in os.environ if k.startswith(("SLURM_", "OMPI_", "PMI_"))], "nothing pretends to be Slurm or MPI"
me = jax.process_index()
gathered = multihost_utils.process_allgather(np.array([me * 10 + 1]))
assert gathered.ravel().tolist() == [p * 10 + 1 for p in range(jax.process_count())], gathered
assert jax.process_count() == int(os.environ["WORLD_SIZE"]) and me == int(os.environ["RANK"])
print("allgather ok", me, "of", jax.process_count(), flush=True)
"""


@pytest.mark.parametrize(("distribution", "nodes", "nproc"), [("jax", 2, 1), ("jax", 2, 2), ("spmd", 2, 2)])
def test_jax_initialize_without_arguments_and_an_allgather_checked_everywhere(script, distribution: str, nodes: int,
                                                                              nproc: int):
    # KUBERNETES_SERVICE_HOST makes JAX's own Kubernetes detection (kubernetes is installed here)
    # try the API server, as in a pod; trainplane's cluster comes first, so it is never asked.
    result = launch("--nnodes", str(nodes), "--nproc-per-node", str(nproc), "--distribution", distribution,
                    "--master-port", "0", str(script(JAX_ALLGATHER)), env={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert result.returncode == 0, result.stderr[-3000:]
    world = nodes * nproc
    assert sorted(line for line in result.stdout.splitlines() if "allgather ok" in line) == [
        f"[rank {r}] allgather ok {r} of {world}" for r in range(world)]


KERAS = """
import json, os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"  # Keras 2 (tf-keras): Keras 3's fit fails under any launcher
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
import tf_keras as keras
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(128, 8)).astype("float32")
y = x @ rng.normal(size=(8, 1)).astype("float32")
with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(4, activation="relu", input_shape=(8,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat().with_options(options)
model.fit(data, epochs=2, steps_per_epoch=3, verbose=0)
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
with open(os.path.join(sys.argv[1], f"weights-{index}.json"), "w") as f:
    json.dump([w.tolist() for w in model.get_weights()], f)
"""


@pytest.mark.parametrize(("nodes", "nproc"), [(2, 1), (1, 2)])
def test_keras_under_multi_worker_mirrored_strategy_ends_with_equal_weights(tmp_path: Path, script, nodes: int,
                                                                           nproc: int):
    out = tmp_path / "weights"
    out.mkdir()
    result = launch("--nnodes", str(nodes), "--nproc-per-node", str(nproc), "--distribution", "tensorflow",
                    "--master-port", "0", str(script(KERAS)), str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = (json.loads((out / f"weights-{i}.json").read_text()) for i in range(2))
    assert first == second
    assert [np.shape(w) for w in first] == [(8, 4), (4,), (4, 1), (1,)] and np.abs(first[0]).sum() > 0


RAY_WHOLE = """
import os, ray
ray.init()  # RAY_ADDRESS; no waiting of its own
nodes = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
print("driver sees", ",".join(nodes), "cpus", ray.cluster_resources().get("CPU"), flush=True)
"""


def test_the_ray_driver_starts_once_every_node_has_joined(script):
    job = f"ray-{uuid.uuid4().hex[:8]}"
    result = launch("--nnodes", "2", "--distribution", "ray", "--master-port", "0", "--rdzv-id", job, *RAY_ARGS,
                    str(script(RAY_WHOLE)), timeout=RAY_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[rank 0] driver sees 127.0.0.2,127.0.0.3 cpus 2.0" in result.stdout
    assert gone(job)


def test_a_ray_node_that_never_joins_fails_the_job_naming_it(script):
    job = f"ray-{uuid.uuid4().hex[:8]}"
    result = launch("--nnodes", "2", "--distribution", "ray", "--master-port", "0", "--rdzv-id", job,
                    "--quorum-timeout", "8", *RAY_ARGS, str(script("print('never runs')\n")), timeout=RAY_TIMEOUT,
                    env={"TRAINPLANE_DAEMON_PREFIX": json.dumps([sys.executable, str(STANDIN)]),
                         "STANDIN_RAY_NEVER_JOINS": "127.0.0.3"})
    assert result.returncode == 1, result.stderr[-3000:]
    assert ("trainplane: the Ray cluster has 1 of 2 nodes after 8 s; never joined: node 1 (127.0.0.3). "
            "The driver did not start") in result.stderr
    assert "never runs" not in result.stdout
    assert gone(job)


MONARCH_ATTACH = """
import os, socket, sys
for address in os.environ["MONARCH_WORKER_ADDRESSES"].split(","):
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    socket.create_connection((host, int(port)), timeout=1).close()  # up before the driver started
print("every worker answered", flush=True)
"""


def test_the_monarch_driver_starts_once_every_worker_listens(tmp_path: Path, script):
    job, result = launch_monarch(tmp_path, script(MONARCH_ATTACH), "unused")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[rank 0] every worker answered" in result.stdout
    assert gone(job)


def test_a_monarch_worker_that_never_listens_fails_the_job_naming_it(tmp_path: Path, script):
    job = f"monarch-{uuid.uuid4().hex[:8]}"
    result = launch("--nnodes", "2", "--distribution", "monarch", "--master-port", "0", "--rdzv-id", job,
                    "--quorum-timeout", "3", "--grace-period", "1", str(script("print('never runs')\n")),
                    env=monarch_env(tmp_path, STANDIN_DEAF_AT="127.0.0.3"))
    assert result.returncode == 1, result.stderr[-3000:]
    assert "(node 1's worker) did not accept connections within" in result.stderr
    assert "127.0.0.3:" in result.stderr and "never runs" not in result.stdout
    assert gone(job)
