"""Every golden Pack through the MCP server, in both eras, byte for byte.

The reference daemon serves each golden Capsule as its `getTaskCapsule`
answer; the context names that Task; `pack` must give the opening statement,
one empty line, then exactly NAME.pack.txt, and `claims` exactly the lines of
NAME.claims.json.
"""

import json
import re

import pytest

from harness import REPO, server_path, tool_value

GOLDEN = REPO / "docs" / "golden"
CASES = sorted(path.name[:-len(".capsule.json")] for path in GOLDEN.glob("*.capsule.json"))
OPENING = re.compile(r"Resuming Task (\d+): .* at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ as pytest-client "
                     r"\(implementer\)\. (No open items\.|\d+ open items? \(c[\d, c]+\) must be "
                     r"resolved or carried forward\.)\Z")


def test_every_case_is_here():
    assert len(CASES) >= 8, CASES


def load(name):
    capsule = json.loads((GOLDEN / (name + ".capsule.json")).read_text(encoding="utf-8"))
    args = json.loads((GOLDEN / (name + ".args.json")).read_text(encoding="utf-8"))
    pack = (GOLDEN / (name + ".pack.txt")).read_bytes().decode("utf-8")
    claims = json.loads((GOLDEN / (name + ".claims.json")).read_text(encoding="utf-8"))
    return capsule, args, pack, claims


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("name", CASES)
def test_golden_pack_and_claims_through_the_server(name, era, start_server, daemon, config,
                                                   workspace):
    capsule, args, want_pack, want_claims = load(name)
    task = capsule["capsule"]["task"]
    daemon.serve_capsule(task["id"], capsule)
    (workspace / ".memprove" / "context.json").write_text(json.dumps(
        {"version": 1, "workspace": {"id": "golden", "root": server_path(workspace)},
         "task": {"id": task["id"], "number": task["number"], "title": task["title"]},
         "session": None}), encoding="utf-8")
    server = start_server(env=config.env())
    if era == "legacy":
        server.initialize()
    client = "pytest-client" if era == "modern" else None
    arguments = {"budget": args["budget"]}
    if args["query"] is not None:
        arguments["query"] = args["query"]

    answer = server.call("pack", arguments, era=era, client=client)["result"]
    assert answer.get("isError") is False, answer
    text = answer["content"][0]["text"]
    opening, blank, pack = text.partition("\n\n")
    assert blank and OPENING.match(opening), opening
    assert pack == want_pack
    assert "structuredContent" not in answer, answer
    result = tool_value(answer)
    assert result["task_id"] == task["id"] and result["session_id"] is None
    assert result["pack"] == want_pack and result["opening"] == opening
    assert result["task"] == task["number"] and result["budget"] == args["budget"]
    for key, value in args["expect"].items():
        assert result[key] == value, key
    assert ("resultType" in answer) == (era == "modern")

    numbers = sorted(int(number) for number in want_claims)
    if numbers:
        answer = server.call("claims", {"numbers": numbers[:50]}, era=era, client=client)["result"]
        assert answer.get("isError") is False, answer
        given = answer["structuredContent"]
        assert [c["line"] for c in given["claims"]] == [want_claims[str(n)] for n in numbers[:50]]
        assert given["missing"] == [] and given["left_out"] == []
    ops = [entry["op"] for entry in daemon.ops]
    assert ops == ["getTaskCapsule"] * (2 if numbers else 1), ops
    assert server.close() == 0


HIDDEN = re.compile("[\u200b\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ufff9-\ufffb"
                    "\U000e0000-\U000e007f\U000e0100-\U000e01ef]")


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_rule33_rule34_the_hidden_golden_through_the_server(era, start_server, daemon, config, workspace):
    """The `hidden` case: a Capsule full of the characters that hide text and a text of
    over 20,000 characters gives its Pack and claim lines byte for byte, in which every
    hidden character is U+FFFD and the long claim's line is its first 19,999 characters
    and `…`."""
    capsule, _, pack, claims = load("hidden")
    texts = json.dumps(capsule, ensure_ascii=False)
    assert len(HIDDEN.findall(texts)) > 100 and max(len(c["text"]) for c in capsule["capsule"]["claims"]) > 20000
    assert not HIDDEN.search(pack) and not HIDDEN.search(json.dumps(claims, ensure_ascii=False))
    assert "\ufffd" in pack and len(claims["4"]) == len("- c4 ") + 20000 and claims["4"].endswith(" \u2026")
    test_golden_pack_and_claims_through_the_server("hidden", era, start_server, daemon, config, workspace)
