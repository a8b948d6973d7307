#!/usr/bin/env python3
"""Generate ``broker/protocol/amqp1_0/definitions.py`` from the AMQP 1.0 spec XML.

Reads the five parts of the specification (types, transport, messaging,
security, transactions) copied into ``specs/amqp-1.0/`` and emits:

* every composite type (performatives, SASL frames, message sections,
  delivery states, termini, error, transactions, lifetime policies) as a
  frozen slotted dataclass whose fields follow the spec order, with its
  descriptor code and symbol, the spec's defaults, and mandatory fields
  without a default;
* the described restricted types (data, amqp-value, amqp-sequence and the
  annotation / property maps) as one-field classes;
* straight-line decoders and encoders for each of them, directed by the
  field types (a ``handle`` is read as a uint and nothing else), registered
  with the type system codec by descriptor code and symbol;
* the restricted types' choices (error conditions, settle modes, terminus
  durability and expiry, distribution modes, SASL codes, ...) as constants;
* the spec's ``definition`` constants and the primitive encodings table.

Usage: python tools/gen_amqp1_0.py [--specs DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import keyword
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NS = "{http://www.amqp.org/schema/amqp.xsd}"
PARTS = ("types", "transport", "messaging", "security", "transactions")

# provides="..." -> the base class a composite gets (composite.py)
BASES = {"frame": "Performative", "sasl-frame": "SaslFrame", "section": "Section",
         "delivery-state": "DeliveryState", "outcome": "Outcome", "lifetime-policy": "LifetimePolicy"}
# map types whose keys are symbols: str keys are encoded as symbols
SYMBOL_KEYED = {"fields", "annotations", "filter-set", "node-properties"}
SCALARS = {"boolean", "ubyte", "ushort", "uint", "ulong", "string", "symbol", "binary", "timestamp"}
PY_TYPES = {"boolean": "bool", "ubyte": "int", "ushort": "int", "uint": "int", "ulong": "int",
            "string": "str", "symbol": "str", "binary": "bytes", "timestamp": "int",
            "map": "dict[Any, Any]", "list": "list[Any]", "*": "Any", "symbols": "Sequence[str]"}


@dataclass
class FieldDef:
    name: str
    type: str
    mandatory: bool = False
    multiple: bool = False
    default: str | None = None


@dataclass
class TypeDef:
    name: str
    klass: str                       # primitive | restricted | composite
    part: str
    source: str = ""
    provides: list[str] = field(default_factory=list)
    symbol: str = ""
    code: int | None = None
    fields: list[FieldDef] = field(default_factory=list)
    choices: list[tuple[str, str]] = field(default_factory=list)
    encodings: list[tuple[int, str, str, int]] = field(default_factory=list)


def load(specs: Path) -> tuple[dict[str, TypeDef], list[tuple[str, str]]]:
    types: dict[str, TypeDef] = {}
    definitions: list[tuple[str, str]] = []
    for part in PARTS:
        root = ET.parse(specs / f"{part}.xml").getroot()
        for t in root.iter(f"{NS}type"):
            td = TypeDef(t.get("name", ""), t.get("class", ""), part, t.get("source", ""),
                         [p.strip() for p in t.get("provides", "").split(",") if p.strip()])
            d = t.find(f"{NS}descriptor")
            if d is not None:
                hi, lo = (int(x, 16) for x in d.get("code", "").split(":"))
                td.symbol, td.code = d.get("name", ""), hi << 32 | lo
            for f in t.findall(f"{NS}field"):
                td.fields.append(FieldDef(f.get("name", ""), f.get("type", ""), f.get("mandatory") == "true",
                                          f.get("multiple") == "true", f.get("default")))
            td.choices = [(c.get("name", ""), c.get("value", "")) for c in t.findall(f"{NS}choice")]
            td.encodings = [(int(e.get("code", ""), 16), e.get("name", ""), e.get("category", ""),
                             int(e.get("width", "0"))) for e in t.findall(f"{NS}encoding")]
            types[td.name] = td
        definitions += [(d.get("name", ""), d.get("value", "")) for d in root.iter(f"{NS}definition")]
    return types, definitions


# -- naming and types ---------------------------------------------------------

def camel(name: str) -> str:
    return "".join(p.capitalize() for p in name.split("-"))


def snake(name: str) -> str:
    s = name.replace("-", "_")
    return s + "_" if keyword.iskeyword(s) else s


def constant_class(td: TypeDef) -> str:
    # "connection-error" would shadow a builtin: every error-condition group says Condition
    return camel(td.name) + ("Condition" if "error-condition" in td.provides else "")


def resolve(types: dict[str, TypeDef], name: str) -> str:
    """The primitive or composite type a (chain of) restricted type(s) stands for."""
    while name in types and types[name].klass == "restricted" and types[name].code is None:
        name = types[name].source
    return name


def symbol_keyed(types: dict[str, TypeDef], name: str) -> bool:
    while name in types and types[name].klass == "restricted":
        if name in SYMBOL_KEYED:
            return True
        name = types[name].source
    return False


def kind(types: dict[str, TypeDef], f: FieldDef) -> str:
    """The codec kind of a field: a primitive name, "*", "symbols", or a composite's name."""
    base = resolve(types, f.type)
    if f.multiple:
        if base != "symbol":
            raise ValueError(f"multiple {base} fields are not supported ({f.name})")
        return "symbols"
    if base in SCALARS or base in ("map", "*"):
        return base
    if types.get(base) and types[base].klass == "composite":
        return base
    raise ValueError(f"field {f.name}: unsupported type {f.type} ({base})")


