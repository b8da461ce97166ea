"""The schema checker against jsonschema as an oracle (same strict schemas, as kubernetes-validate ships them), the
keyword gate over every schema kubernetes-validate ships, and the per-user schema cache."""

from __future__ import annotations

import copy
import functools
import json
import marshal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from referencing import Registry, Resource

from pwdeploy.errors import PwdeployError
from pwdeploy.validation import kubernetes_schemas, schemas
from pwdeploy.validation.checker import Checker, SchemaError, UnsupportedSchema, refs, strip
from pwdeploy.validation.problems import Problem
from pwdeploy.validation.schemas import describe
from tests.conftest import REPO
from tests.test_validate import BROKEN, jobset

VERSIONS = [(1, 27), (1, 31), kubernetes_schemas.kubernetes_versions()[-1]]
KINDS = [("batch/v1", "Job"), ("v1", "Pod"), ("v1", "ConfigMap"), ("v1", "Service")]


@pytest.fixture(autouse=True)
def fresh_schemas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with no schemas in memory and its own cache directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _forget()
    yield
    _forget()


def _forget() -> None:
    kubernetes_schemas._store.cache_clear()
    schemas.kubernetes_validator.cache_clear()
    schemas.jobset_validator.cache_clear()


# --- the oracle ------------------------------------------------------------------------------------------------


def _strict_file(version: tuple[int, int], name: str) -> Any:
    folder = kubernetes_schemas.schema_root() / f"v{version[0]}.{version[1]}.0-local-strict"
    return json.loads((folder / name).read_text())


