"""The Pack against a plain reading of pack.md, on generated Capsules.

`render_pack` builds only the lines the budget reaches (the footer's count of
cut lines is settled without the rest whenever its digits cannot change the
filling) and skips folding for texts that need none; this file holds an eager implementation written
straight from pack.md, with no shortcut, and checks that the two agree on
Capsules full of what the shortcuts must notice: white space of every kind,
controls, lone surrogates, astral characters, lines around the 300-unit cap,
odd field types, budgets from nothing to everything, and queries.
"""

import sys
import unicodedata
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import memprove_mcp as mp  # noqa: E402
from harness import depth  # noqa: E402

# -- the reference: pack.md read literally -------------------------------------

CAP = 300
HEADINGS = ("Next action:", "Open items:", "Decisions:", "Facts:", "Runs:")


def units(text):
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def ref_fold(value):
    text = "" if value is None else value if isinstance(value, str) else str(value)
    text = " ".join(text.split())
    return "".join("\ufffd" if unicodedata.category(char) in ("Cc", "Cs") else char for char in text)


def ref_claim_line(claim):
    line = "- c%d %s" % (claim["number"], ref_fold(claim.get("text")))
    if claim.get("kind") == "decision":
        line += " (%s)" % ref_fold(claim.get("decision_state"))
        if ref_fold(claim.get("rationale")):
            line += " Because: " + ref_fold(claim.get("rationale"))
        alternatives = [ref_fold(alt) for alt in claim.get("alternatives") or []]
        alternatives = [alt for alt in alternatives if alt]
        if alternatives:
            line += " Instead of: " + "; ".join(alternatives)
    if claim.get("evidence"):
        line += " [" + ", ".join(ref_fold(label) for label in claim["evidence"]) + "]"
    return line


def ref_run_line(run):
    if run.get("passed") is True:
        return "- %s passed %s (%s)" % (ref_fold(run["label"]), ref_fold(run.get("command")),
                                        ref_fold(run.get("finished_at")))
    return "- %s failed (exit %s) %s (%s)" % (ref_fold(run["label"]), run.get("exit_code"),
                                              ref_fold(run.get("command")),
                                              ref_fold(run.get("finished_at")))


def ref_cap(line):
    if units(line) <= CAP:
        return line, False
    cut = ""
    for char in line:
        if units(cut + char) > CAP - 1:
            break
        cut += char
    return cut + "\u2026", True


def ref_render(capsule, budget, query):
    task, ledger = capsule["task"], capsule["ledger"]
    sessions = capsule["sessions"]
    opened = sorted((s for s in sessions if s["state"] == "open"), key=lambda s: s["number"])
    closed = len([s for s in sessions if s["state"] in ("ended", "abandoned")])
    header = ["Task %d: %s [%s]" % (task["number"], ref_fold(task["title"]), ref_fold(task["status"]))]
    if opened:
        header.append("Sessions: %d open (%s), %d closed" % (len(opened), ", ".join(
            "s%d %s/%s" % (s["number"], ref_fold(s["agent"]["name"]), ref_fold(s["agent"]["role"]))
            for s in opened), closed))
    else:
        header.append("Sessions: 0 open, %d closed" % closed)
    header.append("Ledger: %d entries, head %s" % (ledger["entries"], ref_fold(ledger["head"])[:12]))

    active = [c for c in capsule["claims"] if c.get("state") == "active"]

    def of_kind(kind):
        return sorted((c for c in active if c.get("kind") == kind), key=lambda c: c["number"])

    candidates = [(0, ref_claim_line(c), True) for c in of_kind("next_action")[-1:]]
    candidates += [(1, ref_claim_line(c), True) for c in of_kind("open_item")]
    candidates += [(2, ref_claim_line(c), True) for c in reversed(of_kind("decision"))]
    candidates += [(3, ref_claim_line(c), True) for c in reversed(of_kind("fact"))]
    candidates += [(4, ref_run_line(r), False) for r in reversed(capsule["runs"])]
    folded = ref_fold(query)
    if folded:
        tokens = folded.casefold().split(" ")
        matching = [c for c in candidates if all(t in c[1].casefold() for t in tokens)]
        header.append("Query: %s (%d of %d lines match)" % (folded, len(matching), len(candidates)))
        candidates = matching
    capped = [(section, ref_cap(line), is_claim) for section, line, is_claim in candidates]

    def layout(chosen):
        text, previous = "", None
        for section, (line, _), _ in chosen:
            if section != previous:
                text += "\n" + HEADINGS[section] + "\n"
                previous = section
            text += line + "\n"
        return text

    head = "".join(line + "\n" for line in header)
    cut_anywhere = any(cut for _, (_, cut), _ in capped)
    if not cut_anywhere and units(head + layout(capped)) <= budget:
        return head + layout(capped), len([c for c in capped if c[2]])
    a = len([c for c in capped if c[2]])
    reserve = 2 + units(mp.FOOTER % (a, len(capped) - a, len([c for c in capped if c[1][1]])))
    used, shown = units(head), 0
    for index, (section, (line, _), _) in enumerate(capped):
        price = units(line) + 1
        if index == 0 or capped[index - 1][0] != section:
            price += 1 + units(HEADINGS[section]) + 1
        if used + price + reserve > budget:
            break
        used += price
        shown += 1
    chosen, rest = capped[:shown], capped[shown:]
    claims_out = len([c for c in rest if c[2]])
    runs_out = len(rest) - claims_out
    cut = len([c for c in chosen if c[1][1]])
    pack = head + layout(chosen)
    if claims_out or runs_out or cut:
        pack += "\n" + mp.FOOTER % (claims_out, runs_out, cut) + "\n"
    return pack, len([c for c in chosen if c[2]])


