"""One wording for the keys :func:`~ckpt_tools.raw_named.raw_named_keys` reads: TF1 keys
named as averages that the ``.meta``'s save op wrote from their own variables, as
``Saver(ema.variables_to_restore())`` does.

A training graph's such Saver writes the RAW weights there; an evaluation graph built by the
same code (optimizer and ``ema.apply()`` included, never run) that restored the averages with
that Saver and saved again writes the averages the same way (review-23-attack-r70 F1, F2):
the ``.meta`` shows what the graph could run, never what it ran. ``list``, ``export``'s and
``restore-ema``'s refusal (:func:`~ckpt_tools.raw_shadows.raw_refusal`) and the note of an
``--averages-only`` export all say it with these words, so that ``list`` no longer states as
a fact what ``export`` leaves to the two options that decide (review-26-user-u28 F1).
"""

from __future__ import annotations

#: What such keys hold, as every command says it.
IF_TRAINED = "hold their variables' raw values if a training graph saved them"


def if_trained(n: int) -> str:
    """:data:`IF_TRAINED` said of ``n`` keys, its verb agreeing (``"holds ..."`` for one).

    Returns:
        `str`: the clause.
    """
    return IF_TRAINED if n != 1 else "holds" + IF_TRAINED.removeprefix("hold")

#: The ``ema`` cell ``list`` shows for such a key: a raw value unless an evaluation graph
#: re-saved the averages.
RAW_MARK = "raw value?"


def readings_said(averages: str | None = None) -> str:
    """Returns the two readings of such keys and the option that takes each (no leading
    separator).

    Args:
        averages: the ``ckpt export`` options that read them as the averages, as probed
            (:func:`~ckpt_tools.raw_stated.listed_averages_option`); ``""`` or ``None``
            where none was found: then the words leave it to export's refusal, never naming
            an option that is refused (``--averages-only`` alone on a renamed Saver's keys:
            review-29-attack-r108 F2).
    """
    return ("an evaluation graph that restored the averages with that Saver and saved again "
            "writes the averages the same way, which the file cannot show: ckpt export --raw "
            "--keys-are-raw writes them as the raw weights (a training run's); "
            + (f"ckpt export {averages} reads them as the averages (an evaluation graph's "
               "re-save)" if averages else
               "export's refusal names the option that reads them as the averages (an "
               "evaluation graph's re-save), where one does"))


def stated_raw_said(n: int, example: str) -> str:
    """Returns the warning (without ``warning:``) of an export or restore whose ``n`` keys of
    this kind (e.g. ``example``) are read as averages only because ``--averages-only`` was
    stated: never called EMA values as a fact."""
    if n != 1:
        return (f"{n} keys named as averages (e.g. {example}) are read as averages only "
                f"because you stated --averages-only, but they {IF_TRAINED}: the .meta's save "
                "op wrote them from their variables, as a Saver of ema.variables_to_restore() "
                "does; if a training run saved this checkpoint, they hold the raw weights, not "
                "averages (ckpt export --raw --keys-are-raw writes them labelled as such)")
    return (f"1 key named as averages ({example}) is read as an average only because you "
            "stated --averages-only, but it holds its variable's raw value if a training graph "
            "saved it: the .meta's save op wrote it from its variable, as a Saver of "
            "ema.variables_to_restore() does; if a training run saved this checkpoint, it "
            "holds the raw weight, not an average (ckpt export --raw --keys-are-raw writes it "
            "labelled as such)")
