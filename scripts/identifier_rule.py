"""Print EBNF rules for Python identifiers that are not keywords (used by grammars/python_function.ebnf).

A context-free grammar cannot subtract one language from another directly, but "identifier minus a
finite word list" is regular: walk the trie of the keywords and, at each node, allow leaving the trie
with any other identifier character, following a child, or stopping where no keyword ends.
Run: python scripts/identifier_rule.py > rules.ebnf
"""

from __future__ import annotations

import keyword
import string

IDENT_START = set(string.ascii_letters + "_")
IDENT_CHAR = IDENT_START | set(string.digits)


def char_class(chars: set[str]) -> str:
    return "[" + "".join(sorted(chars)) + "]"


def rules(words: list[str], name: str = "name") -> list[str]:
    prefixes = {w[:i] for w in words for i in range(1, len(w) + 1)}
    out = [f"{name}_tail ::= [a-zA-Z0-9_]*"]
    for prefix in ["", *sorted(prefixes)]:
        children = sorted({w[len(prefix)] for w in words if w.startswith(prefix) and len(w) > len(prefix)})
        allowed = (IDENT_START if prefix == "" else IDENT_CHAR) - set(children)
        alternatives = [f"{char_class(allowed)} {name}_tail"]
        alternatives += [f'"{c}" {name}_{prefix + c}' for c in children]
        if prefix and prefix not in words:
            alternatives.append('""')
        head = name if prefix == "" else f"{name}_{prefix}"
        out.append(f"{head} ::= " + " | ".join(alternatives))
    return out


if __name__ == "__main__":
    print("\n".join(rules(sorted(keyword.kwlist))))