def py_type(types: dict[str, TypeDef], f: FieldDef) -> str:
    k = kind(types, f)
    return PY_TYPES.get(k) or camel(k)


def default_literal(types: dict[str, TypeDef], f: FieldDef) -> str | None:
    if f.default is None:
        return None
    value = f.default
    td = types.get(f.type)
    if td is not None and td.choices:
        value = dict(td.choices)[value]
    base = resolve(types, f.type)
    if base == "boolean":
        return {"true": "True", "false": "False"}[value]
    if base in ("ubyte", "ushort", "uint", "ulong"):
        return str(int(value))
    if base == "symbol":
        return f"Symbol({value!r})"
    raise ValueError(f"no default literal for {f.name}: {base}")


# -- emission -----------------------------------------------------------------

def emit_constants(td: TypeDef, types: dict[str, TypeDef]) -> list[str]:
    base = resolve(types, td.source)
    out = ["", "", f"class {constant_class(td)}:",
           f'    """{td.name} ({td.part}.xml): the choices of a restricted {base}."""', ""]
    for name, value in td.choices:
        if base == "boolean":
            literal = {"true": "True", "false": "False"}[value]
        elif base == "symbol":
            literal = f"Symbol({value!r})"
        else:
            literal = str(int(value))
        out.append(f"    {snake(name).upper()}: Final = {literal}")
    return out


def bases_of(td: TypeDef) -> str:
    names = [BASES[p] for p in td.provides if p in BASES]
    return ", ".join(names) or "Composite"


def emit_class(td: TypeDef, types: dict[str, TypeDef]) -> list[str]:
    composite = td.klass == "composite"
    deco = "@dataclass(frozen=True, slots=True, kw_only=True)" if composite else "@dataclass(frozen=True, slots=True)"
    out = ["", "", deco, f"class {camel(td.name)}({bases_of(td)}):",
           f'    """{td.name} ({td.part}.xml): {td.symbol}, code 0x{td.code:08x}."""', "",
           f"    NAME: ClassVar[str] = {td.name!r}",
           f"    CODE: ClassVar[int] = 0x{td.code:x}",
           f"    SYMBOL: ClassVar[str] = {td.symbol!r}"]
    if not composite:
        out.append(f"    value: {PY_TYPES[resolve(types, td.source)]}")
        return out
    out.append(f"    FIELDS: ClassVar[tuple[str, ...]] = {tuple(f.name for f in td.fields)!r}")
    for f in td.fields:
        ty = py_type(types, f)
        default = default_literal(types, f)
        if default is not None:
            out.append(f"    {snake(f.name)}: {ty} = {default}")
        elif f.mandatory:
            out.append(f"    {snake(f.name)}: {ty}")
        else:
            out.append(f"    {snake(f.name)}: {ty if ty == 'Any' else ty + ' | None'} = None")
    return out


# the common encodings of the hottest field types read inline; null, the other encodings,
# short input and faults go to the field_* reader
INLINE = {
    "uint": ["c = b[o] if o < e else -1",
             "if c == 0x52 and o + 2 <= e:",
             "    VAR, o = b[o + 1], o + 2",
             "elif c == 0x43:",
             "    VAR, o = 0, o + 1",
             "elif c == 0x70 and o + 5 <= e:",
             "    VAR, o = unpack_uint(b, o + 1)[0], o + 5"],
    "boolean": ["c = b[o] if o < e else -1",
                "if c == 0x42:",
                "    VAR, o = False, o + 1",
                "elif c == 0x41:",
                "    VAR, o = True, o + 1"],
    "binary": ["c = b[o] if o < e else -1",
               "if c == 0xa0 and o + 2 <= e and o + 2 + b[o + 1] <= e:",
               "    VAR, o = bytes(b[o + 2:o + 2 + b[o + 1]]), o + 2 + b[o + 1]"],
}


