"""What the update ops of one TF1 graph (or of one function in its library) write: the
``AssignMovingAvg`` updates of ``ExponentialMovingAverage.apply()``, optimizers' ``Apply*`` ops
and every other write of a variable, as :class:`UpdateOps`.

:func:`op_updates` reads one set of nodes; :mod:`.meta_updates` reads a ``.meta``'s or a TF1
SavedModel's graphs and functions through it, tensors read back to their variable ops
(``Identity``, ``ReadVariableOp``, a v1 cond's ``Switch``, a v1 loop's ``Enter``) as that module
reads them.
"""

from __future__ import annotations

import re

from ._record import Frozen
from .graph_def import READS, GraphNode, op_name
from .meta_copies import copy_source
from .meta_decay import decay_source, decay_text, float_counted_text

VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})
ASSIGN_SUB = frozenset({"AssignSub", "AssignSubVariableOp"})
MOVING_AVG = re.compile(r"(?:^|/)AssignMovingAvg(?:_\d+)?$")
# tf.distribute's strategy.extended.update runs apply()'s update once per device under
# <scope>/AssignMovingAvg/update_<N>/ (MirroredStrategy in a TF1 graph; review-18-attack-r39 F9)
_PER_DEVICE = re.compile(r"/update_\d+$")
# a control-flow-v1 tf.cond's branch inputs (Switch) and a v1 tf.while_loop's frame inputs
# (Enter: apply() run in the loop's body reads its variables through them; review-18-attack-r39 F1)
SWITCHES = frozenset({"Switch", "RefSwitch", "Enter", "RefEnter"})
_APPLY = re.compile(r"^(?:Resource)?(?:Sparse)?Apply[A-Z]\w*$")
_APPLY_KIND = re.compile(r"^(?:Resource)?(?:Sparse)?(Apply[A-Z]\w*)$")
# The slot inputs of each optimizer op, by position, from TF's own op definitions
# (tensorflow/core/ops/training_ops.cc: the ref/resource inputs after ``var``; Resource* and
# Sparse*/ResourceSparse* ops take them at the same positions). Every other input is read,
# never written: ApplyMomentum(var, accum, lr, grad, momentum) reads a learning-rate or
# momentum VARIABLE there, ApplyAdam(var, m, v, beta1_power, beta2_power, lr, ...) TF1's
# beta powers, ApplyAdagradDA(..., global_step) the step, and a gradient accumulator may be
# the grad: none is a slot (review-23-attack-r69 F3; df775cb read them all as slots). An
# Apply* op type not listed here (a custom op library's) proves no slot: its inputs are
# unknown, so each variable it takes is recorded as written (``writers``) and as its state
# (``reads``), never as a slot.
SLOT_INPUTS: dict[str, tuple[int, ...]] = {
    "ApplyGradientDescent": (),
    "ApplyProximalGradientDescent": (),
    "ApplyMomentum": (1,),
    "ApplyKerasMomentum": (1,),
    "ApplyAdagrad": (1,),
    "ApplyAdagradV2": (1,),
    "ApplyProximalAdagrad": (1,),
    "ApplyAddSign": (1,),
    "ApplyPowerSign": (1,),
    "ApplyAdagradDA": (1, 2),
    "ApplyAdam": (1, 2),
    "ApplyAdaMax": (1, 2),
    "ApplyAdadelta": (1, 2),
    "ApplyRMSProp": (1, 2),
    "ApplyFtrl": (1, 2),
    "ApplyFtrlV2": (1, 2),
    "ApplyAdamWithAmsgrad": (1, 2, 3),
    "ApplyCenteredRMSProp": (1, 2, 3),
}
# every other op that writes the variable its first input is (or reads)
WRITES = re.compile(r"^(?:Assign(?:Add|Sub)?(?:VariableOp)?|(?:Resource)?StridedSliceAssign"
                     r"|(?:Resource)?Scatter(?:Nd)?(?:Update|Add|Sub|Mul|Div|Min|Max))$")
