"""A stand-in for pydash, for bench/aml_sdk/submit.py only.

Debian's python3-azure (azure-ai-ml 1.4.0) imports pydash, which Debian does
not package.  azure-ai-ml uses three of its functions: ``get`` and ``omit``
(``import pydash``; ``from pydash import get``) and ``objects.set_``
(``from pydash import objects``).  This module has those three, for the
paths azure-ai-ml passes (dotted keys into dicts, attributes of objects,
list indexes); it is not pydash.  It is on sys.path in the benchmark's SDK
driver only.
"""
import copy

__all__ = ["get", "omit", "objects"]

_MISSING = object()


def _keys(path):
    if isinstance(path, (list, tuple)):
        return list(path)
    if path is None or path == "":
        return []
    return str(path).split(".")


def _step(obj, key):
    if isinstance(obj, dict):
        return obj.get(key, _MISSING)
    if isinstance(obj, (list, tuple)):
        try:
            return obj[int(key)]
        except (ValueError, IndexError):
            return _MISSING
    return getattr(obj, str(key), _MISSING)


def get(obj, path, default=None):
    """The value at ``path`` ("a.b.0.c" or a list of keys) in ``obj``, else ``default``."""
    if isinstance(obj, dict) and not isinstance(path, (list, tuple)) and path in obj:
        return obj[path]
    cur = obj
    for key in _keys(path):
        cur = _step(cur, key)
        if cur is _MISSING:
            return default
    return cur


def omit(obj, *paths):
    """A copy of the dict ``obj`` without the keys (or dotted paths) given, one by one or in lists."""
    flat = []
    for p in paths:
        flat.extend(p if isinstance(p, (list, tuple, set)) else [p])
    out = copy.deepcopy(obj) if isinstance(obj, dict) else dict(vars(obj)) if hasattr(obj, "__dict__") else {}
    for p in flat:
        if isinstance(out, dict) and p in out:
            del out[p]
            continue
        keys = _keys(p)
        cur = out
        for key in keys[:-1]:
            cur = cur.get(key) if isinstance(cur, dict) else None
            if cur is None:
                break
        if isinstance(cur, dict) and keys:
            cur.pop(keys[-1], None)
    return out


def _set(obj, path, value):
    """Sets ``path`` ("a.b.c") in the dict ``obj`` to ``value``, making the dicts between; returns ``obj``."""
    keys = _keys(path)
    cur = obj
    for key in keys[:-1]:
        nxt = cur.get(key) if isinstance(cur, dict) else getattr(cur, key, None)
        if nxt is None:
            nxt = {}
            if isinstance(cur, dict):
                cur[key] = nxt
            else:
                setattr(cur, key, nxt)
        cur = nxt
    if isinstance(cur, dict):
        cur[keys[-1]] = value
    else:
        setattr(cur, keys[-1], value)
    return obj


class _Objects:
    """``from pydash import objects``: ``objects.set_`` (and ``get``, ``omit``)."""
    set_ = staticmethod(_set)
    get = staticmethod(get)
    omit = staticmethod(omit)


objects = _Objects()
