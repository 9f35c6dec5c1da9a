"""The token FSM on a tiny vocabulary: exact masks after each step, line ranges, EOS, random walks."""

import random

import pytest

from backend.core.fsm import TokenFSM
from backend.core.program import CopyLines, Gen, parse_program
from backend.core.token_vocabulary import TokenVocabulary

TINY = [
    "<", "copy", "<copy", ' lines="', "0", "1", "2", "5", "12", "-", '"/>', '"', "/>",
    "<gen>", "gen", ">", "</gen>", "</", "x", "\n", "<|eos|>", None,
]
EOS = TINY.index("<|eos|>")
ALL_TEXT = frozenset(t for t in TINY if t is not None and t != "<|eos|>")
START = frozenset({"<", "<copy", "<gen>", "<|eos|>"})
# Inside gen text every token is allowed except '</gen>' when it would close an empty gen.
GEN_ANY = ALL_TEXT
GEN_EMPTY = ALL_TEXT - {"</gen>"}


@pytest.fixture(scope="module")
def fsm():
    return TokenFSM(TokenVocabulary(TINY, EOS))


def walk(fsm, n_lines, texts):
    state = fsm.start(n_lines)
    ops = []
    for text in texts:
        step = fsm.advance(state, TINY.index(text))
        state = step.state
        ops.extend(step.completed)
    return state, ops


def allowed_texts(fsm, state):
    return {TINY[i] for i in fsm.allowed(state).ids}


# n_lines, tokens read so far, the exact set of token texts allowed next
n_lines__prefix__allowed = [
    (15, [], START),
    (0, [], {"<", "<gen>", "<|eos|>"}),
    (15, ["<"], {"copy", "gen"}),
    (0, ["<"], {"gen"}),
    (15, ["<copy"], {' lines="'}),
    (15, ["<", "copy"], {' lines="'}),
    (15, ["<copy", ' lines="'], {"1", "2", "5", "12"}),
    (9, ["<copy", ' lines="'], {"1", "2", "5"}),
    (1, ["<copy", ' lines="'], {"1"}),
    (15, ["<copy", ' lines="', "1"], {"0", "1", "2", "5", "-"}),
    (10, ["<copy", ' lines="', "1"], {"0", "-"}),
    (9, ["<copy", ' lines="', "1"], {"-"}),
    (15, ["<copy", ' lines="', "12"], {"-"}),
    (15, ["<copy", ' lines="', "12", "-"], {"1", "12"}),
    (15, ["<copy", ' lines="', "12", "-", "1"], {"2", "5"}),
    (15, ["<copy", ' lines="', "12", "-", "12"], {'"/>', '"'}),
    (15, ["<copy", ' lines="', "5", "-"], {"5", "1", "12"}),
    (15, ["<copy", ' lines="', "5", "-", "1"], {"0", "1", "2", "5"}),
    (100, ["<copy", ' lines="', "5", "-", "1"], {"0", "1", "2", "5"}),  # not "12": 112 > 100
    (100, ["<copy", ' lines="', "5", "-", "1", "0"], {"0", '"/>', '"'}),
    (100, ["<copy", ' lines="', "5", "-", "1", "0", "0"], {'"/>', '"'}),
    (15, ["<copy", ' lines="', "1", "-", "1", '"'], {"/>"}),
    (15, ["<copy", ' lines="', "1", "-", "1", '"/>'], START | {"\n"}),
    (15, ["<copy", ' lines="', "1", "-", "1", '"/>', "\n"], START),
    (15, ["<gen>"], GEN_EMPTY),
    (15, ["<", "gen"], {">"}),
    (15, ["<", "gen", ">"], GEN_EMPTY),
    (15, ["<gen>", "</"], GEN_ANY),
    (15, ["<gen>", "</", "gen"], ALL_TEXT - {">"}),  # '<gen></gen>' would close an empty gen
    (15, ["<gen>", "x"], GEN_ANY),
    (15, ["<gen>", "x", "</", "gen"], GEN_ANY),
    (15, ["<gen>", "x", "</gen>"], START | {"\n"}),
    (15, ["<gen>", "x", "</", "gen", ">"], START | {"\n"}),
    (15, ["<gen>", "x", "</gen>", "\n"], START),
    (0, ["<gen>", "x", "</gen>"], {"<", "<gen>", "\n", "<|eos|>"}),
]


@pytest.mark.parametrize("n_lines, prefix, expected", n_lines__prefix__allowed)
def test_exact_allowed_set(fsm, n_lines, prefix, expected):
    state, _ = walk(fsm, n_lines, prefix)
    assert allowed_texts(fsm, state) == set(expected)


