"""Colours for tile codes."""

from __future__ import annotations


class Palette:
    def __init__(self, theme_name: str) -> None:
        self.theme_name = theme_name
        self.swatches: dict[int, tuple[int, int, int]] = {}

    def assign_swatch(self, tile_code: int, rgb: tuple[int, int, int]) -> None:
        self.swatches[tile_code] = rgb

    def swatch_for(self, tile_code: int, fallback_rgb: tuple[int, int, int] = (0, 0, 0)) -> tuple[int, int, int]:
        return self.swatches.get(tile_code, fallback_rgb)

    def blend_pair(self, first_code: int, second_code: int, weight: float = 0.5) -> tuple[int, int, int]:
        a, b = self.swatch_for(first_code), self.swatch_for(second_code)
        return tuple(round(x * (1 - weight) + y * weight) for x, y in zip(a, b))  # type: ignore[return-value]


def make_earth_palette(theme_name: str = "earth", *, include_water: bool = True) -> Palette:
    palette = Palette(theme_name)
    palette.assign_swatch(0, (110, 84, 60))
    if include_water:
        palette.assign_swatch(1, (40, 90, 160))
    return palette


GRASS_CODE = 2
