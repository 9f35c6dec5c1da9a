"""The remote decode loop's logic against a scripted fake server (unit tests: no network, no model).

The real server runs in tests/test_remote_llamacpp.py; here each request gets a scripted answer so
the i > j retry, the prompt growth after copies and gens, and the stop reasons are pinned down.
"""

from __future__ import annotations

from typing import Any, Iterator

from backend.core.program import parse_program
from backend.runtime.remote import remote_plain, remote_program
from backend.runtime.remote_client import Completion, RemoteError

SOURCE = "a = 1\nb = 2\nc = 3\nd = 4\n"


class FakeClient:
    """Answers request k with script[k] = (text pieces, finish_reason); records every body."""

    kind = "llamacpp"
    root = "http://fake"

    def __init__(self, script: list[tuple[list[str], str]]) -> None:
        self.script = list(script)
        self.bodies: list[dict[str, Any]] = []

    def body(self, prompt: str, **options: Any) -> dict[str, Any]:
        return {"prompt": prompt, **options}

    def stream(self, body: dict[str, Any]) -> Iterator[Any]:
        self.bodies.append(body)
        if not self.script:
            raise RemoteError("no more scripted answers")
        pieces, finish = self.script.pop(0)
        done = Completion(first_chunk_seconds=0.001, seconds=0.002)
        for piece in pieces:
            done.text += piece
            done.chunks += 1
            yield piece
        done.finish_reason = finish
        yield done

    def complete(self, body: dict[str, Any]) -> Completion:
        *_, last = self.stream(body)
        return last


def count(text: str) -> int:
    return len(text.split()) or (1 if text else 0)


def run(client: FakeClient, max_new_tokens: int = 100) -> tuple[list[Any], Any]:
    events = list(remote_program(client, SOURCE, "change b", counter=count, max_new_tokens=max_new_tokens))
    return events[:-1], events[-1].result


def test_copy_gen_copy_then_eos__output_and_prompt_growth() -> None:
    client = FakeClient([
        (['<copy lines="', '1-1'], "stop"),
        (["<gen>", "b = 5\n"], "stop"),
        (['<copy lines="3-4'], "stop"),
        ([], "stop"),
    ])
    events, result = run(client)
    assert result.stop_reason == "eos" and result.error is None
    assert result.output == "a = 1\nb = 5\nc = 3\nd = 4\n"
    assert parse_program(result.program) == parse_program('<copy lines="1-1"/><gen>b = 5\n</gen>\n<copy lines="3-4"/>')
    prompts = [b["prompt"] for b in client.bodies]
    # each request's prompt is the previous one plus the item and (for a copy) the copied text
    assert prompts[1] == prompts[0] + '<copy lines="1-1"/>a = 1\n'
    assert prompts[2] == prompts[1] + "<gen>b = 5\n</gen>\n"
    assert prompts[3] == prompts[2] + '<copy lines="3-4"/>c = 3\nd = 4\n'
    assert all(b["stop"] == ('"/>', "</gen>") for b in client.bodies)
    copies = [e.text for e in events if e.kind == "copy"]
    gens = "".join(e.text for e in events if e.kind == "gen")
    assert copies == ["a = 1\n", "c = 3\nd = 4\n"] and gens == "b = 5\n"
    assert result.metrics.copies == 2 and len(client.bodies) == 4


def test_start_after_end__second_number_asked_again_within_bounds() -> None:
    client = FakeClient([
        (['<copy lines="3-1'], "stop"),   # 3 > 1: the grammar cannot forbid it
        (["4"], "stop"),                  # the retry: second number bounded to 3..4
        ([], "stop"),
    ])
    _, result = run(client)
    assert result.output == "c = 3\nd = 4\n" and len(client.bodies) == 3
    retry = client.bodies[1]
    assert retry["prompt"].endswith('<copy lines="3-')
    assert "3" in retry["grammar"].regex and retry["stop"] == ('"/>',)


def test_retry_that_still_fails__error_not_exception() -> None:
    client = FakeClient([(['<copy lines="3-1'], "stop"), (["2"], "stop")])
    _, result = run(client)
    assert result.stop_reason == "error" and "start after end" in result.error


def test_server_ignoring_the_grammar__one_line_error() -> None:
    client = FakeClient([(["Sure! Here is the code"], "stop")])
    _, result = run(client)
    assert result.stop_reason == "error" and "enforce the grammar" in result.error


def test_length_stop__partial_keeps_completed_items() -> None:
    client = FakeClient([(['<copy lines="1-2'], "stop"), (["<gen>", "x x x"], "length")])
    _, result = run(client, max_new_tokens=50)
    assert result.stop_reason == "max_tokens" and result.partial
    assert result.output == "a = 1\nb = 2\nx x x"  # the unclosed gen's text is kept, as in-process


