from ledger.accounts import Account, Entry, Journal
from ledger.currency import HOME_SYMBOL, RateTable, convert_amount


def month_end(journal: Journal, table: RateTable, period_code: str) -> dict[str, int]:
    totals = {}
    for code, account in journal.accounts.items():
        cents = account.balance_cents(period_code)
        totals[code] = convert_amount(cents, "USD", HOME_SYMBOL, table=table, round_half_even=False)
    journal.close_period(period_code)
    return totals


def main() -> None:
    journal = Journal("household")
    rent = journal.open_account("4000", owner_handle="landlord")
    wallet = journal.open_account("1000", owner_handle="me")
    wallet.post_entry(Entry("salary", 320000, "2026-11"))
    journal.transfer_between("1000", "4000", 95000, period_code="2026-11", memo_text="rent")
    table = RateTable(HOME_SYMBOL)
    table.quote_pair("USD", "EUR", 0.92)
    rate = table.lookup_rate("EUR", "USD")
    print(rate, table.known_symbols(), table.base_symbol)
    totals = month_end(journal, table, "2026-11")
    rent.freeze_posting()
    print(totals, rent.frozen, rent.owner_handle, wallet.entries[0].memo_text)
    print(journal.trial_balance(), journal.closed_periods, journal.book_title)
    spare = Account("9999", "nobody")
    print(spare.account_code, spare.balance_cents())


if __name__ == "__main__":
    main()
