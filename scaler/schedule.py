"""Warm floors and scale-to-zero windows by day and time in a timezone (pure).

The warm-pool annotations ``warmscale.io/min-ready`` and ``warmscale.io/scale-to-zero`` are written in
this syntax; the controller validates them (:mod:`warmpool.annotations`) and publishes the raw values
with its warm status, and the scaler evaluates them at its own clock (:func:`bounds_at`), so a floor
binds at a window's start whoever wrote the ScaledObject.

``min-ready`` is a number or a schedule::

    tz=Europe/Berlin; mon-fri 08:00-20:00=4; sat,sun 10:00-16:00=1; default=0

Entries are separated by ``;``. ``tz=`` (an IANA zone, default UTC) and ``default=`` (the floor outside
every window, default 0) are optional. A window is ``<days> <HH:MM>-<HH:MM>=<floor>``: days are
``mon``..``sun``, ranges (``mon-fri``, ``fri-mon``), lists (``sat,sun``) or ``*``/``daily``; the end may be
``24:00``; an end at or before the start crosses midnight and belongs to the start day. Where windows
overlap, the largest floor applies.

``scale-to-zero`` is ``never`` (default), ``allowed``, or ``allowed: <windows>`` (windows as above without
``=floor``, in the schedule's timezone unless a ``tz=`` entry is given).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


@dataclass(frozen=True)
class Window:
    days: frozenset[int]  # 0 = Monday
    start_min: int
    end_min: int  # exclusive; <= start_min means the window crosses midnight

    def contains(self, weekday: int, minute: int) -> bool:
        if self.start_min < self.end_min:
            return weekday in self.days and self.start_min <= minute < self.end_min
        return (weekday in self.days and minute >= self.start_min) or (
            (weekday - 1) % 7 in self.days and minute < self.end_min
        )


@dataclass(frozen=True)
class Schedule:
    """Floors by day/time window in a timezone; a plain number is a schedule without windows."""

    default: int = 0
    windows: tuple[tuple[Window, int], ...] = ()
    tz: str = "UTC"

    def floor_at(self, now: datetime) -> int:
        local = _localize(now, self.tz)
        wd, minute = local.weekday(), local.hour * 60 + local.minute
        floors = [f for w, f in self.windows if w.contains(wd, minute)]
        return max(floors) if floors else self.default

    @property
    def maximum(self) -> int:
        return max([self.default, *(f for _, f in self.windows)])


@dataclass(frozen=True)
class ScaleToZero:
    mode: str = "never"  # never | allowed | windows
    windows: tuple[Window, ...] = ()
    tz: str = "UTC"

    def allowed_at(self, now: datetime) -> bool:
        if self.mode == "never":
            return False
        if self.mode == "allowed":
            return True
        local = _localize(now, self.tz)
        wd, minute = local.weekday(), local.hour * 60 + local.minute
        return any(w.contains(wd, minute) for w in self.windows)



def _localize(now: datetime, tz: str) -> datetime:
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    return now.astimezone(ZoneInfo(tz))


# ---------------------------------------------------------------- parsers


def _parse_count(raw: str) -> int:
    s = raw.strip()
    if not re.fullmatch(r"[0-9]+", s):
        raise ValueError(f"expected a non-negative integer, got {raw!r}")
    v = int(s)
    if v > 10_000:
        raise ValueError(f"{v} is unreasonably large")
    return v


def _parse_tz(raw: str) -> str:
    name = raw.strip()
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown timezone {name!r}") from exc
    return name


def _parse_days(raw: str) -> frozenset[int]:
    s = raw.strip().lower()
    if s in ("*", "daily"):
        return frozenset(range(7))
    out: set[int] = set()
    for part in s.split(","):
        part = part.strip()
        if "-" in part:
            a, b = (x.strip() for x in part.split("-", 1))
            if a not in DAYS or b not in DAYS:
                raise ValueError(f"bad day range {part!r}; days are {', '.join(DAYS)}")
            i, j = DAYS.index(a), DAYS.index(b)
            while True:
                out.add(i)
                if i == j:
                    break
                i = (i + 1) % 7
        elif part in DAYS:
            out.add(DAYS.index(part))
        else:
            raise ValueError(f"bad day {part!r}; days are {', '.join(DAYS)}, ranges like mon-fri, or *")
    return frozenset(out)


def _parse_time(raw: str, allow_24: bool) -> int:
    m = re.fullmatch(r"([0-9]{1,2}):([0-9]{2})", raw.strip())
    if not m:
        raise ValueError(f"bad time {raw!r}; expected HH:MM")
    h, mi = int(m.group(1)), int(m.group(2))
    if (h, mi) == (24, 0) and allow_24:
        return 24 * 60
    if h > 23 or mi > 59:
        raise ValueError(f"bad time {raw!r}")
    return h * 60 + mi


def _parse_window(raw: str) -> Window:
    parts = raw.split()
    if len(parts) != 2 or "-" not in parts[1]:
        raise ValueError(f"bad window {raw!r}; expected '<days> HH:MM-HH:MM'")
    start_s, end_s = parts[1].split("-", 1)
    start, end = _parse_time(start_s, False), _parse_time(end_s, True)
    return Window(_parse_days(parts[0]), start, end)


def _split_entries(raw: str) -> list[str]:
    return [e.strip() for e in raw.split(";") if e.strip()]


def parse_min_ready(raw: str) -> Schedule:
    s = raw.strip()
    if re.fullmatch(r"[0-9]+", s):
        return Schedule(default=_parse_count(s))
    entries = _split_entries(s)
    if not entries:
        raise ValueError("empty schedule")
    tz, default, windows = "UTC", 0, []
    for e in entries:
        low = e.lower()
        if low.startswith("tz="):
            tz = _parse_tz(e[3:])
        elif low.startswith("default="):
            default = _parse_count(e[8:])
        elif "=" in e:
            w, _, f = e.rpartition("=")
            windows.append((_parse_window(w), _parse_count(f)))
        else:
            raise ValueError(f"bad schedule entry {e!r}; expected tz=, default= or '<days> HH:MM-HH:MM=<n>'")
    return Schedule(default=default, windows=tuple(windows), tz=tz)


def parse_scale_to_zero(raw: str, tz: str = "UTC") -> ScaleToZero:
    s = raw.strip()
    low = s.lower()
    if low == "never":
        return ScaleToZero("never")
    if low == "allowed":
        return ScaleToZero("allowed")
    if low.startswith("allowed:"):
        windows = []
        for e in _split_entries(s[len("allowed:"):]):
            if e.lower().startswith("tz="):
                tz = _parse_tz(e[3:])
            else:
                windows.append(_parse_window(e))
        if not windows:
            raise ValueError("'allowed:' needs at least one window")
        return ScaleToZero("windows", tuple(windows), tz)
    raise ValueError(f"expected never, allowed, or 'allowed: <windows>', got {raw!r}")




def scale_to_zero_tz(min_ready_raw: str) -> str:
    """The timezone ``scale-to-zero`` windows use when they name none: the ``min-ready`` schedule's."""
    try:
        return parse_min_ready(min_ready_raw).tz
    except ValueError:
        return "UTC"


@dataclass(frozen=True)
class Bounds:
    """What the warm pool's schedule allows at one instant: the floor of ready replicas (raised to 1
    where scale-to-zero is not allowed) and whether zero replicas are allowed."""

    floor: int
    zero_allowed: bool


def bounds_at(min_ready_raw: str, scale_to_zero_raw: str, now: datetime) -> Bounds:
    """Evaluate the raw ``min-ready`` and ``scale-to-zero`` values at ``now`` (timezone-aware).

    Raises ``ValueError`` on a value the parsers refuse."""
    schedule = parse_min_ready(min_ready_raw)
    stz = parse_scale_to_zero(scale_to_zero_raw, schedule.tz)
    zero = stz.allowed_at(now)
    floor = schedule.floor_at(now)
    return Bounds(floor=floor if floor > 0 or zero else 1, zero_allowed=zero and floor == 0)
