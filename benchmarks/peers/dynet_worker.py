"""DyNet's side of the peer benchmark: our own DyNet programs of the workloads.

Runs under the DyNet venv (`bash benchmarks/peers/dynet_setup.sh`), one CPU thread,
autobatching on (`--autobatch 1`, DyNet's agenda), by depth (2) or off (0). A timed
pass is everything a DyNet training loop does for each minibatch of the data (build
the graph in Python, forward, backward, SGD update), or for inference builds the
minibatch's outputs and reads their values in one forward.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import protocol  # noqa: E402  (standard library only)

# The parser's transition system and dynamic oracle (examples/parser/transitions.py,
# dynamic_oracle.py, treebank.py: standard library only) from the repository, imported
# as `refold.examples.parser.*` without running `src/refold/__init__.py`, which imports the
# whole library (TensorFlow, Numba) that DyNet's interpreter does not have.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _parser_package() -> None:
    import types
    for name, folder in (("refold", os.path.join("src", "refold")), ("refold.examples", "examples"),
                         ("refold.examples.parser", os.path.join("examples", "parser"))):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [os.path.join(_ROOT, folder)]
            sys.modules[name] = package


_parser_package()

# the same sizes as benchmarks/workloads.py and benchmarks/bilstm.py
TREE = dict(vocab=16_000, embed=300, hidden=150, classes=5)
TAGGER = dict(vocab=16_000, embed=128, hidden=128, tags=50)
# examples/tagger/char_tagger.py's model at the workload's sizes (benchmarks/peers/run.py);
# the word vocabulary comes with the data
CHAR_TAGGER = dict(chars=27, char_embed=20, char_hidden=64, hidden=128, tags=8)


def build_tree_lstm(dy, pc, gates: str):
    """`logits(tree)`: the binary TreeLSTM (Tai et al. 2015), a tree being a word id
    or a list `[left, right]`; leaf gates i, o, u see the embedding, node gates i, o,
    u, f_left, f_right see both children's `h`."""
    v, e, h, k = TREE["vocab"], TREE["embed"], TREE["hidden"], TREE["classes"]
    import numpy as np
    embed = pc.add_lookup_parameters((v, e))
    out_w, out_b = pc.add_parameters((k, h)), pc.add_parameters(k, init=0.0)
    node_bias = np.zeros(5 * h, np.float32)
    node_bias[3 * h:] = 1.0  # forget gates start open, as Refold's cell
    if gates == "fused":  # one affine map per node, cut into gates
        leaf_w, leaf_b = pc.add_parameters((3 * h, e)), pc.add_parameters(3 * h, init=0.0)
        node_w, node_b = pc.add_parameters((5 * h, 2 * h)), pc.parameters_from_numpy(node_bias)

        def leaf_gates(x):
            z = dy.affine_transform([leaf_b, leaf_w, x])
            return [dy.pickrange(z, j * h, (j + 1) * h) for j in range(3)]

        def node_gates(x):
            z = dy.affine_transform([node_b, node_w, x])
            return [dy.pickrange(z, j * h, (j + 1) * h) for j in range(5)]
    else:  # one affine map per gate, as DyNet's own TreeLSTM example
        leaf_wb = [(pc.add_parameters((h, e)), pc.add_parameters(h, init=0.0))
                   for _ in range(3)]
        node_wb = [(pc.add_parameters((h, 2 * h)),
                    pc.parameters_from_numpy(node_bias[j * h:(j + 1) * h]))
                   for j in range(5)]

        def leaf_gates(x):
            return [dy.affine_transform([b, w, x]) for w, b in leaf_wb]

        def node_gates(x):
            return [dy.affine_transform([b, w, x]) for w, b in node_wb]

    def state(tree):
        if not isinstance(tree, list):
            i, o, u = leaf_gates(embed[tree])
            c = dy.cmult(dy.logistic(i), dy.tanh(u))
            return dy.cmult(dy.logistic(o), dy.tanh(c)), c
        (h_l, c_l), (h_r, c_r) = state(tree[0]), state(tree[1])
        i, o, u, f_l, f_r = node_gates(dy.concatenate([h_l, h_r]))
        c = (dy.cmult(dy.logistic(i), dy.tanh(u)) + dy.cmult(dy.logistic(f_l), c_l)
             + dy.cmult(dy.logistic(f_r), c_r))
        return dy.cmult(dy.logistic(o), dy.tanh(c)), c

    def logits(tree):
        return dy.affine_transform([out_b, out_w, state(tree)[0]])

    return logits