# -- generated Capsules --------------------------------------------------------

ALPHABET = ["a", "b", "Z", "0", " ", " ", "\t", "\n", "\x07", "\x85", "\xa0", "\u3000", "\u2028",
            "\ufffd", "\ud800", "\udc80", "\U0001F680", ",", ";", "é", "ß"]


def texts(max_size):
    return st.one_of(
        st.text(alphabet=st.sampled_from(ALPHABET), max_size=max_size),
        st.builds(lambda n, tail: "w" * n + tail, st.one_of(st.integers(270, 300), st.integers(140, 330)),
                  st.text(alphabet=st.sampled_from(ALPHABET), max_size=6)),
        st.builds(lambda n, tail: "\U0001F680" * n + tail, st.integers(60, 160),  # 2 units each
                  st.text(alphabet=st.sampled_from(ALPHABET), max_size=6)),
    )


odd_value = st.sampled_from([None, 0, 7, 2.5, True, ["x"]])
label = st.one_of(st.sampled_from(["r1", "r12", "r3 ", " r4", "", " ", "a ,b"]), texts(6))


@st.composite
def claims(draw, number):
    kind = draw(st.sampled_from(["fact", "open_item", "decision", "next_action", "other"]))
    record = {"number": number, "kind": kind,
              "state": draw(st.sampled_from(["active", "active", "active", "withdrawn"])),
              "text": draw(st.one_of(texts(330), odd_value)),
              "evidence": draw(st.one_of(st.lists(label, max_size=4), st.just(None)))}
    if kind == "decision":
        record["decision_state"] = draw(st.one_of(st.sampled_from(["accepted", "proposed"]), odd_value))
        record["rationale"] = draw(st.one_of(texts(200), odd_value))
        record["alternatives"] = draw(st.one_of(st.lists(texts(40), max_size=3), st.just(None)))
    return record


@st.composite
def runs(draw, index):
    passed = draw(st.booleans())
    return {"label": draw(st.one_of(st.just("r%d" % index), texts(8))), "passed": passed,
            "exit_code": draw(st.one_of(st.integers(-3, 300), st.just(-999999999), st.just(10 ** 12), st.just(None))),
            "command": draw(st.one_of(texts(330), st.just(None))),
            "finished_at": draw(st.one_of(st.just("2026-01-02T03:04:05Z"), st.just(None)))}


@st.composite
def capsules(draw):
    # A number that is not an int ("%d" reads 2.5 as 2) makes a query search a claim's `- c2 ` too.
    numbers = draw(st.lists(st.one_of(st.integers(1, 400), st.just(999999999), st.just(10 ** 12),
                                      st.just(2.5), st.just(True)), max_size=25, unique=True))
    return {
        "task": {"number": 3, "title": draw(texts(40)), "status": "active"},
        "sessions": [{"number": 1, "state": "open", "agent": {"name": "claude-code", "role": "implementer"}},
                     {"number": 2, "state": "ended", "agent": {"name": "x", "role": "y"}}],
        "claims": [draw(claims(number)) for number in numbers],
        "runs": [draw(runs(index + 1)) for index in range(draw(st.integers(0, 6)))],
        "ledger": {"entries": 9, "head": "ab" * 32},
    }


budgets = st.one_of(st.integers(0, 4000), st.just(6000), st.just(10 ** 9))
queries = st.one_of(st.none(), st.sampled_from(["", "  ", "w", "r1", "a b", "W", "\u2026", "- c", "c1", "2 w",
                                                 "\ufffd", "a\x07", "ss", "(accepted)", "[r1,"]),
                    texts(5))


