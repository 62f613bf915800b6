"""The ``ckpt`` vocabulary: options and arguments every command spells the same way.

``--json``, ``--quiet``, ``--wide``, ``--grep GLOB`` / ``--regex RE`` (names), ``--format``
(``--to`` is a hidden alias), ``--slots keep|drop``. README: "Options every command shares".
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated

import typer

from ..order_marks import marked_paths
from ._run import (  # noqa: F401 - every command resolves paths as `ckpt list` does
    json_notes,
    note_sibling_doubt,
    resolve,
)

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint

def complete_from(*values: str):
    """Shell completion for an option with fixed choices (``--role <TAB>``)."""
    def complete(incomplete: str) -> list[str]:
        return [v for v in values if v.startswith(incomplete)]
    return complete


def complete_path(incomplete: str) -> list[str]:
    """Shell completion for checkpoint paths: files and directories (``dir/``) starting with
    what was typed so far."""
    import glob

    found = sorted(glob.glob(glob.escape(os.path.expanduser(incomplete)) + "*"))
    return [p + "/" if os.path.isdir(p) else p for p in found[:200]]


PATH_HELP = ("a training directory (uses its 'checkpoint' state file; without one, the "
             "highest step/epoch its file names record, e.g. ckpt-11, ep12.keras), a prefix "
             "such as model.ckpt-1000, a .index, .data-*, or .meta file, a V1 file or shard, a "
             "SavedModel directory or its saved_model.pb, or a .keras/.h5 file; or an "
             "s3://, gs://, http(s):// or file:// URL of a V2 checkpoint (pip install "
             "\"ckpt-tools[remote]\").")
PATH_SHORT = ("a training directory, a prefix (model.ckpt-1000), a .index/.data/.meta file, "
              "a SavedModel, a .keras/.h5 file, or an s3://, gs://, http(s):// URL.")
PathArg = Annotated[
    str,
    typer.Argument(autocompletion=complete_path, help="Checkpoint: " + PATH_SHORT,
                   show_default=False, metavar="PATH"),
]
# --help lists these options apart, after the others: they state what a file cannot show, and
# a refusal names the one to pass (docs/cli.md's option tables give each in full).
PAIRING = "Pairing statements (a refusal names the one to pass)"
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", help="Print only the data: no titles, summaries or notes, except "
    "those saying a pairing rests on your statement or an assumption.")]
WideOpt = Annotated[bool, typer.Option(
    "--wide", "-w", help="Show names whole and every column, whatever the terminal width.")]
GrepOpt = Annotated[list[str] | None, typer.Option(
    "--grep", "-g", metavar="GLOB",
    help="Only names matching this shell glob ('conv*/weights'; repeatable).")]
RegexOpt = Annotated[list[str] | None, typer.Option(
    "--regex", "-e", metavar="RE",
    help="Only names where this regular expression matches ('Momentum$'; repeatable).")]
ToOpt = Annotated[str | None, typer.Option("--to", hidden=True, help="Alias of --format.")]
UseEmaOpt = Annotated[bool | None, typer.Option(
    "--use-ema/--no-use-ema", show_default=False, rich_help_panel=PAIRING,
    help="Keras files: state whether the optimizer ran with use_ema=True, where the file "
    "cannot tell (a bare .weights.h5). Default: from config.json or the optimizer "
    "variables.")]
OptimizerOpt = Annotated[str | None, typer.Option(
    "--optimizer", metavar="CLASS[:OPTIONS]", rich_help_panel=PAIRING,
    help="Bare Keras .weights.h5: the optimizer's built-in class and options that add "
    "variables (sgd:momentum), which the file records only by name (tf_keras: not at "
    "all).")]
TrainableOpt = Annotated[str | None, typer.Option(
    "--trainable", metavar="NAMES", rich_help_panel=PAIRING,
    help="The weights the optimizer was built with, in model.trainable_variables order: "
    "names as 'ckpt list' shows them, comma-separated (a layer name stands for its weights), "
    "or @FILE; a custom loop's order: add --loop-order.")]
LoopOrderOpt = Annotated[bool, typer.Option(
    "--loop-order", rich_help_panel=PAIRING,
    help="The --trainable order is a custom training loop's (its first apply_gradients()), "
    "not the model's. Required with --trainable on a TensorFlow checkpoint.")]
FitOrderOpt = Annotated[bool, typer.Option(
    "--fit-order", rich_help_panel=PAIRING,
    help="Keras: state that fit() built the optimizer, so equal-shaped weights' copies "
    "pair in model order.")]
StrictOpt = Annotated[bool, typer.Option(
    "--strict", rich_help_panel=PAIRING,
    help="Also refuse (exit 6) a pairing that rests on an assumption ('assumed' in --json: "
    "fit_order, saver_not_swapped); --fit-order, --trainable or --not-swapped state it.")]
NotSwappedOpt = Annotated[bool, typer.Option(
    "--not-swapped", rich_help_panel=PAIRING,
    help="State that the file was not saved swapped (after SwapEMAWeights(swap_on_epoch="
    "True) or swap_weights(); TF1 beside a .meta without a save op: by a swapping Saver), "
    "so its EMA copies are the averages (if it was: ckpt export --raw).")]
SaverDefWroteOpt = Annotated[bool, typer.Option(
    "--saver-def-wrote", rich_help_panel=PAIRING,
    help="TF1: state the .meta's SaverDef Saver wrote it.")]
AveragesOnlyOpt = Annotated[bool, typer.Option(
    "--averages-only", rich_help_panel=PAIRING,
    help="TF1: state that keys named as averages of variables not stored hold averages.")]
KeysAreRawOpt = Annotated[bool, typer.Option(
    "--keys-are-raw", rich_help_panel=PAIRING,
    help="With --raw: state keys named as averages are raw.")]
SLOTS = ("keep", "drop")


def trainable_names(value: str | None, loop_order: bool = False,
                    fit_order: bool = False) -> list[str] | None:
    """The names of ``--trainable``: comma-separated, or ``@FILE`` (one per line, ``#``
    comments); a :class:`~ckpt_tools.formats.keras.stated.LoopOrder` with ``--loop-order``.

    Raises:
        typer.BadParameter: ``@FILE`` cannot be read, no name is given, ``--loop-order``
            comes without ``--trainable``, or ``--fit-order`` with either (exit 2).
    """
    if fit_order and (value is not None or loop_order):
        raise typer.BadParameter(
            "states fit()'s order (model.trainable_variables); --trainable/--loop-order "
            "state another: give one", param_hint="--fit-order")
    if value is None:
        if loop_order:
            raise typer.BadParameter("states the order of --trainable: give --trainable "
                                     "NAMES too", param_hint="--loop-order")
        return None
    if value.startswith("@"):
        try:
            with open(value[1:], encoding="utf-8") as f:
                lines = [ln.split("#", 1)[0].strip() for ln in f]
        except (OSError, UnicodeDecodeError) as exc:
            raise typer.BadParameter(f"cannot read {value[1:]}: {exc}",
                                     param_hint="--trainable") from None
        names = [n.strip() for ln in lines for n in ln.split(",")]
    else:
        names = [n.strip() for n in value.split(",")]
    names = [n for n in names if n]
    if not names:
        raise typer.BadParameter("no weight named", param_hint="--trainable")
    if loop_order:
        from ..formats.keras.stated import LoopOrder

        return LoopOrder(names)
    return names


def choice(value: str | None, allowed: Iterable[str], option: str) -> str | None:
    """Returns ``value`` when it is one of ``allowed``.

    Raises:
        typer.BadParameter: otherwise (exit 2), naming the choices.
    """
    allowed = tuple(allowed)
    if value is not None and value not in allowed:
        raise typer.BadParameter(f"{value!r} is not one of: {', '.join(allowed)}",
                                 param_hint=option)
    return value


def pick_format(fmt: str | None, to: str | None) -> str | None:
    """Merges ``--format`` and its hidden alias ``--to``.

    Raises:
        typer.BadParameter: both given with different values.
    """
    if fmt and to and fmt != to:
        raise typer.BadParameter(f"--to {to!r} contradicts --format {fmt!r} (--to is an "
                                 "alias of --format)", param_hint="--format")
    return fmt or to


class NameFilter:
    """``--grep GLOB`` and ``--regex RE``: a name is kept when any pattern matches its
    checkpoint key or its display name (the object path of TF2/Keras keys), or the name
    ``written_as`` gives it (key -> the name an export writes it under:
    :func:`~ckpt_tools.export_names.export_names`).

    Globs are always globs and regular expressions always regular expressions: no guessing
    from the characters a pattern holds.

    Raises:
        typer.BadParameter: for an invalid regular expression (exit 2).
    """

    def __init__(self, grep: list[str] | None = None, regex: list[str] | None = None,
                 written_as: dict[str, str] | None = None):
        self.globs = list(grep or [])
        self.written_as = dict(written_as or {})
        self.regexes = []
        for pattern in regex or []:
            try:
                self.regexes.append(re.compile(pattern))
            except re.error as exc:
                raise typer.BadParameter(f"invalid regular expression {pattern!r}: {exc}",
                                         param_hint="--regex") from None

    @property
    def active(self) -> bool:
        return bool(self.globs or self.regexes)

    def __call__(self, key: str, path: str | None = None) -> bool:
        if not self.active:
            return True
        names = (key,) if not path or path == key else (key, path)
        return any(fnmatch.fnmatchcase(n, g) for n in names for g in self.globs) or any(
            rx.search(n) for n in names for rx in self.regexes)

    def keys(self, ckpt: Checkpoint) -> list[str]:
        """The checkpoint keys this filter keeps."""
        names = display_names(ckpt)
        marked = marked_paths(ckpt)  # a name shown with '?' matches without it (u33 F6)
        return [k for k in ckpt.keys() if (self(k, names.get(k)) or (
            k in self.written_as and self(self.written_as[k])) or (
            k in marked and self(k, marked[k]))) and k not in ckpt.aliases()]

    def as_globs(self, ckpt: Checkpoint) -> list[str] | None:
        """The kept keys as exact-match globs, for library ``include=`` arguments (``None``
        when no filter is given)."""
        if not self.active:
            return None
        kept = [_glob_escape(k) for k in self.keys(ckpt)]
        return kept or ["[]"]  # "[]" matches nothing: an empty selection stays empty


def require_selection(ckpt: Checkpoint, names: NameFilter,
                      exclude: list[str] | None) -> None:
    """Fails when ``--grep``/``--regex``/``--exclude`` leave no variable, naming the options
    given, before any work: otherwise the command would blame something else ("no variable
    has an EMA shadow").

    Raises:
        VariableNotFoundError: the filters select nothing (exit 3, like ``show`` with a name
            or ``--regex`` that matches nothing).
    """
    if not names.active and not exclude:
        return
    shown = display_names(ckpt)
    unused = unmatched_excludes(ckpt, exclude, names.written_as.values())
    if unused:  # a typo'd --exclude would leave in what the user meant to leave out
        from ..errors import VariableNotFoundError

        raise VariableNotFoundError(
            f"{ckpt.path}: {' '.join(f'--exclude {g!r}' for g in unused)} "
            f"match{'es' if len(unused) == 1 else ''} no variable, so "
            f"{'it leaves' if len(unused) == 1 else 'they leave'} nothing out"
            f"{_whole_name_hint(_names(ckpt), unused, '--exclude')}")
    marked = marked_paths(ckpt)
    kept = [k for k in names.keys(ckpt) if not any(
        fnmatch.fnmatchcase(n, g) for g in exclude or ()
        for n in {k, shown.get(k, k), names.written_as.get(k, k), marked.get(k, k)})]
    if kept:
        return
    raise no_selection(ckpt.path, names, exclude, shown=_names(ckpt))


def unmatched_excludes(ckpt: Checkpoint, exclude: list[str] | None,
                       written_as: Iterable[str] = ()) -> list[str]:
    """The ``--exclude`` globs that match no name a command filters on: no key, no display
    name, no variable an average is (or may be) of (a TF1 Saver of the averages alone stores
    no key under the variable's name), no TF2 variable name an average records (the
    average of a weight the object graph does not store), and none of ``written_as`` (the
    names an export writes keys under)."""
    if not exclude:
        return []
    names = set(written_as) | set(marked_paths(ckpt).values())
    for v in ckpt.variables_unwarned():
        names.update(filter(None, (v.name, v.path, v.ema_of, *v.ema_candidates)))
    for full in (ckpt.objects.full_names.values() if ckpt.objects is not None else ()):
        names.update((full, full.rpartition("/")[0]))
    return [g for g in exclude if not any(fnmatch.fnmatchcase(n, g) for n in names)]


def _names(ckpt: Checkpoint) -> set[str]:
    """Every key and display name: what ``--grep`` and ``--exclude`` match."""
    return {n for v in ckpt.variables_unwarned() for n in (v.name, v.path) if n} | set(
        marked_paths(ckpt).values())


def _whole_name_hint(shown, globs: list[str], option: str) -> str:
    """``; did you mean --grep '*fc1*'? (a glob matches the whole name)`` where a glob
    without a wildcard would match as ``*GLOB*``: a bare word is what a new user types."""
    for g in globs:
        if not re.search(r"[*?\[]", g) and any(g in n for n in shown):
            return f"; did you mean {option} '*{g}*'? (a glob matches the whole name)"
    return ""


def exclude_globs(ckpt: Checkpoint, exclude: list[str] | None,
                  written_as: dict[str, str] | None = None) -> list[str] | None:
    """``--exclude`` for library ``exclude=`` arguments (globs on checkpoint keys): the globs
    given, plus the keys whose display name (``model/f8``, the object path ``ckpt list``
    shows) or ``written_as`` name (key -> name, as :class:`NameFilter`'s) matches one, so a
    pattern leaves out what it names in every command."""
    if not exclude:
        return exclude
    shown = [*{**display_names(ckpt), **(written_as or {})}.items(),
             *marked_paths(ckpt).items()]  # a '?' name without its mark too (u33 F6)
    return [*exclude, *dict.fromkeys(_glob_escape(k) for k, n in shown if n != k and any(
        fnmatch.fnmatchcase(n, g) for g in exclude))]


# Characters that make a --grep pattern look like a regular expression ('.*Momentum').
_REGEX_LOOK = re.compile(r"\.\*|\.\+|\\|\^|\$|\(|\||\{")


def _escaped_hint(shown, globs: list[str]) -> str:
    """``; 'ckpt list' shows control characters ... did you mean --grep $'a\\nb'?`` where a
    glob selects a shown name once the escapes ``list`` shows are read back (a name pasted
    from the table, as ``show`` says it: review-32-user-u34 MINOR); ``""`` otherwise."""
    from ..variable import shell_word
    from ._text import unclean

    for g in globs:
        meant = unclean(g)
        if meant != g and any(fnmatch.fnmatchcase(n, meant) for n in shown):
            return ("; 'ckpt list' shows control characters and backslashes escaped: did you "
                    f"mean --grep {shell_word(meant)}?")
    return ""


def no_selection(path: str, names: NameFilter, exclude: list[str] | None = None,
                 what: str = "variable", shown=(), said: str = ""):
    """Returns the exit-3 error every command gives when the name filters select nothing:
    ``<path>: the name filters select no variable (--grep '...')``, adding that ``--grep`` is
    a glob when a pattern looks like a regular expression. ``what`` names what the command
    acts on when the filters match keys but none of those (``variable with an EMA shadow``).
    ``shown``: the names the filters were matched against, for the hint that a ``--grep``
    word matches the whole name; ``said``: what the filters left out, after them."""
    from ..errors import VariableNotFoundError

    given = [f"--grep {g!r}" for g in names.globs] + \
        [f"--regex {r.pattern!r}" for r in names.regexes] + \
        [f"--exclude {g!r}" for g in exclude or ()]
    hint = _escaped_hint(shown, names.globs) or (
        "; --grep takes a shell glob ('conv*/weights'), --regex a regular expression"
        if any(_REGEX_LOOK.search(g) for g in names.globs) else "")
    if not hint and not exclude:
        hint = _whole_name_hint(shown, names.globs, "--grep")
    return VariableNotFoundError(f"{path}: the name filters select no {what} "
                                 f"({' '.join(given)}){said}{hint}")


def check_output_parent(path: str, operation: str = "creating the output") -> None:
    """Fails like the OS would (exit 1) when ``path`` goes through an existing file, naming
    the path, the file in the way and what was being done.

    Raises:
        WriteError: a parent of ``path`` is a file (``/tmp/blocker/out``): ``/tmp/blocker/out:
            Not a directory (/tmp/blocker is a file) while creating the output``.
    """
    from ..errors import WriteError

    parent = os.path.dirname(os.path.abspath(path))
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if parent and not os.path.isdir(parent):
        shown = os.path.relpath(parent) if not os.path.isabs(path) else parent
        raise WriteError(path, f"{os.strerror(errno.ENOTDIR)} ({shown} is a file)", operation)


def _glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def display_names(ckpt: Checkpoint) -> dict[str, str]:
    """``{key: display name}``: the object path of TF2/Keras keys, the key itself otherwise.

    Every command shows these; ``--json`` gives the raw key as ``key`` beside it.
    """
    return {v.name: v.path or v.name for v in ckpt.variables_unwarned()}
