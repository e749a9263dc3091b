"""The property families of :func:`interop.testing.check_workspace`, selectable by name."""

from __future__ import annotations

from collections.abc import Iterable

#: Every family, with what it checks. ``properties=`` selects among these names.
DESCRIPTIONS: dict[str, str] = {
    "shapes": "every view has the requested shape and dtype and is contiguous",
    "containment": "every view lies inside one live buffer (its torch storage), "
    "the views of one call in the same one",
    "disjoint": "views of one call never overlap, nor do views of different slots or "
    "persistent tensors",
    "relative_alignment": "the views of one buffer lie at multiples of the alignment (256 bytes "
    "unless the kit is told another) from each other",
    "absolute_alignment": "every view's data_ptr() is a multiple of the alignment, whatever "
    "address the allocator gave the buffer",
    "intact": "get_retained says intact=True only when the bytes the previous call left are "
    "really unchanged (same key, same span, no scribble, no reallocation), and says so "
    "whenever nothing reached them (same key, shape and dtype, same buffer, no request since "
    "ending past the span's start)",
    "locked": "while locked: no growth (AssertionError) and no refusal of what fits; with "
    "persistent selected, no new persistent keys and their contents kept; with intact "
    "selected, a refused call leaves retained bytes alone",
    "persistent": "one factory call per key per slot (falsy resources too: None, 0, []), "
    "the same object on repeat, zero_init "
    "only once, contents kept, ValueError for another shape or dtype, a tensor's key apart "
    "from a resource's",
}

#: The names of all property families, in a fixed order.
PROPERTIES: tuple[str, ...] = tuple(DESCRIPTIONS)


def select_properties(names: Iterable[str] | None) -> frozenset[str]:
    """The families to check: all of them for ``None``, else exactly ``names``.

    Args:
        names: family names from :data:`PROPERTIES` (a single string counts as one name).

    Returns:
        The selected names.

    Raises:
        TypeError: ``names`` is not an iterable of strings.
        ValueError: an unknown name (the message lists the valid ones), or none.

    Example:
        >>> sorted(select_properties(["intact", "shapes"]))
        ['intact', 'shapes']
        >>> select_properties(["alignment"])
        Traceback (most recent call last):
        ...
        ValueError: unknown properties ['alignment']; valid: shapes, containment, ...
    """
    if names is None:
        return frozenset(PROPERTIES)
    try:
        chosen = frozenset([names] if isinstance(names, str) else names)
    except TypeError:
        raise TypeError(f"properties must be None or an iterable of names, got {names!r}") from None
    wrong = [name for name in chosen if not isinstance(name, str)]
    if wrong:
        raise TypeError(f"properties must be names (strings), got {wrong[0]!r} in {names!r}")
    unknown = sorted(chosen - set(PROPERTIES))
    if unknown:
        raise ValueError(f"unknown properties {unknown}; valid: {', '.join(PROPERTIES)}")
    if not chosen:
        raise ValueError(
            f"no property family selected (properties={names!r}): the check would check "
            f"nothing and pass; choose from {', '.join(PROPERTIES)} (None: all of them)"
        )
    return chosen