def test_allowed_ids_are_sorted_and_never_hold_special_tokens(fsm):
    state, _ = walk(fsm, 15, ["<gen>", "x"])
    ids = fsm.allowed(state).ids
    assert list(ids) == sorted(ids)
    assert TINY.index(None) not in ids
    assert EOS not in ids


# n_lines, tokens, forced text from there
n_lines__prefix__forced = [
    (15, [], ""),
    (15, ["<"], ""),
    (0, ["<"], "gen>"),
    (15, ["<copy"], ' lines="'),
    (15, ["<", "copy"], ' lines="'),
    (15, ["<", "gen"], ">"),
    (1, ["<copy"], ' lines="1-1"/>'),
    (1, ["<", "copy"], ' lines="1-1"/>'),
    (15, ["<copy", ' lines="'], ""),
    (15, ["<copy", ' lines="', "12"], "-1"),
    (15, ["<copy", ' lines="', "12", "-", "1"], ""),
    (15, ["<copy", ' lines="', "5", "-", "12"], '"/>'),
    (10, ["<copy", ' lines="', "1", "0"], '-10"/>'),
    (100, ["<copy", ' lines="', "5", "-", "1", "0", "0"], '"/>'),
    (15, ["<copy", ' lines="', "5", "-", "5", '"'], "/>"),
    (15, ["<gen>"], ""),
    (15, ["<gen>", "x", "</"], ""),
    (15, ["<gen>", "x", "</gen>"], ""),
]


@pytest.mark.parametrize("n_lines, prefix, forced", n_lines__prefix__forced)
def test_forced_text(fsm, n_lines, prefix, forced):
    state, _ = walk(fsm, n_lines, prefix)
    assert fsm.forced_text(state) == forced
    if forced:  # the forced text is accepted, and leaves a choice (or a complete tag) behind
        after = fsm.advance_text(state, forced).state
        assert fsm.forced_text(after) == ""


# tokens read so far (15 lines), then: mode, copy_may_close, item_just_closed, open_gen_text
prefix__mode__may_close__just_closed__gen_text = [
    ([], "between", False, False, ""),
    (["<"], "tag", False, False, ""),
    (["<copy"], "tag", False, False, ""),
    (["<copy", ' lines="'], "first", True, False, ""),
    (["<copy", ' lines="', "1"], "first", True, False, ""),
    (["<copy", ' lines="', "1", "-"], "last", True, False, ""),
    (["<copy", ' lines="', "1", "-", "2", '"'], "tag", True, False, ""),
    (["<copy", ' lines="', "1", "-", "2", '"/>'], "between", False, True, ""),
    (["<copy", ' lines="', "1", "-", "2", '"/>', "\n"], "between", False, False, ""),
    (["<gen>"], "gen", False, False, ""),
    (["<gen>", "x", "gen"], "gen", False, False, "xgen"),
    (["<gen>", "x", "</"], "gen", False, False, "x"),
    (["<gen>", "x", "</", "gen"], "gen", False, False, "x"),
    (["<gen>", "x", "</", "x"], "gen", False, False, "x</x"),
    (["<gen>", "x", "</gen>"], "between", False, True, ""),
    (["<|eos|>"], "end", False, False, ""),
]


@pytest.mark.parametrize("prefix, mode, may_close, just_closed, gen_text", prefix__mode__may_close__just_closed__gen_text)
def test_public_questions_about_a_state(fsm, prefix, mode, may_close, just_closed, gen_text):
    state, _ = walk(fsm, 15, prefix)
    assert state.mode == mode
    assert fsm.copy_may_close(state) is may_close
    assert fsm.item_just_closed(state) is just_closed
    assert fsm.open_gen_text(state) == gen_text


def test_open_gen_text_holds_back_an_unfinished_character():
    raw = [b"<gen>", b"\xc3", b"x", b""]
    fsm = TokenFSM(TokenVocabulary(["<gen>", "\ufffd", "x", "<eos>"], 3, token_bytes=raw))
    state = fsm.advance(fsm.advance(fsm.advance(fsm.start(2), 0).state, 2).state, 1).state
    assert fsm.open_gen_text(state) == "x"  # the lone lead byte of a 2-byte character is not text yet


def test_forced_text_with_a_one_line_input_copies_the_whole_tag(fsm):
    state = fsm.advance_text(fsm.start(1), "<c").state
    forced = fsm.forced_text(state)
    assert forced == 'opy lines="1-1"/>'
    assert fsm.advance_text(state, forced).completed == (CopyLines(1, 1),)