def test_unreachable_server__error_result() -> None:
    client = FakeClient([])
    _, result = run(client)
    assert result.stop_reason == "error" and "no more scripted" in result.error


def test_plain__streams_gen_events_then_done() -> None:
    client = FakeClient([(["a = 1\n", "b = 5\n"], "stop")])
    events = list(remote_plain(client, SOURCE, "x", counter=count, max_new_tokens=10))
    assert [e.kind for e in events] == ["gen", "gen", "done"]
    result = events[-1].result
    assert result.output == "a = 1\nb = 5\n" and result.stop_reason == "eos" and result.strategy == "ar"
    assert "grammar" not in client.bodies[0] and client.bodies[0]["max_tokens"] == 10


def test_early_end_after_a_copy__the_rest_is_copied_on_the_client() -> None:
    script = [(['<copy lines="', '1-1'], "stop"), (["<gen>", "b = 5\n"], "stop"), (['<copy lines="3-3'], "stop"), ([], "stop")]
    events = list(remote_program(FakeClient(script), SOURCE, "change b", counter=count, max_new_tokens=100, copy_rest=True))
    result = events[-1].result
    assert result.stop_reason == "eos" and result.output == "a = 1\nb = 5\nc = 3\nd = 4\n"
    assert result.metrics.copied_rest == "4-4" and result.metrics.copies == 3
    assert [e.text for e in events if e.kind == "copy"][-1] == "d = 4\n"
    assert result.program.endswith('<copy lines="4-4"/>')
    # off (the default of remote_program): the program as the model ended it, line 4 dropped
    _, raw = run(FakeClient(script))
    assert raw.output == "a = 1\nb = 5\nc = 3\n" and raw.metrics.copied_rest is None


def test_early_end_after_a_gen__nothing_is_added() -> None:
    script = [(['<copy lines="', '1-1'], "stop"), (["<gen>", "b = 5\n"], "stop"), ([], "stop")]
    events = list(remote_program(FakeClient(script), SOURCE, "change b", counter=count, max_new_tokens=100, copy_rest=True))
    assert events[-1].result.output == "a = 1\nb = 5\n" and events[-1].result.metrics.copied_rest is None


def test_after_a_copy_ending_on_a_blank_line__the_prompt_holds_the_next_opening() -> None:
    """A server would tokenise a prompt ending in a blank line as one `\\n\\n` token, where the
    trained context has `\\n` `\\n` before the next item's `<`: so the `<` goes into the prompt and
    the next grammar is the item without it (remote.held_lt)."""
    source = "a = 1\n\nb = 2\nc = 3\n"
    client = FakeClient([
        (['<copy lines="', '1-2'], "stop"),
        (["gen>", "b = 5\n"], "stop"),            # the server continues after the held `<`
        (['<copy lines="4-4'], "stop"),
        ([], "stop"),
    ])
    events = list(remote_program(client, source, "change b", counter=count, max_new_tokens=100))
    result = events[-1].result
    assert result.stop_reason == "eos" and result.error is None
    assert result.output == "a = 1\n\nb = 5\nc = 3\n"
    prompts = [b["prompt"] for b in client.bodies]
    assert prompts[1] == prompts[0] + '<copy lines="1-2"/>a = 1\n\n<'
    assert prompts[2] == prompts[1] + "gen>b = 5\n</gen>\n"        # the `<` once, not twice
    assert prompts[3] == prompts[2] + '<copy lines="4-4"/>c = 3\n'  # ends the input: nothing held
    grammars = [b["grammar"] for b in client.bodies]
    assert grammars[1].gbnf.startswith("root ::= item\n") and grammars[0].gbnf.startswith("root ::= item?\n")
    assert grammars[2] == grammars[0]
    assert "".join(e.text for e in events if e.kind == "gen") == "b = 5\n"


def test_the_prompt_is_in_the_style_the_served_model_was_trained_for() -> None:
    """A trained model served remotely gets its own prompt layout (models.yaml `prompt`), not the
    few-shot examples an untrained model needs."""
    from backend.runtime.prompt import _render, program_messages

    def first_prompt(**style: str) -> str:
        client = FakeClient([(['<copy lines="', '1-4'], "stop"), (["<"], "stop")])
        list(remote_program(client, SOURCE, "Replace `b = 2` with `b = 3`", counter=count, max_new_tokens=100, **style))
        return str(client.bodies[0]["prompt"])

    assert first_prompt() == _render(None, program_messages(SOURCE, "Replace `b = 2` with `b = 3`"))
    zero_shot = first_prompt(style="zero-shot")
    assert zero_shot == _render(None, program_messages(SOURCE, "Replace `b = 2` with `b = 3`", style="zero-shot"))
    assert len(zero_shot) < len(first_prompt()) and "Lines with `b = 2`: 2" in first_prompt(style="located")