# ops that read a checkpoint's keys (input 1 names them): a Saver's and init_from_checkpoint's
# restores, and warm_start's vocabulary remap of an embedding (review-33-attack-r126 F2)
RESTORES = frozenset({"RestoreV2", "Restore", "RestoreSlice", "LoadAndRemapMatrix"})
_BROADCAST = re.compile(r"Broadcast|Bcast")  # HorovodBroadcast, NcclBroadcast, CollectiveBcast*
_SAVE_SCOPE = re.compile(r"^(?:.*/)?save(?:_\d+)?/")
NO_NODE = GraphNode("", [], [])


class UpdateOps(Frozen):
    """What a graph's update ops write (variable op names, as the graph names them).

    Attributes:
        averages: shadow -> ``(averaged variable, EMA name scope)``: the shadow an
            ``AssignMovingAvg`` op updates from that variable (``ExponentialMovingAverage_1``:
            the scope of one ``ema.apply()``, as TF made it unique in the graph).
        slots: slot -> ``(trained variable, update op)`` for each variable input of an
            optimizer's ``Apply*`` op at a slot's position (:data:`SLOT_INPUTS`).
        reads: variable -> ``(trained variable, update op)`` for each other variable input of
            such an op (a learning rate, a momentum, Adam's ``beta1_power``, the global step
            of ``ApplyAdagradDA``, a gradient accumulator): the optimizer's state or
            hyperparameters, no slot (review-23-attack-r69 F3).
        grouped: the scopes of ``averages`` that a ``NoOp`` of the scope's own name groups,
            as ``ExponentialMovingAverage.apply()`` does (``ema`` for ``ema/AssignMovingAvg``),
            and whose decay is one ``apply()`` makes itself (:func:`_apply_decay`; with a
            float32 ``num_updates``, which ``apply()`` does not cast, only TF's own
            ``min(decay, (1 + n) / (10 + n))`` over one named counter node:
            :func:`.meta_decay.float_counted_text`).
        other_decay: the scopes so grouped whose decay is not: a decay tensor of the user's
            (``ExponentialMovingAverage(tf.minimum(0.999, ...))``), or a Lookahead's or SWA's
            hand-written ``assign_moving_average`` in ``apply()``'s idiom; the graph does not
            tell which.
        tensors: shadow -> ``(averaged op, EMA name scope)`` where an ``AssignMovingAvg`` op
            averages a tensor no variable holds into it (a gradient's moment kept by
            ``assign_moving_average(m, grad, ...)``): no variable's average
            (review-17-attack-r36 F7).
        writers: variable -> ``(op, its type)``: the first op found writing it that is no
            ``AssignMovingAvg`` update above (an ``Assign``, ``AssignAdd``, ``Scatter*``,
            an optimizer's ``Apply*``, in the graph or in a function it calls), its own
            initializer (``<var>/Assign``, ``<var>/Initializer/...``) and a Saver's restore
            (a value from ``RestoreV2``, ops in a ``save/`` scope) left out. A shadow so
            written is no proven average of anything: ``tf1.assign(m, 0.9 * m + 0.1 * g)``
            under ``w0/ExponentialMovingAverage`` keeps a gradient's moment as ``apply()``'s
            key would (review-17-attack-r38 F9). A plain assign copying a value into a
            shadow an ``AssignMovingAvg`` update averages ``W`` into (``W``'s, its own, a
            backup's of those, a fed one) is no writer (:mod:`.meta_copies`).
        applies: shadow -> the ``apply()`` that writes it, told apart from every other one:
            its name scope as the graph names it, the scopes of the control-flow-v1 contexts
            it runs in kept (``cond/ExponentialMovingAverage``), and the function it is in
            (``ExponentialMovingAverage in cond_true_12``), whose graph restarts the scopes;
            ``averages`` drops both, as an EMA's name reads them (review-18-attack-r41 F3).
        copies: variable -> the ``(op, type, source)`` of each write copying a value into it
            (``source``: the variable op read, or :data:`.meta_copies.FEED`) that is not so
            accepted: the graph does not prove what the value is; the keys' names decide
            (review-18-attack-r41 F2).
        whole: whether every function the graphs call was read (``False``: more calls than
            :func:`.graph_def.read_branches` reads, or a library that could not be read): an
            ``apply()`` may then run unseen, so the reading proves what it shows and no
            absence, such as no other ``apply()`` writing a key (review-19-attack-r43 F3).
        decays: ``apply()`` (as ``applies`` names it) -> the decay its updates use: where it
            is one ``apply()`` builds from a number, the number
            (:func:`.meta_decay.decay_text`: ``0.5``, or ``min(0.5, (1 + n) / (10 + n))``
            with ``num_updates``); where it is a tensor or variable given to the object, the
            node every update reads it from (:func:`.meta_decay.decay_source`: ``tensor
            'dc5'``, ``variable 'decay'``). One object gives each of its ``apply()`` calls the
            same, so two different constants are two objects (review-26-attack-r92 F1), and
            one node read by each shows one decay (review-27-attack-r100 F1). Left out where
            not read (a function's update, a decay not read as ``1 - decay``, two graphs
            disagreeing).
        looped: the ``apply()`` calls (as ``applies`` names them) in a function a
            ``tf.while_loop`` (or ``For``) runs, nested too: its arguments are each
            iteration's values, so a decay or counter it is passed names no node of the graph
            (:class:`~.graph_def.Branch` ``loop``) and its decay is not read.
    """

    averages: dict[str, tuple[str, str]]
    slots: dict[str, tuple[str, str]]
    grouped: frozenset[str]
    other_decay: frozenset[str]
    tensors: dict[str, tuple[str, str]]
    writers: dict[str, tuple[str, str]]
    applies: dict[str, str]
    copies: dict[str, tuple[tuple[str, str, str], ...]]
    whole: bool
    reads: dict[str, tuple[str, str]]
    decays: dict[str, str]
    looped: frozenset[str]
    _fields = ("averages", "slots", "grouped", "other_decay", "tensors", "writers", "applies",
               "copies", "whole", "reads", "decays", "looped")

    def __init__(self, averages: dict[str, tuple[str, str]],
                 slots: dict[str, tuple[str, str]],
                 grouped: frozenset[str] = frozenset(),
                 other_decay: frozenset[str] = frozenset(),
                 tensors: dict[str, tuple[str, str]] | None = None,
                 writers: dict[str, tuple[str, str]] | None = None,
                 applies: dict[str, str] | None = None,
                 copies: dict[str, tuple[tuple[str, str, str], ...]] | None = None,
                 whole: bool = True,
                 reads: dict[str, tuple[str, str]] | None = None,
                 decays: dict[str, str] | None = None,
                 looped: frozenset[str] = frozenset()) -> None:
        self.__dict__.update(averages=averages, slots=slots, grouped=frozenset(grouped),
                             other_decay=frozenset(other_decay), tensors=dict(tensors or {}),
                             writers=dict(writers or {}), applies=dict(applies or {}),
                             copies=dict(copies or {}), whole=whole, reads=dict(reads or {}),
                             decays=dict(decays or {}), looped=frozenset(looped))

