#!/usr/bin/env python3
"""docs/device-protocol.md against the code: every row of its constants table, and its close codes.

    python3 tests/device/protocol_doc_test.py REPO_ROOT [DOC]

DOC defaults to REPO_ROOT/docs/device-protocol.md (pass a scratch copy to see the test fail);
the files the table names are read from REPO_ROOT either way. Python 3 standard library only.

1. The table that follows the line
       <!-- constants: the test tests/device/protocol_doc_test.py checks each against the code -->
   has the columns `| constant | value | code |`; it must have at least one row. `code` is
   `<file> <reference>`, the file relative to REPO_ROOT. The reference is one of:
   - a C++ identifier: its definition in the file (`kName = expr;`, an enum member `kName = 4001,`,
     a member `Millis heartbeat{30000};`), found outside comments, exactly one distinct value.
     The expression may hold integers, decimals, string literals, + - * / and parentheses,
     durations (`std::chrono::seconds(5)`, `Millis{200}`, ...) and other constants of the same
     file. A duration, or a number declared with a duration type, is compared in the unit the
     constant's name ends with (`... ms` or `... s`): "upgrade timeout ms | 5000" for
     `std::chrono::seconds(5)`.
   - `close_code::<name>` (Boost.Beast's names of RFC 6455 close codes) or `status::<name>` (an
     HTTP status): the file must use it, and the value must be that name's number.
   - an integer or a "double-quoted string": a literal the file must contain (outside comments;
     integers outside string literals), equal to the value. This only shows that the literal is
     there, not what it is used for: prefer named constants.
   A value may be written in backticks.
2. Every close code the agent's device endpoint can send (the CloseCode enum of
   agent/src/devices/device_endpoint_core.hpp, the first argument of every closeWith / redirectInBand
   call, `close_code::` names in agent/src/devices/device_*) and every close code the reference client
   sends (`close_code::` names in device/src/client.cpp) must appear in the document's section
   whose heading says "Close codes".
"""
import os
import re
import sys

MARKER = ("<!-- constants: the test tests/device/protocol_doc_test.py checks each against the "
          "code -->")

# RFC 6455 section 7.4.1, under Boost.Beast's names (boost/beast/websocket/rfc6455.hpp).
CLOSE_CODES = {
    "normal": 1000, "going_away": 1001, "protocol_error": 1002, "unknown_data": 1003,
    "bad_payload": 1007, "policy_error": 1008, "too_big": 1009, "needs_extension": 1010,
    "internal_error": 1011, "service_restart": 1012, "try_again_later": 1013,
}
# The HTTP statuses the device protocol uses, under Boost.Beast's names (http::status).
HTTP_STATUSES = {
    "switching_protocols": 101, "moved_permanently": 301, "found": 302,
    "temporary_redirect": 307, "permanent_redirect": 308, "bad_request": 400,
    "unauthorized": 401, "forbidden": 403, "not_found": 404, "upgrade_required": 426,
    "service_unavailable": 503,
}
# Duration types, by the unit they count in (values are kept in ms).
DURATIONS = {
    "std::chrono::milliseconds": 1, "chrono::milliseconds": 1, "milliseconds": 1, "Millis": 1,
    "std::chrono::seconds": 1000, "chrono::seconds": 1000, "seconds": 1000, "Seconds": 1000,
    "std::chrono::minutes": 60000, "chrono::minutes": 60000, "minutes": 60000,
}
NAME_UNITS = {"ms": 1, "s": 1000}


class Failure(Exception):
    pass


# --- C++ source, read just well enough -----------------------------------------------------


