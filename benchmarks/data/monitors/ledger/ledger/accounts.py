"""Double-entry accounts and the journal that posts to them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Entry:
    memo_text: str
    amount_cents: int
    period_code: str


@dataclass
class Account:
    account_code: str
    owner_handle: str
    entries: list[Entry] = field(default_factory=list)
    frozen: bool = False

    def post_entry(self, entry: Entry) -> None:
        if self.frozen:
            raise ValueError(f"account {self.account_code} is frozen")
        self.entries.append(entry)

    def balance_cents(self, period_code: str | None = None) -> int:
        return sum(e.amount_cents for e in self.entries if period_code in (None, e.period_code))

    def freeze_posting(self) -> None:
        self.frozen = True


class Journal:
    def __init__(self, book_title: str) -> None:
        self.book_title = book_title
        self.accounts: dict[str, Account] = {}
        self.closed_periods: list[str] = []

    def open_account(self, account_code: str, owner_handle: str) -> Account:
        account = Account(account_code, owner_handle)
        self.accounts[account_code] = account
        return account

    def transfer_between(self, source_code: str, target_code: str, amount_cents: int, *,
                         period_code: str, memo_text: str = "") -> None:
        self.accounts[source_code].post_entry(Entry(memo_text, -amount_cents, period_code))
        self.accounts[target_code].post_entry(Entry(memo_text, amount_cents, period_code))

    def close_period(self, period_code: str) -> int:
        self.closed_periods.append(period_code)
        return sum(a.balance_cents(period_code) for a in self.accounts.values())

    def trial_balance(self) -> dict[str, int]:
        return {code: account.balance_cents() for code, account in self.accounts.items()}