def test_pieces_and_completed_ops_per_token():
    vocab = ['"/>\n<gen>x', "y</", "gen>\n<", "gen", '>a</gen><copy lines="', "2", "-", '3"/>', "<eos>"]
    fsm = TokenFSM(TokenVocabulary(vocab, len(vocab) - 1))
    state = fsm.start(5)
    state = fsm.advance_text(state, '<copy lines="1-1').state
    steps = []
    for token in range(len(vocab) - 1):
        step = fsm.advance(state, token)
        steps.append((step.pieces, step.completed))
        state = step.state
    assert steps == [
        ((("tag", '"/>\n<gen>'), ("gen", "x")), (CopyLines(1, 1),)),
        ((("gen", "y</"),), ()),  # '</' turns out to be a tag only at the next token
        ((("tag", "gen>\n<"),), (Gen("xy"),)),
        ((("tag", "gen"),), ()),
        ((("tag", ">"), ("gen", "a"), ("tag", '</gen><copy lines="')), (Gen("a"),)),
        ((("tag", "2"),), ()),
        ((("tag", "-"),), ()),
        ((("tag", '3"/>'),), (CopyLines(2, 3),)),
    ]
    assert fsm.is_complete(state)


def test_gen_text_split_inside_a_character_is_exact_with_token_bytes():
    # 'é' = C3 A9 and '😀' = F0 9F 98 80, each split across two byte-level tokens
    raw = [b"<gen>", b"\xc3", b"\xa9", b" \xf0\x9f", b"\x98\x80</gen>", b"<eos>"]
    texts = [b.decode("utf-8", "replace") for b in raw]
    assert "\ufffd" in texts[1] and "\ufffd" in texts[4]
    fsm = TokenFSM(TokenVocabulary(texts, 5, token_bytes=raw))
    state = fsm.start(3)
    completed = []
    for token in range(5):
        assert token in fsm.allowed(state).ids
        step = fsm.advance(state, token)
        state, completed = step.state, completed + list(step.completed)
    assert completed == [Gen("é 😀")]
    assert step.pieces == (("gen", "\ufffd\ufffd"), ("tag", "</gen>"))  # two stray bytes
    # without bytes the text is what the token texts say
    plain = TokenFSM(TokenVocabulary(texts, 5))
    state = plain.start(3)
    for token in range(5):
        step = plain.advance(state, token)
        state = step.state
    assert step.completed == (Gen("".join(texts[1:4]) + texts[4][: -len("</gen>")]),)


def test_replacement_character_tokens_only_inside_gen_text():
    texts = ["<gen>", "\ufffd", "\ufffd<", "</gen>", "<", "gen>", "<eos>"]
    fsm = TokenFSM(TokenVocabulary(texts, 6))
    start = fsm.start(4)
    assert {texts[i] for i in fsm.allowed(start).ids} == {"<gen>", "<", "<eos>"}
    in_gen = fsm.advance(start, 0).state
    assert {1, 2} <= set(fsm.allowed(in_gen).ids)
    after_gen = fsm.advance(fsm.advance(in_gen, 1).state, 3).state
    assert {texts[i] for i in fsm.allowed(after_gen).ids} == {"<gen>", "<", "<eos>"}


def test_eos_only_when_complete_and_nothing_after_it(fsm):
    assert EOS in fsm.allowed(fsm.start(3)).ids
    state, _ = walk(fsm, 3, ["<copy", ' lines="', "1"])
    assert not fsm.is_complete(state)
    with pytest.raises(ValueError, match="EOS not allowed"):
        fsm.advance(state, EOS)
    state, _ = walk(fsm, 3, ["<gen>", "x", "</gen>", "\n"])
    end = fsm.advance(state, EOS).state
    assert fsm.is_complete(end)
    assert fsm.allowed(end).ids == ()
    with pytest.raises(ValueError):
        fsm.advance(end, TINY.index("<"))


@pytest.mark.parametrize(
    "n_lines, prefix, token",
    [
        (9, ["<copy", ' lines="'], "12"),  # 12 > n
        (15, ["<copy", ' lines="'], "0"),  # zero / leading zero
        (15, ["<copy", ' lines="', "12", "-"], "2"),  # J = 2 < I = 12
        (15, ["<copy", ' lines="', "5", "-", "1"], '"/>'),  # J = 1 < I = 5
        (15, ["<copy", ' lines="'], "-"),  # missing number
        (0, [], "<copy"),  # no lines to copy
        (15, ["<gen>"], "</gen>"),  # empty gen
        (15, ["<gen>", "x", "</gen>", "\n"], "\n"),  # a second newline
        (15, [], "\n"),  # a newline before any item
        (15, [], None),  # a special token
    ],
)
def test_advance_rejects_a_disallowed_token(fsm, n_lines, prefix, token):
    state, _ = walk(fsm, n_lines, prefix)
    token_id = TINY.index(token)
    assert token_id not in fsm.allowed(state).ids
    with pytest.raises(ValueError):
        fsm.advance(state, token_id)


