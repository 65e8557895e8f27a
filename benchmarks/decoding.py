"""Greedy decoding throughput: `td.Unfold` in rounds, on the device, and eager.

Run: `python -m benchmarks.decoding` (add `--quick` for a short run). The model is
the decoder example's (`examples.decoder`: an LSTM encoder-decoder, embedding 16,
hidden 64, 12 symbols), untrained, on strings of 1 to 6 digits; every string is
decoded for exactly `--steps` steps (no end symbol), so that all variants do the same
work. It prints strings/s at each batch size, for:

- `rounds`: the argmax read by Python after every step and fed back through the
  configuration: one round (engine call) per step for the batch;
- `device`: the argmax fed back on the device in the step's state
  (`lookahead=steps`): one round for the whole decoding;
- `eager`: the reference evaluator (`block.eval`), one string at a time.

The variants share their layers and take the same decisions. Each throughput is the
best of 3 rounds, the variants interleaved batch size by batch size; ratios within
one run are the reliable figures on a shared machine.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.common import throughput

VARIANTS = ("rounds", "device", "eager")
RATIOS = (("device", "rounds", "device ÷ rounds"), ("rounds", "eager", "rounds ÷ eager"))


def blocks_for(steps: int, seed: int = 0) -> dict:
    """The decoding block of each variant (shared layers), decoding `steps` steps."""
    import keras

    import refold as td
    from refold.examples.decoder.decoder import START, Seq2Seq
    keras.utils.set_random_seed(seed)
    seq2seq = Seq2Seq(embed=16, hidden=64)

    def feed(config, logits):
        return config + (int(np.argmax(logits)),)

    def decoder(on_device: bool) -> td.Block:
        if on_device:
            start = td.AllOf(seq2seq.encode(), td.InputTransform(lambda d: START)
                             >> td.Scalar("int32"))
            unfold = td.Unfold(seq2seq.device_step(), decide=feed, max_steps=steps,
                               lookahead=steps)
        else:
            start = seq2seq.encode()
            unfold = td.Unfold(_python_step(seq2seq), decide=feed, max_steps=steps)
        return td.AllOf(start, td.InputTransform(lambda d: (START,))) >> unfold \
            >> td.GetItem(2)

    return {"rounds": decoder(False), "device": decoder(True), "eager": decoder(False)}


def _python_step(seq2seq):
    """`decoder_step` with a configuration of symbols only (`(symbols, None)` there)."""
    import refold as td
    return td.Record((td.Identity(), td.InputTransform(lambda symbols: (symbols, None)))) \
        >> seq2seq.decoder_step(teacher=False)


def run(batch_sizes: list[int], steps: int, seconds: float, seed: int = 0) -> dict:
    """`{variant: {batch size: strings/s}}`, and checks that the variants agree."""
    from refold.compiler import Compiler
    from refold.examples.decoder.decoder import reverse_task
    blocks = blocks_for(steps, seed)
    compilers = {v: Compiler.create(blocks[v]) for v in ("rounds", "device")}
    rng = np.random.default_rng(seed)
    check = reverse_task(rng, 8)
    decoded = {v: c.run(check) for v, c in compilers.items()}
    decoded["eager"] = [blocks["eager"].eval(x) for x in check]
    if not decoded["rounds"] == decoded["device"] == decoded["eager"]:
        raise AssertionError("the variants took different decisions")
    results: dict = {v: {} for v in VARIANTS}
    for b in batch_sizes:
        batches = [reverse_task(rng, b) for _ in range(4)]
        fns = {"rounds": compilers["rounds"].run, "device": compilers["device"].run,
               "eager": lambda batch: [blocks["eager"].eval(x) for x in batch]}
        for v in VARIANTS:
            results[v][b] = throughput(fns[v], batches, seconds, warm_up="first")
    return results


def table(results: dict, batch_sizes: list[int]) -> str:
    lines = ["| variant | " + " | ".join(f"B={b}" for b in batch_sizes) + " |",
             "|---|" + "---|" * len(batch_sizes)]
    for v in VARIANTS:
        lines.append(f"| {v} | " + " | ".join(f"{results[v][b]:.0f}" for b in batch_sizes)
                     + " |")
    for num, den, label in RATIOS:
        lines.append(f"| {label} | " + " | ".join(
            f"{results[num][b] / results[den][b]:.2f}" for b in batch_sizes) + " |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.decoding", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-sizes", default="1,16,64")
    p.add_argument("--steps", type=int, default=8, help="decoding steps per string")
    p.add_argument("--seconds", type=float, default=6.0, help="per figure")
    p.add_argument("--quick", action="store_true", help="1.5 s per figure")
    args = p.parse_args(argv)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    results = run(sizes, args.steps, 1.5 if args.quick else args.seconds)
    print(f"greedy decoding, {args.steps} steps a string, strings/s")
    print(table(results, sizes))
    return results


if __name__ == "__main__":
    main()
