"""``ckpt list``: what is in a checkpoint, without TensorFlow.

Examples::

    ckpt list train/                       # latest checkpoint in a training directory
    ckpt list model.ckpt-1000 --role ema   # only EMA shadows
    ckpt list model.ckpt-1000 --grep 'conv*/weights' --json
"""

from __future__ import annotations

import fnmatch
import re
from typing import Annotated

import typer

from ..checkpoint import Variable, open_checkpoint
from ..roles import ROLES
from ._common import JsonOpt, PathArg, QuietOpt
from ._output import Output, human_bytes

_COLL_ABBREV = {
    "trainable_variables": "trainable", "variables": "global",
    "moving_average_variables": "moving_avg", "model_variables": "model",
    "local_variables": "local", "global_step": "global_step", "metric_variables": "metric",
}


def matcher(pattern: str):
    """Returns a predicate for ``--grep``: a glob if it has glob characters, else a regex.

    Raises:
        typer.BadParameter: for an invalid regular expression.
    """
    if any(c in pattern for c in "*?["):
        return lambda name: fnmatch.fnmatchcase(name, pattern)
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise typer.BadParameter(f"invalid regular expression {pattern!r}: {exc}") from None
    return lambda name: rx.search(name) is not None


def filter_variables(variables: list[Variable], roles: list[str] | None,
                     collections: list[str] | None, grep: str | None) -> list[Variable]:
    """Applies ``--role``, ``--collection`` and ``--grep`` filters."""
    if roles:
        bad = [r for r in roles if r not in ROLES]
        if bad:
            raise typer.BadParameter(f"unknown role {bad[0]!r}; expected one of: "
                                     f"{', '.join(ROLES)}", param_hint="--role")
        variables = [v for v in variables if v.role in roles]
    if collections:
        full = {_COLL_ABBREV.get(c, c) for c in collections}
        wanted = {c for c in collections} | {k for k, v in _COLL_ABBREV.items() if v in full}
        variables = [v for v in variables if wanted.intersection(v.collections)]
    if grep:
        match = matcher(grep)
        variables = [v for v in variables if match(v.name) or (v.path and match(v.path))]
    return variables


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def list_command(
    path: PathArg,
    role: Annotated[list[str] | None, typer.Option(
        "--role", "-r", help=f"Show only these roles (repeatable): {', '.join(ROLES)}.")] = None,
    collection: Annotated[list[str] | None, typer.Option(
        "--collection", "-c",
        help="Show only members of a graph collection (repeatable; needs a .meta): trainable, "
        "global, moving_avg, model, local, or a full collection name.")] = None,
    grep: Annotated[str | None, typer.Option(
        "--grep", "-g", help="Filter names by glob ('conv*/weights') or regular expression.")
    ] = None,
    sort: Annotated[str, typer.Option(
        help="Sort by 'name' (checkpoint order) or 'size'.")] = "name",
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """List variables with dtype, shape, size, role, collections and EMA shadow.

    Reads only the checkpoint index (and the .meta graph beside it, if any): no tensor data,
    no TensorFlow.
    """
    out = Output(json_mode=json_out, quiet=quiet)
    if sort not in ("name", "size"):
        raise typer.BadParameter("expected 'name' or 'size'", param_hint="--sort")
    with open_checkpoint(path) as ckpt:
        everything = ckpt.variables()
        shown = filter_variables(everything, role, collection, grep)
        if sort == "size":
            shown.sort(key=lambda v: v.nbytes, reverse=True)
        if json_out:
            out.json(list_json(ckpt, shown))
            return
        _print_table(out, ckpt, shown, everything)


def list_json(ckpt, variables: list[Variable]) -> dict:
    """The ``ckpt list --json`` document (a contract other tools parse; extend, never rename)."""
    return {
        "checkpoint": ckpt.path,
        "format": ckpt.format,
        "meta": ckpt.location.meta_path,
        "variables": [
            {"name": v.name, "dtype": v.dtype, "shape": list(v.shape), "role": v.role,
             "collections": list(v.collections), "ema_of": v.ema_of, "ema": v.ema,
             "size": v.size, "nbytes": v.nbytes, "slot_of": v.slot_of,
             "partitions": v.partitions, "path": v.path, "ema_style": v.ema_style,
             "ema_candidates": list(v.ema_candidates)}
            for v in variables
        ],
        "totals": {"variables": len(variables), "parameters": sum(v.size for v in variables),
                   "bytes": sum(v.nbytes for v in variables)},
    }


def _readable(v: Variable | None, key: str | None) -> str:
    if v is not None and v.path:
        return v.path
    return key or ""


def _print_table(out: Output, ckpt, shown: list[Variable], everything: list[Variable]) -> None:
    if out.quiet:
        for v in shown:
            out.print(v.name, markup=False)
        return
    by_name = {v.name: v for v in everything}
    has_meta = ckpt.meta is not None
    any_ema = _has_any_ema(everything)
    expected_roles = _averaged_roles(everything)
    columns = [("name", "left"), ("dtype", "left"), ("shape", "left"), ("size", "right"),
               ("role", "left")] + ([("collections", "left")] if has_meta else []) + [
               ("ema", "left")]
    role_style = {"weight": "green", "ema": "cyan", "optimizer_slot": "magenta",
                  "bn_stat": "yellow", "step": "blue", "loss_average": "dim"}
    rows = []
    for v in shown:
        if v.ema:
            ema = ("✓", "cyan")
        elif v.ema_of:
            ema = (f"of {_readable(by_name.get(v.ema_of), v.ema_of)}", "dim")
        elif v.ema_candidates:
            ema = (f"of ? ({len(v.ema_candidates)} candidates: see 'ckpt map')", "red")
        elif v.role in expected_roles and any_ema:
            ema = ("missing", "red")
        else:
            ema = ("", None)
        name = _readable(v, v.name) + (f" ({v.partitions} parts)" if v.partitions else "")
        row = [(name, None), (v.dtype, None), (_shape(v.shape), None), (f"{v.size:,}", None),
               (v.role, role_style.get(v.role))]
        if has_meta:
            row.append((",".join(_COLL_ABBREV.get(c, c) for c in v.collections), None))
        rows.append([*row, ema])
    out.table(f"{ckpt.path} ({ckpt.format})", columns, rows)
    params = sum(v.size for v in shown)
    nbytes = sum(v.nbytes for v in shown)
    out.print(f"\n{len(shown)} of {len(everything)} variables, {params:,} parameters, "
              f"{human_bytes(nbytes)}", markup=False)
    if ckpt.format == "object":
        out.print("names are object paths; --json gives the checkpoint keys", style="dim")
    _print_ema_summary(out, everything)


def _has_any_ema(variables: list[Variable]) -> bool:
    return any(v.role == "ema" for v in variables)


def _averaged_roles(variables: list[Variable]) -> tuple[str, ...]:
    """Roles that should have shadows: weights, and BN statistics when any of them has one
    (TF1 trainers average them, Keras' use_ema does not)."""
    bn = any(v.role == "bn_stat" and v.ema for v in variables)
    return ("weight", "bn_stat") if bn else ("weight",)


def _print_ema_summary(out: Output, variables: list[Variable]) -> None:
    unpaired = [v for v in variables if v.ema_candidates and not v.ema_of]
    if unpaired:
        out.print(f"EMA: {len(unpaired)} average(s) cannot be paired from what the file records "
                  "(same-named variables); 'ckpt map' lists the candidates and the option that "
                  "decides")
    roles = _averaged_roles(variables)
    averaged = [v for v in variables if v.role in roles]
    what = "weights and BN statistics" if "bn_stat" in roles else "weights"
    with_ema = [v for v in averaged if v.ema]
    if with_ema:
        out.print(f"EMA: {len(with_ema)} of {len(averaged)} {what} have a shadow (use "
                  "'ckpt restore-ema' to evaluate with them)")
    elif averaged:
        out.print(f"EMA: none of {len(averaged)} {what} has a shadow")
