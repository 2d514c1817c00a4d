#!/usr/bin/env python3
# Picks the inputs to keep in fuzz/corpus/ from a libFuzzer merge control file: greedily, those that add
# the most new coverage edges per byte, until every edge is kept or a byte budget is spent.
#
# Usage: fuzz/reduce_corpus.py CONTROL_FILE OUT_DIR [BUDGET_BYTES] [--keep DIR]
# The control file comes from a merge into an empty folder, e.g.
#   build-fuzz/fuzz_checkpoint -merge=1 -use_counters=0 -merge_control_file=ctl empty fuzz/corpus/checkpoint found/
# Inputs already in --keep DIR (seeds, regression inputs) are kept whatever they add and count
# against the budget; the others chosen are copied into OUT_DIR. Input sizes are read from the files,
# so run it from the folder the merge ran in.
import argparse
import os
import shutil

parser = argparse.ArgumentParser()
parser.add_argument("control")
parser.add_argument("out")
parser.add_argument("budget", type=int, nargs="?", default=None)
parser.add_argument("--keep", default=None)
args = parser.parse_args()

lines = open(args.control).read().split("\n")
count = int(lines[0])
names = lines[2 : 2 + count]
edges = {i: set() for i in range(count)}
for line in lines[2 + count :]:
    if line.startswith("COV "):
        fields = line.split()
        edges[int(fields[1])] = set(map(int, fields[2:]))
size = {i: os.path.getsize(names[i]) for i in range(count)}
every = set().union(*edges.values())

keep_dir = os.path.abspath(args.keep) if args.keep else None
chosen = [i for i in range(count) if keep_dir and os.path.dirname(os.path.abspath(names[i])) == keep_dir]
have = set().union(*(edges[i] for i in chosen)) if chosen else set()
used = sum(size[i] for i in chosen)
# 256 bytes per input besides its size: a file of its own costs a directory entry and a run.
left = {i for i in range(count) if i not in chosen}
while True:
    best = max(left, key=lambda i: len(edges[i] - have) / (size[i] + 256), default=None)
    if best is None or not edges[best] - have:
        break
    if args.budget is not None and used + size[best] > args.budget:
        break
    chosen.append(best)
    have |= edges[best]
    used += size[best]
    left.discard(best)

os.makedirs(args.out, exist_ok=True)
for i in chosen:
    if not (keep_dir and os.path.dirname(os.path.abspath(names[i])) == keep_dir):
        shutil.copy(names[i], os.path.join(args.out, os.path.basename(names[i])))
print(f"{len(chosen)} inputs, {used} bytes, {len(have)} of {len(every)} edges")