@settings(max_examples=depth(200), deadline=None, suppress_health_check=list(HealthCheck))
@given(capsule=capsules(), budget=budgets, query=queries)
def test_render_pack_agrees_with_a_literal_reading_of_pack_md(capsule, budget, query):
    result = mp.render_pack(capsule, budget, query)
    pack, claims_shown = ref_render(capsule, budget, query)
    assert result["pack"] == pack
    assert result["units"] == units(pack)
    assert result["claims_shown"] == claims_shown


@settings(max_examples=depth(300), deadline=None)
@given(value=st.one_of(texts(60), odd_value))
def test_fold_agrees_with_pack_md(value):
    assert mp.fold(value) == ref_fold(value)


def test_a_budget_where_the_count_of_cut_lines_decides():
    # Ten cut lines past the budget make the footer's "Lines cut" two digits
    # long; at some budget that one unit decides whether a line goes in, and
    # render_pack must then look at the lines it would rather not build.
    claims = [{"number": n, "kind": "fact", "state": "active", "text": "long %d " % n + "w" * 400}
              for n in range(1, 11)]
    claims.append({"number": 11, "kind": "fact", "state": "active", "text": "short"})
    capsule = {"task": {"number": 1, "title": "T", "status": "active"}, "sessions": [],
               "claims": claims, "runs": [], "ledger": {"entries": 1, "head": "ab" * 32}}
    deciding = []
    for budget in range(0, 700):
        pack, _ = ref_render(capsule, budget, None)
        assert mp.render_pack(capsule, budget)["pack"] == pack, budget
        with_one_digit = ref_render(dict(capsule, claims=claims[-1:] + claims[:9]), budget, None)[0]
        if ("- c11 short" in pack) != ("- c11 short" in with_one_digit):
            deciding.append(budget)
    assert deciding, "no budget exercised the reserve's digits"


# -- many lines at once ----------------------------------------------------------
# render_pack builds lines in bulk: texts that need no folding are found a few
# hundred at a time, lines are built section by section (64 at a time when only
# the budget decides), and one text that needs folding sends its chunk the slow
# way.  The Capsules above are too small to cross those boundaries; these are
# not, and are mostly clean text with a little of everything else mixed in.

CLEAN = ["Retry the upload.", "r1", "r12", "a", "ß", "é", "\U0001F680", "w" * 150, "w" * 290,
         "x" * 296, "Straße und \U0001F680 Rakete", "c"]
UNCLEAN = ["", " ", "a  b", " a", "a ", "\t", "x\ny", "\x07", "\ud800", "\xa0", "\u2028",
           "w" * 320, None, 0, 7, 2.5, True, ["x"]]


def mixed_value(rng, unclean_rate):
    if rng.random() < unclean_rate:
        return rng.choice(UNCLEAN)
    return " ".join(rng.choice(CLEAN) for _ in range(rng.randint(1, 4)))


