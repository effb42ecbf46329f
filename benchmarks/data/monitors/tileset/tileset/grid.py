"""A rectangular grid of tiles with regions."""

from __future__ import annotations


class TileGrid:
    def __init__(self, width_in_tiles: int, height_in_tiles: int, fill_code: int = 0) -> None:
        self.width_in_tiles = width_in_tiles
        self.height_in_tiles = height_in_tiles
        self.cells = [[fill_code] * width_in_tiles for _ in range(height_in_tiles)]

    def place_tile(self, column: int, row: int, tile_code: int) -> None:
        self.cells[row][column] = tile_code

    def tile_at(self, column: int, row: int) -> int:
        return self.cells[row][column]

    def neighbours_of(self, column: int, row: int, *, diagonal: bool = False) -> list[tuple[int, int]]:
        steps = [(1, 0), (-1, 0), (0, 1), (0, -1)]
        if diagonal:
            steps += [(1, 1), (1, -1), (-1, 1), (-1, -1)]
        return [(column + dc, row + dr) for dc, dr in steps
                if 0 <= column + dc < self.width_in_tiles and 0 <= row + dr < self.height_in_tiles]

    def flood_region(self, column: int, row: int) -> set[tuple[int, int]]:
        code = self.tile_at(column, row)
        seen, todo = {(column, row)}, [(column, row)]
        while todo:
            for nxt in self.neighbours_of(*todo.pop()):
                if nxt not in seen and self.tile_at(*nxt) == code:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen


class Viewport:
    def __init__(self, grid: TileGrid, span_columns: int, span_rows: int) -> None:
        self.grid = grid
        self.span_columns = span_columns
        self.span_rows = span_rows
        self.origin_column = 0
        self.origin_row = 0

    def scroll_by(self, delta_columns: int, delta_rows: int) -> None:
        self.origin_column = max(0, self.origin_column + delta_columns)
        self.origin_row = max(0, self.origin_row + delta_rows)

    def visible_codes(self) -> list[list[int]]:
        rows = self.grid.cells[self.origin_row:self.origin_row + self.span_rows]
        return [r[self.origin_column:self.origin_column + self.span_columns] for r in rows]
