"""Chat templates on tiny random models of three families (ChatML, Llama 3, Gemma) with
their real template strings: rendered prompts, BOS rules, end-of-turn stops, records."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from chat_families import FAMILIES, Family, build_chat_model, make_model_end_turns

from pytest_llmeval import ModelError
from pytest_llmeval.dataset import load_items
from pytest_llmeval.eval import ChatSettings, TaskRunner
from pytest_llmeval.model import (
    GenerateRequest,
    LoglikelihoodRequest,
    ModelSettings,
    load_backend,
)
from pytest_llmeval.task import task_spec_from_dict

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

DESCRIPTION = "The following are questions about colours.\n\n"
SYSTEM = "Answer briefly."
SHOTS = [
    {"question": "What colour is the sky?", "options": ["red", "blue"], "answer": 1},
    {"question": "What colour is grass?", "options": ["green", "grey"], "answer": 0},
]
DOCS = [
    {"question": "What colour is snow?", "options": ["white", "black"], "answer": 0},
    {"question": "What colour is coal?", "options": ["pink", "black"], "answer": 1},
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("chat-data")
    (root / "colours.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return root


def _spec(mode: str, **prompt: Any) -> Any:
    data: dict[str, Any] = {
        "task": f"colours_{mode}",
        "dataset": {"path": "colours.jsonl"},
        "prompt": {
            "description": DESCRIPTION,
            "template": (
                "Question: {{ question }}\nA. {{ options[0] }}\nB. {{ options[1] }}\nAnswer:"
            ),
            "target": "{{ 'AB'[answer] }}",
            **prompt,
        },
        "fewshot": {"k": 2, "examples": SHOTS},
        "mode": mode,
    }
    if mode == "multiple_choice":
        data["multiple_choice"] = {"choices": ["A", "B"], "gold": "{{ answer }}"}
    else:
        data["generate"] = {"target": "{{ 'AB'[answer] }}", "max_new_tokens": 8, "stop": ["\n\n"]}
    return task_spec_from_dict(data)


@pytest.fixture(scope="module")
def family_dirs(chat_model_dirs: dict[str, Path]) -> dict[str, Path]:
    return chat_model_dirs


@pytest.fixture(scope="module")
def backends(family_dirs: dict[str, Path]) -> dict[str, Any]:
    return {
        name: load_backend(ModelSettings(model=str(path), batch_size=2))
        for name, path in family_dirs.items()
    }


def _expected_messages(family: Family, multiturn: bool, question: str) -> list[dict[str, str]]:
    """lm-eval's conversation for this item, written out by hand."""
    system = SYSTEM + "\n\n" + DESCRIPTION
    shots = [
        (
            f"Question: {s['question']}\nA. {s['options'][0]}\nB. {s['options'][1]}\nAnswer:",
            "AB"[s["answer"]],
        )  # type: ignore[index]
        for s in SHOTS
    ]
    if multiturn:
        turns = []
        for q, a in shots:
            turns += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        turns.append({"role": "user", "content": question})
    else:
        text = "".join(f"{q} {a}\n\n" for q, a in shots) + question
        turns = [{"role": "user", "content": text}]
    if family.system_role:
        return [{"role": "system", "content": system}, *turns]
    first = dict(turns[0])
    first["content"] = system + first["content"]  # folded: the seam already has whitespace
    return [first, *turns[1:]]


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("multiturn", [True, False])
@pytest.mark.parametrize("mode", ["multiple_choice", "generate"])
def test_rendered_prompt_is_apply_chat_template_of_lm_evals_messages(
    backends: dict[str, Any], data_dir: Path, family: str, multiturn: bool, mode: str
) -> None:
    backend = backends[family]
    runner = TaskRunner(
        _spec(mode), [data_dir], ChatSettings(mode="on", system_prompt=SYSTEM, multiturn=multiturn)
    )
    runner.bind(backend)
    item = load_items(runner.spec, [data_dir])[0]
    prepared = runner.prepare(item)
    expected = backend.tokenizer.apply_chat_template(
        _expected_messages(FAMILIES[family], multiturn, prepared.question),
        tokenize=False,
        add_generation_prompt=True,
    )
    assert prepared.prompt == expected
    assert prepared.prompt.endswith(
        {
            "chatml": "<|im_start|>assistant\n",
            "qwen": "<|im_start|>assistant\n",
            "llama3": "<|end_header_id|>\n\n",
            "gemma": "<start_of_turn>model\n",
        }[family]
    )
    # The shared prefix ends where the item's question starts.
    assert prepared.prompt[prepared.shared_prefix :].startswith(prepared.question.strip())


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("chat", ["on", "off"])
def test_bos_once_and_only_where_the_tokenizer_wants_it(
    backends: dict[str, Any], data_dir: Path, family: str, chat: str
) -> None:
    backend = backends[family]
    spec = FAMILIES[family]
    runner = TaskRunner(_spec("generate"), [data_dir], ChatSettings(mode=chat))
    runner.bind(backend)
    prompt = runner.prepare(load_items(runner.spec, [data_dir])[0]).prompt
    tokens = backend._encode_prompt(prompt)
    bos = backend.tokenizer.bos_token_id
    if spec.tokenizer_adds_bos:
        assert tokens[0] == bos and tokens[1] != bos, "exactly one BOS in front"
    elif chat == "off":
        assert bos not in tokens
    # The default encoding would put a second BOS in front of a template that writes one.
    if spec.tokenizer_adds_bos and chat == "on":
        assert backend.tokenizer(prompt)["input_ids"][:2] == [bos, bos]
    assert backend.bos_info()["add"] is spec.tokenizer_adds_bos


