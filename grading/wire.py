"""Plain data across the sandbox wall: JSON, never pickle.

What a grading kernel sends back to the judge (and what the judge sends in as
a lesson's inputs) is encoded here.  Only these values cross, each with its
exact type, so that the judge sees what the learner's function returned:

- ``None``, ``bool``, ``int``, ``float`` (NaN and infinities too), ``str``;
- NumPy arrays of bool, integer and float16/32/64 dtypes (any shape), and
  NumPy scalars of those dtypes (``np.float32(1.5)`` stays a float32 scalar);
- ``tuple``, ``list`` and ``dict`` with ``str`` or ``int`` keys, nested in any way;
- the helper package's :class:`shared.training.TrainingConfig` (lesson 040's configuration:
  a frozen dataclass of numbers, bools and None, rebuilt field by field, so it checks its
  own fields again on arrival).

Anything else (an object of the learner's own class, an array subclass, a
generator, a dict with a tuple key, a long double) is refused with a :class:`WireError` that
names what was found and where, and decoding builds only the values above,
so a message from a kernel can carry data but never code.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np

MAX_DEPTH = 20
_KINDS = "biuf"  # NumPy dtype kinds that may cross: bool, signed and unsigned ints, floats


class WireError(ValueError):
    """A value that cannot be sent as plain data."""


def _float(x: float) -> Any:
    if math.isfinite(x):
        return x
    return {"$float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def _dtype_ok(dtype: np.dtype) -> bool:
    """Plain numbers only: no structured, object, complex or long-double dtypes (byte order is free)."""
    return dtype.kind in _KINDS and not dtype.fields and (dtype.kind != "f" or dtype.itemsize in (2, 4, 8))


def to_plain(value: Any, where: str = "the value", depth: int = 0) -> Any:
    """``value`` as JSON-ready data; raises WireError for anything not listed in the module doc."""
    if depth > MAX_DEPTH:
        raise WireError(f"{where} is nested more than {MAX_DEPTH} levels deep")
    kind = type(value)
    if value is None or kind in (bool, str):
        return value
    if kind is int:
        return {"$int": str(value)} if abs(value) > 2**53 else value
    if kind is float:
        return _float(value)
    if kind is np.ndarray:
        if not _dtype_ok(value.dtype):
            raise WireError(f"{where} is an array of dtype {value.dtype}; only bool, int and "
                            f"float16/32/64 arrays can be graded")
        data = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<"), copy=False)
        return {"$array": base64.b64encode(data.tobytes()).decode("ascii"),
                "dtype": value.dtype.str.replace(">", "<"), "shape": list(value.shape)}
    if isinstance(value, np.generic) and kind.__module__ == "numpy" and _dtype_ok(value.dtype):
        return {"$scalar": to_plain(np.asarray(value), where, depth + 1)}
    if kind is _config_class():
        from dataclasses import fields
        return {"$config": {f.name: to_plain(getattr(value, f.name), f"{where}.{f.name}", depth + 1)
                            for f in fields(value)}}
    if kind is tuple or kind is list:
        items = [to_plain(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
        return {"$tuple": items} if kind is tuple else items
    if kind is dict:
        for key in value:
            if type(key) not in (str, int):
                raise WireError(f"{where} is a dict with a key of type {type(key).__name__} "
                                f"({key!r}); only str and int keys can be graded")
        items = [[key, to_plain(item, f"{where}[{key!r}]", depth + 1)] for key, item in value.items()]
        if all(type(key) is str for key in value):
            return {"$dict": dict(items)}
        return {"$items": items}  # int keys (e.g. checkpoints by layer) keep their type
    raise WireError(f"{where} is a {kind.__module__}.{kind.__qualname__}; grading compares only "
                    f"NumPy arrays, numbers, strings, None, and tuples, lists and dicts of them")


def from_plain(data: Any, depth: int = 0) -> Any:
    """The value that :func:`to_plain` encoded (raises WireError on anything malformed)."""
    if depth > MAX_DEPTH + 2:
        raise WireError("the data is nested too deeply")
    kind = type(data)
    if data is None or kind in (bool, str, int, float):
        return data
    if kind is list:
        return [from_plain(item, depth + 1) for item in data]
    if kind is not dict or len(data) == 0:
        raise WireError(f"malformed data of type {kind.__name__}")
    if "$float" in data:
        text = data["$float"]
        if text not in ("nan", "inf", "-inf"):
            raise WireError(f"malformed float {text!r}")
        return float(text)
    if "$int" in data:
        return int(str(data["$int"]))
    if "$array" in data:
        dtype = np.dtype(str(data["dtype"]))
        if not _dtype_ok(dtype):
            raise WireError(f"dtype {dtype} cannot be graded")
        shape = tuple(int(n) for n in data["shape"])
        raw = base64.b64decode(str(data["$array"]), validate=True)
        if len(raw) != dtype.itemsize * math.prod(shape):
            raise WireError("an array's bytes do not match its shape")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if "$scalar" in data:
        array = from_plain(data["$scalar"], depth + 1)
        if type(array) is not np.ndarray or array.shape != ():
            raise WireError("malformed NumPy scalar")
        return array[()]
    if "$config" in data:
        fields = data["$config"]
        if type(fields) is not dict or not all(type(v) in (bool, int, float, type(None)) or type(v) is dict
                                               for v in fields.values()):
            raise WireError("malformed configuration")
        try:
            return _config_class()(**{str(k): from_plain(v, depth + 1) for k, v in fields.items()})
        except (TypeError, ValueError) as error:
            raise WireError(f"malformed configuration: {error}") from None
    if "$tuple" in data:
        return tuple(from_plain(item, depth + 1) for item in data["$tuple"])
    if "$dict" in data:
        return {str(key): from_plain(item, depth + 1) for key, item in data["$dict"].items()}
    if "$items" in data:
        out = {}
        for key, item in data["$items"]:
            if type(key) not in (str, int):
                raise WireError("malformed dict key")
            out[key] = from_plain(item, depth + 1)
        return out
    raise WireError(f"malformed data with keys {sorted(data)[:5]}")


def _config_class() -> type:
    """lesson 040's configuration class (imported late: the helper package imports this module's users)."""
    from shared.training import TrainingConfig
    return TrainingConfig


def dumps(value: Any) -> str:
    return json.dumps(to_plain(value), allow_nan=False, separators=(",", ":"))


def loads(text: str) -> Any:
    return from_plain(json.loads(text))
