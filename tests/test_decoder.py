"""The constrained decoder: valid programs under sampling, exact reference replay, jump-forward,
copy events, cancel. `tiny_model` (random weights, the real SmolLM2 tokenizer) for logic,
`smol_model` (the embedded SmolLM2-135M) for truth."""

import dataclasses
import threading

import pytest
import torch

from backend.data.corpora import load_corpus
from backend.core.fsm import TokenFSM
from backend.core.lines import line_count
from backend.core.oracle import oracle_program
from backend.core.program import CopyLines, ProgramError, parse_program
from backend.core.resolve import resolve_program
from backend.core.token_vocabulary import TokenVocabulary
from backend.runtime.decoder import decode_program
from backend.runtime.grammar import Grammar
from backend.runtime.program_text import ProgramStream, encode_text
from backend.runtime.prompt import prompt_style, reference_program
from backend.tokenizers import TextTokenizer

SOURCE = "def add(a, b):\n    total = a - b\n    return total\n\n\nprint(add(1, 2))\n"


_GRAMMARS: dict[int, Grammar] = {}


def grammar_for(loaded):
    """One Grammar per tokenizer for this module's tests (as an engine keeps one per model)."""
    key = id(loaded.tokenizer)
    if key not in _GRAMMARS:
        _GRAMMARS[key] = Grammar.for_model(loaded)
    return _GRAMMARS[key]


def run(loaded, source, instruction="Fix the bug.", **options):
    events = list(decode_program(loaded, source, instruction, grammar=grammar_for(loaded), **options))
    assert [e.kind for e in events].count("done") == 1 and events[-1].kind == "done"
    return events[:-1], events[-1].result


def assert_valid(loaded, source, events, result):
    """The program is a valid (prefix of a) program for this input, and the events tell the same
    story as the result."""
    assert result.error is None or result.partial
    fsm = grammar_for(loaded).fsm
    step = fsm.advance_text(fsm.start(line_count(source)), result.program)  # raises if not a valid prefix
    completed = list(step.completed)
    for op in completed:
        if isinstance(op, CopyLines):
            assert 1 <= op.start <= op.end <= line_count(source)
    if result.stop_reason in ("eos", "complete"):
        assert not result.partial and result.error is None
        assert fsm.is_complete(step.state)
        assert resolve_program(parse_program(result.program), source) == result.output
    else:
        assert result.partial and result.stop_reason in ("max_tokens", "cancel")
        assert result.output.startswith(resolve_program(completed, source))
    program = "".join(e.text for e in events if e.kind in ("tag", "gen"))
    assert result.program.startswith(program)
    assert "".join(e.text for e in events if e.kind in ("copy", "gen")) == result.output
    m = result.metrics
    assert m.program_tokens == m.tokens_tag + m.tokens_generated
    assert sum(e.tokens for e in events if e.kind != "copy") == m.program_tokens
    assert sum(e.tokens for e in events if e.kind == "copy") == m.tokens_copied
    assert [e.forwards for e in events] == sorted(e.forwards for e in events)
    assert m.forwards <= m.program_tokens + 1


# -- sampling: every program is valid ----------------------------------------------------------


@pytest.mark.parametrize("seeds", [range(0, 10), range(10, 20), range(20, 30), range(30, 40), range(40, 50)])
def test_temperature_one_sampling_gives_valid_programs(tiny_model, seeds):
    for seed in seeds:
        events, result = run(tiny_model, SOURCE, max_new_tokens=60, temperature=1.0, seed=seed)
        assert result.mode == "model" and result.strategy == "cad"
        assert_valid(tiny_model, SOURCE, events, result)


class TagLoving(torch.nn.Module):
    """The tiny model with tag tokens favoured, so sampled programs open and close items and stop:
    a fixed bias, plus a bias on what follows the last input token ("</" -> "gen" -> ">")."""

    def __init__(self, inner, bias, follow):
        super().__init__()
        self.inner = inner
        self.config = inner.config
        self.register_buffer("bias", bias)
        self.follow = follow

    def forward(self, input_ids=None, position_ids=None, use_cache=True, logits_to_keep=1, cache=None, **kw):
        out = self.inner(input_ids=input_ids, position_ids=position_ids, use_cache=use_cache,
                         logits_to_keep=logits_to_keep, cache=cache, **kw)
        logits = out.logits + self.bias
        nxt = self.follow.get(int(input_ids[0, -1]))
        if nxt is not None:
            logits[0, -1, nxt] += 30.0
        out.logits = logits
        return out


