"""Each rule of `pwdeploy check` on a small program that has its pattern, and on a twin that must not fire."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pwdeploy.check import check
from pwdeploy.check.rules import RULES

INIT = "import jax\nimport pathwaysutils\npathwaysutils.initialize()\n"  # a program's correct start
OCP = INIT + "import orbax.checkpoint as ocp\n"


def rules_of(tmp_path: Path, source: str, **others: str) -> list[str]:
    """The rule ids of the findings over ``train.py`` holding ``source`` (``others``: more modules beside it)."""
    for name, text in others.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text), encoding="utf-8")
    entry = tmp_path / "train.py"
    entry.write_text(textwrap.dedent(source), encoding="utf-8")
    return [f.id for f in check(None, [entry], cwd=tmp_path).findings]


# Rules that fire only against a job config (-f): tests/test_check_cli.py, tests/test_check_checkpointing.py.
JOB_ONLY = {"sidecar-versions", "colocated-no-sidecar", "mtc-no-volume"}
FIRES = [
    ("init-order", "import jax\nimport pathwaysutils\nd = jax.devices()\npathwaysutils.initialize()\n"),
    ("init-order", "import jax\nprint(jax.device_count())\n"),  # and never initialised
    (
        "init-order",
        """
        import jax, pathwaysutils
        def setup():
            return jax.numpy.zeros(3)
        def main():
            setup()
            pathwaysutils.initialize()
        if __name__ == "__main__":
            main()
        """,
    ),
    ("init-order", "import jax\nimport pathwaysutils\nf = jax.jit(abs)\nf(1)\npathwaysutils.initialize()\n"),
    ("distributed-initialize", INIT + "jax.distributed.initialize()\n"),
    ("orbax-ocdbt", OCP + "manager = ocp.CheckpointManager('/ckpt')\n"),
    ("orbax-ocdbt", OCP + "handler = ocp.PyTreeCheckpointHandler(use_zarr3=False)\n"),
    ("orbax-save-cast", OCP + "import jax.numpy as jnp\nargs = ocp.SaveArgs(dtype=jnp.bfloat16)\n"),
    (
        "orbax-restore-sharding",
        OCP + "a = ocp.ArrayRestoreArgs(sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0]))\n",
    ),
    ("orbax-restore-sharding", OCP + "m = ocp.CheckpointManager('/c', item_handlers=h)\nstate = m.restore(10)\n"),
    ("persistence-env", INIT + "import os\nos.environ['ENABLE_PATHWAYS_PERSISTENCE'] = 'true'\n"),
    ("profile-local-path", INIT + "jax.profiler.start_trace('/tmp/trace')\n"),
    ("profile-local-path", INIT + "with jax.profiler.trace(f'/tmp/run-{1}'):\n    pass\n"),
    ("host-cpu-backend", INIT + "cpu = jax.devices('cpu')[0]\n"),
    ("host-cpu-backend", INIT + "g = jax.jit(abs, backend='cpu')\n"),
    ("process-sharding", INIT + "ds = ds.shard(jax.process_count(), jax.process_index())\n"),
    ("process-sharding", INIT + "import grain\nsharding = grain.sharding.ShardByJaxProcess(drop_remainder=True)\n"),
    ("process-sharding", INIT + "part = rows[jax.process_index() :: jax.process_count()]\n"),
    (
        "process-sharding",
        INIT
        + "import grain\nopts = grain.ShardOptions(shard_index=jax.process_index(), shard_count=jax.process_count())\n",
    ),
    ("local-devices", INIT + "hosts = jax.device_count() // jax.local_device_count()\n"),
    ("local-devices", INIT + "xs = [jax.device_put(x, d) for d in jax.local_devices()]\n"),
    ("cpu-count", INIT + "import os\nworkers = os.cpu_count()\n"),
    ("cpu-count", INIT + "import grain\nloader = grain.DataLoader(data_source=s, sampler=p, worker_count=None)\n"),
    ("compile-cache", INIT + "jax.config.update('jax_compilation_cache_dir', '/tmp/cache')\n"),
    (
        "host-sync",
        INIT
        + textwrap.dedent(
            """
        step = jax.jit(lambda p, b: (p, b))
        for batch in batches:
            params, loss = step(params, batch)
            print(float(loss))
        """
        ),
    ),
    (
        "host-sync",
        INIT
        + textwrap.dedent(
            """
        @jax.jit
        def step(p, b):
            return p, b
        def train(params, batches):
            for batch in batches:
                params, metrics = step(params, batch)
                jax.block_until_ready(params)
        """
        ),
    ),
    ("controller-checkpoints", "import orbax.checkpoint as ocp\nm = ocp.CheckpointManager('/c', item_handlers=h)\n"),
    (
        "elastic-swallow",
        INIT
        + textwrap.dedent(
            """
        from pathwaysutils.elastic import manager
        elastic = manager.Manager()
        @elastic.elastic_retry(minimum_slice_count=1)
        def train():
            try:
                run_steps()
            except Exception as error:
                print("step failed", error)
        """
        ),
    ),
    ("process-index-guard", INIT + "if jax.process_index() == 0:\n    print('hello')\n"),
    ("process-index-guard", INIT + "from jax import process_index as rank\nx = 1 if not rank() else 2\n"),
    ("process-index-guard", INIT + "if jax.process_index() == 0 and step % 100 == 0:\n    print('saved')\n"),
    ("process-index-guard", INIT + "while ready and jax.process_index() != 0:\n    wait()\n"),
    (
        "process-sharding",
        INIT
        + "per_host = len(rows) // jax.process_count()\nstart = jax.process_index() * per_host\n"
        + "mine = rows[start : start + per_host]\n",
    ),
    (
        "process-sharding",
        INIT + "import numpy as np\nmine = np.array_split(rows, jax.process_count())[jax.process_index()]\n",
    ),
    (
        "local-devices",
        INIT + "for i, d in enumerate(jax.local_devices()):\n    shards.append(jax.device_put(batch[i], d))\n",
    ),
    ("local-devices", INIT + "xs = [jax.device_put(x, d) for x, d in zip(parts, jax.local_devices())]\n"),
    (
        "host-sync",
        INIT
        + "step = jax.jit(lambda p, b: (p, b))\nfor batch in batches:\n"
        + "    params, loss = step(params, batch)\n    print(f'loss {loss:.4f}')\n",
    ),
    (
        "host-sync",
        INIT
        + "step = jax.jit(lambda p, b: (p, b))\nfor batch in batches:\n"
        + "    params, metrics = step(params, batch)\n    line = 'loss %.4f' % metrics['loss']\n",
    ),
    (
        "host-sync",
        INIT
        + "step = jax.jit(lambda p, b: (p, b))\nfor batch in batches:\n"
        + "    params, loss = step(params, batch)\n    print(loss)\n",
    ),
    (
        "orbax-array-handler",
        OCP + "ocp.type_handlers.register_type_handler(jax.Array, ocp.type_handlers.ArrayHandler(), override=True)\n",
    ),
    (
        "orbax-array-handler",
        INIT
        + "from orbax.checkpoint import type_handlers as th\n"
        + "th.register_type_handler(ty=jax.Array, handler=th.SingleReplicaArrayHandler(), override=True)\n",
    ),
    (
        "elastic-profiler",
        INIT
        + textwrap.dedent(
            """
        from pathwaysutils.elastic import manager
        elastic = manager.Manager()
        @elastic.elastic_retry(minimum_slice_count=1)
        def train(state, batches):
            jax.profiler.start_trace('gs://bucket/profiles')
            for batch in batches:
                state = step(state, batch)
            jax.profiler.stop_trace()
        """
        ),
    ),
    (
        "orbax-array-handler",
        OCP + "ocp.pathways.register_type_handlers(checkpointing_impl=ocp.pathways.CheckpointingImpl.NO_DISPATCHER)\n",
    ),
    (
        "orbax-array-handler",  # MaxText's v1 Context when colocated Python is off
        INIT
        + "from orbax.checkpoint import pathways as ocp_pathways\nfrom orbax.checkpoint import v1 as ocp\n"
        + "ctx = ocp.Context()\nctx.pathways.checkpointing_impl = ocp_pathways.CheckpointingImpl.NO_DISPATCHER\n",
    ),
    (
        "orbax-ocdbt",
        INIT
        + "from orbax.checkpoint import v1 as ocp\nwith ocp.Context():\n    ocp.save_pytree('gs://b/c/1', state)\n",
    ),
    (
        "mtc-colocated-off",
        INIT
        + "from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import initialization\n"
        + "initialization.initialize_multi_tier_checkpointing('/local', backup_interval_minutes=30)\n",
    ),
    (
        "mtc-colocated-off",
        INIT
        + "from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import replicator_checkpoint_manager"
        + " as rcm\n"
        + "options = rcm.ReplicatorCheckpointManagerOptions(save_interval_steps=10, use_colocated_python=False)\n",
    ),
    (
        "mtc-backup-interval",
        INIT
        + "from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing.initialization import "
        + "initialize_multi_tier_checkpointing as init_mtc\n"
        + "init_mtc('/local', backup_interval_minutes=30, backup_interval_steps=100, use_colocated_python=True)\n",
    ),
    (
        "mtc-backup-interval",
        INIT
        + "from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import initialization as mtc\n"
        + "mtc.initialize_multi_tier_checkpointing('/local', backup_interval_steps=0, use_colocated_python=True)\n",
    ),
]

FIRES += [
    ("sigterm-handler", "import signal, sys\nsignal.signal(signal.SIGTERM, lambda s, f: sys.exit(1))\n"),
    (
        "sigterm-handler",
        """
        import logging, signal
        def on_term(signum, frame):
            logging.info("got SIGTERM, ignoring it until the step ends")
        signal.signal(signal.SIGTERM, on_term)
        """,
    ),
    ("sigterm-handler", "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"),
    ("sigterm-handler", "from signal import signal, SIGTERM\nimport os\nsignal(SIGTERM, lambda *a: os._exit(0))\n"),
]

QUIET = [
    ("init-order", INIT + "d = jax.devices()\n"),
    ("init-order", "import jax\nimport pathwaysutils\nif False:\n    jax.devices()\npathwaysutils.initialize()\n"),
    ("init-order", "import pathwaysutils\ndevices = [1, 2]\nprint(len(devices))\npathwaysutils.initialize()\n"),
    (
        "init-order",  # jax used only inside a function called after initialize
        """
        import jax
        from pwdeploy import runtime
        def count():
            return jax.device_count()
        def main():
            runtime.initialize()
            return count()
        main()
        """,
    ),
    (
        "distributed-initialize",
        INIT + "from pwdeploy import runtime\nif not runtime.on_pathways():\n    jax.distributed.initialize()\n",
    ),
    ("distributed-initialize", INIT + "from mylib import distributed\ndistributed.initialize()\n"),
    ("orbax-ocdbt", OCP + "handler = ocp.PyTreeCheckpointHandler(use_ocdbt=False, use_zarr3=False)\n"),
    ("orbax-ocdbt", OCP + "m = ocp.CheckpointManager('/c', item_handlers={'p': handler})\n"),
    ("orbax-ocdbt", OCP + "m = ocp.CheckpointManager('/c', handler_registry=registry, options=options)\n"),
    ("orbax-save-cast", OCP + "args = ocp.SaveArgs()\nmore = ocp.SaveArgs(dtype=None)\n"),
    (
        "orbax-restore-sharding",
        OCP + "m = ocp.CheckpointManager('/c', item_handlers=h)\n"
        "s = m.restore(10, args=ocp.args.StandardRestore(abstract))\n",
    ),
    ("orbax-restore-sharding", INIT + "import pickle\ncache = pickle\nstate = cache.restore(10)\n"),
    ("persistence-env", INIT + "import os\nos.environ['ENABLE_PATHWAYS_PERSISTENCE'] = '1'\n"),
    ("profile-local-path", INIT + "jax.profiler.start_trace('gs://bucket/profiles')\n"),
    (
        "profile-local-path",
        INIT + "import os\nwith jax.profiler.trace(os.environ['PWDEPLOY_PROFILE_DIR']):\n    pass\n",
    ),
    ("host-cpu-backend", INIT + "d = jax.devices()\n"),
    ("host-cpu-backend", "import os\nos.environ['JAX_PLATFORMS'] = 'proxy,cpu'\n" + INIT + "c = jax.devices('cpu')\n"),
    ("process-sharding", INIT + "import numpy as np\npart = np.array_split(rows, 4)\nds = ds.shard(2, 0)\n"),
    ("process-sharding", INIT + "process_index, process_count = 1, 2\nds = ds.shard(process_count, process_index)\n"),
    ("process-sharding", INIT + "print('host', jax.process_index(), 'of', jax.process_count())\n"),
    ("local-devices", INIT + "n = jax.local_device_count()\nx = batch.reshape(n, -1)\n"),
    ("cpu-count", INIT + "from pwdeploy import runtime\nworkers = runtime.data_workers()\nn = pool.cpu_count()\n"),
    (
        "compile-cache",
        INIT + "jax.config.update('jax_enable_x64', True)\njax.config.update('jax_enable_compilation_cache', False)\n",
    ),
    (
        "host-sync",  # a sync outside the loop, one under an `if`, and float() of a Python number
        INIT
        + textwrap.dedent(
            """
        step = jax.jit(lambda p, b: (p, b))
        lr = 0.1
        for i, batch in enumerate(batches):
            params, loss = step(params, batch)
            print(float(lr))
            if i % 100 == 0:
                print(float(loss))
        final = float(loss)
        """
        ),
    ),
    (
        "host-sync",  # a loop that calls no jitted step
        INIT + "for row in rows:\n    total = float(row)\n    jax.device_get(total)\n",
    ),
    ("controller-checkpoints", OCP + "m = ocp.CheckpointManager('/c', item_handlers=h)\n"),
    (
        "elastic-swallow",  # the handler re-raises; a broad except outside the wrapped function
        INIT
        + textwrap.dedent(
            """
        from pathwaysutils.elastic import manager
        elastic = manager.Manager()
        @elastic.elastic_retry(minimum_slice_count=1)
        def train():
            try:
                run_steps()
            except Exception:
                print("step failed")
                raise
        def restore():
            try:
                return read()
            except Exception:
                return None
        """
        ),
    ),
    ("process-index-guard", INIT + "process_index = 0\nif process_index == 0:\n    print('hello')\n"),
    ("process-index-guard", INIT + "if rank == 0 and jax.device_count() > 8:\n    print('big')\n"),
    (
        "process-sharding",  # slices by the step, and an index alone (which host's name to print)
        INIT
        + "per_step = len(rows) // 8\nstart = step * per_step\nmine = rows[start : start + per_step]\n"
        + "name = hosts[jax.process_index()]\nids = [0] * jax.process_count()\nids[jax.process_index()] = 7\n"
        + "table = [0 for _ in range(jax.process_count())]\nown = table[jax.process_index()]\n",
    ),
    (
        "local-devices",
        INIT
        + "for i, d in enumerate(mesh.devices.flat):\n    shards.append(jax.device_put(batch[i], d))\n"
        + "for i, d in enumerate(jax.local_devices()):\n    print(i, d)\n",
    ),
    (
        "host-sync",  # formatting host values each step, and the loss every 100 steps
        INIT
        + "step = jax.jit(lambda p, b: (p, b))\nfor i, batch in enumerate(batches):\n"
        + "    params, loss = step(params, batch)\n    print(f'step {i}')\n    tag = 'step %d' % i\n"
        + "    if i % 100 == 0:\n        print(f'loss {loss:.4f}')\n",
    ),
    (
        "orbax-array-handler",
        OCP
        + "from pwdeploy import runtime\nocp.type_handlers.register_type_handler(MyState, MyHandler())\n"
        + "if not runtime.on_pathways():\n"
        + "    ocp.type_handlers.register_type_handler(jax.Array, ocp.type_handlers.ArrayHandler(), override=True)\n",
    ),
    (
        "elastic-profiler",  # a trace outside the elastic function, one stopped in a finally:, one on attempt 1 only
        INIT
        + textwrap.dedent(
            """
        from pathwaysutils.elastic import manager
        elastic = manager.Manager()
        jax.profiler.start_trace('gs://bucket/warmup')
        @elastic.elastic_retry(minimum_slice_count=1)
        def train(state, batches):
            jax.profiler.start_trace('gs://bucket/profiles')
            try:
                for batch in batches:
                    state = step(state, batch)
            finally:
                jax.profiler.stop_trace()
        @elastic.elastic_retry(minimum_slice_count=1)
        def again(state, first):
            if first:
                jax.profiler.start_trace('gs://bucket/profiles')
            return step(state)
        """
        ),
    ),
    (
        "orbax-array-handler",
        OCP + "ocp.pathways.register_type_handlers(checkpointing_impl=ocp.pathways.CheckpointingImpl.PERSISTENCE)\n",
    ),
    (
        "orbax-array-handler",
        INIT
        + "from orbax.checkpoint import pathways as ocp_pathways\nfrom orbax.checkpoint import v1 as ocp\n"
        + "ctx = ocp.Context()\n"
        + "ctx.pathways.checkpointing_impl = ocp_pathways.CheckpointingImpl.from_options(use_colocated_python=True)\n",
    ),
    (
        "orbax-ocdbt",
        INIT
        + "from orbax.checkpoint import v1 as ocp\nctx = ocp.Context()\nctx.array.saving.use_ocdbt = False\n"
        + "ctx.array.saving.use_zarr3 = False\nwith ctx:\n    ocp.save_pytree('gs://b/c/1', state)\n",
    ),
    (
        "orbax-ocdbt",  # colocated Python writes OCDBT itself
        INIT
        + "from orbax.checkpoint import pathways as ocp_pathways\nfrom orbax.checkpoint import v1 as ocp\n"
        + "ctx = ocp.Context(pathways_options=ocp.options.PathwaysOptions(\n"
        + "    checkpointing_impl=ocp_pathways.CheckpointingImpl.COLOCATED_PYTHON))\n"
        + "with ctx:\n    ocp.save_pytree('gs://b/c/1', state)\n",
    ),
    (
        "mtc-colocated-off",
        INIT
        + "from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import initialization\n"
        + "initialization.initialize_multi_tier_checkpointing('/local', use_colocated_python=True)\n"
        + "from pwdeploy import runtime\nif not runtime.on_pathways():\n"
        + "    initialization.initialize_multi_tier_checkpointing('/local')\n",
    ),
    (
        "mtc-colocated-off",  # pwdeploy.runtime.mtc_options() holds use_colocated_python=True
        INIT
        + "from pwdeploy import runtime\n"
        + "from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import initialization\n"
        + "initialization.initialize_multi_tier_checkpointing(**runtime.mtc_options())\n",
    ),
    (
        "mtc-colocated-off",  # decided at run time
        INIT
        + "from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import initialization\n"
        + "initialization.initialize_multi_tier_checkpointing('/local', use_colocated_python=flags.colocated)\n",
    ),
    (
        "mtc-backup-interval",
        INIT
        + "from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import initialization as mtc\n"
        + "mtc.initialize_multi_tier_checkpointing('/local', backup_interval_minutes=None, backup_interval_steps=50,"
        + " use_colocated_python=True)\n",
    ),
]
# Correct elastic training (pathwaysutils' Manager.elastic_retry, as its docstring asks): no rule fires.
ELASTIC = INIT + textwrap.dedent(
    """
    import logging
    from pathwaysutils.elastic import manager as elastic

    logging.raiseExceptions = True
    manager = elastic.Manager()

    @manager.elastic_retry(minimum_slice_count=1, poll_interval=10, timeout=600)
    def train(state, batches, every):
        step = jax.jit(lambda s, b: (s, b))
        for i, batch in enumerate(batches, start=1):
            state, loss = step(state, batch)
            if i % every == 0:
                print(i, float(loss))
                if manager.available_inactive_slices:
                    raise elastic.ScaleUpSignalError("slices are back")
        return state
    """
)
QUIET += [
    ("sigterm-handler", "import signal, sys\nsignal.signal(signal.SIGTERM, lambda s, f: sys.exit(143))\n"),
    (
        "sigterm-handler",
        """
        import signal, threading
        stopping = threading.Event()
        def on_term(signum, frame):
            print("stopping at the next step")
            stopping.set()
        signal.signal(signal.SIGTERM, on_term)
        """,
    ),
    ("sigterm-handler", "import signal, sys\nsignal.signal(signal.SIGINT, lambda s, f: sys.exit(1))\n"),
    ("sigterm-handler", "from pwdeploy import runtime\nstop = runtime.stop_on_sigterm()\n"),
]
QUIET += [
    (rule.id, ELASTIC) for rule in RULES if rule.id not in {"sidecar-versions", "colocated-no-sidecar", "mtc-no-volume"}
]


@pytest.mark.parametrize(("rule", "source"), FIRES, ids=[f"{r}-{i}" for i, (r, _) in enumerate(FIRES)])
def test_the_rule_fires_on_its_pattern(tmp_path: Path, rule: str, source: str) -> None:
    assert rule in rules_of(tmp_path, source)


@pytest.mark.parametrize(("rule", "source"), QUIET, ids=[f"{r}-{i}" for i, (r, _) in enumerate(QUIET)])
def test_the_rule_stays_quiet_on_its_twin(tmp_path: Path, rule: str, source: str) -> None:
    assert rule not in rules_of(tmp_path, source)


def test_every_rule_that_reads_code_has_a_case_each_way() -> None:
    code_rules = {rule.id for rule in RULES if rule.id not in JOB_ONLY}
    assert code_rules <= {r for r, _ in FIRES}
    assert code_rules <= {r for r, _ in QUIET}


@pytest.mark.parametrize(
    "imports",
    [
        "import jax as j\nfrom pathwaysutils import initialize as start\nj.distributed.initialize()\n",
        "from jax import distributed\ndistributed.initialize()\n",
        "import jax.distributed as dist\ndist.initialize()\n",
    ],
)
def test_aliases_are_followed(tmp_path: Path, imports: str) -> None:
    assert "distributed-initialize" in rules_of(tmp_path, imports)


def test_an_orbax_alias_from_the_package(tmp_path: Path) -> None:
    found = rules_of(tmp_path, INIT + "from orbax import checkpoint as oc\nh = oc.StandardCheckpointHandler()\n")
    assert found == ["orbax-ocdbt"]


def test_an_import_time_backend_use_in_an_imported_job_module(tmp_path: Path) -> None:
    model = "import jax\nDEVICES = jax.device_count()\n"
    source = "import pathwaysutils\nimport model\n\ndef main():\n    pathwaysutils.initialize()\n\nmain()\n"
    (tmp_path / "model.py").write_text(model, encoding="utf-8")
    entry = tmp_path / "train.py"
    entry.write_text(source, encoding="utf-8")
    (finding,) = check(None, [entry], cwd=tmp_path).findings
    assert (finding.id, finding.where) == ("init-order", "model.py:2")
    assert "train.py:5" in finding.message


def test_files_are_ordered_by_their_most_severe_finding() -> None:
    from pwdeploy.check.results import Report, at, place
    from pwdeploy.finding import Finding

    def finding(file: str, line: int, severity: str) -> Finding:
        return Finding("r", severity, at(file, line), "m", "f", "s")  # type: ignore[arg-type]

    report = Report([finding("a.py", 3, "info"), finding("z.py", 9, "warning"), finding("m.py", 5, "info"),
                     finding("m.py", 1, "error"), finding("z.py", 2, "warning")])  # fmt: skip
    assert [place(f) for fs in report.by_file().values() for f in fs] == [
        ("m.py", 1), ("m.py", 5), ("z.py", 2), ("z.py", 9), ("a.py", 3)
    ]  # fmt: skip
    assert report.summary() == "pwdeploy check: 0 files: 1 error, 2 warnings, 2 info"


def test_the_index_walk_finds_every_child_python_s_walk_does() -> None:
    """The walk reads only the fields an ASDL signature says can hold a node: over pwdeploy's own sources (every
    kind of statement and expression it uses), each node's children are ``ast.iter_child_nodes``' less the
    operators and contexts, in the same order."""
    import ast

    from pwdeploy.check.program import _children, static_truth
    from tests.conftest import REPO

    leaves = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)

    compared = 0
    for path in sorted((REPO / "pwdeploy").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.If, ast.While)) and static_truth(node.test) is not None:
                continue  # the branch that cannot run is left out on purpose
            expected = [c for c in ast.iter_child_nodes(node) if not isinstance(c, leaves)]
            assert _children(node) == expected, (path, ast.dump(node)[:200])
            compared += 1
    assert compared > 100_000


def test_a_sigterm_handler_exiting_a_retry_code_of_the_job_is_quiet_and_the_finding_says_what_follows(
    tmp_path: Path,
) -> None:
    from pwdeploy.config import load_job

    source = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda s, f: sys.exit(42))\n"
    entry = tmp_path / "train.py"
    entry.write_text(source, encoding="utf-8")
    base = {"name": "t", "tpu.type": "v5p-8", "main.image": "r.example/i:1", "main.command": "python3 train.py",
            "storage.scratch": "gs://bkt/s"}  # fmt: skip
    plain = load_job(None, base, installed_jax=lambda: "0.10.2")._replace(base_dir=tmp_path)
    (finding,) = [f for f in check(plain, [entry], cwd=tmp_path).findings if f.id == "sigterm-handler"]
    assert (
        "the handler exits 42: a stop from outside (a Kueue eviction, a deleted head pod) then fails" in finding.message
    )
    assert "stop_on_sigterm" in finding.fix
    retrying = plain._replace(scheduling=plain.scheduling._replace(retry_exit_codes=(42,)))
    assert "sigterm-handler" not in [f.id for f in check(retrying, [entry], cwd=tmp_path).findings]
