"""The `rayspec` command.

    rayspec generate --prompt "def fibonacci(n):" --verifier rrsw --tree kary:2x4 --temperature 0.6 --seed 1
"""

from __future__ import annotations

import argparse
import sys

from rayspec.engine.trees import TREE_SPEC_HELP


def _add_sampling_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0, help="0 disables top-k")
    parser.add_argument("--seed", type=int, default=None, help="a seed makes the output reproducible")


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default=None, help="checkpoint path or hub id (default: the demo target)")
    parser.add_argument("--drafter", default=None, help="checkpoint path or hub id (default: the demo drafter)")
    parser.add_argument("--no-drafter", action="store_true", help="target-only decoding")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--dtype", default="auto", help="auto (float32 on CPU, bfloat16 on CUDA), float32, float16, bfloat16")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")


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
        drafter_model, _ = load_causal_lm(args.drafter or DRAFTER_PATH, args.device, args.dtype)
        drafter = LocalDrafter(drafter_model)
    return LocalTarget(target_model), drafter, tokenizer


def cmd_generate(args) -> int:
    from rayspec.engine import GenerationStats, SpeculativeEngine
    from rayspec.engine.text import TextAssembler

    target, drafter, tokenizer = load_pair(args)
    verifier = args.verifier or ("greedy" if args.temperature == 0 else "rrsw")
    engine = SpeculativeEngine(target, drafter, verifier=verifier, tree=args.tree, tokenizer=tokenizer)
    prompt_ids = tokenizer.encode(args.prompt, add_special_tokens=False)
    assembler = TextAssembler(tokenizer, args.stop or ())
    stats = GenerationStats()
    sys.stdout.write(args.prompt)
    for chunk in engine.generate(
        prompt_ids, max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
        top_k=args.top_k, seed=args.seed, stop=args.stop, stats=stats,
    ):
        sys.stdout.write(assembler.push(chunk.tokens))
        sys.stdout.flush()
    sys.stdout.write(assembler.finish() + "\n")
    print(f"[{verifier}, tree {args.tree if drafter else 'none'}] {stats.summary()}", file=sys.stderr if args.quiet_summary else sys.stdout)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rayspec", description="Tree speculative decoding.")
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="generate text in this process")
    generate.add_argument("--prompt", required=True)
    _add_sampling_args(generate)
    generate.add_argument("--verifier", default=None, help="default: rrsw, or greedy at temperature 0")
    generate.add_argument("--tree", default="kary:2x3", help=TREE_SPEC_HELP)
    generate.add_argument("--stop", action="append", help="stop string (repeatable)")
    generate.add_argument("--quiet-summary", action="store_true", help="print the summary line to stderr")
    _add_model_args(generate)
    generate.set_defaults(func=cmd_generate)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as error:
        print(f"rayspec: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