def test_start_rejects_a_negative_line_count(fsm):
    with pytest.raises(ValueError):
        fsm.start(-1)


def test_keys_are_equal_exactly_for_equal_masks(fsm):
    masks = {}
    for n_lines, prefix, _ in n_lines__prefix__allowed:
        allowed = fsm.allowed(walk(fsm, n_lines, prefix)[0])
        masks.setdefault(allowed.key, set()).add(allowed.ids)
    assert all(len(ids) == 1 for ids in masks.values())
    assert fsm.allowed(fsm.start(5)).key == fsm.allowed(fsm.start(700)).key


DIGITS = ["<copy", ' lines="', *"0123456789", "10", "12", "-", '"/>', "<eos>"]


@pytest.mark.parametrize("n_lines", [1, 9, 10, 15, 100])
def test_every_copy_tag_reachable_and_in_range(n_lines):
    """Explore every token path through the copy tag: exactly the ranges 1 <= I <= J <= n are
    reachable, and every state reached has a way to finish its tag (no dead ends)."""
    fsm = TokenFSM(TokenVocabulary(DIGITS, len(DIGITS) - 1))
    tag_start = fsm.advance_text(fsm.start(n_lines), '<copy lines="').state
    ranges = set()
    finishes = {}

    def explore(state):
        if state in finishes:
            return finishes[state]
        ids = fsm.allowed(state).ids
        assert ids, f"dead end at {state}"
        finishes[state] = False
        for token_id in ids:
            step = fsm.advance(state, token_id)
            if step.completed:
                ranges.update((op.start, op.end) for op in step.completed)
                finishes[state] = True
            elif explore(step.state):
                finishes[state] = True
        return finishes[state]

    assert explore(tag_start)
    assert all(finishes.values())
    assert ranges == {(i, j) for i in range(1, n_lines + 1) for j in range(i, n_lines + 1)}


def test_first_number_is_bounded_by_the_line_count_with_i_12_of_15():
    fsm = TokenFSM(TokenVocabulary(DIGITS, len(DIGITS) - 1))
    state = fsm.advance_text(fsm.start(15), '<copy lines="12-').state
    assert {DIGITS[i] for i in fsm.allowed(state).ids} == {"1", "12"}
    state = fsm.advance_text(state, "1").state
    assert {DIGITS[i] for i in fsm.allowed(state).ids} == {"2", "3", "4", "5"}
    with pytest.raises(ValueError):
        fsm.advance_text(state, "6")


def test_allowed_equals_every_token_that_advances(fsm):
    """The mask (found by prefix search) agrees with walking each token, over random states."""
    rng = random.Random(7)
    checked = 0
    for n_lines in (0, 1, 9, 15, 100):
        state = fsm.start(n_lines)
        for _ in range(150):
            brute = set()
            for token_id, text in enumerate(TINY):
                try:
                    fsm.advance(state, token_id)
                    brute.add(token_id)
                except ValueError:
                    pass
            assert set(fsm.allowed(state).ids) == brute, state
            checked += 1
            token_id = rng.choice([i for i in brute if i != EOS])
            state = fsm.advance(state, token_id).state
    assert checked == 750


@pytest.mark.parametrize("n_lines", [0, 1, 9, 10, 15, 100])
def test_random_walks_render_valid_in_range_programs(fsm, n_lines):
    rng = random.Random(n_lines)
    for _ in range(200):
        state = fsm.start(n_lines)
        texts, ops = [], []
        while True:
            allowed = fsm.allowed(state)
            assert allowed.ids, f"empty mask at {state}"
            assert (EOS in allowed.ids) == fsm.is_complete(state)
            # EOS weighted so that programs have a few items
            weights = [3 if i == EOS else 1 for i in allowed.ids]
            token_id = rng.choices(allowed.ids, weights)[0]
            step = fsm.advance(state, token_id)
            state = step.state
            ops.extend(step.completed)
            if token_id == EOS:
                break
            texts.append(TINY[token_id])
            assert len(texts) < 2000
        program = "".join(texts)
        parsed = parse_program(program)
        assert parsed == ops, program
        for op in parsed:
            if isinstance(op, CopyLines):
                assert 1 <= op.start <= op.end <= n_lines, program
            else:
                assert isinstance(op, Gen) and op.text
