"""The compensation mapping language: how a compensation's arguments are filled from the
original call. Parsed once when the policy is read, checked against the upstreams' JSON
schemas at start, never evaluated as code.

An expression (each argument of the compensation call is one) is:

- ``"args.PATH"``: from the original call's arguments;
- ``"result.PATH"``: from the original call's result (its structured content, else the
  JSON of its single text block);
- ``"item.PATH"``: inside ``{ each = ..., to = ... }``, from the element being built;
- ``"undo_id"``: the undo entry's id, the same on every attempt (an idempotency key);
- ``{ value = ANY }``: that literal value (strings included);
- a bare number or boolean: that literal;
- ``[E, ...]``: a list of expressions;
- ``{ KEY = E, ... }``: an object of expressions (``{ object = { ... } }`` when a key is
  ``value``, ``each`` or ``object``);
- ``{ each = PATH, to = E, reverse = BOOL }``: one ``E`` per element of the list at PATH
  (``item`` being that element), optionally last first.

A PATH is the root followed by ``.key``, ``.N`` (a key, or an index into a list),
``[N]`` (an index) or ``[*]`` (every element: ``result.entities[*].name`` is the list of
the entities' names). Any other string is refused, so that a typo is an error at start
rather than at undo time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

STAR = "[*]"
_PATH = re.compile(
    r"^(args|result|item)((?:\.(?:[A-Za-z_][A-Za-z0-9_-]*|[0-9]+)|\[(?:\*|[0-9]+)\])*)$"
)
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*|[0-9]+)|(\[(?:\*|[0-9]+)\])")
_RESERVED = ("value", "each", "object")
_JSON_TYPES = ("string", "integer", "number", "boolean", "object", "array", "null")

Kind = Literal["args", "result", "item", "undo_id", "value", "object", "list", "each"]


class PolicyError(ValueError):
    """The policy file is refused; the message says where and why."""


class MappingError(LookupError):
    """A compensation's argument cannot be filled from what the journal holds."""