@functools.cache
def oracle(version: tuple[int, int], api_version: str, kind: str) -> Any:
    """jsonschema's validator for the kind, built the way kubernetes-validate builds it."""
    group_version = api_version.replace("/", "-") if "/" in api_version else api_version
    schema = _strict_file(version, f"{kind.lower()}-{group_version}.json")
    definitions = _strict_file(version, "_definitions.json")
    registry: Registry[Any] = Registry().with_resources(
        [(schema["$id"], Resource.from_contents(schema)), (definitions["$id"], Resource.from_contents(definitions))]
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


@functools.cache
def jobset_oracle() -> Any:
    return jsonschema.Draft202012Validator(schemas.jobset_document())


def _adapt(error: Any) -> SchemaError:
    return SchemaError(error.validator, error.validator_value, error.instance, tuple(error.absolute_path), error.schema)


def _keyed(errors: list[SchemaError]) -> list[tuple[str, list[str]]]:
    ordered = sorted(errors, key=lambda e: [str(p) for p in e.path])
    return [(e.keyword, [str(p) for p in e.path]) for e in ordered]


def agree(checker: Checker, validator: Any, instance: object) -> list[Problem]:
    """Asserts the checker and jsonschema find the same errors at the same paths and describe alike."""
    mine = checker.errors(instance)
    theirs = [_adapt(e) for e in validator.iter_errors(instance)]
    assert _keyed(mine) == _keyed(theirs)
    assert describe(mine) == describe(theirs)
    return describe(mine)


def as_jobs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Each replicatedJob template as the batch/v1 Job that pwdeploy checks it as."""
    found: list[dict[str, Any]] = []
    spec = obj.get("spec")
    replicated = spec.get("replicatedJobs") if isinstance(spec, dict) else None
    for rj in replicated if isinstance(replicated, list) else []:
        template = rj.get("template") if isinstance(rj, dict) else None
        if isinstance(template, dict):
            metadata, spec = template.get("metadata", {}), template.get("spec")
            found.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec})
    return found


def agree_on_jobset(obj: dict[str, Any], version: tuple[int, int]) -> int:
    """Both agree on the envelope and every Job template; the number of problems found."""
    count = len(agree(schemas.jobset_validator(), jobset_oracle(), obj))
    job = schemas.kubernetes_validator(version, "batch/v1", "Job")
    assert job is not None
    for instance in as_jobs(obj):
        count += len(agree(job, oracle(version, "batch/v1", "Job"), instance))
    return count


def test_valid_jobset_agrees() -> None:
    assert agree_on_jobset(jobset(), (1, 31)) == 0


@pytest.mark.parametrize(("mutation", "_expected"), [(b[1], b[2]) for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_broken_fixtures_agree(mutation: Any, _expected: list[str]) -> None:
    obj = jobset()
    mutation(obj)
    for version in VERSIONS:
        agree_on_jobset(obj, version)


def test_schema_errors_are_found_and_agree() -> None:
    """Not a vacuous comparison: each keyword of the Kubernetes schemas fails here, on both sides."""
    obj = jobset()
    pod = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"][0].update(
        ports=[{"containerPort": "80"}], resources={"limits": {"cpu": None, "memory": True}}, imagePull="x"
    )
    pod["containers"].append({"image": "i:1", "tty": "yes"})
    pod["dnsPolicy"] = 7
    obj["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] = ["Indexed"]
    (job, _) = as_jobs(obj)
    job["apiVersion"] = 1  # type and enum both fail here
    checker = schemas.kubernetes_validator((1, 31), "batch/v1", "Job")
    assert checker is not None
    problems = agree(checker, oracle((1, 31), "batch/v1", "Job"), job)
    pod_path = "spec.template.spec"
    assert [str(p) for p in problems] == [
        "apiVersion: 1 is not a string",
        "apiVersion: 1 is not one of batch/v1",
        "spec.completionMode: ['Indexed'] is not a string",
        f"{pod_path}.containers[0].imagePull: unknown field; did you mean 'imagePullPolicy'?",
        f"{pod_path}.containers[0].ports[0].containerPort: '80' is not an integer",
        f"{pod_path}.containers[0].resources.limits.cpu: None is not a string or a number",
        f"{pod_path}.containers[0].resources.limits.memory: True is not a string or a number",
        f"{pod_path}.containers[1].name: required field is missing",
        f"{pod_path}.containers[1].tty: 'yes' is not a boolean",
        f"{pod_path}.dnsPolicy: 7 is not a string",
    ]


# --- random mutations ------------------------------------------------------------------------------------------


def _rendered() -> dict[str, Any]:
    from pwdeploy import manifests
    from pwdeploy.config import load_job
    from tests.conftest import REPO

    (obj,) = manifests.build(load_job(REPO / "examples" / "data_parallel" / "job.yaml", {}))
    return obj


BASES = [jobset(), _rendered()]


def _positions(value: object) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in ``value``."""
    found: list[tuple[Any, Any]] = []
    stack = [value]
    while stack:
        node = stack.pop()
        entries = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
        for key, child in entries:
            found.append((node, key))
            stack.append(child)
    return found


def _field_names() -> list[str]:
    schema, definitions = kubernetes_schemas.kind_schema((1, 31), "batch/v1", "Job") or ({}, {})
    names: set[str] = set()
    for sub in [schema, *definitions.values()]:
        names |= set(sub.get("properties", {}))
    return sorted(names)


FIELD_NAMES = _field_names()
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 70000)
    | st.floats(allow_nan=False)
    | st.integers(-2, 3).map(float)
    | st.text(max_size=4)
)
json_values = st.recursive(
    scalars | st.sampled_from(["Always", "Indexed", "100m", "16Gi", "TCP", "Exists"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(FIELD_NAMES), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def mutated_jobsets(draw: st.DrawFn) -> dict[str, Any]:
    obj: dict[str, Any] = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        container, key = draw(st.sampled_from(_positions(obj)))
        action = draw(st.sampled_from(["replace", "swap", "delete", "add"]))
        if action == "replace":
            container[key] = draw(json_values)
        elif action == "swap":  # a real subtree in the wrong place reaches deep into the schema
            other, other_key = draw(st.sampled_from(_positions(obj)))
            container[key] = copy.deepcopy(other[other_key])
        elif action == "delete":
            del container[key]
        elif isinstance(container, dict):
            container[draw(st.sampled_from(FIELD_NAMES) | st.text(max_size=4) | st.integers(0, 2))] = draw(json_values)
        else:
            container.append(draw(json_values))
    return obj


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=mutated_jobsets(), version=st.sampled_from(VERSIONS))
@pytest.mark.slow
def test_random_mutations_agree(obj: dict[str, Any], version: tuple[int, int]) -> None:
    agree_on_jobset(obj, version)


# --- the keywords kubernetes-validate's schemas do not use -----------------------------------------------------

COMBINED = {
    "type": "object",
    "properties": {
        "a": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 3}]},
        "b": {"allOf": [{"type": "array", "maxItems": 2}, {"items": {"enum": [1, True, "x", [1], {"k": 1}]}}]},
        "c": {"oneOf": [{"type": "number", "maximum": 5}, {"type": "integer"}]},
        "d": {"const": {"k": [1, 2.0]}},
    },
    "additionalProperties": {"type": "boolean"},
    "required": ["a", "d"],
}