def op_updates(nodes, variable, function: str = "", said=None) -> UpdateOps:
    """The update ops among ``nodes`` (a graph's, or the ``function`` so named's), ``variable``
    reading a tensor name back to the graph's variable op (``None``: none), ``said`` naming
    the graph's node a function's decay or counter tensor is
    (:func:`.meta_decay.argument_said`; ``None``: the graph's own, or none for a function)."""
    averages: dict[str, tuple[str, str]] = {}
    slots: dict[str, tuple[str, str]] = {}
    reads: dict[str, tuple[str, str]] = {}  # an Apply op's other variable inputs (its lr)
    other_decay: set[str] = set()  # scopes with an update whose decay is not apply()'s
    tensors: dict[str, tuple[str, str]] = {}
    applies: dict[str, str] = {}
    proven: set[str] = set()  # the AssignMovingAvg ops read above
    writes: list[tuple[str, str, str]] = []  # (variable, op, type) of every other write
    copies: dict[str, tuple[tuple[str, str, str], ...]] = {}  # writes copying a value
    decays: dict[str, str] = {}  # apply() -> its decay, where read
    for name, (op, inputs, _strings) in nodes.items():
        if inputs and (WRITES.match(op) or _APPLY.match(op)):
            written = variable(inputs[0])
            if written is not None and not _initial_or_restored(nodes, name, inputs, written,
                                                                variable):
                copied = copy_source(nodes, op, inputs, variable)
                if copied is None:
                    writes.append((written, name, op))
                else:  # read once every graph's updates are known (settle_copies)
                    copies[written] = (*copies.get(written, ()), (name, op, copied))
        if op in ASSIGN_SUB and len(inputs) == 2:
            scope = name if MOVING_AVG.search(name) else name.rpartition("/")[0]
            scope = _PER_DEVICE.sub("", scope) if MOVING_AVG.search(
                _PER_DEVICE.sub("", scope)) else scope
            if not MOVING_AVG.search(scope):
                continue
            owner = scope.rpartition("/")[0]  # the EMA's name scope (ema of ema/AssignMovingAvg)
            shadow = variable(inputs[0])
            mul = nodes.get(op_name(inputs[1]), NO_NODE)  # decay * (shadow - value)
            sub = nodes.get(op_name(mul.inputs[0]), NO_NODE) if mul.op == "Mul" and mul.inputs \
                else NO_NODE
            averaged = variable(sub.inputs[1]) if sub.op == "Sub" and len(sub.inputs) == 2 \
                else None
            if shadow is not None and averaged is not None and shadow != averaged:
                averages[shadow] = (averaged, owner)
                # a function's scopes restart: its ExponentialMovingAverage is not the graph's
                applies[shadow] = f"{owner} in {function}" if function else owner
                proven.add(name)
                if _apply_decay(nodes, mul, owner):
                    decay = decay_text(nodes, mul, owner, said)
                else:  # apply()'s own with a float32 num_updates, which it does not cast
                    decay = float_counted_text(nodes, mul, owner, said)
                    if decay is None:
                        other_decay.add(owner)
                        decay = decay_source(nodes, mul, said)  # the tensor or variable read
                # one update of the apply() whose decay is unread leaves it unread
                label = applies[shadow]
                decays[label] = decay if decay is not None and decays.get(
                    label, decay) == decay else ""
            elif shadow is not None and averaged is None and sub.op == "Sub" \
                    and len(sub.inputs) == 2:
                tensors[shadow] = (op_name(sub.inputs[1]), owner)
                proven.add(name)
        elif _APPLY.match(op) and inputs:
            trained = variable(inputs[0])
            at = SLOT_INPUTS.get(_APPLY_KIND.sub(r"\1", op))  # None: an op TF does not define
            data = [t for t in inputs if not t.startswith("^")]  # control inputs come last
            for i, tensor in enumerate(data[1:], 1):
                taken = variable(tensor)
                if trained is None or taken is None or taken == trained:
                    continue
                if at is not None and i in at:
                    slots.setdefault(taken, (trained, name))
                    writes.append((taken, name, op))
                else:  # a learning rate, Adam's beta1_power: read only, no slot
                    reads.setdefault(taken, (trained, name))
                    if at is None:  # which inputs it writes is unknown: written, no slot
                        writes.append((taken, name, op))
    grouped = {scope for _v, scope in averages.values()
               if scope and nodes.get(scope, NO_NODE).op == "NoOp"}
    writers: dict[str, tuple[str, str]] = {}
    for written, name, op in sorted(writes):
        if name not in proven:
            writers.setdefault(written, (name, op))
    return UpdateOps(averages, slots, frozenset(grouped - other_decay),
                     frozenset(grouped & other_decay), tensors, writers, applies, copies,
                     reads=reads, decays=decays)


