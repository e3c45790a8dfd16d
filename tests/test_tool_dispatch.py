"""Tool dispatch (tools.md): every call's arguments checked against its tool's input schema
before anything is sent.

The unit tests call memprove_mcp.validate directly, their expected values written out by hand
from tools.md's argument rules (lenient integers, ranges, lengths, patterns, unknown and
missing keys, hints that never repeat the value).  The fuzzer draws arguments for each of the
ten tools from its inputSchema as tools/list gives it (valid, at a boundary or invalid, plus
unknown and missing keys) and runs them through the built .pyz against the reference daemon
with a real Task: every call ends in a result or a Problem (never a JSON-RPC error, never
internal_error); a successful result satisfies the outputSchema; an invalid one is
`invalid_params`, sends no daemon request and writes no file, and its planted values appear on
neither output stream.  Texts include lone surrogates (contract.md §6 rule 2), and before a
call the context file may carry an unknown key holding some: context.json stays ASCII JSON and
keeps the key.  A run label over 20 characters is invalid (§6 rule 7).
"""

import re
import uuid
from collections import Counter

import pytest

from hardening_support import FUZZ_EXAMPLES, SETTINGS, call_tool, hypothesis_or_fail, report
from harness import EXPECTED_TOOLS, PLANTED, PROBLEM_CODES, raises_problem, schema_errors, snapshot
import memprove_mcp as mp

hypothesis_or_fail()
from hypothesis import given, settings, strategies as st  # noqa: E402


UUID_TEXT = "0b9d6c1e-7c1e-4e2f-a911-5d0c3f4e2f41"


def fold(text):
    return " ".join(text.split())


def ecma_search(pattern, value):
    if pattern.endswith("$"):
        pattern = pattern[:-1] + r"\Z"
    return re.search(pattern, value) is not None