@pytest.mark.parametrize("family", ["llama3", "gemma"])
def test_log_likelihood_sees_one_bos(backends: dict[str, Any], data_dir: Path, family: str) -> None:
    backend = backends[family]
    runner = TaskRunner(_spec("multiple_choice"), [data_dir], ChatSettings(mode="on"))
    runner.bind(backend)
    context = runner.prepare(load_items(runner.spec, [data_dir])[0]).prompt
    got = backend.loglikelihood([LoglikelihoodRequest(context, "A")])[0]
    # Reference: the text's own tokens (the template's BOS parsed once), scored alone.
    tok = backend.tokenizer
    n = len(context) - len(context.rstrip())
    ctx_ids = tok(context[:-n] if n else context, add_special_tokens=False)["input_ids"]
    whole = tok(context + "A", add_special_tokens=False)["input_ids"]
    cont = whole[len(ctx_ids) :]
    with torch.inference_mode():
        logits = backend.model(input_ids=torch.tensor([whole[:-1]])).logits[0]
    logprobs = torch.log_softmax(logits.float(), -1)
    reference = sum(float(logprobs[len(ctx_ids) - 1 + i, t]) for i, t in enumerate(cont))
    assert math.isclose(got.logprob, reference, abs_tol=1e-4)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_generation_stops_on_the_end_of_turn_token(
    tmp_path: Path, data_dir: Path, family: str
) -> None:
    spec = FAMILIES[family]
    path = build_chat_model(tmp_path / family, spec)
    backend = load_backend(ModelSettings(model=str(path), batch_size=2))
    runner = TaskRunner(_spec("generate"), [data_dir], ChatSettings(mode="on"))
    runner.bind(backend)
    item = load_items(runner.spec, [data_dir])[0]
    prompt = runner.prepare(item).prompt
    ids = backend._encode_prompt(prompt)
    eot = make_model_end_turns(path, spec, ids)
    backend = load_backend(ModelSettings(model=str(path), batch_size=2))
    assert backend.chat_template().end_of_turn == spec.end_of_turn
    assert eot in backend.stop_tokens

    # The reference: transformers' generate, stopping on the same ids.
    with torch.inference_mode():
        free = backend.model.generate(
            torch.tensor([ids]),
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=backend.tokenizer.pad_token_id,
        )[0, len(ids) :].tolist()
    assert eot in free, "precondition: the model emits the end-of-turn token"
    stop_at = min(free.index(i) for i in backend.stop_tokens if i in free)
    if spec.eos != spec.end_of_turn:
        # Stopping on the tokenizer's EOS alone would run past the end of the turn.
        assert backend.tokenizer.eos_token_id not in free[: free.index(eot) + 1]

    out = backend.generate([GenerateRequest(prompt, max_new_tokens=12)])[0]
    assert out.finish_reason == "eos"
    assert out.stop_token == backend.stop_tokens[free[stop_at]]
    assert out.n_tokens == stop_at
    assert out.text == backend.tokenizer.decode(free[:stop_at], skip_special_tokens=True)

    runner = TaskRunner(_spec("generate"), [data_dir], ChatSettings(mode="on"))
    result = runner.run([item], backend)[0]
    assert result.stop_token == out.stop_token
    assert result.output == out.text
    assert result.messages is not None and result.messages[-1]["role"] == "user"
    assert result.bos_added is (spec.tokenizer_adds_bos and spec.bos not in prompt[:20])