def large_capsule(seed, size, unclean_rate):
    import random
    rng = random.Random(seed)
    text = lambda: mixed_value(rng, unclean_rate)  # noqa: E731
    claims = []
    for number in range(1, size + 1):
        kind = rng.choice(["fact", "fact", "open_item", "decision", "next_action"])
        claim = {"number": number, "kind": kind, "state": "active" if rng.random() < 0.9 else "withdrawn",
                 "text": text(), "evidence": [text() for _ in range(rng.choice([0, 0, 1, 2]))]}
        if kind == "decision":
            claim.update(decision_state=text(), rationale=text(),
                         alternatives=[text() for _ in range(rng.choice([0, 1, 3]))])
        claims.append(claim)
    runs = [{"label": text(), "passed": rng.random() < 0.7, "exit_code": rng.choice([1, 2, None, "9"]),
             "command": text(), "finished_at": text()} for _ in range(size // 8)]
    return {"task": {"number": 3, "title": "T", "status": "active"}, "sessions": [],
            "claims": claims, "runs": runs, "ledger": {"entries": 9, "head": "ab" * 32}}


@settings(max_examples=depth(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2 ** 32), size=st.integers(0, 700),
       unclean_rate=st.sampled_from([0.0, 0.002, 0.05, 0.5]),
       budget=st.one_of(st.integers(0, 60000), st.just(10 ** 9)),
       query=st.sampled_from([None, "-", "r1", "a", "ss", "ß", "w", "- c1", "\U0001F680 r"]))
def test_render_pack_agrees_on_large_capsules(seed, size, unclean_rate, budget, query):
    capsule = large_capsule(seed, size, unclean_rate)
    result = mp.render_pack(capsule, budget, query)
    pack, claims_shown = ref_render(capsule, budget, query)
    assert result["pack"] == pack
    assert result["units"] == units(pack)
    assert result["claims_shown"] == claims_shown


@settings(max_examples=depth(1000), deadline=None, suppress_health_check=list(HealthCheck))
@given(values=st.lists(st.one_of(st.sampled_from(CLEAN), st.sampled_from(UNCLEAN), texts(12), odd_value),
                       max_size=600))
def test_folding_in_bulk_agrees_with_pack_md(values):
    assert mp.fold_all(values) == [ref_fold(value) for value in values]


def test_a_record_the_budget_does_not_reach_is_not_read():
    # Lines are built a chunk at a time; a record no line needs (evidence
    # that is not a list) must not fail a Pack that never shows it, and must
    # fail one that does, as when lines were built one at a time.
    claims = [{"number": n, "kind": "fact", "state": "active", "text": "fact %d" % n, "evidence": []}
              for n in range(1, 40)]
    claims[0]["evidence"] = 7                         # facts run newest first: c1 comes last
    capsule = {"task": {"number": 1, "title": "T", "status": "active"}, "sessions": [],
               "claims": claims, "runs": [], "ledger": {"entries": 1, "head": "ab" * 32}}
    shown = mp.render_pack(capsule, 400)
    assert "- c39 fact 39\n" in shown["pack"] and "c1 " not in shown["pack"]
    with pytest.raises(TypeError):
        mp.render_pack(capsule, 10 ** 9)
    with pytest.raises(TypeError):
        mp.render_pack(capsule, 400, "fact")


# -- the query's search ------------------------------------------------------------
# A query searches a claim in its text (unfolded) and tail, and in its `- c12 `
# only for a token of `-`, `c` and digits; these hold it to the lines it must
# find and to the records it must read all the same.

def test_a_query_reads_every_record_as_building_its_line_would():
    facts = [{"number": n, "kind": "fact", "state": "active", "text": "fact %d" % n, "evidence": []}
             for n in range(1, 40)]
    capsule = {"task": {"number": 1, "title": "T", "status": "active"}, "sessions": [],
               "claims": facts, "runs": [], "ledger": {"entries": 1, "head": "ab" * 32}}
    bad_evidence = dict(capsule, claims=[dict(facts[0], evidence=7)] + facts[1:])
    with pytest.raises(TypeError):
        ref_render(bad_evidence, 400, "nothing matches")
    with pytest.raises(TypeError):
        mp.render_pack(bad_evidence, 400, "nothing matches")
    # Open items come before facts; the only fact, so no sorting compares its number: "%d" reads it first.
    items = [dict(fact, kind="open_item") for fact in facts]
    bad_number = dict(capsule, claims=items + [{"number": "7", "kind": "fact", "state": "active", "text": "last"}])
    with pytest.raises(TypeError):
        ref_render(bad_number, 400, "nothing matches")
    with pytest.raises(TypeError):
        mp.render_pack(bad_number, 400, "nothing matches")
    assert "last" not in mp.render_pack(bad_number, 400)["pack"]      # not reached: not read


@pytest.mark.parametrize("query", ["c2", "2", "- c", "c-3", "fact", "\u3000fact", "spaced", "spaced\ttext",
                                   "\ufffd", "bell\x07", "[r1,", "r1]", "(accepted)", "because:", "ss", "STRASSE"])
def test_a_query_finds_what_the_lines_hold(query):
    claims = [
        {"number": 2, "kind": "fact", "state": "active", "text": "  fact\u3000 spaced \t text  ", "evidence": ["r1"]},
        {"number": 2.5, "kind": "open_item", "state": "active", "text": "fact with a bell\x07", "evidence": None},
        {"number": -3, "kind": "next_action", "state": "active", "text": "Stra\u00dfe", "evidence": ["r1", "r2"]},
        {"number": 5, "kind": "decision", "state": "active", "text": "fact", "decision_state": " accepted ",
         "rationale": " \t ", "alternatives": ["", " x "], "evidence": []},
        {"number": 6, "kind": "decision", "state": "active", "text": None, "decision_state": "accepted",
         "rationale": "because", "alternatives": None, "evidence": [" r1"]},
    ]
    capsule = {"task": {"number": 1, "title": "T", "status": "active"}, "sessions": [],
               "claims": claims, "runs": [], "ledger": {"entries": 1, "head": "ab" * 32}}
    for budget in (0, 300, 10 ** 9):
        pack, claims_shown = ref_render(capsule, budget, query)
        result = mp.render_pack(capsule, budget, query)
        assert result["pack"] == pack
        assert result["claims_shown"] == claims_shown