def emit_decoder(td: TypeDef, types: dict[str, TypeDef]) -> list[str]:
    cls = camel(td.name)
    fn = f"_decode_{snake(td.name)}"
    out = ["", "", f"def {fn}(b: Buffer, o: int, end: int, depth: int) -> tuple[{cls}, int]:"]
    if td.klass != "composite":
        base = resolve(types, td.source)
        reader = {"binary": "field_binary(b, o, end",
                  "map": ("field_fields" if symbol_keyed(types, td.source) else "field_map") + "(b, o, end, depth",
                  "list": "field_list(b, o, end, depth", "*": "field_any(b, o, end, depth"}[base]
        out.append(f"    value, o = {reader}, {td.name!r})")
        if base != "*":
            out += ["    if value is None:",
                    f"        raise DecodeError({td.name + ' section: null where a ' + base + ' is required'!r}, o)"]
        out.append(f"    return {cls}(value), o")
        return out
    n = len(td.fields)
    # the common list8 header inline; list0, list32 and every fault in composite_list
    out += ["    if o + 3 <= end and b[o] == 0xc0 and 1 <= b[o + 1] <= end - o - 2 and b[o + 2] < b[o + 1]:",
            "        count, e = b[o + 2], o + 2 + b[o + 1]",
            "        o += 3",
            "    else:",
            f"        count, o, e = composite_list(b, o, end, {td.name!r})"]
    for f in td.fields:
        var = snake(f.name)
        ty = py_type(types, f)
        out.append(f"    {var}: {ty if ty == 'Any' else ty + ' | None'} = None")
    for i, f in enumerate(td.fields):
        var, k, what = snake(f.name), kind(types, f), f"{td.name}.{f.name}"
        if k in SCALARS:
            call = f"field_{k}(b, o, e, {what!r})"
        elif k == "map":
            reader = "field_fields" if symbol_keyed(types, f.type) else "field_map"
            call = f"{reader}(b, o, e, depth, {what!r})"
        elif k == "symbols":
            call = f"field_symbols(b, o, e, depth, {what!r})"
        else:
            call = f"field_any(b, o, e, depth, {what!r})"
        out.append(f"    if count > {i}:")
        if k in INLINE:
            out += [f"        {line}".replace("VAR", var) for line in INLINE[k]]
            out += ["        else:", f"            {var}, o = {call}"]
        else:
            out.append(f"        {var}, o = {call}")
        if k not in SCALARS and k not in ("map", "symbols", "*"):
            out += [f"        if {var} is not None and not isinstance({var}, {camel(k)}):",
                    f"            raise wrong_value({what!r}, {k!r}, {var}, o)"]
    out += [f"    if count > {n}:", f"        o = skip_values(b, o, e, count - {n}, {td.name!r})",
            "    if o != e:", f"        raise list_mismatch({td.name!r}, o, e)"]
    for f in td.fields:
        var = snake(f.name)
        default = default_literal(types, f)
        if default is not None:
            out += [f"    if {var} is None:", f"        {var} = {default}"]
        elif f.mandatory:
            out += [f"    if {var} is None:", f"        raise mandatory({td.name + '.' + f.name!r}, o)"]
    if not td.fields:
        out.append(f"    return {cls}(), e")
        return out
    # fill the slots directly: the frozen dataclass's __init__ (object.__setattr__ per field)
    # costs 2.5 times as much, and a transfer is decoded for every message
    setters = f"_SET_{snake(td.name).upper()}"
    out += [f"    m = new({cls})", f"    s = {setters}"]
    out += [f"    s[{i}](m, {snake(f.name)})" for i, f in enumerate(td.fields)]
    out.append("    return m, e")
    return out


def field_encoder(types: dict[str, TypeDef], f: FieldDef, expr: str) -> str:
    k = kind(types, f)
    if k in SCALARS:
        call = f"enc_{k}({expr})"
    elif k == "map":
        call = f"enc_fields({expr})" if symbol_keyed(types, f.type) else f"enc_map({expr})"
    elif k == "symbols":
        call = f"enc_symbols({expr})"
    else:
        call = f"encode({expr})"
    default = default_literal(types, f)
    if default is not None:
        # a value equal to the default is sent as null (the same, and trailing nulls are left out)
        plain = default[len("Symbol("):-1] if default.startswith("Symbol(") else default
        return f"NULL if {expr} == {plain} else {call}"
    return call if f.mandatory else f"NULL if {expr} is None else {call}"


