from tileset.grid import TileGrid, Viewport
from tileset.palette import GRASS_CODE, Palette, make_earth_palette


def paint(grid: TileGrid, palette: Palette) -> list[str]:
    lines = []
    for row in range(grid.height_in_tiles):
        codes = [grid.tile_at(column, row) for column in range(grid.width_in_tiles)]
        lines.append(" ".join(str(palette.swatch_for(code, fallback_rgb=(9, 9, 9))) for code in codes))
    return lines


def main() -> None:
    grid = TileGrid(8, 6, fill_code=GRASS_CODE)
    grid.place_tile(2, 3, 1)
    region = grid.flood_region(0, 0)
    around = grid.neighbours_of(2, 3, diagonal=True)
    palette = make_earth_palette("dusk", include_water=False)
    palette.assign_swatch(GRASS_CODE, (60, 140, 60))
    mixed = palette.blend_pair(0, GRASS_CODE, weight=0.25)
    print(len(region), around, mixed, palette.theme_name, palette.swatches)
    view = Viewport(grid, span_columns=4, span_rows=3)
    view.scroll_by(1, 2)
    print(view.visible_codes(), view.origin_column, view.span_rows, view.grid.width_in_tiles)
    print("\n".join(paint(grid, palette)))


if __name__ == "__main__":
    main()