def _initial_or_restored(nodes, name: str, inputs: list[str], written: str,
                         variable) -> bool:
    """Whether the write ``name`` (its data ``inputs``) of variable op ``written`` is the
    variable's own initializer (``<var>/Assign``, or an op under ``<var>/Initializer``), a
    Saver's restore (in a ``save``/``save_N`` scope, or a value read from a restore op) or the
    variable's own value broadcast from another worker (Horovod's
    ``broadcast_global_variables()`` assigns every global variable, the averages too,
    ``HorovodBroadcast(v)``); ``variable`` reads a tensor back to its variable op."""
    if name == written + "/Assign" or name.startswith(written + "/Initializer/") \
            or _SAVE_SCOPE.match(name):
        return True
    value = op_name(inputs[1]) if len(inputs) > 1 else ""
    for _ in range(8):
        node = nodes.get(value)
        if node is None or node.op not in READS or not node.inputs:
            break
        value = op_name(node.inputs[0])
    node = nodes.get(value, NO_NODE)
    if _BROADCAST.search(node.op) and node.inputs:
        return variable(node.inputs[0]) == written  # a copy of itself: no new value
    return node.op in RESTORES or _restored_only(nodes, value)


#: Ops whose value no restore gives: a variable's (a training op reads them) or a fed one.
_NOT_RESTORED = frozenset({"VarHandleOp", "VariableV2", "Variable", "TemporaryVariable",
                           "Placeholder"})
