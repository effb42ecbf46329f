"""Conversion between currencies with a table of rates."""

from __future__ import annotations


class RateTable:
    def __init__(self, base_symbol: str) -> None:
        self.base_symbol = base_symbol
        self.quoted_rates: dict[tuple[str, str], float] = {}

    def quote_pair(self, source_symbol: str, target_symbol: str, rate: float) -> None:
        self.quoted_rates[(source_symbol, target_symbol)] = rate
        self.quoted_rates[(target_symbol, source_symbol)] = 1.0 / rate

    def lookup_rate(self, source_symbol: str, target_symbol: str) -> float:
        if source_symbol == target_symbol:
            return 1.0
        return self.quoted_rates[(source_symbol, target_symbol)]

    def known_symbols(self) -> set[str]:
        return {s for pair in self.quoted_rates for s in pair}


def convert_amount(amount_cents: int, source_symbol: str, target_symbol: str, *, table: RateTable,
                   round_half_even: bool = True) -> int:
    value = amount_cents * table.lookup_rate(source_symbol, target_symbol)
    return round(value) if round_half_even else int(value + 0.5)


HOME_SYMBOL = "EUR"
