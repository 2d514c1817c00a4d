# What the SIGKILL tests share, sourced at their start: the seed (fresh from /dev/urandom, or
# CONVOY_KILL_SEED=N to replay one), the 5 fractions it draws, and moment(), which turns a fraction
# into seconds after a run's start from $span (an uninterrupted run) and $fixed (a run with nothing
# left to do), both set by the test before it calls moment.
seed=${CONVOY_KILL_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
echo "kill seed $seed (replay: CONVOY_KILL_SEED=$seed)"

# Each run is killed at a random fraction (drawn from the seed) of the time it should still take:
# its fixed cost plus the rest of the uninterrupted run's time scaled by the work left. So the kills
# fall all along the work (start-up, the middle, the end), not only near its start, and seldom after
# the end.
# A test that starts each trial afresh sets kill_spread=1 before sourcing: then the i-th fraction is
# drawn from the i-th fifth, so that five trials always cover start-up, the middle and the end.
mapfile -t fractions < <(/usr/bin/python3 -c '
import random, sys
r = random.Random(int(sys.argv[1]))
spread = sys.argv[2] == "1"
for i in range(5): print(f"{(i + r.random()) / 5 if spread else r.random():.4f}")' "$seed" "${kill_spread:-0}")
moment() {  # moment <fraction drawn> <fraction of the work left>
  awk -v u="$1" -v left="$2" -v span="$span" -v fixed="$fixed" \
    'BEGIN { work = span - fixed; if (work < 0.1) work = 0.1; printf "%.3f", u * (fixed + work * left) }'
}