@dataclass(frozen=True)
class ArgSource:
    """One expression of the mapping language (a tree for constructions)."""

    kind: Kind
    path: tuple[str, ...] = ()  # args/result/item: keys, "N", "[N]" or "[*]"
    value: Any = None  # value: the literal
    fields: tuple[tuple[str, ArgSource], ...] = ()  # object
    elements: tuple[ArgSource, ...] = ()  # list; each: (the list, the template)
    reverse: bool = False  # each: last element first

    @property
    def is_path(self) -> bool:
        return self.kind in ("args", "result", "item")

    def text(self) -> str:
        """The expression as the policy writes it (for messages)."""
        if self.kind == "value" and isinstance(self.value, bool | int | float):
            return json.dumps(self.value)
        stored = self.to_json()
        return stored if isinstance(stored, str) else json.dumps(stored)

    def to_json(self) -> Any:
        """The form stored in the journal's compensation descriptor (re-read by the walk,
        so that a walk after a policy change still undoes what the old policy meant)."""
        if self.kind == "value":
            return {"value": self.value}
        if self.is_path:
            # a path is stored as the policy writes it
            return self.kind + "".join(s if s.startswith("[") else f".{s}" for s in self.path)
        if self.kind == "object":
            return {"object": {k: v.to_json() for k, v in self.fields}}
        if self.kind == "list":
            return [e.to_json() for e in self.elements]
        if self.kind == "each":
            over, template = self.elements
            out = {"each": over.to_json(), "to": template.to_json()}
            return {**out, "reverse": True} if self.reverse else out
        return self.kind

    @classmethod
    def parse(cls, raw: Any, where: str, *, in_each: bool = False) -> ArgSource:
        if isinstance(raw, bool | int | float):
            return cls("value", value=raw)
        if isinstance(raw, list):
            return cls(
                "list",
                elements=tuple(
                    cls.parse(e, f"{where}[{i}]", in_each=in_each) for i, e in enumerate(raw)
                ),
            )
        if isinstance(raw, dict):
            return cls._parse_table(raw, where, in_each)
        if not isinstance(raw, str):
            raise PolicyError(f"{where}: expected a mapping expression, got {raw!r}")
        if raw == "undo_id":
            return cls("undo_id")
        match = _PATH.match(raw)
        if match is not None and (match.group(1) != "item" or in_each):
            steps = tuple(m.group(1) or m.group(2) for m in _STEP.finditer(match.group(2)))
            return cls(match.group(1), steps)  # type: ignore[arg-type]
        if match is not None:
            raise PolicyError(f"{where}: {raw!r}: item.PATH reads an element only inside each")
        raise PolicyError(
            f"{where}: {raw!r} is not args.PATH, result.PATH or undo_id "
            f'(a literal string is written {{ value = "..." }}; a PATH is keys and '
            "indexes, e.g. args.user.id, result.items[0].id, result.items[*].id)"
        )

    @classmethod
    def _parse_table(cls, raw: dict[str, Any], where: str, in_each: bool) -> ArgSource:
        keys = set(raw)
        if keys == {"value"}:
            _check_json(raw["value"], where)
            return cls("value", value=raw["value"])
        if keys == {"object"} and isinstance(raw["object"], dict):
            return cls._object(raw["object"], where, in_each)
        if "each" in keys:
            if not keys <= {"each", "to", "reverse"}:
                raise PolicyError(
                    f"{where}: {{ each = PATH, to = EXPRESSION, reverse = BOOL }} takes no "
                    f"{', '.join(sorted(keys - {'each', 'to', 'reverse'}))} (for an object "
                    "with those keys write { object = { ... } })"
                )
            over = cls.parse(raw["each"], f"{where}.each", in_each=in_each)
            if not over.is_path:
                raise PolicyError(
                    f'{where}.each: expected the PATH of a list (e.g. "args.edits"), '
                    f"got {raw['each']!r}"
                )
            template = cls.parse(raw.get("to", "item"), f"{where}.to", in_each=True)
            reverse = raw.get("reverse", False)
            if not isinstance(reverse, bool):
                raise PolicyError(f"{where}.reverse: expected true or false")
            return cls("each", elements=(over, template), reverse=reverse)
        clash = keys & set(_RESERVED)
        if clash:
            raise PolicyError(
                f"{where}: a literal is written {{ value = ... }}, a list's elements "
                f"{{ each = ..., to = ... }}; for an object with a key named "
                f"{', '.join(sorted(clash))} write {{ object = {{ ... }} }} (got {raw!r})"
            )
        return cls._object(raw, where, in_each)

    @classmethod
    def _object(cls, raw: dict[str, Any], where: str, in_each: bool) -> ArgSource:
        return cls(
            "object",
            fields=tuple(
                (str(k), cls.parse(v, f"{where}.{k}", in_each=in_each)) for k, v in raw.items()
            ),
        )

    def evaluate(self, scope: _Scope) -> Any:
        if self.kind == "value":
            return self.value
        if self.kind == "undo_id":
            return scope.undo_id
        if self.kind == "object":
            return {k: v.evaluate(scope) for k, v in self.fields}
        if self.kind == "list":
            return [e.evaluate(scope) for e in self.elements]
        if self.kind == "each":
            over, template = self.elements
            items = over.evaluate(scope)
            if not isinstance(items, list):
                raise MappingError(f"{over.text()}: each needs a list, got {_short(items)}")
            ordered = reversed(items) if self.reverse else items
            return [template.evaluate(scope.with_item(item)) for item in ordered]
        if self.kind == "args":
            return _walk_path(scope.call_args, self.path, self.text())
        if self.kind == "item":
            return _walk_path(scope.item, self.path, self.text())
        if scope.result is None:
            raise MappingError(
                f"{scope.name} = {self.text()}: the call has no recorded "
                "result (its outcome is unknown): undo it by hand"
            )
        return _walk_path(result_value(scope.result), self.path, self.text())

    def walk(self) -> Iterator[ArgSource]:
        """This expression and every one inside it."""
        yield self
        for _, f in self.fields:
            yield from f.walk()
        for e in self.elements:
            yield from e.walk()

    def result_paths(self) -> Iterator[tuple[str, ...]]:
        """The parts of the result this expression reads, each cut before its first
        ``[...]`` step (the whole list is kept): what a reduced journal record must hold."""
        for node in self.walk():
            if node.kind == "result":
                cut = next((i for i, s in enumerate(node.path) if s.startswith("[")), None)
                yield node.path[:cut]