def strip_comments(text, blank_strings=False):
    """The text without // and /* */ comments (string and character literals are respected, raw
    strings included); with blank_strings the contents of string literals become spaces too.
    Offsets are kept: removed characters become spaces, newlines stay."""
    out = []
    i, n = 0, len(text)

    def blank(s):
        return "".join(c if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(blank(text[i:end]))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(blank(text[i:end]))
            i = end
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or
                                                                       text[i - 1] == "_")):
            open_paren = text.find("(", i + 2)
            delimiter = text[i + 2:open_paren]
            close = text.find(")" + delimiter + '"', open_paren)
            end = n if close < 0 else close + len(delimiter) + 2
            body = text[i:end]
            out.append('R"' + blank(body[2:-1]) + '"' if blank_strings else body)
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            body = text[i:j + 1]
            out.append('"' + blank(body[1:-1]) + '"' if blank_strings else body)
            i = j + 1
        elif c == "'":
            if i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(c)  # a digit separator: 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


TOKEN = re.compile(r"""
    \s*(?:
      (?P<number>0[xX][0-9a-fA-F']+[uUlLzZ]*|(?:\d[\d']*)?\.?\d[\d']*(?:[eE][+-]?\d+)?[uUlLzZfF]*)
    | (?P<string>"(?:[^"\\]|\\.)*")
    | (?P<name>(?:::)?[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)
    | (?P<op>[-+*/(){}<>,])
    )""", re.VERBOSE)


class Value:
    """A number (with ms as its unit when it is a duration) or a string."""

    def __init__(self, number=None, ms=False, string=None):
        self.number, self.ms, self.string = number, ms, string

    def __repr__(self):
        if self.string is not None:
            return repr(self.string)
        return f"{self.number:g} ms" if self.ms else f"{self.number:g}"


class Evaluator:
    def __init__(self, path, text, depth=0):
        self.path, self.text, self.depth = path, text, depth

    def tokens(self, expr):
        out, pos = [], 0
        expr = expr.strip()
        while pos < len(expr):
            m = TOKEN.match(expr, pos)
            if not m or m.end() == pos:
                raise Failure(f"cannot read '{expr[pos:pos + 20]}' in '{expr}'")
            pos = m.end()
            kind = m.lastgroup
            out.append((kind, m.group(kind)))
        return out

    def evaluate(self, expr, declared_type=""):
        self.toks = self.tokens(expr)
        self.pos = 0
        value = self.sum()
        if self.pos != len(self.toks):
            raise Failure(f"cannot evaluate '{expr}'")
        scale = DURATIONS.get(declared_type)
        if scale and value.string is None and not value.ms:
            value = Value(value.number * scale, ms=True)
        return value

    def peek(self):
        return self.toks[self.pos] if self.pos < len(self.toks) else (None, None)

    def take(self, op=None):
        kind, tok = self.peek()
        if op is not None and tok != op:
            raise Failure(f"expected '{op}', found '{tok}'")
        self.pos += 1
        return kind, tok

    def sum(self):
        value = self.product()
        while self.peek()[1] in ("+", "-"):
            op = self.take()[1]
            rhs = self.product()
            if value.string is not None or rhs.string is not None or value.ms != rhs.ms:
                raise Failure("cannot add a duration and a number, or strings")
            value = Value(value.number + rhs.number if op == "+" else value.number - rhs.number,
                          value.ms)
        return value

    def product(self):
        value = self.unary()
        while self.peek()[1] in ("*", "/"):
            op = self.take()[1]
            rhs = self.unary()
            if value.string is not None or rhs.string is not None or (value.ms and rhs.ms):
                raise Failure("cannot multiply these")
            if op == "*":
                number = value.number * rhs.number
            elif isinstance(value.number, int) and isinstance(rhs.number, int) and not rhs.ms:
                number = value.number // rhs.number
            else:
                number = value.number / rhs.number
            value = Value(number, value.ms or rhs.ms)
        return value

    def unary(self):
        if self.peek()[1] == "-":
            self.take()
            value = self.unary()
            return Value(-value.number, value.ms)
        return self.primary()

    def primary(self):
        kind, tok = self.take()
        if kind == "number":
            digits = tok.replace("'", "").rstrip("uUlLzZfF")
            if digits.lower().startswith("0x"):
                return Value(int(digits, 16))
            return Value(float(digits) if any(c in digits for c in ".eE") else int(digits))
        if kind == "string":
            return Value(string=bytes(tok[1:-1], "utf-8").decode("unicode_escape"))
        if tok == "(":
            value = self.sum()
            self.take(")")
            return value
        if kind == "name":
            name = tok.lstrip(":")
            following = self.peek()[1]
            if following in ("(", "{"):
                closing = ")" if following == "(" else "}"
                self.take()
                value = self.sum()
                self.take(closing)
                if name in DURATIONS:
                    if value.string is not None or value.ms:
                        raise Failure(f"{name} of a duration or string")
                    return Value(value.number * DURATIONS[name], ms=True)
                if name in ("size_t", "std::size_t", "int", "unsigned", "uint16_t",
                            "std::uint16_t", "uint64_t", "std::uint64_t", "int64_t"):
                    return value
                raise Failure(f"cannot evaluate a call of {name}")
            if self.depth > 5:
                raise Failure(f"{name}: constants refer to each other too deeply")
            return definition(self.path, self.text, name.split("::")[-1], self.depth + 1)
        raise Failure(f"unexpected '{tok}'")