@pytest.fixture(scope="module")
def tag_loving(tiny_model):
    tokenizer = tiny_model.tokenizer

    def one(text):
        (token,) = encode_text(tokenizer, text)
        return token

    bias = torch.zeros(tiny_model.vocab_size)
    weights = {"</": 12, "<": 11, "copy": 11, "gen": 10, '"/>': 10, "-": 10, "\n": 9, **{d: 10 for d in "123456"}}
    for text, weight in weights.items():
        bias[one(text)] = float(weight)
    bias[tokenizer.convert_tokens_to_ids("<|im_end|>")] = 11.0  # as likely as "<": some programs end within 60 tokens
    follow = {one("</"): one("gen"), one("gen"): one(">")}
    return dataclasses.replace(tiny_model, model=TagLoving(tiny_model.model, bias, follow).eval())


@pytest.mark.parametrize("seeds", [range(0, 10), range(10, 20)])
def test_tag_heavy_sampling_gives_complete_valid_programs(tag_loving, seeds):
    stops = []
    for seed in seeds:
        events, result = run(tag_loving, SOURCE, max_new_tokens=60, temperature=1.0, seed=seed)
        assert_valid(tag_loving, SOURCE, events, result)
        stops.append(result.stop_reason)
    assert "eos" in stops  # complete programs, resolved


def test_same_seed_same_program(tag_loving):
    first = run(tag_loving, SOURCE, max_new_tokens=40, temperature=1.0, seed=7)[1]
    second = run(tag_loving, SOURCE, max_new_tokens=40, temperature=1.0, seed=7)[1]
    assert first.program == second.program and first.output == second.output


def test_tag_drafts_change_no_program_in_model_mode(tag_loving):
    # The model writes its own program (sampled, seeded: the draws happen at the same choices in
    # the same order); drafted tag openings are kept only where the model chose them itself.
    accepted = 0
    for seed in range(8):
        options = dict(max_new_tokens=60, temperature=1.0, seed=seed)
        drafted = run(tag_loving, SOURCE, **options)[1]
        plain = run(tag_loving, SOURCE, tag_drafts=False, **options)[1]
        assert (drafted.program, drafted.output, drafted.stop_reason) == (plain.program, plain.output, plain.stop_reason)
        assert drafted.metrics.forwards == plain.metrics.forwards - drafted.metrics.tag_drafts_accepted
        accepted += drafted.metrics.tag_drafts_accepted
    assert accepted > 0


def test_empty_source_allows_gens_only(tag_loving):
    for seed in range(5):
        events, result = run(tag_loving, "", max_new_tokens=30, temperature=1.0, seed=seed)
        assert_valid(tag_loving, "", events, result)
        fsm = grammar_for(tag_loving).fsm
        step = fsm.advance_text(fsm.start(0), result.program)
        assert not any(isinstance(op, CopyLines) for op in step.completed)
        assert not any(e.kind == "copy" for e in events)


def test_max_new_tokens_stops_partial(tiny_model):
    events, result = run(tiny_model, SOURCE, max_new_tokens=5, temperature=1.0, seed=3)
    assert result.stop_reason == "max_tokens" and result.partial
    assert result.metrics.program_tokens >= 5
    assert_valid(tiny_model, SOURCE, events, result)


# -- cancel ------------------------------------------------------------------------------------


@pytest.mark.parametrize("forced", [False, True])
def test_cancel_stops_with_a_partial_result(tiny_model, forced):
    cancel = threading.Event()
    options = {"max_new_tokens": 200, "temperature": 1.0, "seed": 1, "cancel": cancel}
    if forced:
        target = SOURCE.replace("a - b", "a + b") + "# " + "done " * 40 + "\n"
        options["force_program"] = reference_program(oracle_program(SOURCE, target, objective="cost"))
    events = []
    for event in decode_program(tiny_model, SOURCE, "x", **options):
        events.append(event)
        if len(events) == 3:
            cancel.set()
    result = events[-1].result
    assert result.stop_reason == "cancel" and result.partial
    assert len(events) <= 3 + 6  # the events of the token in flight, then done
    assert_valid(tiny_model, SOURCE, events[:-1], result)


# -- reference replay: exact -------------------------------------------------------------------


def replay(loaded, source, target):
    grammar = grammar_for(loaded)
    tokenizer = TextTokenizer("t", lambda text: encode_text(loaded.tokenizer, text), grammar.token_bytes)
    program = reference_program(oracle_program(source, target, objective="cost", tokenize=tokenizer))
    events, result = run(loaded, source, max_new_tokens=None, force_program=program)
    assert result.mode == "reference" and result.stop_reason == "complete", result.error
    assert result.program == program
    assert_valid(loaded, source, events, result)
    return events, result