def test_choices_continue_the_assistant_turn_without_delimiter(
    backends: dict[str, Any], data_dir: Path
) -> None:
    seen: list[LoglikelihoodRequest] = []
    backend = backends["chatml"]

    class Recording:
        batch_size = 2

        def loglikelihood(self, requests):  # type: ignore[no-untyped-def]
            seen.extend(requests)
            return backend.loglikelihood(requests)

        def generate(self, requests):  # type: ignore[no-untyped-def]
            return backend.generate(requests)

        def chat_template(self):  # type: ignore[no-untyped-def]
            return backend.chat_template()

        def info(self):  # type: ignore[no-untyped-def]
            return backend.info()

    for chat, continuations in (("on", {"A", "B"}), ("off", {" A", " B"})):
        seen.clear()
        runner = TaskRunner(_spec("multiple_choice"), [data_dir], ChatSettings(mode=chat))
        runner.run(load_items(runner.spec, [data_dir]), Recording())  # type: ignore[arg-type]
        assert {r.continuation for r in seen} == continuations
        assert all(r.context.endswith("assistant\n") == (chat == "on") for r in seen)


def test_auto_follows_the_model_and_on_without_template_says_what_to_do(
    tiny_model_dir: Path, backends: dict[str, Any], data_dir: Path
) -> None:
    plain = load_backend(ModelSettings(model=str(tiny_model_dir), batch_size=2))
    assert plain.chat_template() is None
    runner = TaskRunner(_spec("generate"), [data_dir], ChatSettings(mode="auto"))
    runner.bind(plain)
    assert runner.template is None
    assert runner.prompt_record()["chat_template"] is None
    runner = TaskRunner(_spec("generate"), [data_dir], ChatSettings(mode="auto"))
    runner.bind(backends["chatml"])
    assert runner.template is not None
    record = runner.prompt_record()
    assert record["chat_template"]["source"] == "tokenizer"
    assert len(record["chat_template"]["sha256"]) == 64
    assert record["fewshot_multiturn"] is True
    with pytest.raises(
        ModelError, match=r"has no chat template.*--llm-set prompt.chat_template_file"
    ):
        TaskRunner(_spec("generate"), [data_dir], ChatSettings(mode="on")).bind(plain)


def test_spec_pin_wins_over_the_run(backends: dict[str, Any], data_dir: Path) -> None:
    runner = TaskRunner(_spec("generate", chat="off"), [data_dir], ChatSettings(mode="on"))
    runner.bind(backends["chatml"])
    assert runner.template is None
    assert runner.prompt_record()["chat_mode"] == {
        "requested": "off",
        "by": "spec (prompt.chat)",
        "applied": False,
    }
    pinned_on = TaskRunner(_spec("generate", chat="on"), [data_dir], ChatSettings(mode="off"))
    pinned_on.bind(backends["gemma"])
    assert pinned_on.template is not None
    # A mode given on the command line wins over the pin.
    forced = TaskRunner(
        _spec("generate", chat="on"), [data_dir], ChatSettings(mode="off", forced=True)
    )
    forced.bind(backends["gemma"])
    assert forced.template is None
    assert forced.prompt_record()["chat_mode"]["by"] == "run, over the spec's prompt.chat"