def expression_after(text, start, closing):
    """The text from `start` up to the `closing` bracket that matches (closing '}' for a brace
    initializer) or, for closing None, up to the first ';' or ',' or unmatched bracket."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            if depth == 0:
                if closing is None or c == closing:
                    return text[start:i]
                raise Failure("unbalanced brackets")
            depth -= 1
        elif depth == 0 and closing is None and c in ";,":
            return text[start:i]
        i += 1
    raise Failure("definition runs off the end of the file")


def definition(path, text, name, depth=0):
    """The one value `name` is defined with in `text` (comments already stripped)."""
    pattern = re.compile(r"(?<![\w.>])" + re.escape(name) + r"\s*(=(?!=)|\{)")
    values = []
    for m in pattern.finditer(text):
        before = text[:m.start()]
        if before.rstrip().endswith("->"):
            continue
        declared = re.search(r"([A-Za-z_][\w:]*)\s*$", before)
        declared_type = declared.group(1) if declared else ""
        if m.group(1) == "{" and declared_type in ("struct", "class", "enum", "namespace",
                                                   "return", ""):
            continue  # not a brace-initialized definition
        closing = "}" if m.group(1) == "{" else None
        expr = expression_after(text, m.end(), closing)
        try:
            values.append(Evaluator(path, text, depth).evaluate(expr, declared_type))
        except Failure as error:
            raise Failure(f"{name} = {expr.strip()}: {error}")
    if not values:
        raise Failure(f"no definition of {name} in {path}")
    distinct = {repr(v) for v in values}
    if len(distinct) > 1:
        raise Failure(f"{name} is defined more than once in {path} with different values "
                      f"({', '.join(sorted(distinct))})")
    return values[0]


# --- the document ---------------------------------------------------------------------------


def table_rows(doc):
    lines = doc.splitlines()
    try:
        at = next(i for i, line in enumerate(lines) if line.strip() == MARKER)
    except StopIteration:
        raise Failure(f"the constants table marker is missing; it must be the line\n  {MARKER}")
    rows = [line for line in lines[at + 1:]]
    table = []
    for line in rows:
        if not line.strip().startswith("|"):
            break
        table.append(line)
    if len(table) < 2:
        raise Failure("no table right after the constants marker")
    header = [c.strip() for c in table[0].strip().strip("|").split("|")]
    if header != ["constant", "value", "code"]:
        raise Failure(f"the constants table's header must be | constant | value | code |, "
                      f"not {table[0].strip()}")
    parsed = []
    for line in table[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not all(cells):
            raise Failure(f"a row of the constants table is not | constant | value | code |: "
                          f"{line.strip()}")
        parsed.append(cells)
    if not parsed:
        raise Failure("the constants table has no rows")
    return parsed


def section(doc, heading_words):
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(#+)\s+(.*)$", line)
        if m and heading_words.lower() in m.group(2).lower():
            level = len(m.group(1))
            body = []
            for later in lines[i + 1:]:
                n = re.match(r"^(#+)\s", later)
                if n and len(n.group(1)) <= level:
                    break
                body.append(later)
            return "\n".join(body)
    raise Failure(f"no section whose heading says '{heading_words}'")


# --- the checks -----------------------------------------------------------------------------


def read(root, relative):
    path = os.path.join(root, relative)
    if not os.path.isfile(path):
        raise Failure(f"{relative}: no such file")
    with open(path, encoding="utf-8") as f:
        return f.read()


def code_value(root, code):
    """The value the `code` cell points at."""
    parts = code.strip("`").split(None, 1)
    if len(parts) != 2:
        raise Failure("the code column must be '<file> <identifier>'")
    relative, ref = parts[0], parts[1].strip().strip("`")
    text = strip_comments(read(root, relative))
    m = re.fullmatch(r"(?:(?:boost::)?(?:beast::)?websocket::)?close_code::(\w+)", ref)
    if m:
        if m.group(1) not in CLOSE_CODES:
            raise Failure(f"close_code::{m.group(1)} is not a close code this test knows")
        if not re.search(r"close_code::" + m.group(1) + r"\b", text):
            raise Failure(f"{relative} does not use close_code::{m.group(1)}")
        return Value(CLOSE_CODES[m.group(1)])
    m = re.fullmatch(r"(?:\w+::)*status::(\w+)", ref)
    if m:
        if m.group(1) not in HTTP_STATUSES:
            raise Failure(f"status::{m.group(1)} is not a status this test knows")
        if not re.search(r"status::" + m.group(1) + r"\b", text):
            raise Failure(f"{relative} does not use status::{m.group(1)}")
        return Value(HTTP_STATUSES[m.group(1)])
    if re.fullmatch(r"\d+", ref):
        code_only = strip_comments(read(root, relative), blank_strings=True)
        if not re.search(r"(?<![\w.'])" + ref + r"(?![\w.'])", code_only):
            raise Failure(f"{relative} has no literal {ref} outside comments and strings")
        return Value(int(ref))
    if re.fullmatch(r'"[^"]*"', ref):
        if ref not in text:
            raise Failure(f"{relative} has no string literal {ref} outside comments")
        return Value(string=ref[1:-1])
    if re.fullmatch(r"[A-Za-z_]\w*", ref):
        return definition(relative, text, ref)
    raise Failure(f"cannot read the reference '{ref}' (an identifier, close_code::name, "
                  f"status::name, an integer or a \"string\")")


def check_row(root, name, value, code):
    actual = code_value(root, code)
    value = value.strip("`")
    if actual.string is not None:
        if value != actual.string:
            raise Failure(f"the document says {value!r}, the code says {actual.string!r}")
        return actual
    unit_word = name.split()[-1]
    number = actual.number
    if actual.ms:
        if unit_word not in NAME_UNITS:
            raise Failure(f"the code holds a duration ({actual!r}): end the constant's name "
                          f"with its unit, 'ms' or 's'")
        number = number / NAME_UNITS[unit_word]
    try:
        stated = float(value)
    except ValueError:
        raise Failure(f"the document's value {value!r} is not a number, the code says {actual!r}")
    if abs(stated - number) > 1e-9 * max(1.0, abs(number)):
        shown = f"{number:g}" + (f" {unit_word}" if actual.ms else "")
        raise Failure(f"the document says {value}, the code says {shown} ({actual!r})")
    return actual


def sent_close_codes(root):
    """{code: where} for every close code the agent's device endpoint or the client can send."""
    codes = {}
    core_path = "agent/src/devices/device_endpoint_core.hpp"
    core = strip_comments(read(root, core_path))
    enum = re.search(r"enum\s+CloseCode\b[^{]*\{(.*?)\};", core, re.S)
    if not enum:
        raise Failure(f"{core_path}: no enum CloseCode")
    members = {}
    for m in re.finditer(r"([A-Za-z_]\w*)\s*=\s*([^,]+)", enum.group(1)):
        members[m.group(1)] = int(Evaluator(core_path, core).evaluate(m.group(2)).number)
    for member, number in members.items():
        codes.setdefault(number, f"{core_path} {member}")

    agent_dir = os.path.join(root, "agent", "src", "devices")
    sources = sorted(f for f in os.listdir(agent_dir)
                     if f.startswith("device_") and f.endswith((".cpp", ".hpp")))
    texts = {f"agent/src/devices/{f}": strip_comments(read(root, f"agent/src/devices/{f}"))
             for f in sources}
    for path, text in texts.items():
        for m in re.finditer(r"\b(closeWith|redirectInBand)\s*\(", text):
            try:
                first = expression_after(text, m.end(), None)
            except Failure:
                continue
            for number in re.findall(r"(?<![\w.])(\d{4})(?![\w.])", first):
                codes.setdefault(int(number), f"{path} {m.group(1)}({number}, ...)")
            for ident in re.findall(r"\b(k[A-Z]\w*)\b", first):
                if ident in members:
                    continue
                found = None
                for other_path, other in texts.items():
                    try:
                        found = definition(other_path, other, ident)
                        break
                    except Failure:
                        continue
                if found is None or found.string is not None:
                    raise Failure(f"{path}: the close code {ident} is neither in enum CloseCode "
                                  f"nor defined in agent/src/devices/device_*")
                codes.setdefault(int(found.number), f"{path} {ident}")
        for name in re.findall(r"close_code::(\w+)", text):
            if name in CLOSE_CODES:
                codes.setdefault(CLOSE_CODES[name], f"{path} close_code::{name}")
    client_path = "device/src/client.cpp"
    for name in re.findall(r"close_code::(\w+)", strip_comments(read(root, client_path))):
        if name in CLOSE_CODES:
            codes.setdefault(CLOSE_CODES[name], f"{client_path} close_code::{name}")
    if not codes:
        raise Failure("found no close code in the code at all: this test's search is broken")
    return codes


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = os.path.abspath(argv[1])
    doc_path = argv[2] if len(argv) == 3 else os.path.join(root, "docs", "device-protocol.md")
    failures = []
    try:
        with open(doc_path, encoding="utf-8") as f:
            doc = f.read()
        rows = table_rows(doc)
    except (OSError, Failure) as error:
        print(f"FAIL: {doc_path}: {error}")
        return 1

    for name, value, code in rows:
        try:
            actual = check_row(root, name, value, code)
            print(f"ok    {name} = {value}  ({code}: {actual!r})")
        except Failure as error:
            failures.append(f"row '| {name} | {value} | {code} |': {error}")
            print(f"FAIL  {name} = {value}  ({code}): {error}")

    try:
        codes = sent_close_codes(root)
        close_section = section(doc, "Close codes")
        documented = {int(n) for n in re.findall(r"(?<![\w.])(\d{4})(?![\w.])", close_section)}
        for number in sorted(codes):
            if number in documented:
                print(f"ok    close code {number} ({codes[number]}) is in the Close codes section")
            else:
                failures.append(f"close code {number} ({codes[number]}) is sent but not in the "
                                f"document's Close codes section")
                print(f"FAIL  close code {number} ({codes[number]}) is not in the Close codes "
                      f"section")
    except Failure as error:
        failures.append(str(error))
        print(f"FAIL  {error}")

    if failures:
        print(f"\n{len(failures)} problem(s) in {doc_path}:")
        for failure in failures:
            print(f"  - {failure}")
        return 1
    print(f"\nPASS: {len(rows)} constants and {len(codes)} close codes agree with the code")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
