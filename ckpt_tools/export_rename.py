"""``ckpt export --rename 'old/=new/'``: the prefix rules (:func:`parse_rename`) and
:class:`Renamer`, which applies them to output names (the first rule whose prefix a name has)
and refuses rules that renamed nothing. A typo'd or shadowed rule would leave the names the
user meant to change, and a converter loading by name then fails far from the cause, as a
typo'd ``--exclude`` would leave in what was meant to be left out (review-16-user-u18 F6)."""

from __future__ import annotations

from .errors import OutputError, VariableNotFoundError


def parse_rename(rules: list[str] | str | None) -> list[tuple[str, str]]:
    """Parses ``--rename 'old/=new/'`` prefix rules (one rule may be given as a string).

    Returns:
        `list[tuple[str, str]]`: ``(old_prefix, new_prefix)`` in the order given.

    Raises:
        OutputError: for a rule without ``=``.

    Example:
        >>> parse_rename(["model/=net/"])
        [('model/', 'net/')]
    """
    if isinstance(rules, str):  # rename="a/=b/": one rule, never its characters (r34 F11)
        rules = [rules]
    out = []
    for rule in rules or ():
        if "=" not in rule:
            raise OutputError(f"invalid --rename rule {rule!r}: expected 'old_prefix=new_prefix'")
        old, new = rule.split("=", 1)
        out.append((old, new))
    return out


class Renamer:
    """Applies ``--rename`` rules to output names, remembering which rules renamed one.

    Example:
        >>> r = Renamer(["model/=net/"])
        >>> r("model/w"), r("head/b")
        ('net/w', 'head/b')
        >>> r.check("ckpt")
    """

    def __init__(self, rules: list[str] | str | None):
        self.rules = parse_rename(rules)
        self.used: set[int] = set()

    def __call__(self, name: str) -> str:
        """``name`` under the first rule whose prefix it has (unchanged under none)."""
        for i, (old, new) in enumerate(self.rules):
            if name.startswith(old):
                self.used.add(i)
                return new + name[len(old):]
        return name

    def check(self, path: str) -> None:
        """Refuses the rules that renamed no exported name.

        Raises:
            VariableNotFoundError: naming each such rule (exit 3): its prefix begins no
                name, or an earlier rule took every name it would have renamed.
        """
        unused = [f"{old}={new}" for i, (old, new) in enumerate(self.rules) if i not in self.used]
        if unused:
            rules = " ".join(f"--rename {u!r}" for u in unused)
            raise VariableNotFoundError(
                f"{path}: {rules} renamed no exported name (no name begins with its prefix, or "
                "an earlier rule took them: the first rule whose prefix a name has wins); "
                "'ckpt list' shows the names export starts from")
