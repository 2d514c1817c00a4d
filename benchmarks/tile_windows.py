# Where ilsvrc_photos.py --regions cuts each image: a photograph in tiles, a class per tile, each image a
# random window in or near its tile; and the best top-1 that the windows' places allow (the set's ceiling).
"""The geometry of `ilsvrc_photos.py --regions WxH --window LO HI --spill F`.

A photograph of size (W, H) is cut into cols x rows tiles. An image of tile t is a window of the
output's shape (w, h) whose side is a uniform fraction in [LO, HI] of the largest such window the
tile holds, placed uniformly where it fits inside the tile widened by F of its width and height on
each side (within the photograph). With F > 0 the windows of neighbouring tiles overlap, and a
window in the overlap may be of either class: `ceiling` estimates the best top-1 any classifier can
reach when it knows each window's exact place and size in its photograph (and tells photographs
apart), the bound that --spill sets on a trained net.
"""
import random

from photo_jpegs import shape


class Tiles:
    def __init__(self, regions, window, spill):
        (self.cols, self.rows), (self.lo, self.hi), self.spill = regions, window, spill

    def count(self):
        return self.cols * self.rows

    def tile(self, size, t):
        """(x0, y0, x1, y1) of tile t of a photograph of size (W, H), numbered across then down."""
        (width, height), i, j = size, t % self.cols, t // self.cols
        return (i * width // self.cols, j * height // self.rows, (i + 1) * width // self.cols,
                (j + 1) * height // self.rows)

    def reach(self, size, t):
        """(x0, y0, x1, y1) where tile t's windows may lie: the tile widened by the spill, within the photograph."""
        x0, y0, x1, y1 = self.tile(size, t)
        sx, sy = int(self.spill * (x1 - x0)), int(self.spill * (y1 - y0))
        return max(0, x0 - sx), max(0, y0 - sy), min(size[0], x1 + sx), min(size[1], y1 + sy)

    def largest(self, size, t, out):
        """The largest scale of the output shape out that tile t holds."""
        x0, y0, x1, y1 = self.tile(size, t)
        return min((x1 - x0) / out[0], (y1 - y0) / out[1])

    def window(self, size, t, rng):
        """(box, output shape) of one image of tile t, drawing from rng."""
        out = shape(rng)
        f = self.largest(size, t, out) * rng.uniform(self.lo, self.hi)
        gx0, gy0, gx1, gy1 = self.reach(size, t)
        cw, ch = min(max(1, int(out[0] * f)), gx1 - gx0), min(max(1, int(out[1] * f)), gy1 - gy0)
        x, y = gx0 + rng.randrange(gx1 - gx0 - cw + 1), gy0 + rng.randrange(gy1 - gy0 - ch + 1)
        return (x, y, x + cw, y + ch), out

    def likelihood(self, size, t, box, out):
        """The density of window box (of output shape out) among tile t's windows; 0 where t makes none such."""
        x, y, x1, y1 = box
        cw, ch = x1 - x, y1 - y
        f = self.largest(size, t, out)
        if not int(out[0] * f * self.lo) <= cw <= out[0] * f * self.hi:
            return 0.0
        gx0, gy0, gx1, gy1 = self.reach(size, t)
        if not (gx0 <= x <= gx1 - cw and gy0 <= y <= gy1 - ch):
            return 0.0
        return 1.0 / (out[0] * f * (self.hi - self.lo) or 1.0) / ((gx1 - gx0 - cw + 1) * (gy1 - gy0 - ch + 1))

    def ceiling(self, sizes, samples, seed=1):
        """The best top-1 over windows of photographs of these sizes: each window given to the likeliest
        tile of its photograph (ties shared), by Monte Carlo over `samples` windows."""
        rng, right = random.Random(seed), 0.0
        for _ in range(samples):
            size, t = rng.choice(sizes), rng.randrange(self.count())
            box, out = self.window(size, t, rng)
            d = [self.likelihood(size, u, box, out) for u in range(self.count())]
            best = [u for u in range(self.count()) if d[u] == max(d)]
            right += (t in best) / len(best)
        return right / samples
