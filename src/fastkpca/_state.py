"""Registry of small fitted sub-objects that model files can store without pickle.

A fitted attribute (trailing underscore) of an estimator must be one of: a numpy array, a Python
scalar / str / None, a list or tuple of those, a :class:`fastkpca.kernels.Kernel`, or an instance
of a class registered here.  A registered class provides ``to_state(self) -> dict`` (values of the
same plain kinds, no objects) and ``from_state(cls, state)``; model files record the registered
name and call ``from_state`` on load, so loading never runs arbitrary code.

A model file is untrusted, so the state it holds is checked before ``from_state`` sees it: each
registered class declares its state (every key, its kind, dtype and shape, the checks across
keys) in :data:`fastkpca._model_schema.STATE_SCHEMAS`, under the same qualified name, and a file
holding a state of a class without a declaration does not load.  ``from_state`` may then rely on
the declared kinds and shapes; what it still checks itself it reports as ``ValueError``.
"""

from __future__ import annotations

STATE_CLASSES: dict[str, type] = {}


def register_state_class(cls):
    """Class decorator: make ``cls`` storable in model files under its qualified name."""
    if not (hasattr(cls, "to_state") and hasattr(cls, "from_state")):
        raise TypeError(f"{cls.__name__} must define to_state() and from_state()")
    STATE_CLASSES[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return cls


def state_class_name(obj) -> str | None:
    """The registered name of ``obj``'s class, or None if it is not registered."""
    name = f"{type(obj).__module__}.{type(obj).__qualname__}"
    return name if STATE_CLASSES.get(name) is type(obj) else None