@settings(max_examples=200, deadline=None)
@given(
    instance=st.dictionaries(
        st.sampled_from(["a", "b", "c", "d", "e"]),
        json_values | st.just({"k": [1, 2]}) | st.lists(st.sampled_from([1, 1.0, True, "x", [1], {"k": 1}])),
        max_size=5,
    )
)
def test_other_keywords_agree(instance: dict[str, Any]) -> None:
    agree(Checker(strip(COMBINED, "test"), {}), jsonschema.Draft202012Validator(COMBINED), instance)


def test_equality_follows_json() -> None:
    schema = {"enum": [1, [1, 2], {"a": 0}]}
    checker, validator = Checker(strip(schema, "test"), {}), jsonschema.Draft202012Validator(schema)
    for instance in (1, 1.0, True, [1, 2.0], [True, 2], {"a": 0.0}, {"a": False}, "1"):
        agree(checker, validator, instance)
    assert checker.is_valid(1.0) and not checker.is_valid(True) and not checker.is_valid({"a": False})


def test_integral_floats_are_integers() -> None:
    schema = {"type": "integer"}
    checker, validator = Checker(strip(schema, "test"), {}), jsonschema.Draft202012Validator(schema)
    for instance in (1, 1.0, -0.0, 1.5, float("inf"), True, "1"):
        agree(checker, validator, instance)
    assert checker.is_valid(2.0) and not checker.is_valid(2.5)


def test_every_shipped_schema_uses_only_checked_keywords() -> None:
    """Fails loudly when kubernetes-validate starts using a keyword the checker would ignore."""
    for version in kubernetes_schemas.kubernetes_versions():
        folder = kubernetes_schemas.schema_root() / f"v{version[0]}.{version[1]}.0-local-strict"
        definitions = json.loads((folder / "_definitions.json").read_text())["$defs"]
        stripped = {name: strip(sub, name, kubernetes_schemas._definition_ref) for name, sub in definitions.items()}
        for path in folder.glob("*.json"):
            if path.name not in ("_definitions.json", "all.json"):
                root = strip(json.loads(path.read_text()), path.name, kubernetes_schemas._kind_ref)
                assert refs(root) <= set(stripped), path
        assert all(refs(sub) <= set(stripped) for sub in stripped.values()), version
    document = schemas.jobset_document()
    for name, sub in document["$defs"].items():
        assert refs(strip(sub, name)) <= set(document["$defs"])
    strip(document, "jobset")


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "string", "pattern": "^a"}, "at/pattern: JSON Schema keyword 'pattern' is not supported"),
        ({"properties": {"x": {"minLength": 1}}}, "at/properties/x/minLength: JSON Schema keyword 'minLength'"),
        ({"$schema": "http://json-schema.org/draft-07/schema#"}, "is not draft 2020-12"),
        ({"type": "text"}, "at/type: 'text' is not a JSON type"),
        ({"$ref": "other.json#/definitions/x"}, "is not of the form #/$defs/NAME"),
        ({"items": [{"type": "string"}]}, "at/items: a schema must be a mapping"),
    ],
)
def test_unchecked_keywords_are_refused(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(UnsupportedSchema, match=message.replace("[", r"\[").replace("$", r"\$")):
        strip(schema, "at")


def test_unsupported_keyword_in_kubernetes_validate_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "schemas" / "v1.31.0-local-strict"
    folder.mkdir(parents=True)
    (folder / "_definitions.json").write_text(json.dumps({"$defs": {"Spec": {"type": "object", "minProperties": 1}}}))
    job = {"type": "object", "properties": {"spec": {"$ref": "/api/_definitions.json#/$defs/Spec"}}}
    (folder / "job-batch-v1.json").write_text(json.dumps(job))
    with pytest.raises(PwdeployError) as info:
        kubernetes_schemas.kind_schema((1, 31), "batch/v1", "Job", root=tmp_path / "schemas")
    assert str(info.value) == (
        "the Kubernetes 1.31 schema of Job (batch/v1) from kubernetes-validate unknown cannot be checked: "
        "_definitions.json#/$defs/Spec/minProperties: JSON Schema keyword 'minProperties' is not supported\n"
        "  hint: install the kubernetes-validate version pwdeploy was released with, or render with --no-validate"
    )
    # no file: nothing to check against
    assert kubernetes_schemas.kind_schema((1, 31), "v1", "Pod", root=tmp_path / "schemas") is None


# --- the cache -------------------------------------------------------------------------------------------------


def _cache_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "pwdeploy").glob("*"))