def build_tagger(dy, pc):
    """`logits(words)`: one logits expression per word, from an LSTM each way."""
    v, e, h, k = TAGGER["vocab"], TAGGER["embed"], TAGGER["hidden"], TAGGER["tags"]
    embed = pc.add_lookup_parameters((v, e))
    forward, backward = dy.VanillaLSTMBuilder(1, e, h, pc), dy.VanillaLSTMBuilder(1, e, h, pc)
    out_w, out_b = pc.add_parameters((k, 2 * h)), pc.add_parameters(k, init=0.0)

    def logits(words):
        xs = [embed[w] for w in words]
        fs = forward.initial_state().transduce(xs)
        bs = backward.initial_state().transduce(xs[::-1])[::-1]
        return [dy.affine_transform([out_b, out_w, dy.concatenate([f, b])])
                for f, b in zip(fs, bs)]

    return logits


def build_parser(dy, pc, sizes: dict):
    """`(encode, score)` of `examples.parser`'s model: `encode(tokens)` is the BiLSTM's
    encoding of each position (word and tag embeddings, the root token first), and
    `score(encodings, positions)` the logits of a configuration, a tanh MLP on the
    encodings at s2, s1, s0 and b0 (a learned pad vector for an empty stack slot)."""
    e, t, h, m = sizes["embed"], sizes["tag_embed"], sizes["hidden"], sizes["mlp"]
    words = pc.add_lookup_parameters((sizes["words"], e))
    tags = pc.add_lookup_parameters((sizes["tags"], t))
    forward = dy.VanillaLSTMBuilder(1, e + t, h, pc)
    backward = dy.VanillaLSTMBuilder(1, e + t, h, pc)
    pads = [pc.add_parameters(2 * h, init=0.0) for _ in range(3)]
    hidden_w, hidden_b = pc.add_parameters((m, 8 * h)), pc.add_parameters(m, init=0.0)
    out_w, out_b = pc.add_parameters((3, m)), pc.add_parameters(3, init=0.0)

    def encode(tokens):
        xs = [dy.concatenate([words[w], tags[k]]) for w, k in tokens]
        fs = forward.initial_state().transduce(xs)
        bs = backward.initial_state().transduce(xs[::-1])[::-1]
        return [dy.concatenate([f, b]) for f, b in zip(fs, bs)]

    def score(encodings, positions):
        features = [encodings[p] if p is not None else pads[k]
                    for k, p in enumerate(positions[:3])] + [encodings[positions[3]]]
        hidden = dy.tanh(dy.affine_transform([hidden_b, hidden_w, dy.concatenate(features)]))
        return dy.affine_transform([out_b, out_w, hidden])

    return encode, score


def parser_logits(encode, score):
    """`logits(sentence)`: the logits of every configuration of its oracle sequence."""
    def logits(sentence):
        encodings = encode(sentence["tokens"])
        return [score(encodings, config[:4]) for config in sentence["configs"]]
    return logits


