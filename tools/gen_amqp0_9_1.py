#!/usr/bin/env python3
"""Generate ``broker/protocol/amqp0_9_1/methods.py`` from the AMQP specs.

One engine serves 0-8, 0-9 and 0-9-1 (as Broker-J does).  Each method is one
slotted dataclass whose fields carry the 0-9-1 names; a method that exists in
an older version with the same wire types in the same positions (perhaps
fewer trailing ones, perhaps other names) shares the class.  Per version the
generator emits the (class-id, method-id) of every method and straight-line
decoder/encoder functions for its own argument list.

Sources (all in specs/, copied from the AMQP specification files):
  0-8    amqp0-8-qpid.stripped.xml   (stock 0-8 plus Qpid's additions)
  0-9    amqp0-9-qpid.stripped.xml
  0-9-1  amqp-rabbitmq-0.9.1.json    (RabbitMQ's extensions: confirm, nack,
         exchange.bind/unbind, connection.blocked) plus exchange.bound from
         amqp0-9-1.stripped.xml (Qpid's JMS client uses it)

Usage: python tools/gen_amqp0_9_1.py [--specs DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import keyword
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIPPED_CLASSES = {"file", "stream", "tunnel", "test", "dtx", "message"}
VERSIONS = ("0-8", "0-9", "0-9-1")


@dataclass
class MethodDef:
    cls: str
    name: str
    class_id: int
    method_id: int
    fields: list[tuple[str, str]]          # (spec name, wire type)
    synchronous: bool = False
    content: bool = False
    responses: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.cls}.{self.name}"

    @property
    def wire_types(self) -> list[str]:
        return [t for _, t in self.fields]


def _resolve(domains: dict[str, str], ty: str) -> str:
    # The 0-9 XML names a domain "queue-name" but one field refers to it as
    # "queue name": compare domain names with spaces and hyphens unified.
    domains = {k.replace(" ", "-"): v for k, v in domains.items()}
    ty = ty.replace(" ", "-")
    seen = set()
    while ty in domains and domains[ty] != ty and ty not in seen:
        seen.add(ty)
        ty = domains[ty]
    return ty


def load_xml(path: Path) -> dict[str, MethodDef]:
    root = ET.parse(path).getroot()
    domains = {d.get("name", ""): d.get("type", "") for d in root.iter("domain")}
    methods: dict[str, MethodDef] = {}
    for c in root.iter("class"):
        cname = c.get("name", "")
        if cname in SKIPPED_CLASSES:
            continue
        for m in c.findall("method"):
            fields = []
            for f in m.findall("field"):
                ty = f.get("type") or f.get("domain") or ""
                fields.append((f.get("name", ""), _resolve(domains, ty)))
            md = MethodDef(
                cname, m.get("name", ""), int(c.get("index", "0")), int(m.get("index", "0")), fields,
                synchronous=m.get("synchronous") == "1", content=m.get("content") == "1",
                responses=[r.get("name", "") for r in m.findall("response")],
            )
            methods[md.key] = md
    return methods


def load_json(path: Path) -> dict[str, MethodDef]:
    spec = json.loads(path.read_text())
    domains = {name: ty for name, ty in spec["domains"]}
    methods: dict[str, MethodDef] = {}
    for c in spec["classes"]:
        for m in c["methods"]:
            fields = [(a["name"], _resolve(domains, a.get("type") or a.get("domain", "")))
                      for a in m["arguments"]]
            md = MethodDef(c["name"], m["name"], c["id"], m["id"], fields,
                           synchronous=bool(m.get("synchronous")), content=bool(m.get("content")))
            methods[md.key] = md
    return methods


def load_versions(specs: Path) -> dict[str, dict[str, MethodDef]]:
    v091 = load_json(specs / "amqp-rabbitmq-0.9.1.json")
    qpid091 = load_xml(specs / "amqp0-9-1.stripped.xml")
    taken = {(m.class_id, m.method_id) for m in v091.values()}
    for key in ("exchange.bound", "exchange.bound-ok"):
        m = qpid091[key]
        if (m.class_id, m.method_id) not in taken:
            v091[key] = m
    return {
        "0-8": load_xml(specs / "amqp0-8-qpid.stripped.xml"),
        "0-9": load_xml(specs / "amqp0-9-qpid.stripped.xml"),
        "0-9-1": v091,
    }


# -- naming -----------------------------------------------------------------

def class_name(key: str, suffix: str = "") -> str:
    cls, meth = key.split(".")
    return "".join(p.capitalize() for p in f"{cls}-{meth}".split("-")) + suffix


def field_name(spec_name: str) -> str:
    name = spec_name.replace("-", "_").replace(" ", "_")
    return name + "_" if keyword.iskeyword(name) else name


PY_TYPES = {
    "octet": "int", "short": "int", "long": "int", "longlong": "int", "timestamp": "int",
    "bit": "bool", "shortstr": "str", "longstr": "bytes", "table": "dict[str, Any]",
}
DEFAULTS = {
    "octet": "0", "short": "0", "long": "0", "longlong": "0", "timestamp": "0",
    "bit": "False", "shortstr": "''", "longstr": "b''", "table": "field(default_factory=dict)",
}
STRUCT = {"octet": "B", "short": "H", "long": "I", "longlong": "Q", "timestamp": "Q"}
SIZES = {"B": 1, "H": 2, "I": 4, "Q": 8}


# -- shared classes ---------------------------------------------------------

@dataclass
class ClassPlan:
    name: str
    key: str
    fields: list[tuple[str, str]]          # (python name, wire type), the widest list
    synchronous: bool
    content: bool
    responses: set[str]


def plan_classes(versions: dict[str, dict[str, MethodDef]]) -> tuple[dict[str, ClassPlan], dict[tuple[str, str], ClassPlan]]:
    """Decide which class each (version, method) uses."""
    plans: dict[str, ClassPlan] = {}
    use: dict[tuple[str, str], ClassPlan] = {}
    # 0-9-1 first: its names are the canonical ones.
    for ver in ("0-9-1", "0-9", "0-8"):
        for key, m in versions[ver].items():
            types = m.wire_types
            chosen = None
            for suffix in ("", "_0_9", "_0_8"):
                plan = plans.get(class_name(key, suffix))
                if plan is None:
                    continue
                ptypes = [t for _, t in plan.fields]
                if ptypes[: len(types)] == types or types[: len(ptypes)] == ptypes:
                    chosen = plan
                    break
            if chosen is None:
                suffix = "" if class_name(key) not in plans else "_" + ver.replace("-", "_")
                chosen = ClassPlan(class_name(key, suffix), key,
                                   [(field_name(n), t) for n, t in m.fields],
                                   m.synchronous, m.content, set())
                plans[chosen.name] = chosen
            elif len(types) > len(chosen.fields):
                chosen.fields += [(field_name(n), t) for n, t in m.fields[len(chosen.fields):]]
            chosen.synchronous = chosen.synchronous or m.synchronous
            chosen.content = chosen.content or m.content
            use[(ver, key)] = chosen
    return plans, use


# -- code emission ----------------------------------------------------------

def emit_class(plan: ClassPlan) -> list[str]:
    out = ["", "", "@dataclass(frozen=True, slots=True)", f"class {plan.name}(Method):"]
    out.append(f"    NAME: ClassVar[str] = {plan.key!r}")
    out.append(f"    SYNCHRONOUS: ClassVar[bool] = {plan.synchronous}")
    out.append(f"    CONTENT: ClassVar[bool] = {plan.content}")
    for name, ty in plan.fields:
        out.append(f"    {name}: {PY_TYPES[ty]} = {DEFAULTS[ty]}")
    return out


def emit_decoder(fn: str, plan: ClassPlan, m: MethodDef, optional_tail: bool = False) -> list[str]:
    names = [f for f, _ in plan.fields[: len(m.fields)]]
    out = ["", "", f"def {fn}(b: bytes, o: int) -> {plan.name}:"]
    if not m.fields:
        out.append(f"    return {plan.name}()")
        return out
    bit_index = 0
    for name, (_, ty) in zip(names, m.fields):
        if ty != "bit" and bit_index:
            out.append("    o += 1")
            bit_index = 0
        if ty == "bit":
            out.append(f"    {name} = bool(b[o] & {1 << bit_index})")
            bit_index += 1
            if bit_index == 8:
                out.append("    o += 1")
                bit_index = 0
        elif ty in STRUCT:
            code = STRUCT[ty]
            out.append(f"    {name} = unpack_from('>{code}', b, o)[0]")
            out.append(f"    o += {SIZES[code]}")
        elif ty == "shortstr":
            out.append(f"    {name}, o = decode_shortstr(b, o)")
        elif ty == "longstr":
            out.append(f"    {name}, o = decode_longstr(b, o)")
        elif ty == "table" and optional_tail and name == names[-1]:
            # Stock 0-8 has no trailing table where Qpid's 0-8 does: accept both.
            out.append(f"    {name}, o = decode_table(b, o) if o < len(b) else ({{}}, o)")
        elif ty == "table":
            out.append(f"    {name}, o = decode_table(b, o)")
        else:
            raise ValueError(f"unknown type {ty}")
    if bit_index:
        out.append("    o += 1")
    out.append("    if o > len(b):")
    out.append(f"        raise ValueError('{m.key}: arguments run past the end of the frame')")
    out.append(f"    return {plan.name}({', '.join(names)})")
    return out


def emit_encoder(fn: str, plan: ClassPlan, m: MethodDef) -> list[str]:
    names = [f for f, _ in plan.fields[: len(m.fields)]]
    out = ["", "", f"def {fn}(m: {plan.name}) -> bytes:",
           f"    parts: list[bytes] = [{(m.class_id << 16 | m.method_id).to_bytes(4, 'big')!r}]"]
    bits: list[str] = []

    def flush_bits() -> None:
        if bits:
            expr = " | ".join(f"({b} << {i})" for i, b in enumerate(bits))
            out.append(f"    parts.append(bytes(({expr},)))")
            bits.clear()

    for name, (_, ty) in zip(names, m.fields):
        if ty == "bit":
            bits.append(f"int(m.{name})")
            if len(bits) == 8:
                flush_bits()
            continue
        flush_bits()
        if ty in STRUCT:
            out.append(f"    parts.append(pack('>{STRUCT[ty]}', m.{name}))")
        elif ty == "shortstr":
            out.append(f"    parts.append(encode_shortstr(m.{name}))")
        elif ty == "longstr":
            out.append(f"    parts.append(encode_longstr(m.{name}))")
        elif ty == "table":
            out.append(f"    parts.append(encode_table(m.{name}))")
    flush_bits()
    out.append("    return b''.join(parts)")
    return out


def generate(specs: Path) -> str:
    versions = load_versions(specs)
    plans, use = plan_classes(versions)
    lines = [
        "# Generated by tools/gen_amqp0_9_1.py from specs/ — do not edit.",
        "# The AMQP specifications it reads are (c) their authors; see their notices.",
        '"""AMQP 0-8 / 0-9 / 0-9-1 method classes and per-version codec tables."""',
        "",
        "from __future__ import annotations",
        "",
        "from dataclasses import dataclass, field",
        "from struct import pack, unpack_from",
        "from typing import Any, Callable, ClassVar",
        "",
        "from .codec import (decode_longstr, decode_shortstr, decode_table, encode_longstr,",
        "                    encode_shortstr, encode_table)",
        "",
        "",
        "class Method:",
        '    """Base of every method class (no behaviour: frames are plain data)."""',
        "",
        "    __slots__ = ()",
        "    NAME: ClassVar[str]",
        "    SYNCHRONOUS: ClassVar[bool]",
        "    CONTENT: ClassVar[bool]",
    ]
    for plan in sorted(plans.values(), key=lambda p: p.name):
        lines += emit_class(plan)
    tables: dict[str, tuple[list[str], list[str], list[str]]] = {}
    for ver in VERSIONS:
        tag = ver.replace("-", "_")
        dec_rows, enc_rows, id_rows = [], [], []
        for key, m in sorted(versions[ver].items(), key=lambda kv: (kv[1].class_id, kv[1].method_id)):
            plan = use[(ver, key)]
            slug = key.replace(".", "_").replace("-", "_")
            dfn, efn = f"_d{tag}_{slug}", f"_e{tag}_{slug}"
            lines += emit_decoder(dfn, plan, m, optional_tail=ver != "0-9-1")
            lines += emit_encoder(efn, plan, m)
            dec_rows.append(f"    {m.class_id << 16 | m.method_id}: {dfn},  # {key}")
            enc_rows.append(f"    {plan.name}: {efn},")
            id_rows.append(f"    {plan.name}: ({m.class_id}, {m.method_id}),")
        tables[tag] = (dec_rows, enc_rows, id_rows)
    for tag, (dec_rows, enc_rows, id_rows) in tables.items():
        lines += ["", "", f"DECODERS_{tag}: dict[int, Callable[[bytes, int], Method]] = {{", *dec_rows, "}"]
        lines += ["", f"ENCODERS_{tag}: dict[type[Method], Callable[[Any], bytes]] = {{", *enc_rows, "}"]
        lines += ["", f"IDS_{tag}: dict[type[Method], tuple[int, int]] = {{", *id_rows, "}"]
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specs", type=Path, default=ROOT / "specs")
    ap.add_argument("--out", type=Path, default=ROOT / "broker" / "protocol" / "amqp0_9_1" / "methods.py")
    args = ap.parse_args()
    args.out.write_text(generate(args.specs))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
