"""Errors the probes raise. Each carries a one-line message fit for a terminal."""


class ProbeError(Exception):
    """A probe could not read its target at all."""


class TargetUnreachable(ProbeError):
    pass


class NotAnEngine(ProbeError):
    """The target answers, but exposes no metrics of a known engine."""


class BadExposition(ProbeError):
    """The target's /metrics text could not be parsed."""


class CatalogError(Exception):
    """A dialect or signal definition file is malformed."""