@dataclass(frozen=True)
class _Scope:
    name: str
    call_args: Mapping[str, Any]
    result: Any
    undo_id: str
    item: Any = None

    def with_item(self, item: Any) -> _Scope:
        return _Scope(self.name, self.call_args, self.result, self.undo_id, item)


def _check_json(value: Any, where: str) -> None:
    if isinstance(value, str | bool | int | float) or value is None:
        return
    if isinstance(value, list):
        for item in value:
            _check_json(item, where)
        return
    if isinstance(value, dict):
        for item in value.values():
            _check_json(item, where)
        return
    raise PolicyError(f"{where}: {value!r} cannot be sent as JSON")


def _short(value: Any) -> str:
    return repr(str(value)[:200])


def resolve(
    mapping: Mapping[str, Any],
    *,
    call_args: Mapping[str, Any],
    result: Any,
    undo_id: str,
) -> dict[str, Any]:
    """Fill a stored mapping (``ArgSource.to_json`` forms) into the compensation's args."""
    out: dict[str, Any] = {}
    for name, stored in mapping.items():
        source = ArgSource.parse(stored, f"compensation argument {name!r}")
        out[name] = source.evaluate(_Scope(name, call_args, result, undo_id))
    return out


def result_value(snapshot: Any) -> Any:
    """What ``result.`` paths read: the structured content of the recorded tool result,
    else the JSON of its single text block, else the text itself."""
    if not isinstance(snapshot, dict):
        return snapshot
    structured = snapshot.get("structuredContent")
    if structured is not None:
        return structured
    texts = [c.get("text") for c in snapshot.get("content", []) if c.get("type") == "text"]
    if len(texts) == 1 and isinstance(texts[0], str):
        try:
            return json.loads(texts[0])
        except ValueError:
            return texts[0]
    return snapshot


def _walk_path(value: Any, path: tuple[str, ...], expression: str) -> Any:
    for i, segment in enumerate(path):
        if segment == STAR:
            if not isinstance(value, list):
                raise MappingError(f"{expression}: [*] needs a list, got {_short(value)}")
            return [_walk_path(v, path[i + 1 :], expression) for v in value]
        if segment.startswith("["):
            index = int(segment[1:-1])
            if isinstance(value, list) and index < len(value):
                value = value[index]
                continue
            raise MappingError(f"{expression}: no element {index} in {_short(value)}")
        if isinstance(value, dict) and segment in value:
            value = value[segment]
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            raise MappingError(f"{expression}: no {segment!r} in {_short(value)}")
    return value


# --- the start-time check against the upstreams' JSON schemas ---------------------------


@dataclass(frozen=True)
class _Shape:
    """What a schema says a value is: a node of a JSON schema (``{}``: anything), the
    document its ``$ref``s point into, or a list of another shape (a projection)."""

    node: Any
    root: Any = None
    array_of: _Shape | None = None


_ANY = _Shape({})


def _deref(shape: _Shape) -> dict[str, Any]:
    node, seen = shape.node, 0
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and seen < 32:
        ref: str = node["$ref"]
        if not ref.startswith("#/"):
            return {}
        target: Any = shape.root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        node, seen = target, seen + 1
    return node if isinstance(node, dict) else {}