EDGE_CASES = {
    "crlf": ("a = 1\r\nb = 2\r\nc = 3\r\nd = 4\r\ne = 5\r\n", "a = 1\r\nb = 2\r\nc = 30\r\nd = 4\r\ne = 5\r\n"),
    "lone-cr": ("one\rtwo\rthree\rfour\rfive\r", "one\rtwo\rTHREE\rfour\rfive\r"),
    "no-trailing-newline": ("x = 1\ny = 2\nz = 3\nw = 4\nreturn x", "x = 1\ny = 2\nz = 3\nw = 4\nreturn x + y"),
    "non-ascii": (
        "# café naïve\nname = 'Zoë'\ngreet = '你好'\nwave = '👋'\nend = 1\n",
        "# café naïve\nname = 'Zoë'\ngreet = '你好世界'\nwave = '👋😀'\nend = 1\n",
    ),
    "closing-tag-in-text": ("a = 1\nb = 2\nc = 3\nd = 4\n", "a = 1\nb = 2\nhtml = '</gen>'\nc = 3\nd = 4\n"),
    "special-token-text": ("s = 'x'\nt = 1\nu = 2\nv = 3\n", "s = '<|im_end|>'\nt = 1\nu = 2\nv = 3\n"),
    "delete-only": ("1\n2\n3\n4\n5\n6\n7\n8\n", "1\n2\n3\n6\n7\n8\n"),
    "reorder": ("alpha()\nbeta()\ngamma()\ndelta()\n", "gamma()\ndelta()\nalpha()\nbeta()\n"),
    "empty-source": ("", "new file\n"),
    "empty-target": ("gone\n", ""),
    "unchanged": (SOURCE, SOURCE),
}


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_reference_replay_is_exact_on_edge_cases(tiny_model, name):
    source, target = EDGE_CASES[name]
    events, result = replay(tiny_model, source, target)
    assert result.output == target
    assert "\ufffd" not in "".join(e.text for e in events)


def test_copy_events_carry_the_copied_text(tiny_model):
    source = "".join(f"line {i}\n" for i in range(1, 21))
    target = source.replace("line 10\n", "line ten\n")
    events, result = replay(tiny_model, source, target)
    copies = [op for op in parse_program(result.program) if isinstance(op, CopyLines)]
    copy_events = [e for e in events if e.kind == "copy"]
    assert [e.text for e in copy_events] == [resolve_program([op], source) for op in copies]
    assert len(copy_events) == 2
    for event in copy_events:
        assert event.tokens == len(encode_text(tiny_model.tokenizer, event.text))
    assert result.metrics.tokens_copied == sum(e.tokens for e in copy_events)
    # each copy enters the cache with the forward that also carries its tag's last tokens
    kinds = [e.kind for e in events]
    for index, kind in enumerate(kinds):
        if kind == "copy":
            assert kinds[index - 1] == "tag" and events[index - 1].text.endswith('"/>')
            assert events[index].forwards == events[index - 1].forwards


class RecordingHandle:
    """A model handle that keeps every cache it hands out, to read the decoding context back."""

    def __init__(self, loaded):
        self.loaded, self.caches = loaded, []

    def __getattr__(self, name):
        return getattr(self.loaded, name)

    def new_cache(self):
        self.caches.append(self.loaded.new_cache())
        return self.caches[-1]


@pytest.mark.parametrize("tag_drafts", [True, False])
def test_decoding_context_is_the_trained_context_when_a_copy_ends_on_a_blank_line(tiny_model, tag_drafts):
    """The trainer tokenises each answer whole: a copy's text ending on a blank line is `\n` `\n`
    before the `<gen>` after it, where the text tokenised alone ends in one `\n\n` token. The
    trained SmolLM2 adapter chose EOS after that unseen context (docs/results.md)."""
    from backend.training.examples import encode_example

    source = "import os\n\ndef main():\n    return os.getcwd()\n"
    program = '<copy lines="1-2"/><gen># the entry point\n</gen>\n<copy lines="3-4"/>'
    handle = RecordingHandle(tiny_model)
    events = list(decode_program(handle, source, "Comment the entry point.", grammar=grammar_for(tiny_model),
                                 max_new_tokens=None, force_program=program, tag_drafts=tag_drafts))
    assert events[-1].result.output == resolve_program(parse_program(program), source)
    record = {"id": "t", "kind": "insert", "source": source, "instruction": "Comment the entry point.", "program": program}
    trained = encode_example(tiny_model.tokenizer, record, eos_id=tiny_model.eos_ids[0], style=prompt_style(tiny_model))
    assert handle.caches[-1].token_ids == list(trained.input_ids[:-1])  # all but the EOS the model would choose
    blank_pair = encode_text(tiny_model.tokenizer, "\n\n")  # what the copy's text alone ends with
    assert len(blank_pair) == 1 and blank_pair[0] not in handle.caches[-1].token_ids[-40:]


