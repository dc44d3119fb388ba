"""Validation of the options the LLM clients share (all raise :class:`ConfigError`)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from engramdb.errors import ConfigError

__all__ = ["headers_option", "optional_int", "optional_number", "secrets_of"]

_SENSITIVE_HEADER = re.compile(r"auth|key|token|secret|cookie", re.IGNORECASE)


def optional_number(name: str, value: object, low: float, high: float | None) -> float | None:
    """Return ``value`` as a float, or ``None``; raise ConfigError outside ``[low, high]``."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not value >= low
        or (high is not None and not value <= high)
    ):
        bounds = f"between {low:g} and {high:g}" if high is not None else f">= {low:g}"
        raise ConfigError(f"llm option {name!r} must be a number {bounds}, got {value!r}")
    return float(value)


def optional_int(name: str, value: object, low: int) -> int | None:
    """Return ``value`` if it is an integer >= ``low`` (or ``None``); else raise ConfigError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"llm option {name!r} must be an integer >= {low}, got {value!r}")
    return value


def headers_option(value: object) -> dict[str, str]:
    """Return the ``headers`` option as a dict of strings; raise ConfigError otherwise."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(
            f"llm option 'headers' must be a dict of header names to string values, got {value!r}"
        )
    return dict(value)


def secrets_of(api_key: str | None, headers: Mapping[str, str]) -> tuple[str, ...]:
    """Return the values to mask in messages: the key and credential-like headers."""
    values = [api_key, *(v for k, v in headers.items() if _SENSITIVE_HEADER.search(k))]
    return tuple(v for v in values if v)