def _members(shape: _Shape) -> list[_Shape]:
    """The shape's alternatives (anyOf/oneOf, allOf merged loosely), or itself."""
    node = _deref(shape)
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(node.get(key), list):
            out: list[_Shape] = []
            for member in node[key]:
                out += _members(_Shape(member, shape.root))
            return out
    return [_Shape(node, shape.root)]


def _types(shape: _Shape) -> set[str] | None:
    """The JSON types the shape allows; None when the schema does not say."""
    if shape.array_of is not None:
        return {"array"}
    out: set[str] = set()
    for member in _members(shape):
        node = member.node
        declared = node.get("type")
        if isinstance(declared, str):
            out.add(declared)
        elif isinstance(declared, list):
            out |= {str(t) for t in declared}
        elif "const" in node or isinstance(node.get("enum"), list):
            values = [node["const"]] if "const" in node else node["enum"]
            out |= {_json_type(v) for v in values}
        elif isinstance(node.get("properties"), dict):
            out.add("object")
        elif isinstance(node.get("items"), dict):
            out.add("array")
        else:
            return None
    return out or None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _items(shape: _Shape) -> _Shape:
    if shape.array_of is not None:
        return shape.array_of
    for member in _members(shape):
        items = member.node.get("items")
        if isinstance(items, dict):
            return _Shape(items, member.root)
    return _ANY


def _property(shape: _Shape, key: str) -> tuple[_Shape | None, list[str]]:
    """(the key's shape, else None when the schema says the key is not there; the keys
    it declares)."""
    declared: list[str] = []
    open_ = False
    for member in _members(shape):
        props = member.node.get("properties")
        extra = member.node.get("additionalProperties")
        if isinstance(props, dict):
            declared += list(props)
            if key in props:
                return _Shape(props[key], member.root), declared
        if isinstance(extra, dict):
            return _Shape(extra, member.root), declared
        if not isinstance(props, dict) or extra is True:
            open_ = True  # a key the schema does not list may be there
    return (_ANY if open_ else None), declared


def _compatible(given: set[str], wanted: set[str]) -> bool:
    if given & wanted:
        return True
    numbers = {"integer", "number"}
    return bool(given & numbers and wanted & numbers)


def _describe(shape: _Shape, article: bool = True) -> str:
    types = _types(shape)
    if types is None:
        return "anything"
    words = []
    for t in sorted(types):
        if t == "array":
            inner = _describe(_items(shape), article=False)
            word = "array" if inner == "anything" else f"array of {inner}"
        else:
            word = t
        words.append(f"{'an' if word[0] in 'aeiou' else 'a'} {word}" if article else word)
    return " or ".join(words)


