"""The `rayspec` command: generate, and the tree tools."""

from __future__ import annotations

import json
import re

import pytest

from rayspec import cli
from rayspec.cli import main
from rayspec.tree.structure import TreeShape


def test_generate_prints_the_text_then_a_summary_line(capsys):
    assert main(["generate", "--prompt", "def add(a, b):", "--max-new-tokens", "12", "--temperature", "0",
                 "--tree", "kary:2x2", "--threads", "1"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("def add(a, b):")
    assert "tokens/step" in out[-1] and "tokens/s" in out[-1] and "12 tokens" in out[-1]


def test_generate_takes_max_tokens_and_writes_nothing_for_a_request_it_refuses(capsys):
    assert main(["generate", "--prompt", "def add(a, b):", "--max-tokens", "5", "--temperature", "0",
                 "--threads", "1"]) == 0
    assert "] 5 tokens in" in capsys.readouterr().out
    assert main(["generate", "--prompt", "def add(a, b):", "--max-tokens", "-5", "--threads", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "rayspec: error: max_new_tokens must be a whole number, 1 or more, got -5\n"


def test_generate_refuses_bad_sampling_flags_before_it_loads_the_models(capsys, monkeypatch):
    monkeypatch.setattr(cli, "load_pair", lambda args: pytest.fail("the models were loaded first"))
    for flags, message in ((["--top-p", "1.5"], "top_p must be in (0, 1]"),
                           (["--presence-penalty", "5"], "presence_penalty must be in [-2, 2]"),
                           (["--temperature", "-1"], "temperature must be >= 0")):
        assert main(["generate", "--prompt", "x", *flags]) == 2, flags
        assert message in capsys.readouterr().err, flags


def test_ctrl_c_during_a_command_is_a_line_and_status_130_not_a_traceback(capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt  # as Ctrl-C lands mid-forward

    monkeypatch.setattr(cli, "load_pair", interrupted)
    assert main(["generate", "--prompt", "x"]) == 130
    assert capsys.readouterr().err.strip() == "rayspec: interrupted"


def test_generate_applies_a_repetition_penalty(capsys):
    def text(*penalty):
        assert main(["generate", "--prompt", "def add(a, b):", "--max-new-tokens", "24", "--temperature", "0",
                     "--tree", "kary:2x2", "--threads", "1", "--quiet-summary", *penalty]) == 0
        return capsys.readouterr().out

    plain, penalised = text(), text("--repetition-penalty", "2.0")
    assert plain != penalised and penalised.startswith("def add(a, b):")
    assert main(["generate", "--prompt", "x", "--presence-penalty", "5", "--threads", "1"]) == 2
    assert "presence_penalty must be in [-2, 2]" in capsys.readouterr().err


def test_generate_applies_min_tokens_and_ignore_eos(capsys):
    """At seed 2 the demo target draws EOS after 4 tokens of "pass\\n": --ignore-eos runs on
    to --max-new-tokens; --min-tokens bans EOS from the first tokens, and a stop string the
    first tokens complete does not stop them."""
    def run(*extra):
        assert main(["generate", "--prompt", "pass\n", "--max-new-tokens", "32", "--temperature", "1", "--seed", "2",
                     "--tree", "kary:2x2", "--threads", "1", *extra]) == 0
        out = capsys.readouterr().out.splitlines()
        tokens = int(re.search(r"\] (\d+) tokens in", out[-1]).group(1))
        return "\n".join(out[:-1]), tokens

    plain, plain_tokens = run()
    ignored, ignored_tokens = run("--ignore-eos")
    assert plain_tokens < 10 and ignored_tokens == 32 and ignored.startswith(plain.rstrip("\n"))
    held, held_tokens = run("--min-tokens", "10")
    assert held_tokens >= 10 and held != plain and held.startswith("pass\n")
    # nothing left to ban: the EOS ignored and no stop ids
    assert run("--min-tokens", "10", "--ignore-eos") == (ignored, 32)
    stop = ignored[len("pass\n"):].split()[1][:3]  # in the text of the first tokens (" gettest" at seed 2)
    cut, cut_tokens = run("--ignore-eos", "--stop", stop)
    assert cut_tokens < 10 and len(cut) < len(ignored) and stop not in cut
    assert ignored.count(stop) == 1  # so, past the first 10 tokens, nothing stops the completion
    assert run("--ignore-eos", "--min-tokens", "10", "--stop", stop) == (ignored, 32)
    kept, kept_tokens = run("--ignore-eos", "--stop", stop, "--include-stop-str-in-output")
    assert kept_tokens == cut_tokens and kept == ignored[: ignored.index(stop) + len(stop)]
    shown, shown_tokens = run("--ignore-eos", "--no-skip-special-tokens")  # the EOS drawn after "pass\n..." shows
    assert shown_tokens == 32 and "<|endoftext|>" in shown and shown.replace("<|endoftext|>", "") == ignored
    assert main(["generate", "--prompt", "x", "--min-p", "2", "--threads", "1"]) == 2
    assert "min_p must be in [0, 1] (0 disables it), got 2.0" in capsys.readouterr().err
    assert main(["generate", "--prompt", "x", "--min-tokens", "-1", "--threads", "1"]) == 2
    assert "min_tokens must be in [0, 2^31), got -1" in capsys.readouterr().err


def test_generate_applies_min_p(capsys):
    def text(*extra):
        assert main(["generate", "--prompt", "def add(a, b):", "--max-new-tokens", "24", "--temperature", "1.5",
                     "--seed", "3", "--tree", "kary:2x2", "--threads", "1", "--quiet-summary", *extra]) == 0
        return capsys.readouterr().out

    plain, truncated = text(), text("--min-p", "0.3")
    assert plain != truncated and truncated.startswith("def add(a, b):")


def test_generate_refuses_a_bad_tree_with_a_message(capsys):
    assert main(["generate", "--prompt", "x", "--tree", "kary:3", "--threads", "1"]) == 2
    assert "bad tree spec 'kary:3'" in capsys.readouterr().err


def test_tree_build_writes_the_dp_tree_and_its_drawing(tmp_path, capsys):
    vector = tmp_path / "v.json"
    vector.write_text(json.dumps({"acceptance": [0.6, 0.15, 0.05]}))
    out = tmp_path / "tree.json"
    assert main(["tree", "build", "--vector", str(vector), "--budget", "16", "--max-depth", "5", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    shape = TreeShape.from_json(data)  # parents, child_rank in breadth-first order
    assert shape.size == 16 and shape.max_depth <= 5 and data["expected_tokens"] > 2
    assert out.with_suffix(".png").stat().st_size > 1000
    assert "16 nodes" in capsys.readouterr().out


def test_tree_measure_writes_a_vector_with_its_evidence(tmp_path, capsys):
    assert main(["tree", "measure", "--verifier", "rrsw", "--width", "4", "--temperature", "1.0", "--prompts", "2",
                 "--max-new-tokens", "16", "--out", str(tmp_path), "--threads", "1"]) == 0
    data = json.loads((tmp_path / "rrsw_t1.00.json").read_text())
    assert len(data["acceptance"]) == 4 and data["samples"] > 0 and len(data["ci95"]) == 4
    assert data["setting"]["verifier"] == "rrsw" and data["setting"]["temperature"] == 1.0
    assert 0 <= sum(data["acceptance"]) <= 1 and (tmp_path / "rrsw_t1.00.png").exists()


def test_tree_measure_writes_nothing_when_no_draft_was_verified(tmp_path, capsys, monkeypatch):
    """Completions that all end before a step drafts measure nothing: their vector of zeros was
    written over the measured one."""
    import rayspec.engine
    import rayspec.engine.measure
    from rayspec.tree.acceptance import RankCounts, estimate

    class Tokenizer:
        def encode(self, text, add_special_tokens):
            return [1]

    monkeypatch.setattr(cli, "load_pair", lambda args: (None, "drafter", Tokenizer()))
    monkeypatch.setattr(rayspec.engine, "SpeculativeEngine", lambda *args, **kwargs: None)
    monkeypatch.setattr(rayspec.engine.measure, "measure_acceptance",
                        lambda *args, **kwargs: estimate(RankCounts.zeros(2, 1), depth_aware=False))
    measured = tmp_path / "rrsw_t0.60.json"
    measured.write_text('{"acceptance": [0.9, 0.5], "samples": 5000}')
    assert main(["tree", "measure", "--prompts", "2", "--max-new-tokens", "2", "--width", "2",
                 "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"rayspec: error: no draft was verified on 2 prompt(s) of at most 2 new "
                                       f"tokens: nothing measured, {measured} not written; give more prompts or "
                                       f"tokens\n")
    assert measured.read_text() == '{"acceptance": [0.9, 0.5], "samples": 5000}'
    assert [p.name for p in tmp_path.iterdir()] == ["rrsw_t0.60.json"]


def test_tree_plan_prints_a_choice_and_a_predicted_speedup(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["tree", "plan", "--verifier", "spechub", "--temperature", "0.6", "--max-budget", "32",
                 "--rtt-ms", "2", "--out", str(out), "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    assert "predicted speedup over target-only" in printed
    assert "measured for spechub: target verify" in printed  # the verifier's own walk and levels
    plan = json.loads(out.read_text())
    assert TreeShape.from_json(plan).max_children <= 2 and plan["predicted_speedup"] > 0
    assert set(plan["costs"]["walk_seconds"]) == {"rrsw", "spechub"}


def test_tree_plan_takes_a_depth_aware_vector(tmp_path, capsys, monkeypatch):
    """`tree measure --depth-aware` writes a row per depth, and the library hands such a vector
    out: `tree plan` crashed on it (TypeError) once it had calibrated, printing the vector."""
    import rayspec.engine
    from rayspec.engine.calibrate import Costs
    from rayspec.tree.planner import MeasuredTimes
    from rayspec.tree.sequoia import solve

    class Target:
        vocab_size = 64

    class Engine:
        def __init__(self, *args, **kwargs):
            pass

        def costs(self):
            return Costs(MeasuredTimes((1, 4, 16), (0.010, 0.011, 0.012)), MeasuredTimes((1, 16), (0.001, 0.001)), 0.0)

    monkeypatch.setattr(cli, "load_pair", lambda args: (Target(), "drafter", None))
    monkeypatch.setattr(rayspec.engine, "SpeculativeEngine", Engine)
    rows = [[0.6, 0.1, 0.05], [0.5, 0.1, 0.05], [0.4, 0.1, 0.02]]
    vector = tmp_path / "rrsw_t0.60.json"
    vector.write_text(json.dumps({"acceptance": rows}))
    out = tmp_path / "plan.json"
    assert main(["tree", "plan", "--vector", str(vector), "--max-budget", "16", "--out", str(out)]) == 0
    assert f"vector ({vector}): {rows}" in capsys.readouterr().out
    plan = json.loads(out.read_text())
    assert plan["acceptance"] == rows
    assert plan["expected_tokens"] == pytest.approx(solve(rows, plan["budget"], plan["max_depth"]).value())


def test_tree_plan_refuses_a_negative_draft_top_k(capsys):
    assert main(["tree", "plan", "--draft-top-k", "-3"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "rayspec: error: --draft-top-k must be a whole number, 0 (off) or more, got -3"


def test_tree_plan_refuses_to_plan_without_a_drafter(capsys):
    assert main(["tree", "plan", "--no-drafter"]) == 2
    assert "planning a tree needs a drafter" in capsys.readouterr().err


def test_generate_restricts_the_tokens_to_the_allowed_ones(capsys):
    """Every id the demo tokenizer writes with letters only, at T = 0: the greedy text over them."""
    from transformers import AutoTokenizer

    from rayspec.demo import TARGET_PATH

    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    letters = [i for i in range(tokenizer.vocab_size) if tokenizer.decode([i]).strip().isalpha()]

    def text(*extra):
        assert main(["generate", "--prompt", "def add(a, b):", "--max-new-tokens", "12", "--temperature", "0",
                     "--tree", "kary:2x2", "--threads", "1", "--quiet-summary", *extra]) == 0
        return capsys.readouterr().out[len("def add(a, b):"):].strip()

    plain = text()
    restricted = text("--allowed-token-ids", *map(str, letters))
    assert not plain.replace(" ", "").isalpha() and restricted.replace(" ", "").isalpha() and len(restricted) >= 12
    assert main(["generate", "--prompt", "x", "--allowed-token-ids", "3", "99999", "--threads", "1"]) == 2
    assert "allowed_token_ids names token 99999, outside the vocabulary" in capsys.readouterr().err


def test_generate_takes_a_logit_bias_and_stop_token_ids(capsys):
    from transformers import AutoTokenizer

    from rayspec.demo import TARGET_PATH

    token = AutoTokenizer.from_pretrained(str(TARGET_PATH)).encode(" banana", add_special_tokens=False)[0]

    def run(*extra):
        assert main(["generate", "--prompt", "def add(a, b):", "--max-new-tokens", "6", "--temperature", "0",
                     "--tree", "kary:2x2", "--threads", "1", *extra]) == 0
        return capsys.readouterr().out.splitlines()

    plain, biased = run(), run("--logit-bias", f"{token}=100")
    biased_text = biased[0][len("def add(a, b):"):]
    assert plain[0] != biased[0] and biased_text.count(biased_text[:4]) >= 3, biased_text  # one token, over and over
    stopped = run("--logit-bias", "5=1", "--logit-bias", f"{token}=100", "--stop-token-ids", "3",
                  "--stop-token-ids", str(token))  # repeated flags add up
    assert stopped[0] == "def add(a, b):" and "] 0 tokens in" in stopped[-1]
    assert main(["generate", "--prompt", "x", "--logit-bias", "5=1", "5=-1", "--threads", "1"]) == 2
    assert "logit_bias: token 5 is negative or given twice" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["generate", "--prompt", "x", "--logit-bias", "5"])
    assert exited.value.code == 2 and "a logit bias is ID=BIAS, such as 42=-5; got '5'" in capsys.readouterr().err
    assert main(["generate", "--prompt", "x", "--logit-bias", "5=500", "--threads", "1"]) == 2
    assert "logit_bias" in capsys.readouterr().err


def test_generate_never_writes_a_bad_word(capsys):
    """At T = 0 the demo pair writes " return" after `def add(a, b):`'s docstring; banned, it
    writes another word there (the ban is case-sensitive: "Return" stays)."""

    def text(*extra):
        assert main(["generate", "--prompt", "def add(a, b):", "--max-new-tokens", "12", "--temperature", "0",
                     "--tree", "kary:2x2", "--threads", "1", "--quiet-summary", *extra]) == 0
        return capsys.readouterr().out[len("def add(a, b):"):]

    plain, banned = text(), text("--bad-words", "return", "--bad-words", "string of a")
    assert " return" in plain and "string of a" in plain
    assert " return" not in banned and "string of a" not in banned and "Return" in banned
    assert main(["generate", "--prompt", "x", "--bad-words", " ", "--threads", "1"]) == 2
    assert "bad_words: a word must have a character other than spaces" in capsys.readouterr().err


def test_generate_follows_a_json_schema_or_a_choice_and_refuses_an_unenforced_schema(tmp_path, capsys):
    schema = {"type": "object", "properties": {"debug": {"type": "boolean"}}, "required": ["debug"]}
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    assert main(["generate", "--prompt", "config = ", "--json-schema", str(tmp_path / "schema.json"), "--seed", "1",
                 "--max-new-tokens", "40", "--threads", "1"]) == 0
    text = capsys.readouterr().out.splitlines()[0]
    assert set(json.loads(text.removeprefix("config = "))) == {"debug"}
    for seed in ("1", "2"):
        assert main(["generate", "--prompt", "Weather:", "--choice", "sunny", "cold and wet", "--seed", seed,
                     "--temperature", "1", "--threads", "1"]) == 0
        assert capsys.readouterr().out.splitlines()[0] in ("Weather:sunny", "Weather:cold and wet")
    bounded = json.dumps({"type": "object", "properties": {"port": {"type": "integer", "maximum": 9}}})
    assert main(["generate", "--prompt", "x", "--json-schema", bounded, "--threads", "1"]) == 2
    captured = capsys.readouterr()
    assert "json_schema uses properties.port.maximum" in captured.err and captured.out == ""


def test_generate_refuses_a_structured_output_with_ignore_eos_before_building_it_or_loading_the_models(capsys,
                                                                                                      monkeypatch):
    from rayspec.engine import structured

    monkeypatch.setattr(cli, "load_pair", lambda args: pytest.fail("the models were loaded first"))
    monkeypatch.setattr(structured, "_in_compiler", lambda *args: pytest.fail("the schema's expression was built"))
    schema = json.dumps({"type": "object", "properties": {"debug": {"type": "boolean"}}, "required": ["debug"]})
    assert main(["generate", "--prompt", "x", "--json-schema", schema, "--ignore-eos"]) == 2
    captured = capsys.readouterr()
    assert "ignore_eos cannot be combined with structured output" in captured.err and captured.out == ""


def test_bad_arguments_are_one_error_line_before_any_model_loads(tmp_path, capsys, monkeypatch):
    """A mistake is said in one line (exit status 2), before minutes of loading a model for it:
    no traceback, no output file, no vector of zeros written over a measured one."""
    import rayspec.cli

    def no_loading(args):
        raise AssertionError("the models were loaded for arguments that are refused")

    monkeypatch.setattr(rayspec.cli, "load_pair", no_loading)
    (tmp_path / "list.json").write_text("[0.5, 0.2]")
    (tmp_path / "ok.json").write_text('{"acceptance": [0.6, 0.2]}')
    cases = [
        (["tree", "build", "--vector", str(tmp_path / "list.json")], "an acceptance vector file is a JSON object"),
        (["tree", "plan", "--vector", str(tmp_path / "list.json")], "an acceptance vector file is a JSON object"),
        (["tree", "build", "--vector", str(tmp_path / "ok.json"), "--budget", "100000"],
         "--budget 100000: a tree has at most 1024 nodes"),
        (["tree", "build", "--vector", str(tmp_path / "ok.json"), "--out", str(tmp_path)], "Is a directory"),
        (["tree", "build", "--vector", str(tmp_path / "ok.json"), "--budget", "0"],
         "argument --budget: a whole number, 1 or more, is needed, got '0'"),
        (["tree", "measure", "--prompts", "0", "--out", str(tmp_path)],
         "argument --prompts: a whole number, 1 or more, is needed, got '0'"),
        (["generate", "--prompt", "x", "--threads", "-1"], "argument --threads: a whole number, 1 or more"),
        # bytes that are no UTF-8, as a Latin-1 terminal passes "café" (Python's surrogate escapes)
        (["generate", "--prompt", "caf\udce9"], "--prompt is not valid Unicode text: it holds a lone surrogate"),
        (["generate", "--prompt", "x", "--bad-words", "caf\udce9"], "--bad-words is not valid Unicode text"),
        (["generate", "--prompt", "x", "--prediction", "y", "--tree", "kary:2x3"],
         "with a prediction the tree is a chain of predicted tokens: give chain:N (N at least 1) or no tree "
         "(chain:8), not 'kary:2x3'"),
        (["generate", "--prompt", "x", "--prediction", "y", "--tree", "chain:0"],  # was decoded, never drafting it
         "give chain:N (N at least 1) or no tree (chain:8), not 'chain:0'"),
        (["tree", "plan", "--max-budget", "0"], "argument --max-budget: a whole number, 1 or more"),
        # the HTTP API refuses min_tokens above max_tokens; the flags were taken, and held no token back
        (["generate", "--prompt", "x", "--json-schema", "schema.json"],  # the bare OSError's line, flag unnamed
         "--json-schema is a schema's JSON text (an object, beginning with {) or a file holding it: [Errno 2] No "
         "such file or directory: 'schema.json'"),
        (["generate", "--prompt", "x", "--max-new-tokens", "4", "--min-tokens", "10"],
         "min_tokens must be between 0 and max_tokens (4), got 10"),
        (["tree", "measure", "--depth-aware", "-1"], "argument --depth-aware: a whole number, 0 or more"),
        # the JSON was written, then its drawing (out.with_suffix(".png") == out) over it
        (["tree", "build", "--vector", str(tmp_path / "ok.json"), "--out", str(tmp_path / "tree.png")],
         f"--out {tmp_path / 'tree.png'}: the tree JSON is written there and its drawing beside it as .png; "
         f"give a name that does not end in .png, such as {tmp_path / 'tree.json'}"),
        (["tree", "plan", "--out", str(tmp_path / "plan.PNG")], f"--out {tmp_path / 'plan.PNG'}: the tree JSON"),
        # measured 0 samples, and wrote their vector of zeros over the measured one
        (["tree", "measure", "--max-new-tokens", "1", "--out", str(tmp_path)],
         "--max-new-tokens 1: a step with one token left drafts nothing (it emits the target's own token), "
         "so no draft would be measured; give 2 or more"),
        (["tree", "measure", "--prompts", "101", "--out", str(tmp_path)],  # was quietly 100
         "--prompts 101: there are 100 held-out prompts"),
        (["tree", "plan", "--temperature", "-1"], "temperature must be >= 0 and finite, got -1.0"),  # was planned
        (["tree", "measure", "--temperature", "-1", "--out", str(tmp_path)],  # refused only once loaded
         "temperature must be >= 0 and finite, got -1.0"),
    ]
    for argv, message in cases:
        try:
            status = main(argv)
        except SystemExit as exit:
            status = exit.code
        err = capsys.readouterr().err
        assert status == 2 and message in err.strip().splitlines()[-1] and "Traceback" not in err, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["list.json", "ok.json"]


@pytest.mark.parametrize("flag", ["--stop-token-ids", "--allowed-token-ids"])
def test_generate_refuses_a_negative_token_id_before_the_models_load_in_the_http_apis_words(flag, capsys,
                                                                                             monkeypatch):
    """Refused once the models had loaded, in other words than HTTP's: "stop token -5 is outside
    the vocabulary of 8192 tokens", "allowed_token_ids: token ids are >= 0, got -5"."""
    monkeypatch.setattr(cli, "load_pair", lambda args: pytest.fail("the models were loaded first"))
    assert main(["generate", "--prompt", "x", flag, "3", "-5"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1] == \
        f"rayspec: error: {flag} must be a list of token ids (integers >= 0)"
    assert captured.out == ""


def test_with_a_prediction_the_tree_is_the_chain_it_is_drafted_in(capsys):
    """--tree chain:2 was the engine's tree, and the prediction went in the default chain of 8."""
    common = ["generate", "--prompt", "def f(x):", "--temperature", "0", "--max-new-tokens", "24", "--threads", "1"]
    assert main([*common, "--no-drafter"]) == 0
    out = capsys.readouterr().out
    completion = out[len("def f(x):"): out.rindex("\n[")]  # the text, before its summary line
    assert main([*common, "--prediction", completion, "--tree", "chain:2"]) == 0
    summary = capsys.readouterr().out.splitlines()[-1]
    assert summary.startswith("[greedy, tree sequoia:auto, prediction chain:2] 24 tokens in 8 steps"), summary


def test_a_device_torch_does_not_know_is_an_error_line(capsys):
    assert main(["generate", "--prompt", "x", "--device", "tpu"]) == 2
    assert capsys.readouterr().err.strip() == "rayspec: error: device must be auto, cpu, cuda or cuda:N; got 'tpu'"


@pytest.mark.parametrize("device", ["meta", "mps"])
def test_a_device_rayspec_does_not_decode_on_is_an_error_line(capsys, device):
    """meta (tensors without values) passed and failed mid-decode with a traceback."""
    assert main(["generate", "--prompt", "x", "--device", device, "--threads", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"rayspec: error: device must be auto, cpu, cuda or cuda:N; got {device!r}\n"
    assert captured.out == ""
