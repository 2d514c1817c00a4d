#!/usr/bin/env python3
# A convoy config's recipe carried over to another run length, batch and crop the way torchvision's
# reference carries it: a config that train and the PyTorch baselines both read (convergence_resnet18.sh).
"""A convoy config with its recipe scaled to another number of epochs, batch and crop.

    scaled_config.py BASE OUT --epochs E [--batch B] [--crop C --eval-resize R] [--label-smoothing S]
                     [--classes N]

From BASE's [train]: the lr times B / BASE's batch (torchvision's rule: lr 0.1 for 256 images a step);
step_epochs and warmup_epochs times E / BASE's epochs, a step never shorter than one epoch and rounded
up (90 epochs stepped every 30 become 16 stepped every 6: the same three stages, the last the
shortest); every other key as BASE has it, with label_smoothing S when given. [data] becomes
torchvision's ImageNet training and evaluation: random_resized_crop to C (default BASE's crop),
BASE's flip, and eval_resize R (default 256, or 8/7 of C rounded). [net] keeps BASE's keys with its
input at C and classes N when given; the [[layer]] tables are BASE's, as text.
"""
import argparse
import json
import math
import re
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a basic TOML string: the same escapes as JSON's for these names
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def table(name, keys):
    return f"[{name}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in keys.items() if not isinstance(v, dict))


def scale(cfg, args):
    """(net, train, data) tables of the scaled config."""
    net, train, data = dict(cfg.get("net", {})), dict(cfg.get("train", {})), dict(cfg.get("data", {}))
    base_epochs, base_batch = train.get("epochs"), train.get("batch")
    if not base_epochs or not base_batch:
        sys.exit(f"{args.base}: [train] needs epochs and batch to scale from")
    batch = args.batch or base_batch
    ratio = args.epochs / base_epochs
    train.update(epochs=args.epochs, batch=batch, lr=train.get("lr", 0.05) * batch / base_batch)
    if "step_epochs" in train:
        train["step_epochs"] = max(1, math.ceil(train["step_epochs"] * ratio))
    if train.get("warmup_epochs"):
        train["warmup_epochs"] = train["warmup_epochs"] * ratio
    if args.label_smoothing is not None:
        train["label_smoothing"] = args.label_smoothing
    crop = args.crop or data.get("crop")
    if not crop:
        sys.exit(f"{args.base}: [data] has no crop; give --crop")
    eval_resize = args.eval_resize or (256 if crop == 224 else round(crop * 8 / 7))
    data = {"crop": crop, "flip": data.get("flip", False), "random_resized_crop": True, "eval_resize": eval_resize}
    if "input" in net:
        net["input"] = [net["input"][0], crop, crop]
    if args.classes:
        net["classes"] = args.classes
    return net, train, data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("out")
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--crop", type=int)
    ap.add_argument("--eval-resize", type=int)
    ap.add_argument("--label-smoothing", type=float)
    ap.add_argument("--classes", type=int)
    args = ap.parse_args()
    if args.epochs < 1 or (args.batch is not None and args.batch < 1):
        ap.error("--epochs and --batch must be at least 1")
    text = open(args.base).read()
    net, train, data = scale(tomllib.loads(text), args)
    layers = re.search(r"^\[\[layer\]\]", text, re.M)
    command = " ".join(sys.argv[1:])
    with open(args.out, "w") as f:
        f.write(f"# {args.base} scaled by benchmarks/scaled_config.py {command}\n"
                "# (its recipe to these epochs and batch; torchvision's crops in training and evaluation)\n\n")
        f.write(table("net", net) + "\n" + table("train", train) + "\n" + table("data", data))
        if layers:
            f.write("\n" + text[layers.start():])


if __name__ == "__main__":
    main()
