"""What a caller's or team's limits are, how big a lease is, and how a refusal reads."""

from __future__ import annotations

import math
from typing import Literal

import msgspec

from a2a_continue.errors import AppError
from a2a_continue.settings import Settings

Kind = Literal["caller", "team"]
# One subject of the limits: ("caller", sub) or ("team", team id).
Subject = tuple[Kind, str]

# The most tokens one lease takes (SPEC §20: at most min(20, ceil(burst / 10))).
MAX_LEASE = 20


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """The limits of one subject; None = no limit of that kind."""

    rps: float | None = None
    burst: int | None = None
    inflight: int | None = None

    @property
    def rated(self) -> bool:
        """Whether a rate applies."""
        return self.rps is not None

    @property
    def size(self) -> int:
        """The bucket's size: the burst, else one second's worth of the rate."""
        if self.burst is not None:
            return self.burst
        return max(1, math.ceil(self.rps or 1))

    @property
    def lease(self) -> int:
        """How many tokens one lease takes at most."""
        return max(1, min(MAX_LEASE, math.ceil(self.size / 10)))

    def policy(self, kind: Kind) -> str:
        """The ``RateLimit-Policy`` item of this bucket (quota, and the window that refills it)."""
        window = max(1, math.ceil(self.size / (self.rps or 1)))
        return f'"{kind}";q={self.size};w={window}'


def defaults(settings: Settings) -> dict[Kind, Limits]:
    """The limits every caller and every team has unless an override says otherwise."""
    return {
        "caller": Limits(
            rps=settings.limit_caller_rps,
            burst=settings.limit_caller_burst,
            inflight=settings.limit_caller_inflight,
        ),
        "team": Limits(
            rps=settings.limit_team_rps,
            burst=settings.limit_team_burst,
            inflight=settings.limit_team_inflight,
        ),
    }


def merged(default: Limits, given: dict[str, float | int | None]) -> Limits:
    """The default with an override's members in place (a member not given keeps it)."""
    return msgspec.structs.replace(default, **given)


def seconds(wait_s: float) -> int:
    """A wait as whole seconds for ``Retry-After`` (at least 1)."""
    return max(1, math.ceil(wait_s))


class RateLimited(AppError):
    status, slug, title = 429, "rate-limited", "Too many requests"

    def __init__(self, kind: Kind, limits: Limits, wait_s: float) -> None:
        wait = seconds(wait_s)
        super().__init__(
            f"the {kind}'s rate limit ({limits.rps:g}/s, burst {limits.size}) is spent;"
            f" retry in {wait} s",
            limit=kind,
        )
        self.headers["Retry-After"] = str(wait)
        self.headers["RateLimit-Policy"] = limits.policy(kind)
        self.headers["RateLimit"] = f'"{kind}";r=0;t={wait}'


class TooManyInFlight(AppError):
    status, slug, title = 429, "too-many-in-flight", "Too many calls in flight"

    def __init__(self, kind: Kind, cap: int) -> None:
        super().__init__(
            f"the {kind} already has {cap} calls in flight (its limit); retry when one ends",
            limit=kind,
        )
        self.headers["Retry-After"] = "1"
