"""The producers' errors: one root, small subclasses that carry the data a caller needs.

Every message names the subject, the place and the fix. ``ContractError`` also crosses
process boundaries (Spark ships it between Python workers), so it pickles by value.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "CONTRACT_REASONS",
    "ContractError",
    "ContractReason",
    "FaultSpecError",
    "LedgerError",
    "ProducerError",
    "QueueFullError",
    "RunConfigError",
    "TopicError",
]


class ProducerError(Exception):
    """Root of every error the ``producers`` package raises on purpose."""


ContractReason = Literal[
    "empty",
    "too-large",
    "not-utf8",
    "invalid-json",
    "not-an-object",
    "missing-field",
    "unknown-field",
    "wrong-type",
    "unknown-kind",
    "unsupported-version",
]

#: Every ``ContractError.reason``, in the order the parser checks them.
CONTRACT_REASONS: tuple[ContractReason, ...] = (
    "empty",
    "too-large",
    "not-utf8",
    "invalid-json",
    "not-an-object",
    "unsupported-version",
    "missing-field",
    "unknown-kind",
    "unknown-field",
    "wrong-type",
)


class ContractError(ProducerError, ValueError):
    """A record (or a message being built) breaks the wire contract.

    ``reason`` is one of :data:`CONTRACT_REASONS` (a closed vocabulary that a pipeline can
    count and quarantine by); ``detail`` names the field and what was expected, for a
    human. Pickles by value, so it survives a trip between Spark Python workers.
    """

    def __init__(self, reason: ContractReason, detail: str) -> None:
        if reason not in CONTRACT_REASONS:
            # A typo here would silently widen a vocabulary the job counts by.
            raise ValueError(f"ContractError reason {reason!r} is not one of {CONTRACT_REASONS}")
        super().__init__(reason, detail)
        self.reason: ContractReason = reason
        self.detail = detail

    def __reduce__(self) -> tuple[type[ContractError], tuple[str, str]]:
        return (type(self), (self.reason, self.detail))

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


class FaultSpecError(ProducerError, ValueError):
    """A fault was configured wrongly (an unknown name, knob or value)."""

    def __init__(self, spec: str, problem: str, fix: str) -> None:
        self.spec, self.problem, self.fix = spec, problem, fix
        super().__init__(f"fault {spec!r}: {problem}; {fix}")


class RunConfigError(ProducerError, ValueError):
    """A run setting is out of range or inconsistent with another."""

    def __init__(self, setting: str, value: object, fix: str) -> None:
        self.setting, self.value, self.fix = setting, value, fix
        super().__init__(f"{setting}={value!r}: {fix}")


class LedgerError(ProducerError):
    """The ledger cannot be written or read at ``location``."""

    def __init__(self, location: str, problem: str, fix: str) -> None:
        self.location, self.problem, self.fix = location, problem, fix
        super().__init__(f"ledger {location}: {problem}; {fix}")


class TopicError(ProducerError):
    """A collection topic could not be created or checked."""

    def __init__(self, topic: str, bootstrap: str, detail: str) -> None:
        self.topic, self.bootstrap, self.detail = topic, bootstrap, detail
        super().__init__(
            f"topic {topic} on {bootstrap}: {detail}; check that Kafka answers there "
            f"(python -m sandbox status) and that the topic name is valid"
        )


class QueueFullError(ProducerError):
    """The producer's local queue stayed full for longer than the run allows."""

    def __init__(self, topic: str, waited_s: float, bootstrap: str) -> None:
        self.topic, self.waited_s, self.bootstrap = topic, waited_s, bootstrap
        super().__init__(
            f"topic {topic}: the producer queue stayed full for {waited_s:.1f}s, so Kafka at "
            f"{bootstrap} is not taking messages; check the broker (python -m sandbox status) "
            f"or lower --rate"
        )