_MAX_RESTORED = 64  # ops a warm start's value is followed back through at most


def _restored_only(nodes, value: str) -> bool:
    """Whether the op ``value`` is computed from a restore op and otherwise only from
    constants and random initializers (no variable, no fed value): ``warm_start``'s
    vocabulary remap with out-of-vocabulary rows, ``concat([LoadAndRemapMatrix(...),
    oov_init])``, whose assign is the warm start, not an op training the variable
    (review-33-attack-r130 N3). Followed back at most :data:`_MAX_RESTORED` ops; ``False``
    past that."""
    restored, seen, todo = False, set(), [value]
    while todo:
        name = op_name(todo.pop())
        if name in seen or not name:
            continue
        seen.add(name)
        node = nodes.get(name)
        if node is None or len(seen) > _MAX_RESTORED or node.op in _NOT_RESTORED:
            return False
        if node.op in RESTORES:  # its own inputs are the file and key names
            restored = True
            continue
        todo.extend(i for i in node.inputs if not i.startswith("^"))
    return restored


def _apply_decay(nodes: dict[str, GraphNode], mul: GraphNode, scope: str) -> bool:
    """Whether an ``AssignMovingAvg`` update's decay is the one
    ``ExponentialMovingAverage.apply()`` gives it: ``1 - <scope>/decay`` (the constant a
    float ``decay`` becomes, cast to the variable's dtype where it differs), or with
    ``num_updates`` ``1 - <scope>/Minimum(decay, (1 + n) / (10 + n))``, the ratio built in the
    scope from ``<scope>/num_updates`` (whatever ``decay`` is). A running mean kept by hand
    with ``assign_moving_average`` in the same name-scope-and-group idiom (a Lookahead's slow
    weights, decay 0.5 on sync steps and 1 otherwise; an SWA mean, n / (n + 1)) gets its decay
    from elsewhere (review-15-attack-r31 F1). So does an EMA given a decay tensor without
    ``num_updates`` (``apply()`` passes it through as it is): the graph does not tell it from
    a Lookahead's, and ``--ema-name`` states it (review-15-attack-r31 F10). A resource
    variable given as ``decay`` is read in the scope (``<scope>/ReadVariableOp``) exactly as
    a Lookahead reads its changing decay variable once in its scope (``d = alpha.value()``):
    not proven either (review-16-attack-r33 F2)."""
    def node(name: str) -> GraphNode:
        return nodes.get(op_name(name), NO_NODE)

    decay = node(mul.inputs[1]) if mul.op == "Mul" and len(mul.inputs) == 2 else NO_NODE
    if decay.op == "Cast" and decay.inputs:
        decay = node(decay.inputs[0])
    if decay.op != "Sub" or len(decay.inputs) != 2:
        return False
    source = op_name(decay.inputs[1])
    if source == scope + "/Minimum" and node(source).op == "Minimum":
        # minimum(decay, (1 + n) / (10 + n)), the ratio of num_updates built in the scope:
        # apply()'s own, whatever decay it was given
        return scope + "/truediv" in map(op_name, node(source).inputs) and all(
            scope + "/num_updates" in map(op_name, node(f"{scope}/{a}").inputs)
            for a in ("add", "add_1"))
    return source == scope + "/decay" and node(source).op == "Const"
