from greenhouse.sensors import LightMeter, Reading, SoilProbe
from greenhouse.schedule import WateringPlan, WateringWindow, build_default_plan

BEDS = ["north", "south", "herbs"]


def morning_round(plan: WateringPlan, probes: list[SoilProbe], minute: int) -> list[Reading]:
    readings = []
    for probe in probes:
        reading = probe.sample_moisture(41.5, minute)
        plan.adjust_for(reading, dry_below_pct=35.0)
        readings.append(reading)
    return readings


def main() -> None:
    plan = build_default_plan("spring", BEDS, morning_start=330, minutes_each=10)
    probes = [SoilProbe(label, depth_cm=15) for label in BEDS]
    meter = LightMeter("north", gain_factor=1.5)
    lux = meter.measure_lux(2200)
    if meter.is_shaded(threshold_lux=1500.0):
        plan.skip_day(3)
    readings = morning_round(plan, probes, 360)
    first = readings[0]
    print(first.moisture_pct, first.bed_label, lux)
    window = plan.next_window_after(400)
    if window is not None:
        print(window.end_minute(), window.duration_minutes)
    extra = WateringWindow(600, 15, "herbs")
    if window is None or not extra.overlaps(window):
        plan.add_window(extra)
    dry = probes[0].driest_reading()
    offset = probes[1].recalibrate(reference_pct=40.0)
    print(dry, offset, plan.season_name, plan.skipped_days, meter.peak_lux)


if __name__ == "__main__":
    main()
