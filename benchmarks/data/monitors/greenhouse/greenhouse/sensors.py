"""Probes that report soil and light conditions per bed."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Reading:
    bed_label: str
    moisture_pct: float
    lux_level: float
    taken_at_minute: int


@dataclass
class SoilProbe:
    bed_label: str
    depth_cm: int = 10
    drift_offset: float = 0.0
    history: list[Reading] = field(default_factory=list)

    def sample_moisture(self, raw_value: float, minute: int) -> Reading:
        reading = Reading(self.bed_label, raw_value + self.drift_offset, 0.0, minute)
        self.history.append(reading)
        return reading

    def recalibrate(self, reference_pct: float) -> float:
        if self.history:
            self.drift_offset = reference_pct - self.history[-1].moisture_pct
        return self.drift_offset

    def driest_reading(self) -> Reading | None:
        return min(self.history, key=lambda r: r.moisture_pct, default=None)


class LightMeter:
    def __init__(self, bed_label: str, gain_factor: float = 1.0) -> None:
        self.bed_label = bed_label
        self.gain_factor = gain_factor
        self.peak_lux = 0.0

    def measure_lux(self, raw_counts: int) -> float:
        lux = raw_counts * self.gain_factor
        self.peak_lux = max(self.peak_lux, lux)
        return lux

    def is_shaded(self, threshold_lux: float = 2000.0) -> bool:
        return self.peak_lux < threshold_lux
