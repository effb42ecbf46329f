"""When each bed gets water."""

from __future__ import annotations

from greenhouse.sensors import Reading


class WateringWindow:
    def __init__(self, start_minute: int, duration_minutes: int, bed_label: str) -> None:
        self.start_minute = start_minute
        self.duration_minutes = duration_minutes
        self.bed_label = bed_label

    def overlaps(self, other: WateringWindow) -> bool:
        return self.start_minute < other.start_minute + other.duration_minutes and \
            other.start_minute < self.start_minute + self.duration_minutes

    def end_minute(self) -> int:
        return self.start_minute + self.duration_minutes


class WateringPlan:
    def __init__(self, season_name: str) -> None:
        self.season_name = season_name
        self.windows: list[WateringWindow] = []
        self.skipped_days: set[int] = set()

    def add_window(self, window: WateringWindow) -> None:
        self.windows.append(window)

    def next_window_after(self, minute: int) -> WateringWindow | None:
        later = [w for w in self.windows if w.start_minute >= minute]
        return min(later, key=lambda w: w.start_minute, default=None)

    def skip_day(self, day_index: int) -> None:
        self.skipped_days.add(day_index)

    def adjust_for(self, reading: Reading, dry_below_pct: float = 30.0) -> int:
        extra = 5 if reading.moisture_pct < dry_below_pct else 0
        for window in self.windows:
            if window.bed_label == reading.bed_label:
                window.duration_minutes += extra
        return extra


def build_default_plan(season_name: str, bed_labels: list[str], *, morning_start: int = 360,
                       minutes_each: int = 12) -> WateringPlan:
    plan = WateringPlan(season_name)
    for offset, label in enumerate(bed_labels):
        plan.add_window(WateringWindow(morning_start + offset * minutes_each, minutes_each, label))
    return plan
