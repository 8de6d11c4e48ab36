"""The `rayspec` command.

    rayspec generate --prompt "def fibonacci(n):" --verifier rrsw --tree kary:2x4 --temperature 0.6 --seed 1
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from pathlib import Path

from rayspec.engine.trees import MAX_TREE_NODES, TREE_SPEC_HELP

DEFAULT_TREE = "sequoia:auto"


def at_least(least: int):
    """An argparse `type`: a whole number, `least` or more."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < least:
            raise argparse.ArgumentTypeError(f"a whole number, {least} or more, is needed, got {text!r}")
        return value

    return whole


def _read_vector(path: str):
    """The acceptance vector of a JSON file (`rayspec tree measure`'s, or {"acceptance": [...]})."""
    from rayspec.tree.acceptance import AcceptanceEstimate

    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("acceptance"), list):
        raise ValueError(f'{path}: an acceptance vector file is a JSON object {{"acceptance": [p1, ..., pW], ...}}')
    try:
        return AcceptanceEstimate.from_json(data).acceptance
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: not an acceptance vector: {error}") from None


def _bias(text: str) -> tuple[int, float]:
    """A --logit-bias pair, ID=BIAS."""
    token, _, bias = text.partition("=")
    try:
        return int(token), float(bias)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a logit bias is ID=BIAS, such as 42=-5; got {text!r}") from None


def _add_sampling_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-new-tokens", "--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0, help="0 (or -1) disables top-k")
    parser.add_argument("--presence-penalty", type=float, default=0.0, help="OpenAI's, in [-2, 2]")
    parser.add_argument("--frequency-penalty", type=float, default=0.0, help="OpenAI's, in [-2, 2]")
    parser.add_argument("--repetition-penalty", type=float, default=1.0, help="HF's and vLLM's; 1 is off")
    parser.add_argument("--min-p", type=float, default=0.0, help="vLLM's, in [0, 1]; 0 is off")
    parser.add_argument("--min-tokens", type=int, default=0, help="vLLM's: no stop before this many new tokens")
    parser.add_argument("--ignore-eos", action="store_true", help="vLLM's: EOS does not end the completion")
    parser.add_argument("--allowed-token-ids", type=int, nargs="+", default=(), metavar="ID",
                        help="vLLM's: the only tokens that can be drawn")
    parser.add_argument("--seed", type=int, default=None, help="a seed makes the output reproducible")


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default=None, help="checkpoint path or hub id (default: the demo target)")
    parser.add_argument("--drafter", default=None, help="checkpoint path or hub id (default: the demo drafter)")
    parser.add_argument("--no-drafter", action="store_true", help="target-only decoding")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--dtype", default="auto", help="auto (float32 on CPU, bfloat16 on CUDA), float32, float16, bfloat16")
    parser.add_argument("--threads", type=at_least(1), default=None, help="torch CPU threads (default: torch's choice)")


def acceptance_dir(args):
    """Where the pair's measured acceptance vectors are: the demo pair ships its own."""
    return getattr(args, "acceptance_dir", None) or (None if args.target else _demo_acceptance())


def load_pair(args):
    """(target, drafter or None, tokenizer) as in-process engine handles."""
    from rayspec.demo import DRAFTER_PATH, TARGET_PATH
    from rayspec.engine import LocalDrafter, LocalTarget
    from rayspec.models import load_causal_lm

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    target_model, tokenizer = load_causal_lm(args.target or TARGET_PATH, args.device, args.dtype)
    drafter = None
    if not args.no_drafter:
        drafter = LocalDrafter(*load_causal_lm(args.drafter or DRAFTER_PATH, args.device, args.dtype))
    return LocalTarget(target_model, tokenizer), drafter, tokenizer


