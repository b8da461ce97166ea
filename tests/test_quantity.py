"""Kubernetes quantities: whole ones as ints (no decimal import on render's path), the rest as exact Decimals,
with the same values, errors and bounds either way."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pwdeploy.errors import ConfigError
from pwdeploy.quantity import parse_amount, parse_quantity, whole_bytes


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", 8),
        (8, 8),
        ("+3", 3),
        ("007", 7),
        ("32Gi", 32 * 2**30),
        ("100G", 100 * 10**9),
        ("1k", 1000),
        ("7Ei", 7 * 2**60),
        ("0", 0),
    ],
)
def test_whole_quantities_are_ints(text: object, value: int) -> None:
    amount = parse_amount(text, "f", allow_zero=True)
    assert type(amount) is int and amount == value
    assert parse_quantity(text, "f", allow_zero=True) == Decimal(value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("1000m", Decimal(1)),
        ("0.5", Decimal("0.5")),
        ("1.5Gi", Decimal("1.5") * 2**30),
        ("1e3", Decimal(1000)),
        ("1E-3", Decimal("0.001")),
        (".5", Decimal("0.5")),
        ("2.", Decimal(2)),
        (1.5, Decimal("1.5")),
    ],
)
def test_other_quantities_are_exact_decimals(text: object, value: Decimal) -> None:
    amount = parse_amount(text, "f")
    assert isinstance(amount, Decimal) and amount == value
    assert parse_quantity(text, "f") == value


def test_ints_and_decimals_compare_and_add_exactly() -> None:
    assert parse_amount("1Gi", "f") + parse_amount("512Mi", "f") == parse_amount("1.5Gi", "f")
    assert parse_amount("1", "f") > parse_amount("999m", "f")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "must be greater than zero"),
        ("0.0", "must be greater than zero"),
        ("8Ei", "larger than any Kubernetes quantity"),
        ("9223372036854775808", "larger than any Kubernetes quantity"),
        ("1e19", "larger than any Kubernetes quantity"),
        ("8 Gi", "is not a Kubernetes quantity"),
        ("-1", "is not a Kubernetes quantity"),
        (True, "is not a Kubernetes quantity"),
    ],
)
def test_refusals_are_the_same_for_both(text: object, message: str) -> None:
    for parse in (parse_amount, parse_quantity):
        with pytest.raises(ConfigError, match=message):
            parse(text, "main.memory")


def test_the_largest_quantity_is_accepted() -> None:
    assert parse_amount("9223372036854775807", "f") == 2**63 - 1


def test_the_config_keeps_each_quantity_as_written_with_its_value_parsed_once() -> None:
    """Issue 36 item 4: a quantity field of the loaded model is its text (what the manifests carry) and the amount
    parsed when the config was loaded; what reads the amount takes that one (``quantity.amount``)."""
    import copy
    import pickle

    from pwdeploy import api
    from pwdeploy.quantity import Quantity, amount
    from tests.conftest import REPO

    job = api.load(REPO / "examples" / "data_parallel" / "job.yaml", {"main.memory": "48Gi", "main.cpu": "1500m"})
    assert isinstance(job.main.memory, Quantity) and job.main.memory == "48Gi"
    assert job.main.memory.amount == 48 * 2**30 and amount(job.main.memory, "main.memory") == 48 * 2**30
    assert job.main.cpu.amount == parse_amount("1500m", "main.cpu")
    for copied in (pickle.loads(pickle.dumps(job.main.memory)), copy.deepcopy(job.main.memory)):
        assert type(copied) is Quantity and copied == "48Gi" and copied.amount == 48 * 2**30
    assert amount("2Gi", "x") == 2 * 2**30  # a plain str (a model built by hand) is parsed
    rendered = api.to_yaml(api.render(job))
    assert "memory: 48Gi" in rendered and "cpu: 1500m" in rendered


def test_a_quantity_is_written_as_its_text_in_yaml_and_json() -> None:
    import json

    import click
    from click.testing import CliRunner

    from pwdeploy.cli.output import emit
    from pwdeploy.quantity import Quantity

    document = {"memory": Quantity("16Gi", 16 * 2**30)}
    assert json.loads(json.dumps(document)) == {"memory": "16Gi"}

    @click.command()
    def show() -> None:
        emit(document, "yaml")

    assert CliRunner().invoke(show).output == "memory: 16Gi\n"


@pytest.mark.parametrize(
    ("text", "expected"), [("512m", 1), ("1500m", 2), ("1e-3", 1), ("4096000m", 4096), ("16Gi", 16 * 2**30)]
)
def test_whole_bytes_round_up_as_kubernetes_quantity_value_does(text: str, expected: int) -> None:
    """apimachinery's Quantity.Value(): rounded up, away from zero; what the kubelet gives a tmpfs as size=."""
    assert whole_bytes(parse_amount(text, "f")) == expected