def emit_encoder(td: TypeDef, types: dict[str, TypeDef]) -> list[str]:
    cls = camel(td.name)
    prefix = b"\x00\x53" + bytes((td.code or 0,))
    out = ["", "", f"def _encode_{snake(td.name)}(m: {cls}) -> bytes:"]
    if td.klass != "composite":
        base = resolve(types, td.source)
        if base == "map":
            call = "enc_fields(m.value)" if symbol_keyed(types, td.source) else "enc_map(m.value)"
        else:
            call = {"binary": "enc_binary(m.value)", "list": "enc_list(m.value)", "*": "encode(m.value)"}[base]
        out.append(f"    return {prefix!r} + {call}")
        return out
    if not td.fields:
        empty = prefix + b"\x45"          # list0: no fields
        out.append(f"    return {empty!r}")
        return out
    out.append(f"    return composite_bytes({prefix!r}, [")
    for f in td.fields:
        out.append(f"        {field_encoder(types, f, 'm.' + snake(f.name))},")
    out.append("    ])")
    return out


HEADER = '''\
# Generated by tools/gen_amqp1_0.py from specs/amqp-1.0/*.xml -- do not edit.
# Regenerate: python tools/gen_amqp1_0.py   (the spec files are (c) their authors; see their notices)
"""AMQP 1.0 definitions: composite and described types, restricted-type choices, constants.

Composites are frozen slotted dataclasses, fields in spec order, constructed by
keyword; a field with a spec default has it (never None), a mandatory one has
no default, any other is None when absent.  Values read from the wire are
plain Python values (int, str, bytes, bool); the field's spec type decides the
encoding, so ``Transfer(handle=0)`` encodes ``handle`` as a uint.  Symbol
fields decode to :class:`Symbol`, multiple symbol fields to lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from .composite import (Composite, DeliveryState, LifetimePolicy, Outcome, Performative, SaslFrame,
                        Section, new, register, slot_setters)
from .decoding import (Buffer, composite_list, field_any, field_binary, field_boolean, field_list,
                       field_fields, field_map, field_string, field_symbol, field_symbols, field_timestamp,
                       field_ubyte, field_uint, field_ulong, field_ushort, list_mismatch, mandatory,
                       skip_values, unpack_uint, wrong_value)
from .encoding import (NULL, composite_bytes, enc_binary, enc_boolean, enc_fields, enc_list, enc_map,
                       enc_string, enc_symbol, enc_symbols, enc_timestamp, enc_ubyte, enc_uint, enc_ulong,
                       enc_ushort, encode)
from .values import DecodeError, Symbol
'''


def generate(specs: Path) -> str:
    types, definitions = load(specs)
    lines = HEADER.rstrip("\n").split("\n")
    lines += ["", "", "# -- constants (the spec's <definition>s) --", ""]
    for name, value in definitions:
        lines.append(f"{snake(name).upper()}: Final = {int(value)}")
    lines += ["", "#: every primitive encoding (types.xml): code -> (type, encoding name, category, width)",
              "ENCODINGS: Final[dict[int, tuple[str, str, str, int]]] = {"]
    for td in types.values():
        for code, name, category, width in td.encodings:
            lines.append(f"    0x{code:02x}: ({td.name!r}, {name!r}, {category!r}, {width}),")
    lines.append("}")
    for td in types.values():
        if td.klass == "restricted" and td.choices:
            lines += emit_constants(td, types)
    described = [td for td in types.values() if td.code is not None]
    for td in described:
        lines += emit_class(td, types)
    for td in described:
        lines += emit_decoder(td, types)
        lines += emit_encoder(td, types)
    lines += ["", "", "#: every composite and described type, in spec order",
              "DESCRIBED_TYPES: Final[tuple[type[Composite], ...]] = ("]
    lines += [f"    {camel(td.name)}," for td in described]
    lines += [")", ""]
    names = ([snake(n).upper() for n, _ in definitions] + ["ENCODINGS", "DESCRIBED_TYPES"]
             + [constant_class(td) for td in types.values() if td.klass == "restricted" and td.choices]
             + [camel(td.name) for td in described])
    lines.append("__all__ = [")
    lines += [f"    {n!r}," for n in names]
    lines += ["]", ""]
    for td in described:
        if td.klass == "composite" and td.fields:
            lines.append(f"_SET_{snake(td.name).upper()} = slot_setters({camel(td.name)})")
    lines.append("")
    for td in described:
        lines.append(f"register({camel(td.name)}, _decode_{snake(td.name)}, _encode_{snake(td.name)})")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specs", type=Path, default=ROOT / "specs" / "amqp-1.0")
    ap.add_argument("--out", type=Path, default=ROOT / "broker" / "protocol" / "amqp1_0" / "definitions.py")
    args = ap.parse_args()
    args.out.write_text(generate(args.specs))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