@dataclass(frozen=True)
class _Check:
    """One compensation's start-time check: where the expressions read from."""

    where: str
    tool: str  # the original tool
    undo: str  # the compensation tool
    args: _Shape  # the original tool's input schema
    result: _Shape  # its output schema (anything when it declares none)

    def path_shape(
        self, source: ArgSource, item: _Shape | None, arg: str
    ) -> tuple[_Shape | None, list[str]]:
        """What a path expression reads, per the schemas, or the problems with it."""
        start = {"args": self.args, "result": self.result}.get(source.kind, item or _ANY)
        return self._steps(source, 0, start, arg)

    def _steps(
        self, source: ArgSource, first: int, shape: _Shape, arg: str
    ) -> tuple[_Shape | None, list[str]]:
        for i in range(first, len(source.path)):
            step = source.path[i]
            here = ArgSource(source.kind, source.path[:i]).text()
            where = f"{self.where}: {arg} = {source.text()}, but"
            types = _types(shape)
            if step == STAR or step.startswith("["):
                if types is not None and "array" not in types:
                    return None, [f"{where} {here} is {_describe(shape)}, not a list"]
                if step == STAR:
                    inner, problems = self._steps(source, i + 1, _items(shape), arg)
                    return (None, problems) if inner is None else (_Shape({}, None, inner), [])
                shape = _items(shape)
                continue
            if step.isdigit() and types is not None and "object" not in types:
                if "array" not in types:
                    return None, [f"{where} {here} is {_describe(shape)}"]
                shape = _items(shape)
                continue
            if types is not None and "object" not in types:
                return None, [f"{where} {here} is {_describe(shape)}, with no keys"]
            found, declared = _property(shape, step)
            if found is None:
                if source.kind == "args" and i == 0:
                    return None, [f"{where} {self.tool} has no argument {step!r}"]
                owner = here
                if i == 0:
                    owner = {
                        "result": f"{self.tool}'s output schema",
                        "item": "item (an element of the list each walks)",
                    }.get(source.kind, here)
                return None, [
                    f"{where} {owner} has no {step!r} (it has: {', '.join(declared) or 'none'})"
                ]
            shape = found
        return shape, []

    def check(
        self, source: ArgSource, target: _Shape, label: str, item: _Shape | None
    ) -> list[str]:
        """The problems with filling ``label`` (of the compensation) with ``source``."""
        wanted = _types(target)
        arg = label.split(".")[0].split("[")[0]
        problems: list[str] = []
        if source.is_path:
            shape, problems = self.path_shape(source, item, arg)
            if shape is None:
                return problems
            return self.compare(source, shape, target, label)
        if source.kind == "undo_id":
            return self.compare(source, _Shape({"type": "string"}), target, label)
        if source.kind == "value":
            return self.literal(source.value, target, label, source)
        if source.kind == "object":
            if wanted is not None and "object" not in wanted:
                return [self.mismatch(label, target, source, "an object")]
            for key, sub in source.fields:
                field_shape, declared = _property(target, key)
                if field_shape is None:
                    problems.append(
                        f"{self.where}: {self.undo}.{label} takes no key {key!r} "
                        f"(it takes: {', '.join(declared)})"
                    )
                    continue
                problems += self.check(sub, field_shape, f"{label}.{key}", item)
            for key in sorted(_required(target) - {k for k, _ in source.fields}):
                problems.append(
                    f"{self.where}: {self.undo}.{label} requires {key!r}, which the mapping "
                    "does not fill"
                )
            return problems
        if wanted is not None and "array" not in wanted:
            return [self.mismatch(label, target, source, "an array")]
        if source.kind == "list":
            for i, element in enumerate(source.elements):
                problems += self.check(element, _items(target), f"{label}[{i}]", item)
            return problems
        over, template = source.elements
        shape, problems = self.path_shape(over, item, arg)
        if shape is None:
            return problems
        over_types = _types(shape)
        if over_types is not None and "array" not in over_types:
            return [
                f"{self.where}: {arg} = {source.text()}, but each needs a list and "
                f"{over.text()} is {_describe(shape)}"
            ]
        return self.check(template, _items(target), f"{label}[*]", _items(shape))

    def compare(self, source: ArgSource, given: _Shape, target: _Shape, label: str) -> list[str]:
        wanted, types = _types(target), _types(given)
        if wanted is None or types is None:
            return []
        if not _compatible(types, wanted):
            return [self.mismatch(label, target, source, _describe(given))]
        if "array" in types and "array" in wanted:
            inner_given, inner_wanted = _items(given), _items(target)
            inner_types, inner_want = _types(inner_given), _types(inner_wanted)
            if inner_types and inner_want and not _compatible(inner_types, inner_want):
                return [self.mismatch(label, target, source, _describe(given))]
        return []

    def literal(self, value: Any, target: _Shape, label: str, source: ArgSource) -> list[str]:
        wanted = _types(target)
        if wanted is not None and not _compatible({_json_type(value)}, wanted):
            return [self.mismatch(label, target, source, _describe(_Shape({"const": value})))]
        if isinstance(value, list):
            for element in value:
                problems = self.literal(element, _items(target), label, source)
                if problems:
                    return problems
        return []

    def mismatch(self, label: str, target: _Shape, source: ArgSource, given: str) -> str:
        return (
            f"{self.where}: {self.undo}.{label} wants {_describe(target)}, but "
            f"{source.text()} gives {given}: {self.hint(label, target, source)}"
        )

    def hint(self, label: str, target: _Shape, source: ArgSource) -> str:
        """What to write instead, when the expression's own path suggests it."""
        wanted = _types(target) or set()
        fallback = "map a value of that type (docs/mcp-proxy.md, Compensation arguments)"
        if not source.is_path:
            return fallback
        shape, _ = self.path_shape(source, None, label)
        given = (_types(shape) if shape is not None else None) or set()
        if "array" in wanted and "array" not in given:
            indexed = [i for i, s in enumerate(source.path) if s.isdigit() or s.startswith("[")]
            if indexed:
                i = indexed[-1]
                star = ArgSource(source.kind, (*source.path[:i], STAR, *source.path[i + 1 :]))
                return f'write {label} = "{star.text()}" (every element, not one)'
            return f'write {label} = ["{source.text()}"] (a list of that one value)'
        if "array" in wanted and shape is not None:
            # a list of objects where a list of values is wanted: name the element's key
            element, want = _items(shape), _types(_items(target))
            keys = []
            for member in _members(element):
                props = member.node.get("properties")
                for key, sub in (props or {}).items() if isinstance(props, dict) else ():
                    types = _types(_Shape(sub, member.root))
                    if want is None or types is None or _compatible(types, want):
                        keys.append(key)
            if keys:
                base = source.path if source.path[-1:] == (STAR,) else (*source.path, STAR)
                options = [ArgSource(source.kind, (*base, k)).text() for k in keys]
                return f'write {label} = "{options[0]}"' + (
                    f" (or one of: {', '.join(options[1:])})" if len(options) > 1 else ""
                )
        if "array" in given and "array" not in wanted:
            stars = [i for i, s in enumerate(source.path) if s == STAR]
            path = source.path
            one = (*path[: stars[-1]], "[0]", *path[stars[-1] + 1 :]) if stars else (*path, "[0]")
            text = ArgSource(source.kind, one).text()
            return f'write {label} = "{text}" for its first element'
        return fallback