def _read_the_full_definitions(version: tuple[int, int]) -> bool:
    """Whether the schemas of ``version`` in memory came from kubernetes-validate's full definitions file (slow)
    rather than from the cache alone."""
    return kubernetes_schemas._store(version, kubernetes_schemas.schema_root())._all_definitions is not None


def test_cache_is_written_once_and_then_used(tmp_path: Path) -> None:
    assert schemas.kubernetes_validator((1, 31), "batch/v1", "Job") is not None
    (cache,) = _cache_files(tmp_path)
    assert cache.name == f"k8s-1.31-kubernetes-validate-{_kv_version()}.marshal"
    assert cache.stat().st_size < 200_000  # the Job's definitions only, without descriptions
    assert _read_the_full_definitions((1, 31))
    _forget()
    job = schemas.kubernetes_validator((1, 31), "batch/v1", "Job")
    assert job is not None and not _read_the_full_definitions((1, 31))
    assert [str(p) for p in describe(job.errors({"apiVersion": "batch/v1", "kind": "Job", "spec": {"x": 1}}))] == [
        "spec.template: required field is missing",
        "spec.x: unknown field",
    ]


def test_kinds_accumulate_in_one_file(tmp_path: Path) -> None:
    for api_version, kind in KINDS:
        assert schemas.kubernetes_validator((1, 31), api_version, kind) is not None
    assert len(_cache_files(tmp_path)) == 1
    _forget()
    for api_version, kind in KINDS:
        checker = schemas.kubernetes_validator((1, 31), api_version, kind)
        assert checker is not None and checker.is_valid({"apiVersion": api_version, "kind": kind, "metadata": {}})
    assert not _read_the_full_definitions((1, 31))


CORRUPT = {
    "empty": b"",
    "not marshal data": b"{not json",
    "bytes of no meaning": b"\xff\xfe",
    "cache format 1 (JSON)": b'{"format": 1}',
    "a list": marshal.dumps([]),
    "no format": marshal.dumps({"kinds": {}, "definitions": {}}),
    "a code object": marshal.dumps(compile("1", "x", "eval")),
}


@pytest.mark.parametrize("content", [*CORRUPT.values(), "cut short"], ids=[*CORRUPT, "cut short"])
def test_corrupt_cache_is_rewritten(tmp_path: Path, content: bytes | str) -> None:
    schemas.kubernetes_validator((1, 31), "batch/v1", "Job")
    (cache,) = _cache_files(tmp_path)
    good = cache.read_bytes()
    cache.write_bytes(good[: len(good) // 2] if isinstance(content, str) else content)
    _forget()
    assert agree_on_jobset(jobset(), (1, 31)) == 0
    assert cache.read_bytes() == good


def test_a_json_cache_of_the_format_before_is_replaced(tmp_path: Path) -> None:
    folder = tmp_path / "cache" / "pwdeploy"
    folder.mkdir(parents=True)
    old = folder / f"k8s-1.31-kubernetes-validate-{_kv_version()}.json"
    old.write_text('{"format": 1, "kinds": {}, "definitions": {}}')
    schemas.kubernetes_validator((1, 31), "batch/v1", "Job")
    assert [p.name for p in _cache_files(tmp_path)] == [f"k8s-1.31-kubernetes-validate-{_kv_version()}.marshal"]


def test_cache_missing_a_definition_is_not_used(tmp_path: Path) -> None:
    schemas.kubernetes_validator((1, 31), "batch/v1", "Job")
    (cache,) = _cache_files(tmp_path)
    data = marshal.loads(cache.read_bytes())
    del data["definitions"]["io.k8s.api.core.v1.Container"]
    cache.write_bytes(marshal.dumps(data))
    _forget()
    obj = jobset()
    obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["imagePul"] = "x"
    assert agree_on_jobset(obj, (1, 31)) == 1


def test_cache_from_another_source_is_not_used(tmp_path: Path) -> None:
    schemas.kubernetes_validator((1, 31), "batch/v1", "Job")
    (cache,) = _cache_files(tmp_path)
    data = marshal.loads(cache.read_bytes())
    data["source"]["definitions"] = [1, 2]
    data["kinds"]["batch/v1 Job"]["schema"] = {"type": "string"}  # would reject every Job if it were used
    cache.write_bytes(marshal.dumps(data))
    _forget()
    assert agree_on_jobset(jobset(), (1, 31)) == 0


def test_unwritable_cache_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # mkdir under a file fails, even for root
    _forget()
    assert agree_on_jobset(jobset(), (1, 31)) == 0
    assert list(tmp_path.iterdir()) == [blocker]


def test_relative_cache_home_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kubernetes_schemas.cache_dir() == tmp_path / "home" / ".cache" / "pwdeploy"


def test_cache_write_leaves_no_partial_files(tmp_path: Path) -> None:
    for api_version, kind in KINDS:
        schemas.kubernetes_validator((1, 31), api_version, kind)
    assert [p.name for p in _cache_files(tmp_path)] == [f"k8s-1.31-kubernetes-validate-{_kv_version()}.marshal"]
    assert not list((tmp_path / "cache" / "pwdeploy").glob(".*"))


def _kv_version() -> str:
    from importlib.metadata import version

    return version("kubernetes-validate")


def test_validation_imports_no_jsonschema(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from pwdeploy import manifests\n"
        "from pwdeploy.config import load_job\n"
        "from pwdeploy.validation.validate import validate_objects\n"
        "objects = manifests.build(load_job(Path('examples/data_parallel/job.yaml'), {}))\n"
        "assert validate_objects(objects) == []\n"
        "print(sorted(m for m in ('jsonschema', 'referencing', 'kubernetes_validate', 'json') if m in sys.modules))\n"
    )
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    outputs = []
    for _ in range(2):  # without, then with the cache files
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env, cwd=REPO
        )
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout)
    assert outputs == ["['json']\n", "[]\n"]  # the shipped JSON files are parsed once, then read from the cache


