"""Schema nodes: a subschema together with where it came from, and the document it belongs to.

A subschema on its own is not enough to compile it: its ``$ref``s resolve against the base URI
in force where it sits (``$id`` changes it), the draft decides what ``items`` or
``exclusiveMinimum`` mean, and errors must name its JSON pointer. A :class:`Node` carries all
three. Reference resolution is delegated to ``referencing`` (the library ``jsonschema`` itself
uses), so ``$id``, ``$anchor``, relative and JSON-pointer references behave as validators do.

The compiler also builds *synthetic* schemas (the negation of a subschema, the branches of a
dependency). Their children may be Nodes already, which :meth:`Node.child` passes through.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import jsonschema
import jsonschema._utils
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.validators import validator_for
from jsonschema_specifications import REGISTRY as SPECIFICATIONS

from codemask.errors import InvalidSchemaError, UnsupportedSchemaError

DRAFT4 = "http://json-schema.org/draft-04/schema#"
DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"

VALUE_TYPES = frozenset(["null", "boolean", "object", "array", "string", "integer", "fraction"])
"""Internal types: JSON's, with ``number`` split into ``integer`` and ``fraction`` (non-integers),
so that ``not: {type: integer}`` is a type set too."""

ANNOTATIONS = frozenset([
    "$schema", "$id", "id", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$comment", "$defs",
    "definitions", "$vocabulary", "title", "description", "default", "examples", "deprecated",
    "readOnly", "writeOnly", "contentEncoding", "contentMediaType", "contentSchema", "discriminator",
    "nullable", "example", "markdownDescription", "errorMessage",
])
"""Keywords that never constrain an instance (``discriminator`` is OpenAPI's, a hint only)."""


# Schemas nesting objects and arrays deeper than this are refused: validation and compilation
# recurse per level (a real schema of jsonschemabench nests 63 deep, the next 34).
MAX_SCHEMA_DEPTH = 96


JSON_SCALARS = (str, int, float, type(None))  # (bool is an int)


def check_json_values(value: Any) -> None:
    """Refuse what JSON cannot hold or the compiler cannot take, before anything recurses into
    it: nesting deeper than `MAX_SCHEMA_DEPTH`, numbers that are not finite (``inf`` or ``nan``
    from Python; JSON has neither), object keys that are not strings and values of other Python
    types (a tuple, a set). The schema is then exactly what its JSON text says, which keys the
    compile cache (`Grammar.cache_key`). Iterative: the point is to get no `RecursionError`. A
    first pass only finds whether anything is wrong; the second, which names the place, runs only
    then (spelling every value's JSON pointer was most of the check's time)."""
    if _json_values_fit(value):
        return
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, pointer = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise InvalidSchemaError(f"invalid JSON Schema at {pointer or '/'}: {item} is not a JSON number")
        if not isinstance(item, (dict, list)):
            if not isinstance(item, JSON_SCALARS):
                raise InvalidSchemaError(f"invalid JSON Schema at {pointer or '/'}: a {type(item).__name__} "
                                         "is not a JSON value")
            continue
        if depth > MAX_SCHEMA_DEPTH:
            where = pointer if len(pointer) <= 80 else pointer[:80] + "..."
            raise InvalidSchemaError(f"invalid JSON Schema at {where}: nesting deeper than "
                                     f"{MAX_SCHEMA_DEPTH} levels of objects and arrays")
        if isinstance(item, dict):
            for key in item:
                if not isinstance(key, str):
                    raise InvalidSchemaError(f"invalid JSON Schema at {pointer or '/'}: the key {key!r} "
                                             "is not a string")
        children = item.items() if isinstance(item, dict) else enumerate(item)
        stack.extend((child, depth + 1, f"{pointer}/{_escape(str(key))}") for key, child in children)


def _json_values_fit(value: Any) -> bool:
    """Whether `check_json_values` finds nothing wrong with ``value`` (it then says nothing)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict:
            if depth > MAX_SCHEMA_DEPTH:
                return False
            for key, child in item.items():
                if type(key) is not str:
                    return False
                stack.append((child, depth + 1))
        elif kind is list:
            if depth > MAX_SCHEMA_DEPTH:
                return False
            stack.extend((child, depth + 1) for child in item)
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif kind is not str and kind is not int and kind is not bool and item is not None:
            return False  # (subclasses too: the full check decides them)
    return True


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


@dataclass
class Document:
    """The root schema, its draft, and the registry its references resolve in."""

    root: Any
    dialect: str
    validator_class: Any
    strict: bool
    warnings: list[UnsupportedSchemaError] = field(default_factory=list)
    _probing: bool = False
    negating: set[tuple[int, str]] = field(default_factory=set)  # nodes being negated (cycle guard)
    # references resolved so far, by the resolver's identity and the reference: (the resolver, kept
    # so that its id stays its own, and what the reference resolved to)
    resolved: dict[tuple[int, str], tuple[Any, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, schema: Any, strict: bool) -> Document:
        if not isinstance(schema, (dict, bool)):
            raise InvalidSchemaError(f"a JSON Schema is an object or a boolean, not {type(schema).__name__}")
        check_json_values(schema)
        validator_class = validator_for(schema, default=jsonschema.Draft202012Validator)
        if not _valid_quickly(schema, validator_class):
            # The meta-schema without format assertions: a pattern Python's re cannot read (``\\p{L}``)
            # is a valid schema, refused later as unsupported, not reported as an invalid schema.
            error = jsonschema.exceptions.best_match(validator_class(validator_class.META_SCHEMA).iter_errors(schema))
            if error is not None:
                where = "/" + "/".join(str(p) for p in error.absolute_path)
                raise InvalidSchemaError(f"invalid JSON Schema at {where}: {error.message}")
        dialect = validator_class.META_SCHEMA.get("$schema", DEFAULT_DIALECT)
        return cls(schema, dialect, validator_class, strict)

    @property
    def draft4(self) -> bool:
        return self.dialect == DRAFT4

    @property
    def ref_overrides_siblings(self) -> bool:
        """Up to draft 7, keywords next to ``$ref`` are ignored."""
        return self.dialect.startswith("http://json-schema.org/")

    @property
    def tuple_items(self) -> bool:
        """Before 2020-12, ``items`` as an array is positional and ``additionalItems`` the rest."""
        return self.dialect != DEFAULT_DIALECT

    def root_node(self) -> Node:
        specification = referencing.jsonschema.specification_with(self.dialect)
        resource = specification.create_resource(self.root)
        # The drafts' meta-schemas are known offline, so ``$ref`` to them resolves.
        registry: referencing.Registry[Any] = SPECIFICATIONS.with_resource(resource.id() or "", resource)
        resolver = registry.resolver(base_uri=resource.id() or "")
        return Node(self.root, resolver, "", self)

    def unsupported(self, keyword: str, pointer: str, detail: str = "") -> None:
        """Refuse (strict) or note and over-approximate (lenient) a construct we cannot express."""
        error = UnsupportedSchemaError(keyword, pointer, detail)
        if self.strict or self._probing:
            raise error
        self.warnings.append(error)

    @contextlib.contextmanager
    def probing(self) -> Iterator[None]:
        """Within this block every unsupported construct raises, to try an exact rewrite first."""
        saved, self._probing = self._probing, True
        try:
            yield
        finally:
            self._probing = saved


def _valid_quickly(schema: Any, validator_class: Any) -> bool:
    """Whether ``schema`` is valid against its draft's meta-schema by `jsonschema_rs` (a Rust
    validator, ~300× faster than ``jsonschema``, which took a millisecond of a small schema's
    compile and tens of milliseconds of a large one's); False where it says no or cannot tell, and
    ``jsonschema`` decides and names the error. It asserts formats (``jsonschema`` without a
    format checker does not: a ``pattern`` Python's re cannot read is valid), and then ``jsonschema``
    finds the schema valid; the one rule of a meta-schema it does not check, draft-04's non-empty
    ``enum`` of distinct values, is checked here."""
    if _RS is None:
        return False
    try:
        valid = bool(_RS.meta.is_valid(schema))
    except Exception:  # (a meta-schema it cannot resolve, a value that is not JSON: ``jsonschema`` decides)
        return False
    return valid and (validator_class is not jsonschema.Draft4Validator or _draft4_enums_valid(schema))


def _draft4_enums_valid(schema: Any) -> bool:
    """Whether every ``enum`` of a draft-04 schema is a non-empty array of distinct values, read at
    the places that hold subschemas in draft 04."""
    todo = [schema]
    while todo:
        node = todo.pop()
        if not isinstance(node, dict):
            continue
        enum = node.get("enum")
        if enum is not None and not (isinstance(enum, list) and enum and jsonschema._utils.uniq(enum)):
            return False
        for keyword in ("additionalItems", "additionalProperties", "not", "items"):
            todo.append(node.get(keyword))
        for keyword in ("items", "allOf", "anyOf", "oneOf"):
            if isinstance(node.get(keyword), list):
                todo.extend(node[keyword])
        for keyword in ("properties", "patternProperties", "definitions", "dependencies"):
            if isinstance(node.get(keyword), dict):
                todo.extend(node[keyword].values())
    return True


_RS: ModuleType | None
try:
    import jsonschema_rs as _RS
except ImportError:  # (no wheel for the platform: ``jsonschema`` alone)
    _RS = None


@dataclass(eq=False)
class Node:
    """A subschema (dict or bool) with its resolver, its JSON pointer, and its document."""

    schema: Any
    resolver: Any
    pointer: str
    document: Document
    origin: Any = None  # the user's schema, when this node is a trimmed copy of it

    def child(self, value: Any, *path: str | int) -> Node:
        """The subschema ``value`` found under this node at ``path``."""
        if isinstance(value, Node):
            return value
        pointer = self.pointer + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)
        resolver = self.resolver
        if isinstance(value, dict):
            own_id = value.get("id" if self.document.draft4 else "$id")
            if isinstance(own_id, str) and not own_id.startswith("#"):
                specification = referencing.jsonschema.specification_with(self.document.dialect)
                resolver = resolver.in_subresource(specification.create_resource(value))
        return Node(value, resolver, pointer, self.document)

    def synthetic(self, schema: dict[str, Any]) -> Node:
        """A schema the compiler built, resolved and reported as if it sat at this node."""
        return Node(schema, self.resolver, self.pointer, self.document)

    def resolve(self, keyword: str) -> Node | None:
        """The target of this node's ``$ref``-like keyword, or None (after reporting) if unresolvable."""
        reference = self.schema[keyword]
        if keyword == "$recursiveRef":
            reference = "#"
        key = (id(self.resolver), reference)
        found = self.document.resolved.get(key)
        if found is not None and found[0] is self.resolver:  # (a lookup took 13 µs; definitions are met often)
            resolved = found[1]
        else:
            try:
                resolved = self.resolver.lookup(reference)
            except (referencing.exceptions.Unresolvable, ValueError) as exc:
                self.document.unsupported(keyword, self.pointer, f"cannot resolve {reference!r} ({exc})")
                return None
            self.document.resolved[key] = (self.resolver, resolved)
        return Node(resolved.contents, resolved.resolver, f"{self.pointer}/{keyword}", self.document)

    @property
    def identity(self) -> tuple[int, str]:
        """Identifies the node for memoisation: the schema object and the base URI it resolves against."""
        return id(self.schema), str(getattr(self.resolver, "_base_uri", ""))

    def get(self, keyword: str, default: Any = None) -> Any:
        return self.schema.get(keyword, default) if isinstance(self.schema, dict) else default


def canonical(value: Any) -> str:
    """A canonical text of a JSON value, for equality as JSON Schema defines it (1 == 1.0)."""
    return json.dumps(_normalise_numbers(value), sort_keys=True, ensure_ascii=False)


def _normalise_numbers(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_normalise_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalise_numbers(v) for k, v in value.items()}
    return value


def json_type(value: Any) -> str:
    """The internal type of a JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "fraction"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def types_of(type_keyword: Any) -> frozenset[str]:
    """Internal types named by a ``type`` keyword (a name or a list of names)."""
    names = [type_keyword] if isinstance(type_keyword, str) else list(type_keyword)
    out: set[str] = set()
    for name in names:
        if name == "number":
            out |= {"integer", "fraction"}
        elif name in VALUE_TYPES:
            out.add(name)
    return frozenset(out)