def _required(shape: _Shape) -> set[str]:
    out: set[str] = set()
    for member in _members(shape):
        required = member.node.get("required")
        if isinstance(required, list):
            out |= {str(r) for r in required}
    return out


def check_mapping(
    where: str,
    tool: str,
    undo: str,
    args: Mapping[str, ArgSource],
    schemas: Mapping[str, Any],
    undo_schema: Any,
) -> list[str]:
    """Every problem with filling compensation ``undo``'s arguments from ``tool``'s
    (``schemas``: its ``inputSchema`` and ``outputSchema``), checked against the
    compensation's ``undo_schema``: paths the schemas say cannot be there, types that can
    never match, keys the compensation does not take or requires."""
    own_in, own_out = schemas.get("inputSchema"), schemas.get("outputSchema")
    check = _Check(
        where,
        tool,
        undo,
        _Shape(own_in if isinstance(own_in, dict) else {}, own_in),
        _Shape(own_out if isinstance(own_out, dict) else {}, own_out),
    )
    target = _Shape(undo_schema if isinstance(undo_schema, dict) else {}, undo_schema)
    problems: list[str] = []
    for name, source in args.items():
        field, _ = _property(target, name)
        if field is None:
            problems.append(f"{where}: {undo} takes no argument {name!r}")
            continue
        problems += check.check(source, field, name, None)
    for name in sorted(_required(target) - set(args)):
        problems.append(f"{where}: {undo} requires {name!r}, which the mapping does not fill")
    return problems
