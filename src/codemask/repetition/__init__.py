"""RPG — repetition penalization based on grammar (Dong et al., ACL 2025).

``units`` turns code into its sequence of statement-level grammar units (tree-sitter, incremental),
``detector`` finds the back-to-back repeat that ends a sequence, ``state`` combines both per
sequence into the decays for the next token, and ``stage`` applies them to the logits.
"""

from codemask.repetition.config import RPG
from codemask.repetition.detector import Repeat, TandemRepeats
from codemask.repetition.stage import RepetitionStage, apply_penalties_
from codemask.repetition.state import Penalties, RepetitionState
from codemask.repetition.units import StatementUnits, Unit, statement_units

__all__ = [
    "RPG",
    "Penalties",
    "Repeat",
    "RepetitionStage",
    "RepetitionState",
    "StatementUnits",
    "TandemRepeats",
    "Unit",
    "apply_penalties_",
    "statement_units",
]