def test_template_file_overrides_the_models_own(
    family_dirs: dict[str, Path], data_dir: Path, tmp_path: Path
) -> None:
    from chat_families import LLAMA3_TEMPLATE

    template = tmp_path / "llama3.jinja"
    template.write_text(LLAMA3_TEMPLATE)
    backend = load_backend(
        ModelSettings(model=str(family_dirs["chatml"]), chat_template_file=str(template))
    )
    chat = backend.chat_template()
    assert chat is not None and chat.source == f"file:{template}"
    rendered = chat.render([{"role": "user", "content": "Hi"}])  # type: ignore[misc]
    assert rendered.startswith("<|im_start|><|start_header_id|>user")  # its bos_token
    with pytest.raises(ModelError, match="cannot be read"):
        load_backend(
            ModelSettings(model=str(family_dirs["chatml"]), chat_template_file=str(tmp_path / "no"))
        )


def _form_spec(**form: Any) -> Any:
    """A generative spec with a chat form: another question, an assistant prefix, no stop."""
    data: dict[str, Any] = {
        "task": "colours_form",
        "dataset": {"path": "colours.jsonl"},
        "prompt": {"template": "Q: {{ question }}\nA:"},
        "mode": "generate",
        "generate": {"target": "{{ options[answer] }}", "max_new_tokens": 8, "stop": ["\n"]},
        "chat_form": {
            "prompt": {
                "template": "Answer with one colour.\n{{ question }}\n",
                "assistant_prefix": "The colour of {{ question.split()[-1] }} is\n",
                **form,
            },
            "generate": {"stop": []},
        },
    }
    return task_spec_from_dict(data)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("multiturn", [True, False])
def test_chat_form_applies_under_the_template_and_continues_the_prefix(
    backends: dict[str, Any], data_dir: Path, family: str, multiturn: bool
) -> None:
    """Under a chat template the task runs in its chat form: the form's question as the user
    turn and the assistant prefix as an open assistant turn, rendered as lm-eval renders a
    gen_prefix (transformers' continue_final_message, which drops a prefix's trailing
    whitespace under templates that trim, such as Llama 3's)."""
    backend = backends[family]
    spec = _form_spec()
    runner = TaskRunner(spec, [data_dir], ChatSettings(mode="on", multiturn=multiturn))
    runner.bind(backend)
    assert runner.spec is spec.chat_form and runner.chat_form_applied is True
    prepared = runner.prepare(load_items(runner.spec, [data_dir])[0])
    expected = backend.tokenizer.apply_chat_template(
        [
            {"role": "user", "content": "Answer with one colour.\nWhat colour is snow?\n"},
            {"role": "assistant", "content": "The colour of snow? is\n"},
        ],
        tokenize=False,
        continue_final_message=True,
    )
    assert prepared.prompt == expected
    assert "The colour of snow? is" in prepared.prompt
    assert not prepared.prompt.rstrip().endswith(FAMILIES[family].end_of_turn)
    assert runner.spec.generate is not None and runner.spec.generate.stop == ()


def test_without_a_template_the_spec_runs_as_written(
    backends: dict[str, Any], data_dir: Path
) -> None:
    spec = _form_spec()
    runner = TaskRunner(spec, [data_dir], ChatSettings(mode="off"))
    runner.bind(backends["chatml"])
    assert runner.spec is spec and runner.chat_form_applied is False
    prepared = runner.prepare(load_items(runner.spec, [data_dir])[0])
    assert prepared.prompt == "Q: What colour is snow?\nA:"
    assert runner.spec.generate is not None and runner.spec.generate.stop == ("\n",)