# --- the cache of the shipped JobSet schema ----------------------------------------------------------------------

JOBSET_COPY = f"{schemas.JOBSET_SCHEMA}.marshal"


def _jobset_copy(tmp_path: Path) -> Path:
    assert schemas.jobset_document() == json.loads((Path(schemas.__file__).parent / schemas.JOBSET_SCHEMA).read_text())
    return tmp_path / "cache" / "pwdeploy" / JOBSET_COPY


def test_the_jobset_schema_is_read_from_its_copy_while_the_copy_is_of_this_file(tmp_path: Path) -> None:
    copy_path = _jobset_copy(tmp_path)
    data = marshal.loads(copy_path.read_bytes())
    data["document"]["$defs"]["marker"] = {"type": "string"}
    copy_path.write_bytes(marshal.dumps(data))
    assert "marker" in schemas.jobset_document()["$defs"]  # the copy answers: the shipped file is not parsed
    data["source"][2] += 1  # a copy made from another file (or another install's): parsed again, copy replaced
    copy_path.write_bytes(marshal.dumps(data))
    assert "marker" not in schemas.jobset_document()["$defs"]
    assert "marker" not in marshal.loads(copy_path.read_bytes())["document"]["$defs"]


@pytest.mark.parametrize("content", [*CORRUPT.values(), "a list as the document"], ids=[*CORRUPT, "list document"])
def test_a_corrupt_jobset_copy_is_replaced(tmp_path: Path, content: bytes | str) -> None:
    copy_path = _jobset_copy(tmp_path)
    good = copy_path.read_bytes()
    if content == "a list as the document":
        data = marshal.loads(good)
        data["document"] = []
        content = marshal.dumps(data)
    assert isinstance(content, bytes)
    copy_path.write_bytes(content)
    assert agree_on_jobset(jobset(), (1, 31)) == 0
    assert copy_path.read_bytes() == good


@pytest.mark.parametrize(
    ("source", "version"),
    [
        ('__version__ = "1.37.0"\n', "1.37.0"),
        ("# kept by the release tool\n__version__='2.0rc1'\n", "2.0rc1"),
        ("__version__ = \"1.0'\n", "unknown"),  # quotes that do not pair
        ('__version__ = ""\n', "unknown"),
        ("version = '1'\n", "unknown"),
        ("", "unknown"),
    ],
)
def test_the_kubernetes_validate_version_is_read_from_its_version_file(source: str, version: str) -> None:
    assert kubernetes_schemas._assigned_version(source) == version