def build_char_tagger(dy, pc, vocabulary: int):
    """`logits(words)`: the tagger above, with a word's vector a lookup if it is
    frequent (`{"word": id}`) and, if it is rare (`{"word": 0, "chars": [ids]}`), the
    final outputs of a character LSTM each way over its spelling, concatenated."""
    c = CHAR_TAGGER
    e = 2 * c["char_hidden"]
    embed = pc.add_lookup_parameters((vocabulary, e))
    char_embed = pc.add_lookup_parameters((c["chars"], c["char_embed"]))
    char_forward, char_backward = (dy.VanillaLSTMBuilder(1, c["char_embed"], c["char_hidden"],
                                                         pc) for _ in range(2))
    forward, backward = (dy.VanillaLSTMBuilder(1, e, c["hidden"], pc) for _ in range(2))
    out_w = pc.add_parameters((c["tags"], 2 * c["hidden"]))
    out_b = pc.add_parameters(c["tags"], init=0.0)

    def vector(word):
        if "chars" not in word:
            return embed[word["word"]]
        xs = [char_embed[i] for i in word["chars"]]
        f = char_forward.initial_state().transduce(xs)[-1]
        b = char_backward.initial_state().transduce(xs[::-1])[-1]
        return dy.concatenate([f, b])

    def logits(words):
        xs = [vector(w) for w in words]
        fs = forward.initial_state().transduce(xs)
        bs = backward.initial_state().transduce(xs[::-1])[::-1]
        return [dy.affine_transform([out_b, out_w, dy.concatenate([f, b])])
                for f, b in zip(fs, bs)]

    return logits


def greedy_parse(dy, encode, score, batch) -> list:
    """The heads of each sentence of the minibatch, parsed greedily as
    `ParserModel.parse` does: every round one forward of the current configuration of
    every unfinished sentence, then each one's best legal transition."""
    from refold.examples.parser.transitions import Configuration
    dy.renew_cg()
    encodings = [encode(s["tokens"]) for s in batch]
    configs = [Configuration(len(s["tokens"]) - 1) for s in batch]
    active = [i for i, c in enumerate(configs) if not c.is_terminal()]
    while active:
        exprs = [score(encodings[i], configs[i].features()) for i in active]
        values = dy.concatenate_cols(exprs).npvalue().reshape(3, len(active))
        for j, i in enumerate(active):
            legal = configs[i].legal()
            configs[i].apply(max((t for t in range(3) if legal[t]),
                                 key=lambda t: values[t, j]))
        active = [i for i in active if not configs[i].is_terminal()]
    return [c.heads for c in configs]


def coin(epoch: int, seed: int, step: int) -> float:
    """A uniform draw fixed by (epoch, sentence seed, step), as the Refold side's."""
    import random
    return random.Random(hash((epoch, seed, step))).random()


def exploration_losses(dy, encode, score, batch, explore: float, epoch: int = 0) -> list:
    """The loss terms of one minibatch of exploration training, built as the parsers
    go: every round scores the current configuration of each unfinished sentence,
    reads the scores in one forward (autobatched), adds each one's cross-entropy of
    its best-scoring least-cost transition (the dynamic oracle) and moves it on by
    its prediction if that is correct, or with probability `explore` anyway, else by
    that best correct transition."""
    from refold.examples.parser.dynamic_oracle import best_transitions, costs
    from refold.examples.parser.transitions import Configuration
    encodings = [encode(s["tokens"]) for s in batch]
    configs = [Configuration(len(s["heads"])) for s in batch]
    steps = [0] * len(batch)
    terms = []
    active = [i for i, c in enumerate(configs) if not c.is_terminal()]
    while active:
        exprs = [score(encodings[i], configs[i].features()) for i in active]
        values = dy.concatenate_cols(exprs).npvalue().reshape(3, len(active))
        for j, i in enumerate(active):
            cost = costs(configs[i], batch[i]["heads"])
            correct = best_transitions(cost)
            z = values[:, j]
            best = max((t for t in range(3) if correct[t]), key=lambda t: z[t])
            terms.append(dy.pickneglogsoftmax(exprs[j], best))
            taken = max((t for t in range(3) if cost[t] is not None), key=lambda t: z[t])
            if not correct[taken] and not coin(epoch, batch[i]["seed"], steps[i]) < explore:
                taken = best
            configs[i].apply(taken)
            steps[i] += 1
        active = [i for i in active if not configs[i].is_terminal()]
    return terms