def structured_output(args):
    """The `StructuredOutput` the flags ask for (None: free text)."""
    from rayspec.engine.structured import StructuredOutput

    asked = {"json_schema": args.json_schema, "json_object": args.json_object or None, "regex": args.regex,
             "choice": args.choice}
    asked = {kind: value for kind, value in asked.items() if value is not None}
    if not asked:
        return None
    if "json_schema" in asked and not asked["json_schema"].lstrip().startswith("{"):
        try:
            asked["json_schema"] = Path(asked["json_schema"]).read_text()  # a file's name
        except OSError as error:  # its bare message named neither the flag nor the schema's text
            raise ValueError(f"--json-schema is a schema's JSON text (an object, beginning with {{) or a file "
                             f"holding it: {error}") from None
    return StructuredOutput(**asked)


def cmd_generate(args) -> int:
    from rayspec.engine import GenerationStats, SpeculativeEngine
    from rayspec.engine.prediction import prediction_chain
    from rayspec.engine.requests import check_min_tokens, check_token_ids
    from rayspec.engine.text import TextAssembler
    from rayspec.unicode_text import check_text
    from rayspec.verify.processing import SamplingParams

    # The flags' values are checked before the models load (a real pair's load takes minutes).
    SamplingParams(args.temperature, args.top_p, args.top_k, presence_penalty=args.presence_penalty,
                   frequency_penalty=args.frequency_penalty, repetition_penalty=args.repetition_penalty,
                   logit_bias=args.logit_bias, min_p=args.min_p, min_tokens=args.min_tokens)
    if args.max_new_tokens >= 1:  # (a length below is the engine's to refuse, in its words)
        check_min_tokens(args.min_tokens, args.max_new_tokens)  # as the HTTP API's min_tokens and max_tokens
    for flag, ids in (("--stop-token-ids", args.stop_token_ids), ("--allowed-token-ids", args.allowed_token_ids)):
        check_token_ids(ids, flag)  # their ids' vocabulary is the loaded target's to check
    structured = structured_output(args)
    if structured is not None:
        from rayspec.engine.structured import check_structured

        if args.ignore_eos:  # refused before a schema's expression is built and the pair loads; its EOS needs the pair
            check_structured(structured, ignore_eos=True, eos_token_ids=())
        structured.to_regex()  # a bad schema is refused before anything is written
    texts = {"--prompt": [args.prompt], "--prediction": [args.prediction] if args.prediction else [],
             "--bad-words": args.bad_words}
    for flag, values in texts.items():  # bytes from the shell that are no UTF-8 (an ISO-8859-1 terminal's)
        for value in values:
            check_text(value, flag)
    # With a prediction, --tree is the request's: the chain its tokens are drafted in.
    engine_tree, request_tree = (DEFAULT_TREE, args.tree) if args.prediction else (args.tree or DEFAULT_TREE, None)
    if request_tree is not None:
        prediction_chain(request_tree)
    target, drafter, tokenizer = load_pair(args)
    verifier = args.verifier or ("greedy" if args.temperature == 0 else "rrsw")
    engine = SpeculativeEngine(target, drafter, verifier=verifier, tree=engine_tree, tokenizer=tokenizer,
                               acceptance_dir=acceptance_dir(args))
    prompt_ids = tokenizer.encode(args.prompt, add_special_tokens=args.add_special_tokens)
    assembler = TextAssembler(tokenizer, args.stop or (), prompt_ids, args.min_tokens,
                              args.include_stop_str_in_output, args.skip_special_tokens)
    stats = GenerationStats()
    chunks = engine.generate(
        prompt_ids, max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
        top_k=args.top_k, presence_penalty=args.presence_penalty, frequency_penalty=args.frequency_penalty,
        repetition_penalty=args.repetition_penalty, min_p=args.min_p, min_tokens=args.min_tokens,
        ignore_eos=args.ignore_eos, allowed_token_ids=args.allowed_token_ids, bad_words=args.bad_words,
        seed=args.seed, stop=[*(args.stop or ()), *args.stop_token_ids], skip_special_tokens=args.skip_special_tokens,
        stats=stats, logit_bias=args.logit_bias,
        prediction=tokenizer.encode(args.prediction, add_special_tokens=False) if args.prediction else None,
        tree=request_tree, structured_output=structured,
    )
    first = next(chunks, None)  # the request is checked (and its first step decoded) before anything is written
    sys.stdout.write(args.prompt)
    try:
        for chunk in itertools.chain([first] if first is not None else [], chunks):
            sys.stdout.write(assembler.push_chunk(chunk.tokens, chunk.finish_reason, chunk.stop_reason))
            sys.stdout.flush()
    finally:  # a failure mid-way is reported on a line of its own
        sys.stdout.write(assembler.finish() + "\n")
    trees = engine_tree + (f", prediction {request_tree}" if request_tree else "") if drafter else "none"
    print(f"[{verifier}, tree {trees}] {stats.summary()}", file=sys.stderr if args.quiet_summary else sys.stdout)
    return 0


