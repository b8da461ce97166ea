"""Kubernetes resource quantities (``500m``, ``16Gi``, ``1e3``), parsed exactly."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pwdeploy.errors import ConfigError

if TYPE_CHECKING:
    from decimal import Decimal

# Whole numbers with these suffixes need no Decimal (parse_amount): a render whose quantities are all whole ones
# does not import decimal (about 1 ms).
_MULTIPLIERS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
# Kept as text too: the JSON Schema of the config (pwdeploy.config.json_schema) uses the same pattern.
PATTERN = r"([+]?[0-9]+(?:\.[0-9]*)?|[+]?\.[0-9]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?)"
_PATTERN = re.compile(PATTERN)


MAX_QUANTITY = 2**63 - 1  # a Quantity is an int64 (with a scale): the API server refuses more


def parse_quantity(value: object, field: str, *, allow_zero: bool = False) -> Decimal:
    """The value of a quantity as a Decimal; a ConfigError naming ``field`` when it is not one, or is not positive.

    ``allow_zero`` admits 0, which Kubernetes accepts in manifests but which is never a useful config value.
    """
    from decimal import Decimal

    return Decimal(parse_amount(value, field, allow_zero=allow_zero))


def parse_amount(value: object, field: str, *, allow_zero: bool = False) -> int | Decimal:
    """The value of a quantity, exact: an int when it is a whole number written without a fraction, an exponent
    or ``m`` (``8``, ``16Gi``), else a Decimal; a ConfigError naming ``field`` when it is not one, or is not positive.

    ``allow_zero`` admits 0, which Kubernetes accepts in manifests but which is never a useful config value.
    """
    text = str(value).strip() if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None
    match = _PATTERN.fullmatch(text) if text else None
    if text is None or match is None:
        raise ConfigError(field, f"{value!r} is not a Kubernetes quantity; use e.g. 8, 500m, 16Gi, 100G")
    number, exponent, suffix = match.groups()
    result: int | Decimal
    if exponent is None and suffix != "m" and "." not in number:
        result = int(number) * _MULTIPLIERS[suffix or ""]
    else:
        from decimal import Decimal, InvalidOperation

        try:
            if exponent:
                scale = Decimal(10) ** int(exponent[1:])
            else:
                scale = Decimal("0.001") if suffix == "m" else Decimal(_MULTIPLIERS[suffix or ""])
            result = Decimal(number) * scale
        except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid decimals
            raise ConfigError(field, f"{value!r} is not a Kubernetes quantity") from exc
    if result < 0 or (result == 0 and not allow_zero):
        raise ConfigError(field, f"{value!r} must be greater than zero")
    if result > MAX_QUANTITY:
        raise ConfigError(field, f"{value!r} is larger than any Kubernetes quantity (at most 2^63-1)")
    return result


def whole_bytes(value: int | Decimal) -> int:
    """The bytes Kubernetes takes a byte quantity for: ``Quantity.Value()`` rounds up, away from zero
    (kubernetes/apimachinery pkg/api/resource/quantity.go), so ``512m`` (0.512) is 1 byte, never 0. The kubelet
    mounts a memory-backed emptyDir as a tmpfs of ``size=`` that value (kubernetes/kubernetes
    pkg/volume/emptydir/empty_dir.go, generateTmpfsMountOptions), and tmpfs rounds it up to whole pages."""
    whole = int(value)
    return whole + 1 if whole < value else whole


def is_bare_number(text: str) -> bool:
    """Whether a quantity is a plain number, without a suffix or an exponent (``32``, ``0.5``)."""
    match = _PATTERN.fullmatch(text.strip())
    return match is not None and match.group(2) is None and match.group(3) is None


class Quantity(str):
    """A quantity the job config accepted: the text as the user wrote it (what the manifests carry, so it stays a
    ``str``), and its value, parsed once when the config was loaded (``amount``, as ``parse_amount`` gives it)."""

    amount: int | Decimal

    def __new__(cls, text: str, amount: int | Decimal) -> Quantity:
        made = super().__new__(cls, text)
        made.amount = amount
        return made

    def __reduce__(self) -> tuple[type[Quantity], tuple[str, int | Decimal]]:
        return Quantity, (str(self), self.amount)


def canonical(value: object, field: str, *, allow_zero: bool = False) -> Quantity:
    """The quantity as the user wrote it (ints become strings), with its value."""
    return Quantity(str(value).strip(), parse_amount(value, field, allow_zero=allow_zero))


def amount(value: object, field: str, *, allow_zero: bool = False) -> int | Decimal:
    """The value of a config quantity: the one parsed at load time (a ``Quantity``), else parsed now (a model
    built by hand, or a value from outside the config)."""
    if isinstance(value, Quantity):
        return value.amount
    return parse_amount(value, field, allow_zero=allow_zero)
