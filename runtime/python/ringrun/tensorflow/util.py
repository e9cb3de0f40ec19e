"""Small helpers of ringrun.tensorflow, with horovod.tensorflow.util's names."""

import tensorflow as tf
from tensorflow.python.eager import context


def _executing_eagerly():
    """True when ops run eagerly here (not while a graph or a tf.function is being built)."""
    return context.executing_eagerly()


def _make_subgraph(f):
    """f as a tf.function: eager callers run the collectives of a step as one graph, so that the
    engine sees them together and fuses them."""
    return tf.function(f)


def _cache(f):
    """Memoizes f by its (hashable) arguments and whether it is called eagerly."""
    cache = {}

    def wrapper(*args):
        key = (args, _executing_eagerly())
        if key not in cache:
            cache[key] = f(*args)
        return cache[key]

    return wrapper


def _tf_variable(variable):
    """The tf.Variable of a Keras 3 variable (itself for a tf.Variable): what a tf.function can
    take as a variable rather than as a tensor."""
    if isinstance(variable, tf.Variable):
        return variable
    inner = getattr(variable, 'value', None)
    return inner if isinstance(inner, tf.Variable) else variable


def _ref(variable):
    """A hashable key of a variable: tf.Variable.ref(), or that of the tf.Variable inside a Keras 3
    variable (which has no ref())."""
    if hasattr(variable, 'ref'):
        return variable.ref()
    inner = getattr(variable, 'value', None)
    if hasattr(inner, 'ref'):
        return inner.ref()
    return _IdentityRef(variable)


class _IdentityRef:
    """A key by identity, for objects with no ref(); deref() gives the object back."""

    def __init__(self, obj):
        self._obj = obj

    def __hash__(self):
        return id(self._obj)

    def __eq__(self, other):
        return isinstance(other, _IdentityRef) and other._obj is self._obj

    def deref(self):
        return self._obj


def vars_to_refs(variables):
    """Nested lists of variables as hashable references (tuples of refs)."""
    if isinstance(variables, list):
        return tuple(vars_to_refs(v) for v in variables)
    return _ref(variables)


def refs_to_vars(refs):
    """The inverse of vars_to_refs."""
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()