def test_jump_forward_saves_forwards(tiny_model):
    source = "".join(f"value_{i} = {i}\n" for i in range(1, 31))
    target = source.replace("value_7 = 7\n", "value_7 = 70\n").replace("value_20 = 20\n", "")
    events, result = replay(tiny_model, source, target)
    m = result.metrics
    assert m.jump_forward_tokens > 0
    # one forward per chosen token; forced tokens and copies ride along with the token before them,
    # and so do the predicted openings of the next item (tag drafts) where the program has them
    assert m.tag_drafts_accepted > 0
    assert m.forwards == m.program_tokens - m.jump_forward_tokens - m.tag_drafts_accepted
    assert m.forwards < m.program_tokens + m.copies
    assert m.forwards < m.output_tokens


def test_gen_text_split_inside_a_character_comes_out_whole(tiny_model):
    # an emoji is 4 bytes; byte-level BPE may give it in pieces: no event may show half of it
    source = "a = 1\n"
    target = "a = 1\nb = '🦜🦜🦜 𝔘𝔫𝔦𝔠𝔬𝔡𝔢'\n"
    events, result = replay(tiny_model, source, target)
    assert result.output == target
    assert all("\ufffd" not in e.text for e in events)


def test_program_stream_withholds_a_possible_closing_tag():
    stream = ProgramStream()
    assert stream.feed(b"<gen>a</") == [("tag", "<gen>"), ("gen", "a")]
    assert stream.withheld == "</"
    assert stream.feed(b"div>") == [("gen", "</div>")]
    assert stream.feed(b"<</ge") == [("gen", "<")]
    assert stream.feed(b"n>\n<") == [("tag", "</gen>\n<")]
    assert stream.feed("gen>\U0001F600".encode()[:7]) == [("tag", "gen>")]  # 3 of the emoji's 4 bytes
    assert stream.feed("\U0001F600".encode()[3:]) == [("gen", "\U0001F600")]


def test_masks_ban_tokens_that_would_split_a_copy_from_its_text():
    texts = ["<", 'copy lines="', "1", "-", '"/>', '"/>\n', '"', "/>", "\n", '"/><', "x", None]
    vocabulary = TokenVocabulary(texts, eos_id=11)
    grammar = Grammar(vocabulary, TokenFSM(vocabulary), len(texts), "cpu")
    fsm = grammar.fsm
    state = fsm.start(3)
    for token in (0, 1, 2, 3, 2):  # <copy lines="1-1
        state = fsm.advance(state, token).state
    assert set(fsm.allowed(state).ids) >= {4, 5, 6, 9}
    assert set(grammar.allowed_ids(state)) == {4, 6}  # '"/>' and '"'; never '"/>\n' or '"/><'
    mask = grammar.mask(state)
    assert [i for i in range(len(texts)) if not mask[i]] == [4, 6]
    between = fsm.advance(state, 4).state
    assert set(grammar.allowed_ids(between)) == {0, 8, 11}  # '<', '\n', EOS


def test_bad_forced_programs_are_rejected(tiny_model):
    with pytest.raises(ProgramError):
        next(decode_program(tiny_model, "a\n", "x", max_new_tokens=None, force_program="<gen>open"))
    with pytest.raises(ValueError, match="input has 1 lines"):
        next(decode_program(tiny_model, "a\n", "x", max_new_tokens=None, force_program='<copy lines="1-2"/>'))
    with pytest.raises(ValueError, match="max_new_tokens"):
        next(decode_program(tiny_model, "a\n", "x", max_new_tokens=0))


# -- the real model -----------------------------------------------------------------------------


HUMANEVALPACK_INDICES = (0, 1, 10)


@pytest.fixture(scope="module")
def humanevalpack_python():
    return load_corpus("humanevalpack-python")


@pytest.mark.parametrize("index", HUMANEVALPACK_INDICES)
def test_reference_replay_is_exact_on_humanevalpack_with_smollm2(smol_model, humanevalpack_python, index):
    case = humanevalpack_python[index]
    events, result = replay(smol_model, case.source, case.target)
    assert result.output == case.target, case.id
    assert result.metrics.copies == sum(e.kind == "copy" for e in events) > 0
    assert result.metrics.boundary_retokenized == 0  # SmolLM2 has no token past '"/>'


def test_smollm2_greedy_program_is_valid(smol_model, humanevalpack_python):
    case = humanevalpack_python[2]
    events, result = run(smol_model, case.source, f"Fix bugs in {case.meta['entry_point']}.", max_new_tokens=40)
    assert_valid(smol_model, case.source, events, result)
    assert result.metrics.tokens_per_second > 0