class DynetSide:
    """The workloads' DyNet models, each with its own plain SGD trainer."""

    def __init__(self, dy, data: dict, lr: float, gates: str):
        self.dy, self.data = dy, data
        self.models, self.parameters = {}, {}
        builders = {"treelstm": lambda pc: build_tree_lstm(dy, pc, gates),
                    "bilstm": lambda pc: build_tagger(dy, pc),
                    "parser": lambda pc: parser_logits(*self._parser(pc, data)),
                    "explore": lambda pc: build_parser(dy, pc, data["explore"]["sizes"]),
                    "chartagger": lambda pc: build_char_tagger(
                        dy, pc, data["chartagger"]["vocabulary"])}
        for workload in data:
            # held here: a trainer does not keep its collection alive
            pc = self.parameters[workload] = dy.ParameterCollection()
            self.models[workload] = (builders[workload](pc), self._trainer(pc, lr))

    def _parser(self, pc, data):
        self.parser = build_parser(self.dy, pc, data["parser"]["sizes"])
        return self.parser

    def _trainer(self, pc, lr):
        trainer = self.dy.SimpleSGDTrainer(pc, learning_rate=lr)
        trainer.set_clip_threshold(-1)  # plain SGD: no gradient clipping
        return trainer

    def _losses(self, workload, logits, batch):
        """The minibatch's loss terms and their count (trees, words, or transitions)."""
        pick = self.dy.pickneglogsoftmax
        if workload == "treelstm":
            return [pick(logits(t), y) for t, y in batch], len(batch)
        if workload == "parser":
            terms = [pick(z, c[-1]) for s in batch for z, c in zip(logits(s), s["configs"])]
            return terms, len(terms)
        if workload == "explore":  # `logits` is the parser's (encode, score)
            terms = exploration_losses(self.dy, *logits, batch, self.data[workload]["explore"])
            return terms, len(terms)
        terms = [pick(z, t) for s in batch for z, t in zip(logits(s["words"]), s["tags"])]
        return terms, len(terms)

    def run(self, request: dict) -> dict:
        dy = self.dy
        workload, b, n = request["workload"], request["batch"], request["items"]
        logits, trainer = self.models[workload]
        d = self.data[workload]
        items = (list(zip(d["trees"][:n], d["labels"][:n])) if workload == "treelstm"
                 else d["sentences"][:n])
        batches = [items[i:i + b] for i in range(0, len(items), b)]
        loss = None
        start = time.perf_counter()
        if request["op"] == "train":
            for batch in batches:
                dy.renew_cg()
                terms, count = self._losses(workload, logits, batch)
                total = dy.esum(terms) * (1.0 / count)  # the mean, as Keras' loss
                loss = total.value()
                total.backward()
                trainer.update()
        elif request["op"] == "infer":
            for batch in batches:
                dy.renew_cg()
                if workload == "treelstm":
                    outs = [logits(t) for t, _ in batch]
                elif workload == "parser":
                    outs = [z for s in batch for z in logits(s)]
                else:
                    outs = [z for s in batch for z in logits(s["words"])]
                dy.concatenate_cols(outs).npvalue()  # one forward for the whole minibatch
        elif request["op"] == "parse" and workload == "parser":
            for batch in batches:
                greedy_parse(dy, *self.parser, batch)
        else:
            raise ValueError(f"unknown op {request['op']!r}")
        seconds = time.perf_counter() - start
        if loss is not None and not math.isfinite(loss):
            raise FloatingPointError(f"{workload} training loss is {loss}")
        return {"seconds": seconds, "loss": loss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="the runner's JSON data file")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--gates", choices=["fused", "split"], default="fused",
                        help="TreeLSTM gates: one affine map per node, or one per gate")
    parser.add_argument("--mem", default="2048", help="DyNet's memory pool (MB)")
    parser.add_argument("--autobatch", type=int, choices=(0, 1, 2), default=1,
                        help="1: agenda (DyNet's default), 2: by depth, 0: no batching")
    args = parser.parse_args()
    reply = protocol.claim_stdout()
    import dynet_config
    dynet_config.set(mem=args.mem, random_seed=1, autobatch=args.autobatch)
    import dynet as dy
    side = DynetSide(dy, protocol.load_data(args.data), args.lr, args.gates)
    protocol.serve(side.run, reply, {"system": "dynet", "autobatch": args.autobatch,
                                     "gates": args.gates,
                                     "dynet": getattr(dy, "__version__", "2.1.2")})


if __name__ == "__main__":
    main()