def as_number(value):
    """tools.md: an integer, an integral JSON number, or a string of decimal digits;
    None when it is none of them, "open" for a digit string past the 4,300 digits
    Python 3.11+ converts (the server refuses it, earlier interpreters take it)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and value and all("0" <= c <= "9" for c in value):
        return int(value) if len(value) <= 4300 else "open"
    return None


def input_errors(schema, value, where="$"):
    """Where `value` breaks an input schema, tools.md's lenient integers included;
    "open" entries mark corners the spec does not settle."""
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "integer" in kinds:
        number = as_number(value)
        if number == "open":
            return ["open"]
        if number is None:
            return ["%s: not a number" % where]
        if number < schema.get("minimum", number) or number > schema.get("maximum", number):
            return ["%s: out of range" % where]
        return []
    if "string" in kinds:
        if not isinstance(value, str):
            return ["%s: not a string" % where]
        errors = []
        if len(value) > schema.get("maxLength", len(value)) or len(value) < schema.get("minLength", 0):
            errors.append("%s: length" % where)
        if "pattern" in schema and not ecma_search(schema["pattern"], value):
            errors.append("%s: pattern" % where)
        if "enum" in schema and value not in schema["enum"]:
            errors.append("%s: enum" % where)
        return errors
    if "boolean" in kinds:
        return [] if isinstance(value, bool) else ["%s: not a boolean" % where]
    if "array" in kinds:
        if not isinstance(value, list):
            return ["%s: not a list" % where]
        errors = []
        if len(value) > schema.get("maxItems", len(value)) or len(value) < schema.get("minItems", 0):
            errors.append("%s: items" % where)
        for index, item in enumerate(value):
            errors += input_errors(schema["items"], item, "%s[%d]" % (where, index))
        return errors
    if "object" in kinds:
        if not isinstance(value, dict):
            return ["%s: not an object" % where]
        errors = []
        properties = schema.get("properties", {})
        for key in value:
            if key not in properties:
                errors.append("%s.%s: unknown" % (where, key))
        for key in schema.get("required", []):
            if key not in value:
                errors.append("%s.%s: missing" % (where, key))
        for key, item in value.items():
            if key in properties:
                errors += input_errors(properties[key], item, "%s.%s" % (where, key))
        return errors
    raise AssertionError("a schema type the oracle does not know: %r" % kinds)


def classify(tool, schema, args):
    """'valid', 'invalid' or 'open' (a corner tools.md does not settle)."""
    errors = input_errors(schema, args)
    if any(error != "open" for error in errors):
        return "invalid"
    if errors:
        return "open"
    if tool == "begin":
        if "task" in args and "new_task" in args:
            return "invalid"
        if "new_task" in args and not fold(args["new_task"]):
            return "invalid"
        if len(fold(args.get("agent_name", ""))) > 64:
            return "invalid"
    if tool == "end" and "session" in args and "abandoned" in args:
        return "invalid"
    if tool == "decide" and not fold(args["decision"]):
        return "invalid"
    if tool == "checkpoint":
        if any(not fold(fact["text"]) for fact in args.get("facts", [])):
            return "invalid"
        items = [item for item in args.get("open_items", []) if fold(item)]
        if not (args.get("facts") or items or args.get("reaffirm") or args.get("withdraw")
                or fold(args.get("next_action", ""))):
            # A list of blank open items is "non-empty" by one reading only.
            return "open" if args.get("open_items") else "invalid"
    return "valid"


class Texts:
    """Free texts carry a fresh marker, planted when the call turns out invalid."""

    def __init__(self):
        self.markers = []

    def planted(self):
        marker = "PLANTED-ARG-%s" % uuid.uuid4().hex[:12]
        self.markers.append(marker)
        return marker

    def make(self, draw, max_length, min_length):
        shape = draw(st.sampled_from(["plain", "plain", "blank", "max", "over", "unicode", "empty",
                                      "surrogate"]))
        marker = "PLANTED-ARG-%s" % uuid.uuid4().hex[:12]
        if shape == "empty":
            return ""
        if shape == "blank":
            return draw(st.sampled_from([" ", "\t\n", "\u3000 \u2028"]))
        if shape == "max":
            self.markers.append(marker)
            return (marker + " " + "m" * max_length)[:max_length]
        if shape == "over":
            self.markers.append(marker)
            return (marker + " " + "o" * max_length)[:max_length + 1]
        if shape == "unicode":
            self.markers.append(marker)
            return marker + " \u00e9\u4e2d\U0001F600 \u2028x\x00"
        if shape == "surrogate":
            # JSON allows a lone surrogate: a client that cuts a string inside an emoji
            # sends one (contract.md §6 rule 2).  It is a valid text.
            self.markers.append(marker)
            return marker + draw(st.sampled_from([" \ud83d", " \ud800 x", " \udfff", "\udc00\ud800"]))
        self.markers.append(marker)
        return marker + " " + draw(st.text(max_size=20)).replace("\n", " ").replace("\r", " ")


WRONG_TYPES = [None, True, False, 0, -1, 1.5, "", "abc", [], {}, [1], {"a": 1}, UUID_TEXT]


def value_for(draw, schema, texts, labels, mode):
    """A value for one schema node; mode 'valid' stays valid (boundaries included),
    'invalid' breaks this node."""
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if mode == "invalid":
        if "integer" in kinds:
            low, high = schema.get("minimum", 1), schema.get("maximum")
            options = [low - 1, -5, 2.5, "1.0", " 3", "3 ", "three", UUID_TEXT, "-1", "0x10",
                       True, None, [], {}, 1e400 if False else float(low) + 0.5]
            if high is not None:
                options += [high + 1, str(high + 1)]
            return draw(st.sampled_from(options))
        if "string" in kinds:
            options = list(WRONG_TYPES[:4]) + [5, 1.0, [], {}]
            if "maxLength" in schema:
                options.append(texts.planted() + " " + "x" * schema["maxLength"])
            if "pattern" in schema:
                options += ["r0", "R1", "r01", "r", "1", "r-1", " r1", "Implementer", "1abc",
                            "a" * 33, "a b", "r1 "]
                if schema["pattern"].startswith("^r"):
                    # contract.md §6 rule 7: at most 20 characters; no digit string raises.
                    options += ["r" + "1" * 20, "r" + "9" * 5000]
            if "enum" in schema:
                options += ["Open", "closed", "open ", ""]
            if schema.get("minLength", 0) >= 1:
                options.append("")
            return draw(st.sampled_from(options))
        if "boolean" in kinds:
            return draw(st.sampled_from([0, 1, "true", None, [], "false"]))
        if "array" in kinds:
            choice = draw(st.sampled_from(["type", "too-many", "bad-item"]))
            if choice == "type":
                return draw(st.sampled_from(["r1", 3, None, {"0": 1}, True]))
            if choice == "too-many":
                item = value_for(draw, schema["items"], texts, labels, "valid")
                return [item] * (schema.get("maxItems", 50) + 1)
            return [value_for(draw, schema["items"], texts, labels, "invalid")]
        if "object" in kinds:
            choice = draw(st.sampled_from(["type", "unknown", "missing", "bad"]))
            if choice == "type":
                return draw(st.sampled_from(["text", 1, None, []]))
            value = value_for(draw, schema, texts, labels, "valid")
            if choice == "unknown":
                value["evidence"] = ["r1"]
            elif choice == "missing":
                value.pop(schema["required"][0], None)
            else:
                key = draw(st.sampled_from(sorted(schema["properties"])))
                value[key] = value_for(draw, schema["properties"][key], texts, labels, "invalid")
            return value
    # valid (and boundary) values
    if "integer" in kinds:
        low, high = schema.get("minimum", 1), schema.get("maximum")
        top = high if high is not None else 12
        number = draw(st.sampled_from([low, low, top, low + 1, (low + top) // 2]
                                      + ([] if high is not None else [10 ** 17, 999])))
        form = draw(st.sampled_from(["int", "int", "int", "float", "str", "zeros"]))
        if form == "float":
            return float(number)
        if form == "str":
            return str(number)
        if form == "zeros":
            return "00" + str(number)
        return number
    if "string" in kinds:
        if "enum" in schema:
            return draw(st.sampled_from(schema["enum"]))
        if "pattern" in schema:
            if schema["pattern"].startswith("^r"):
                return draw(st.sampled_from(labels + ["r999", "r1234567"]))
            return draw(st.sampled_from(["implementer", "reviewer", "a", "a" + "b" * 31,
                                         "x-1", "tester-2"]))
        text = texts.make(draw, schema.get("maxLength", 200), schema.get("minLength", 0))
        if len(text) > schema.get("maxLength", len(text)):
            text = text[:schema["maxLength"]]
        if len(text) < schema.get("minLength", 0):
            text = "t"
        return text
    if "boolean" in kinds:
        return draw(st.booleans())
    if "array" in kinds:
        low, high = schema.get("minItems", 0), schema.get("maxItems", 50)
        size = draw(st.sampled_from([low, low, max(low, 1), max(low, 2), high]))
        return [value_for(draw, schema["items"], texts, labels, "valid") for _ in range(size)]
    if "object" in kinds:
        value = {}
        for key, sub in schema["properties"].items():
            if key in schema.get("required", []) or draw(st.booleans()):
                value[key] = value_for(draw, sub, texts, labels, "valid")
        return value
    raise AssertionError(kinds)


@st.composite
def tool_arguments(draw, schema, labels):
    texts = Texts()
    mode = draw(st.sampled_from(["valid", "valid", "invalid", "invalid", "unknown", "missing"]))
    args = {}
    properties = schema["properties"]
    for key, sub in properties.items():
        if key in schema.get("required", []) or draw(st.sampled_from([False, False, True])):
            args[key] = value_for(draw, sub, texts, labels, "valid")
    if mode == "invalid" and properties:
        key = draw(st.sampled_from(sorted(properties)))
        args[key] = value_for(draw, properties[key], texts, labels, "invalid")
    elif mode == "unknown":
        args[draw(st.sampled_from(["x", "task_id", "session_id", "Task", "argument with space",
                                   "\u00e9", "evidence"]))] = draw(st.sampled_from(
                                       [1, texts.planted(), None, [], {"text": texts.planted()}]))
    elif mode == "missing" and schema.get("required"):
        args.pop(schema["required"][0], None)
    return args, texts.markers


@pytest.mark.parametrize("tool", EXPECTED_TOOLS)
def test_tool_fuzz(world, tool, planted, config, workspace):
    server = world.server
    tools = dict((entry["name"], entry) for entry in server.request("tools/list")["result"]["tools"])
    # `pack` alone declares none: its result object rides in _meta (tools.md).
    schema, output_schema = tools[tool]["inputSchema"], tools[tool].get("outputSchema")
    tally = {"calls": 0, "valid": 0, "invalid": 0, "open": 0, "ok": 0, "problems": Counter()}

    @settings(max_examples=FUZZ_EXAMPLES, **SETTINGS)
    @given(drawn=tool_arguments(schema, world.labels), era=st.sampled_from(["legacy", "modern"]),
           poison=st.sampled_from([None, None, "\ud800", "cut \ud83d", ["\udfff", {"k": "\udc00"}]]))
    def run(drawn, era, poison):
        args, markers = drawn
        kind = classify(tool, schema, args)
        if tool in ("checkpoint", "decide", "end", "complete"):
            world.ensure_session()
        if poison is not None:
            world.poison_context(poison)
        if kind == "invalid":
            planted.update(markers)
        ops_before = len(world.daemon.ops)
        files_before = snapshot(workspace, config.dir)
        code, value = world.call(tool, args, era)
        tally["calls"] += 1
        tally[kind] += 1
        assert code != "internal_error", (args, value)
        if code == "ok":
            tally["ok"] += 1
            if output_schema is not None:
                assert schema_errors(output_schema, value) == [], (args, value)
        else:
            assert code in PROBLEM_CODES, value
            tally["problems"][code] += 1
        if kind == "invalid":
            assert code == "invalid_params", (tool, args, code, value)
            assert len(world.daemon.ops) == ops_before, (
                "an invalid call sent %r" % [op["op"] for op in world.daemon.ops[ops_before:]])
            assert snapshot(workspace, config.dir) == files_before, "an invalid call wrote a file"
        elif kind == "valid":
            assert code != "invalid_params", (tool, args, value)
        world.check_context(poison)

    run()
    assert tally["valid"] > 0 and tally["invalid"] > 0, tally
    assert server.close() == 0
    report("tool_fuzz", tool=tool, calls=tally["calls"], valid=tally["valid"],
           invalid=tally["invalid"], open=tally["open"], ok=tally["ok"],
           problems=dict(tally["problems"]))


@pytest.mark.parametrize("tool, args", [
    ("begin", {"new_task": "Trailing newline role", "agent_role": "implementer\n"}),
    ("checkpoint", {"facts": [{"text": "A fact.", "runs": ["r1\n"]}]}),
    ("decide", {"decision": "A decision.", "runs": ["r2\n"]}),
], ids=["begin-agent_role", "checkpoint-label", "decide-label"])
def test_pattern_rejects_a_trailing_newline(world, tool, args, workspace, config):
    """tools.md: labels match `^r[1-9][0-9]*$` and roles `^[a-z][a-z0-9-]{0,31}$` as JSON
    Schema patterns (ECMA-262: `$` is the end of input); bad arguments send nothing."""
    world.ensure_session()
    ops_before = len(world.daemon.ops)
    code, value = world.call(tool, args)
    assert (code, len(world.daemon.ops)) == ("invalid_params", ops_before), (code, value)


@pytest.mark.parametrize("where", ["fact", "checkpoint", "decide"])
def test_rule7_run_label_over_20_characters_is_invalid(begun, daemon, workspace, where):
    """§6 rule 7: a run label is at most 20 characters: `r` plus 5,000 digits (or 20) is
    `invalid_params`, and nothing is sent; 19 digits is a well-formed label that is unknown."""
    server, value = begun
    for label, expected in (("r" + "1" * 5000, "invalid_params"), ("r" + "1" * 20, "invalid_params"),
                            ("r" + "1" * 19, "run_label_unknown")):
        if where == "fact":
            tool, args = "checkpoint", {"facts": [{"text": "A fact.", "runs": [label]}]}
        elif where == "checkpoint":
            tool, args = "checkpoint", {"facts": [{"text": "A fact."}], "runs": [label]}
        else:
            tool, args = "decide", {"decision": "A decision.", "runs": [label]}
        daemon.clear_ops()
        code, text = call_tool(server, tool, args)
        assert code == expected, (label[:30], text)
        if expected == "invalid_params":
            assert "1" * 21 not in text, text        # never the value
        assert daemon.ops == []
    assert server.close() == 0


UUID = "0b9d2c1e-4f6a-4b8e-9c3d-2a1f0e9b8c7d"


def schema_of(tool_name):
    return next(entry for entry in mp.TOOLS if entry["name"] == tool_name)["inputSchema"]


# --------------------------------------------------------------------------
# validate: the tool table's input schemas (tools.md, "Rules for every tool")
# --------------------------------------------------------------------------

def refused(tool_name, arguments):
    return raises_problem("invalid_params", mp.validate, schema_of(tool_name), arguments)


def test_every_input_schema_refuses_additional_properties():
    assert len(mp.TOOLS) == 10
    for entry in mp.TOOLS:
        assert entry["inputSchema"]["additionalProperties"] is False, entry["name"]


@pytest.mark.parametrize("given", [3, 3.0, "3"])
def test_integer_accepts_int_integral_float_and_digits(given):
    checked = mp.validate(schema_of("pack"), {"task": given})
    assert checked == {"task": 3}
    assert type(checked["task"]) is int


@pytest.mark.parametrize("given", [True, 3.5, "3.5", "", "\uff13", None])
def test_integer_refuses_non_integers(given):
    refused("pack", {"task": given})


@pytest.mark.parametrize("given", [0, "-1"])
def test_integer_below_minimum_refused(given):
    problem = refused("pack", {"task": given})
    assert "`task`" in problem.hint


@pytest.mark.parametrize("given", [499, "60001"])
def test_budget_outside_range_refused_with_range_hint(given):
    problem = refused("pack", {"budget": given})
    assert "500" in problem.hint and "60000" in problem.hint


def test_budget_bounds_accepted():
    assert mp.validate(schema_of("pack"), {"budget": 500}) == {"budget": 500}
    assert mp.validate(schema_of("pack"), {"budget": "60000"}) == {"budget": 60000}


def test_thirty_digit_string_gets_same_hint_as_huge_int():
    as_int = refused("pack", {"budget": 10 ** 30})
    as_text = refused("pack", {"budget": "9" * 30})
    assert "whole number" not in as_text.hint
    assert as_text.hint == as_int.hint


@pytest.mark.parametrize("uuid", [UUID, "{%s}" % UUID.upper()])
def test_uuid_for_task_gets_the_spec_hint(uuid):
    problem = refused("pack", {"task": uuid})
    assert problem.hint == "`task` takes a number from `tasks`, never a UUID."
    assert uuid not in problem.text()


@pytest.mark.parametrize("tool_name, arguments, name", [
    ("claims", {"numbers": [UUID]}, "numbers"),
    ("checkpoint", {"withdraw": [1, UUID]}, "withdraw"),
    ("complete", {"session": UUID}, "session"),
])
def test_uuid_anywhere_a_number_belongs_is_refused_with_hint(tool_name, arguments, name):
    problem = refused(tool_name, arguments)
    assert "UUID" in problem.hint
    assert name in problem.hint
    assert UUID not in problem.text()


@pytest.mark.parametrize("tool_name, name, limit, extra", [
    ("begin", "new_task", 200, {}),
    ("decide", "rationale", 2000, {"decision": "d"}),
])
def test_string_max_length(tool_name, name, limit, extra):
    at_limit = dict(extra, **{name: "x" * limit})
    assert mp.validate(schema_of(tool_name), at_limit) == at_limit
    problem = refused(tool_name, dict(extra, **{name: "Q" * limit + PLANTED}))
    assert "`%s`" % name in problem.hint
    assert PLANTED not in problem.text()


@pytest.mark.parametrize("tool_name, arguments", [
    ("begin", {"new_task": ""}), ("checkpoint", {"facts": [{"text": ""}]}),
])
def test_empty_required_string_refused(tool_name, arguments):
    refused(tool_name, arguments)


def test_list_over_fifty_items_refused():
    assert mp.validate(schema_of("claims"), {"numbers": list(range(1, 51))})["numbers"][-1] == 50
    refused("claims", {"numbers": list(range(1, 52))})
    refused("claims", {"numbers": []})


@pytest.mark.parametrize("tool_name, arguments, missing", [
    ("claims", {"task": 1}, "numbers"), ("decide", {"rationale": PLANTED}, "decision"),
])
def test_required_argument_named_in_hint(tool_name, arguments, missing):
    problem = refused(tool_name, arguments)
    assert missing in problem.hint
    assert PLANTED not in problem.text()


def test_unknown_argument_refused_without_its_value():
    problem = refused("context", {"bogus_argument": PLANTED})
    assert "bogus_argument" in problem.hint
    assert PLANTED not in problem.text()


@pytest.mark.parametrize("label", ["r0", "r1\n", PLANTED])
def test_run_label_pattern_refused(label):
    problem = refused("checkpoint", {"runs": [label]})
    assert "runs" in problem.hint
    assert PLANTED not in problem.text()


def test_run_label_pattern_accepted():
    labels = ["r1", "r9", "r10", "r4321"]
    assert mp.validate(schema_of("decide"), {"decision": "d", "runs": labels})["runs"] == labels


@pytest.mark.parametrize("tool_name, arguments", [
    ("tasks", {"status": PLANTED}),
    ("begin", {"agent_role": PLANTED}),
    ("checkpoint", {"open_items": PLANTED}),
    ("pack", {PLANTED + " free text": 1}),                       # an unknown key that is free text
    ("checkpoint", {"facts": [{"text": "a fact", "extra": PLANTED}]}),
])
def test_bad_argument_refused_without_repeating_it(tool_name, arguments):
    problem = refused(tool_name, arguments)
    assert PLANTED not in problem.text()


def test_arguments_that_are_not_an_object_refused():
    refused("pack", "not an object")
    refused("pack", [])


def test_valid_full_checkpoint_passes_unchanged_but_numbers():
    arguments = {"facts": [{"text": "Retries use a fixed 1 s delay.", "runs": ["r4"]}],
                 "open_items": ["The S3 mock ignores Content-MD5."], "reaffirm": ["3"],
                 "withdraw": [5.0], "next_action": "Compare r4 under load.", "runs": ["r4"],
                 "session": "2"}
    assert mp.validate(schema_of("checkpoint"), arguments) == {
        "facts": [{"text": "Retries use a fixed 1 s delay.", "runs": ["r4"]}],
        "open_items": ["The S3 mock ignores Content-MD5."], "reaffirm": [3],
        "withdraw": [5], "next_action": "Compare r4 under load.", "runs": ["r4"],
        "session": 2}


def test_a_digit_string_past_the_interpreters_limit_is_refused_as_too_long():
    # Python 3.11+ converts at most 4,300 digits (a bare JSON number that long is a
    # parse error there); earlier versions convert it, and it is then out of range.
    problem = refused("pack", {"budget": "9" * 5000})
    assert problem.hint in ("`budget` has too many digits.", "`budget` must be from 500 to 60000.")
    assert "9" * 50 not in problem.text()
