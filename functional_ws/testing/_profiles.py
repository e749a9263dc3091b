"""The Hypothesis profiles the kits are tuned for: ``ci`` (reproducible) and ``dev`` (deeper).

Both kits' state machines make real calls and check every answer, so their budget is steps,
not seconds: ``ci`` runs a fixed number of examples, derandomized (the same calls on every
run, no example database), with no deadline, which a noisy shared machine would trip;
``dev`` runs more and longer examples from fresh random seeds. This repository's test suite
loads them through :func:`register_profiles` too (``tests/conftest.py``).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

#: Both are built on Hypothesis's ``default`` profile, not on whatever profile is loaded when
#: this module is imported (Hypothesis loads its own ``ci`` profile where ``CI`` is set).
_BASE = settings.get_profile("default")

#: Derandomized, 60 examples of up to 40 steps, no deadline, no database: the same run on
#: every machine, and a failure's reproduction blob printed.

CI = settings(
    _BASE,
    derandomize=True,
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
#: Random, 1,000 examples of up to 80 steps, no deadline: for a deeper look before a release.
DEV = settings(
    _BASE,
    derandomize=False,
    max_examples=1000,
    stateful_step_count=80,
    deadline=None,
    print_blob=True,
)


def register_profiles(
    *, ci: str = "ci", dev: str = "dev", load: str | None = None
) -> dict[str, settings]:
    """Register the kits' profiles with Hypothesis, and load one if asked.

    Args:
        ci: the name to register :data:`CI` under (a profile of that name is replaced).
        dev: the name to register :data:`DEV` under.
        load: a profile to load once both are registered (one of these two, Hypothesis's
            ``"default"``, or any profile registered before), or ``None`` to load nothing.

    Returns:
        The registered settings by name.

    Raises:
        TypeError: a name is not a non-empty string (or ``load`` not a string or ``None``).
        ValueError: ``ci`` and ``dev`` are the same name.
        hypothesis.errors.InvalidArgument: ``load`` names no registered profile.

    Example:
        >>> import os
        >>> from hypothesis import settings
        >>> sorted(register_profiles())  # e.g. in conftest.py, then:
        ['ci', 'dev']
        >>> settings.get_profile("ci").derandomize
        True
        >>> # settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    """
    for name, value in (("ci", ci), ("dev", dev)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"register_profiles({name}={value!r}): {name} must be a profile name")
    if ci == dev:
        raise ValueError(f"register_profiles(ci={ci!r}, dev={dev!r}): the names must differ")
    if load is not None and not isinstance(load, str):
        raise TypeError(f"register_profiles(load={load!r}): load must be a profile name or None")
    profiles = {ci: CI, dev: DEV}
    for name, profile in profiles.items():
        settings.register_profile(name, profile)
    if load is not None:
        settings.load_profile(load)
    return profiles