def cmd_serve(args) -> int:
    from rayspec.cluster.actors import ServiceStartError
    from rayspec.cluster.launch import serve_forever
    from rayspec.serve.config import ServiceConfig

    config = ServiceConfig.from_yaml(args.config) if args.config else ServiceConfig()
    # $RAYSPEC_API_KEY checked now, as the file was, not by `Service` once Ray has started
    config = dataclasses.replace(config, api_key=config.resolved_api_key)
    try:
        return serve_forever(config, args.address)
    except ServiceStartError as error:
        print(f"rayspec serve: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the ready line: what had started is stopped
        print("rayspec serve: stopped while starting", file=sys.stderr)
        return 130


def _check_temperature(temperature: float) -> None:
    """The sampler's own check of a temperature (`SamplingParams`), before the models load:
    `tree measure` refused a negative one only once they had, and `tree plan` planned for it."""
    from rayspec.verify.processing import SamplingParams

    SamplingParams(temperature=temperature)


def _json_out(out: str) -> Path:
    """The path of a tree JSON whose drawing goes beside it, with the suffix .png: a name that
    already ends so had its JSON written and then drawn over."""
    path = Path(out)
    if path.suffix.lower() == ".png":
        raise ValueError(f"--out {out}: the tree JSON is written there and its drawing beside it as .png; "
                         f"give a name that does not end in .png, such as {path.with_suffix('.json')}")
    return path


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def cmd_tree_measure(args) -> int:
    from rayspec.demo import load_prompts
    from rayspec.engine import SpeculativeEngine
    from rayspec.engine.measure import measure_acceptance
    from rayspec.engine.policy import vector_file_name
    from rayspec.tree.draw import draw_acceptance
    from rayspec.verify import verifier_class

    # Before the models load, and before a vector of zeros is written over a measured one.
    _check_temperature(args.temperature)
    if args.max_new_tokens < 2:
        raise ValueError(f"--max-new-tokens {args.max_new_tokens}: a step with one token left drafts nothing "
                         "(it emits the target's own token), so no draft would be measured; give 2 or more")
    texts = load_prompts()
    if args.prompts > len(texts):
        raise ValueError(f"--prompts {args.prompts}: there are {len(texts)} held-out prompts")
    target, drafter, tokenizer = load_pair(args)
    if drafter is None:
        raise ValueError("measuring acceptance needs a drafter")
    width = min(args.width, verifier_class(args.verifier).max_drafts or args.width)
    engine = SpeculativeEngine(target, drafter, verifier=args.verifier, tree="chain:1", tokenizer=tokenizer)
    prompts = [tokenizer.encode(p, add_special_tokens=False) for p in texts[:args.prompts]]
    found = measure_acceptance(
        engine, prompts, args.verifier, args.temperature, width, args.max_new_tokens, args.depth_aware,
        setting={"target": str(args.target or "demo"), "drafter": str(args.drafter or "demo")},
    )
    path = Path(args.out) / vector_file_name(args.verifier, args.temperature)
    if not found.samples.reshape(-1)[0]:  # every completion ended before a step drafted
        raise ValueError(f"no draft was verified on {len(prompts)} prompt(s) of at most {args.max_new_tokens} "
                         f"new tokens: nothing measured, {path} not written; give more prompts or tokens")
    _write_json(path, found.to_json())
    draw_acceptance(found.acceptance, path.with_suffix(".png"), ci95=found.ci95,
                    title=f"{args.verifier}, T = {args.temperature:g}, {int(found.samples if found.samples.ndim == 0 else found.samples[0])} nodes")
    print(f"acceptance {[round(float(a), 4) for a in found.acceptance.reshape(-1)][:width]} "
          f"(none {float(found.none.reshape(-1)[0]):.4f}, {int(found.samples.reshape(-1)[0])} samples) -> {path}")
    return 0


def cmd_tree_build(args) -> int:
    from rayspec.tree.draw import draw_tree
    from rayspec.tree.sequoia import planned_tree, tree_to_json

    if args.budget > MAX_TREE_NODES:
        raise ValueError(f"--budget {args.budget}: a tree has at most {MAX_TREE_NODES} nodes, "
                         "as the engine drafts them")
    out = _json_out(args.out)
    vector = _read_vector(args.vector)
    tree = planned_tree(vector, args.budget, args.max_depth, args.max_children)
    _write_json(out, tree_to_json(tree))
    draw_tree(tree.shape, out.with_suffix(".png"), acceptance=vector,
              title=f"Sequoia tree: {tree.shape.size} nodes, depth {tree.shape.max_depth}, E[tokens/step] {tree.expected_tokens:.3f}")
    print(f"{tree.shape.size} nodes, depth {tree.shape.max_depth}, expected tokens/step {tree.expected_tokens:.4f} -> {out}")
    return 0


def cmd_tree_plan(args) -> int:
    import numpy as np

    from rayspec.engine import SpeculativeEngine
    from rayspec.engine.local import check_draft_top_k
    from rayspec.engine.policy import AcceptanceLibrary, step_cost_model
    from rayspec.tree.draw import draw_tree
    from rayspec.tree.planner import plan_tree
    from rayspec.tree.sequoia import expected_tokens
    from rayspec.verify import verifier_class

    check_draft_top_k(args.draft_top_k, "--draft-top-k")  # before the models load
    _check_temperature(args.temperature)
    out = _json_out(args.out) if args.out else None
    if args.no_drafter:
        raise ValueError("planning a tree needs a drafter: its costs are half of what a tree is planned on")
    if args.vector:
        vector, source = _read_vector(args.vector), args.vector
    else:
        vector, source = AcceptanceLibrary(acceptance_dir(args)).lookup(args.verifier, args.temperature)
    target, drafter, tokenizer = load_pair(args)
    engine = SpeculativeEngine(target, drafter, verifier=args.verifier, tree="chain:1", tokenizer=tokenizer,
                               acceptance_dir=acceptance_dir(args))  # each verifier's walks on its planned trees
    costs = engine.costs()
    cost = step_cost_model(
        costs, args.verifier, target.vocab_size, rtt=args.rtt_ms / 1e3, draft_rtt=args.draft_rtt_ms / 1e3,
        bandwidth=args.bandwidth_gbps * 1e9 / 8 if args.bandwidth_gbps else float("inf"),
        draft_top_k=args.draft_top_k, temperature=args.temperature,
    )
    budgets = [n for n in costs.target.sizes if n <= args.max_budget]
    best = plan_tree(vector, cost, budgets, args.max_depth, verifier_class(args.verifier).max_drafts)
    verifying, levels = costs.target_for(args.verifier, args.temperature), costs.levels_for(args.verifier)
    print(f"measured for {args.verifier}: target verify "
          + ", ".join(f"{n}:{s * 1e3:.1f}ms" for n, s in zip(verifying.sizes, verifying.seconds)))
    print("          drafter per level " + ", ".join(f"{w}:{s * 1e3:.2f}ms" for w, s in zip(levels.sizes, levels.seconds)))
    # A depth-aware vector (`tree measure --depth-aware`, or the library's) has a row per depth.
    shown = [[round(float(a), 3) for a in row[:8]] for row in np.atleast_2d(np.asarray(vector, dtype=np.float64))]
    print(f"vector ({source}): {shown[0] if np.ndim(vector) == 1 else shown}")
    print(f"plan for {args.verifier} at T = {args.temperature:g}: {best.shape.size} nodes, depth {best.shape.max_depth}, "
          f"{best.tokens_per_step:.3f} tokens/step, {best.seconds_per_token * 1e3:.2f} ms/token, "
          f"predicted speedup over target-only {best.speedup:.2f}x")
    if out is not None:
        _write_json(out, {"parents": list(best.shape.parents), "child_rank": list(best.shape.child_rank),
                          "expected_tokens": expected_tokens(best.shape, vector), "budget": best.budget,
                          "max_depth": best.max_depth, "acceptance": np.asarray(vector, dtype=np.float64).tolist(),
                          "seconds_per_token": best.seconds_per_token, "predicted_speedup": best.speedup,
                          "costs": costs.to_json(), "rtt_ms": args.rtt_ms, "bandwidth_gbps": args.bandwidth_gbps})
        draw_tree(best.shape, out.with_suffix(".png"), acceptance=vector,
                  title=f"planned: {best.shape.size} nodes, {best.speedup:.2f}x predicted")
    return 0


def _demo_acceptance():
    from rayspec.demo import DEMO_DIR

    return DEMO_DIR / "acceptance"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rayspec", description="Tree speculative decoding.")
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="generate text in this process")
    generate.add_argument("--prompt", required=True)
    _add_sampling_args(generate)
    generate.add_argument("--verifier", default=None, help="default: rrsw, or greedy at temperature 0")
    generate.add_argument("--tree", default=None, help=f"{TREE_SPEC_HELP} (default: {DEFAULT_TREE})")
    generate.add_argument("--acceptance-dir", default=None, help="measured acceptance vectors (default: the demo pair's)")
    generate.add_argument("--stop", action="append", help="stop string (repeatable)")
    generate.add_argument("--stop-token-ids", type=int, nargs="+", action="extend", default=[], metavar="ID",
                          help="vLLM's: tokens that end the completion as EOS does (repeatable)")
    generate.add_argument("--logit-bias", type=_bias, nargs="+", action="extend", default=[], metavar="ID=BIAS",
                          help="OpenAI's: BIAS in [-100, 100] added to token ID's logit (repeatable)")
    generate.add_argument("--bad-words", action="append", default=[], metavar="WORD",
                          help="vLLM's: a word the completion never contains (repeatable)")
    generate.add_argument("--include-stop-str-in-output", action="store_true",
                          help="vLLM's: the text ends after the stop string, not before")
    generate.add_argument("--skip-special-tokens", action=argparse.BooleanOptionalAction, default=True,
                          help="vLLM's: special tokens have no text (default)")
    generate.add_argument("--add-special-tokens", action=argparse.BooleanOptionalAction, default=True,
                          help="the prompt gets the tokenizer's special tokens, e.g. a BOS (default, as vLLM's "
                               "completions and HF's encode)")
    generate.add_argument("--prediction", default=None, metavar="TEXT",
                          help="OpenAI's Predicted Outputs: the completion expected, drafted where it is followed "
                               "(--tree chain:N sets the chain; the drafter then uses sequoia:auto)")
    structured = generate.add_mutually_exclusive_group()
    structured.add_argument("--json-schema", default=None, metavar="SCHEMA",
                            help="structured output: the completion is JSON following this schema (its JSON text, "
                                 "or a file holding it)")
    structured.add_argument("--json-object", action="store_true", help="structured output: any JSON object")
    structured.add_argument("--regex", default=None, help="structured output: the completion matches this regular "
                                                          "expression")
    structured.add_argument("--choice", nargs="+", default=None, metavar="TEXT",
                            help="structured output: the completion is one of these strings")
    generate.add_argument("--quiet-summary", action="store_true", help="print the summary line to stderr")
    _add_model_args(generate)
    generate.set_defaults(func=cmd_generate)

    tree = commands.add_parser("tree", help="acceptance vectors and Sequoia trees").add_subparsers(dest="tree_command", required=True)
    measure = tree.add_parser("measure", help="measure a positional acceptance vector on held-out prompts")
    measure.add_argument("--verifier", default="rrsw")
    measure.add_argument("--width", type=at_least(1), default=16,
                         help="children of the star tree (capped by the verifier)")
    measure.add_argument("--temperature", type=float, default=0.6)
    measure.add_argument("--prompts", type=at_least(1), default=30, help="held-out prompts to decode")
    measure.add_argument("--max-new-tokens", type=at_least(1), default=64)
    measure.add_argument("--depth-aware", type=at_least(0), default=0, metavar="D",
                         help="per-depth vectors over D levels (0: one vector)")
    measure.add_argument("--out", default="acceptance", help="directory for <verifier>_t<T>.json and .png")
    _add_model_args(measure)
    measure.set_defaults(func=cmd_tree_measure)

    build = tree.add_parser("build", help="Sequoia's optimal tree for a vector, budget and depth")
    build.add_argument("--vector", required=True, help='JSON with "acceptance": [p1, ..., pW]')
    build.add_argument("--budget", type=at_least(1), default=64,
                       help=f"nodes, root included (at most {MAX_TREE_NODES})")
    build.add_argument("--max-depth", type=at_least(1), default=10)
    build.add_argument("--max-children", type=int, default=None)
    build.add_argument("--out", default="tree.json", help="tree JSON (a PNG drawing is written beside it)")
    build.set_defaults(func=cmd_tree_build)

    plan = tree.add_parser("plan", help="measure this machine and choose the tree size (Sequoia's hardware-aware planner)")
    plan.add_argument("--verifier", default="rrsw")
    plan.add_argument("--temperature", type=float, default=0.6)
    plan.add_argument("--vector", default=None, help="vector JSON (default: the measured one for the verifier)")
    plan.add_argument("--acceptance-dir", default=None)
    plan.add_argument("--max-budget", type=at_least(1), default=128)
    plan.add_argument("--max-depth", type=at_least(1), default=10)
    plan.add_argument("--rtt-ms", type=float, default=0.0, help="network round trip added to every step")
    plan.add_argument("--draft-rtt-ms", type=float, default=0.0, help="extra round trip of a remote drafter")
    plan.add_argument("--bandwidth-gbps", type=float, default=0.0, help="link for the q rows (0: free)")
    plan.add_argument("--draft-top-k", type=int, default=0,
                      help="the drafter's draft_top_k: its q rows cross as k entries (0: whole rows)")
    plan.add_argument("--out", default=None, help="write the planned tree JSON (and PNG)")
    _add_model_args(plan)
    plan.set_defaults(func=cmd_tree_plan)

    serve = commands.add_parser("serve", help="run the service on a Ray cluster (a local one by default)")
    serve.add_argument("config", nargs="?", help="service YAML (default: the demo pair on this machine)")
    serve.add_argument("--address", default=None, help="Ray cluster address, or auto for the one `ray start` brought up here (default: $RAY_ADDRESS, else a new local Ray)")
    serve.set_defaults(func=cmd_serve)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, OSError) as error:  # OSError: a file missing or a directory, no Ray to join
        print(f"rayspec: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: a line, not a traceback (`serve` handles its own)
        print("\nrayspec: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
