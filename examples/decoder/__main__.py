"""Trains a sequence-to-sequence LSTM to reverse digit strings (teacher forcing), then
decodes the test set greedily with `td.Unfold`, the model's own argmax fed back
until it emits the end symbol: by Python after each step, and on the device.

    python -m refold.examples.decoder [--epochs 8] [--train-size 6000] [--max-len 6]

Prints Keras' per-epoch log, then the exact-match accuracy of greedy decoding on the
test set against echoing the input unchanged (right for palindromes only), how many
rounds (engine calls) and seconds decoding took each way, and a few decoded strings.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from refold.examples.decoder.decoder import Seq2Seq, emitted, reverse_task  # noqa: E402


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m refold.examples.decoder", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-size", type=int, default=6000)
    p.add_argument("--test-size", type=int, default=1000)
    p.add_argument("--max-len", type=int, default=6, help="digits per string, at most")
    p.add_argument("--embed", type=int, default=16)
    p.add_argument("--hidden", type=int, default=64, help="LSTM units (encoder, decoder)")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2))
    return p.parse_args(argv)


def exact_match(outputs: list[list[int]], inputs: list[list[int]]) -> float:
    """The fraction of outputs that are their input reversed."""
    return float(np.mean([list(o) == x[::-1] for o, x in zip(outputs, inputs)]))


def main(argv: Sequence[str] | None = None) -> dict:
    """Runs the example; returns the history, accuracies and the decoded test strings."""
    import keras

    from refold.compiler import Model

    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train = reverse_task(rng, args.train_size, args.max_len)
    test = reverse_task(rng, args.test_size, args.max_len)

    seq2seq = Seq2Seq(args.embed, args.hidden)
    model = Model(seq2seq.training_block())
    model.compile(optimizer=keras.optimizers.Adam(args.lr))
    history = model.fit(train, batch_size=args.batch_size, epochs=args.epochs,
                        verbose=args.verbose)

    # on the device, one round reads as many steps as a right answer takes
    runs = {mode: greedy_decode(seq2seq, test, 2 * args.max_len + 2, args.batch_size,
                                lookahead=args.max_len + 1 if mode == "device" else None)
            for mode in ("python", "device")}
    decoded = runs["python"][0]
    if runs["device"][0] != decoded:
        raise AssertionError("decoding on the device emitted other symbols than step by step")
    accuracy = exact_match(decoded, test)
    baseline = exact_match(test, test)  # echo: right where the input is a palindrome
    print(f"greedy decoding, exact match on {len(test)} test strings: {100 * accuracy:.1f}%"
          f" (echoing the input: {100 * baseline:.1f}%)")
    for mode, what in (("python", "argmax fed back by Python"),
                       ("device", "argmax fed back on the device")):
        _, rounds, seconds = runs[mode]
        print(f"  {what}: at most {rounds} rounds (engine calls) a batch of "
              f"{args.batch_size}, {seconds:.1f} s")
    for x, y in list(zip(test, decoded))[:4]:
        print(f"  {''.join(map(str, x)):>{args.max_len}} -> {''.join(map(str, y))}")
    return {"history": history.history, "accuracy": accuracy, "baseline": baseline,
            "decoded": decoded, "rounds": {m: r[1] for m, r in runs.items()}}


def greedy_decode(seq2seq: Seq2Seq, strings: list, max_steps: int, batch_size: int,
                  lookahead: int | None) -> tuple[list, int, float]:
    """The symbols emitted for each string, the most rounds a batch took, the seconds
    (including tracing)."""
    from refold.compiler import Compiler
    decoder = Compiler.create(seq2seq.greedy_block(max_steps, lookahead=lookahead))
    start = time.perf_counter()
    decoded, rounds = [], 0
    for i in range(0, len(strings), batch_size):
        decoded += [emitted(c) for c in decoder.run(strings[i:i + batch_size])]
        rounds = max(rounds, decoder.last_rounds)
    return decoded, rounds, time.perf_counter() - start


if __name__ == "__main__":
    main()
