#!/usr/bin/env python3
"""Plot train/val loss and the learning rate of a run from its log.jsonl, as a PNG.

    python3 scripts/plot_loss.py OUT/log.jsonl            # writes OUT/loss.png
    python3 scripts/plot_loss.py OUT/log.jsonl -o curves.png --title "lora on shakespeare"

Top panel: train loss per step (blue) and validation loss at each eval (orange squares).
Bottom panel: learning rate. A preference run (--objective dpo|ipo|orpo|simpo) gets a middle
panel: the reward accuracy of the step's pairs (blue) and of the held-out pairs (orange), TRL's
rewards/accuracies. Only Python's standard library is used: the image is drawn into a
pixel buffer with a small built-in bitmap font and written as a PNG with zlib. Steps logged more
than once (a resumed run appends to the same log) keep their last value.
"""
import argparse
import json
import math
import os
import struct
import sys
import zlib

# 5x7 glyphs, one string per row ('#' = ink). Upper case is drawn as lower case.
FONT = {
    "0": ".###.|#...#|#..##|#.#.#|##..#|#...#|.###.", "1": "..#..|.##..|..#..|..#..|..#..|..#..|.###.",
    "2": ".###.|#...#|....#|...#.|..#..|.#...|#####", "3": "#####|...#.|..#..|...#.|....#|#...#|.###.",
    "4": "...#.|..##.|.#.#.|#..#.|#####|...#.|...#.", "5": "#####|#....|####.|....#|....#|#...#|.###.",
    "6": "..##.|.#...|#....|####.|#...#|#...#|.###.", "7": "#####|....#|...#.|..#..|.#...|.#...|.#...",
    "8": ".###.|#...#|#...#|.###.|#...#|#...#|.###.", "9": ".###.|#...#|#...#|.####|....#|...#.|.##..",
    "a": ".....|.....|.###.|....#|.####|#...#|.####", "b": "#....|#....|#.##.|##..#|#...#|#...#|####.",
    "c": ".....|.....|.###.|#....|#....|#...#|.###.", "d": "....#|....#|.##.#|#..##|#...#|#...#|.####",
    "e": ".....|.....|.###.|#...#|#####|#....|.###.", "f": "..##.|.#..#|.#...|###..|.#...|.#...|.#...",
    "g": ".....|.####|#...#|#...#|.####|....#|.###.", "h": "#....|#....|#.##.|##..#|#...#|#...#|#...#",
    "i": "..#..|.....|.##..|..#..|..#..|..#..|.###.", "j": "...#.|.....|..##.|...#.|...#.|#..#.|.##..",
    "k": "#....|#....|#..#.|#.#..|##...|#.#..|#..#.", "l": ".##..|..#..|..#..|..#..|..#..|..#..|.###.",
    "m": ".....|.....|##.#.|#.#.#|#.#.#|#...#|#...#", "n": ".....|.....|#.##.|##..#|#...#|#...#|#...#",
    "o": ".....|.....|.###.|#...#|#...#|#...#|.###.", "p": ".....|.....|####.|#...#|####.|#....|#....",
    "q": ".....|.....|.##.#|#..##|.####|....#|....#", "r": ".....|.....|#.##.|##..#|#....|#....|#....",
    "s": ".....|.....|.###.|#....|.###.|....#|####.", "t": ".#...|.#...|###..|.#...|.#...|.#..#|..##.",
    "u": ".....|.....|#...#|#...#|#...#|#..##|.##.#", "v": ".....|.....|#...#|#...#|#...#|.#.#.|..#..",
    "w": ".....|.....|#...#|#...#|#.#.#|#.#.#|.#.#.", "x": ".....|.....|#...#|.#.#.|..#..|.#.#.|#...#",
    "y": ".....|.....|#...#|#...#|.####|....#|.###.", "z": ".....|.....|#####|...#.|..#..|.#...|#####",
    ".": ".....|.....|.....|.....|.....|.##..|.##..", "-": ".....|.....|.....|#####|.....|.....|.....",
    "+": ".....|..#..|..#..|#####|..#..|..#..|.....", "(": "...#.|..#..|.#...|.#...|.#...|..#..|...#.",
    ")": ".#...|..#..|...#.|...#.|...#.|..#..|.#...", ":": ".....|.##..|.##..|.....|.##..|.##..|.....",
    "/": ".....|....#|...#.|..#..|.#...|#....|.....", ",": ".....|.....|.....|.....|.##..|..#..|.#...",
    "=": ".....|.....|#####|.....|#####|.....|.....", "_": ".....|.....|.....|.....|.....|.....|#####",
    "%": "##..#|##.#.|...#.|..#..|.#...|.#.##|#..##", "?": ".###.|#...#|....#|...#.|..#..|.....|..#..",
    " ": ".....|.....|.....|.....|.....|.....|.....",
}
GLYPHS = {c: [row for row in rows.split("|")] for c, rows in FONT.items()}

WHITE, BLACK, GRID = (255, 255, 255), (0, 0, 0), (225, 225, 225)
BLUE, ORANGE, GREEN = (31, 119, 180), (255, 127, 14), (44, 160, 44)


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(WHITE * (w * h))

    def set(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i:i + 3] = bytes(c)

    def fill(self, x0, y0, x1, y1, c):
        for y in range(max(0, y0), min(self.h, y1)):
            for x in range(max(0, x0), min(self.w, x1)):
                self.set(x, y, c)

    def line(self, x0, y0, x1, y1, c, width=1):
        """Bresenham, thickened by drawing a width x width square at each point."""
        x0, y0, x1, y1 = int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            for oy in range(width):
                for ox in range(width):
                    self.set(x0 + ox - width // 2, y0 + oy - width // 2, c)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x, y, s, c, scale=2):
        for ch in s.lower():
            rows = GLYPHS.get(ch, GLYPHS["?"])
            for r, row in enumerate(rows):
                for k, bit in enumerate(row):
                    if bit == "#":
                        self.fill(x + k * scale, y + r * scale, x + (k + 1) * scale, y + (r + 1) * scale, c)
            x += 6 * scale

    def text_vertical(self, x, y, s, c, scale=2):
        """Text rotated 90 degrees counter-clockwise, starting at (x, y) and running upwards."""
        for ch in s.lower():
            rows = GLYPHS.get(ch, GLYPHS["?"])
            for r, row in enumerate(rows):
                for k, bit in enumerate(row):
                    if bit == "#":
                        self.fill(x + r * scale, y - (k + 1) * scale, x + (r + 1) * scale, y - k * scale, c)
            y -= 6 * scale


def text_width(s, scale=2):
    return 6 * scale * len(s) - scale


def nice_ticks(lo, hi, n=5):
    """About n round tick values (1, 2 or 5 times a power of ten) covering [lo, hi]."""
    if hi <= lo:
        span = abs(lo) or 1.0
        lo, hi = lo - 0.5 * span, hi + 0.5 * span
    raw = (hi - lo) / n
    p = 10 ** math.floor(math.log10(raw))
    step = min((m * p for m in (1, 2, 5, 10) if m * p >= raw), default=10 * p)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], first
    while t <= hi + 1e-9 * step:
        ticks.append(0.0 if abs(t) < 1e-12 * step else t)
        t += step
    return ticks, step


def fmt_tick(v, step):
    if v == 0:
        return "0"
    if 1e-3 <= abs(step) < 1e5:
        decimals = max(0, -int(math.floor(math.log10(step))))
        return "%.*f" % (decimals, v)
    m, e = ("%.1e" % v).split("e")
    m = m.rstrip("0").rstrip(".")
    return "%se%d" % (m, int(e))


def read_log(path):
    """[(step, value)] sorted, for: train loss, val loss, lr, reward accuracy (train, val)."""
    train, val, lr, acc, vacc = {}, {}, {}, {}, {}
    bad = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
                step = int(r["step"])
            except (ValueError, KeyError, TypeError):
                bad += 1  # e.g. a line cut short by a crash
                continue
            for key, d in (("train_loss", train), ("val_loss", val), ("lr", lr), ("rewards/accuracies", acc),
                           ("val_rewards/accuracies", vacc)):
                v = r.get(key)
                if isinstance(v, (int, float)) and math.isfinite(v):
                    d[step] = float(v)
    if bad:
        print("note: %s: %d line(s) are not JSON objects with a step; skipped" % (path, bad), file=sys.stderr)
    return [sorted(d.items()) for d in (train, val, lr, acc, vacc)]


def draw_panel(cv, box, xlim, series, ylabel):
    """box = (left, top, right, bottom) of the plot area; series = [(points, colour, markers)]."""
    l, t, r, b = box
    ys = [y for pts, _, _ in series for _, y in pts]
    lo, hi = min(ys), max(ys)
    pad = 0.05 * (hi - lo) if hi > lo else 0.5 * (abs(hi) or 1.0)
    yticks, ystep = nice_ticks(lo - pad, hi + pad)
    ylo, yhi = min(yticks[0], lo - pad), max(yticks[-1], hi + pad)
    xticks, xstep = nice_ticks(*xlim)
    xlo, xhi = xlim if xlim[1] > xlim[0] else (xlim[0] - 1, xlim[1] + 1)
    X = lambda x: l + (x - xlo) / (xhi - xlo) * (r - l)
    Y = lambda y: b - (y - ylo) / (yhi - ylo) * (b - t)
    for v in yticks:
        if ylo <= v <= yhi:
            cv.line(l, Y(v), r, Y(v), GRID)
            s = fmt_tick(v, ystep)
            cv.text(l - 8 - text_width(s), int(Y(v)) - 7, s, BLACK)
    for v in xticks:
        if xlo <= v <= xhi:
            cv.line(X(v), t, X(v), b, GRID)
            s = fmt_tick(v, xstep)
            cv.text(int(X(v)) - text_width(s) // 2, b + 8, s, BLACK)
    for pts, colour, markers in series:
        prev = None
        for x, y in pts:
            px, py = X(x), Y(y)
            if prev and not markers:
                cv.line(prev[0], prev[1], px, py, colour, 2)
            if markers:
                cv.fill(int(px) - 4, int(py) - 4, int(px) + 5, int(py) + 5, colour)
                if prev:
                    cv.line(prev[0], prev[1], px, py, colour, 1)
            prev = (px, py)
        if len(pts) == 1 and not markers:
            cv.fill(int(X(pts[0][0])) - 2, int(Y(pts[0][1])) - 2, int(X(pts[0][0])) + 3, int(Y(pts[0][1])) + 3, colour)
    cv.line(l, t, l, b, BLACK)
    cv.line(l, b, r, b, BLACK)
    cv.line(l, t, r, t, BLACK)
    cv.line(r, t, r, b, BLACK)
    cv.text_vertical(14, (t + b) // 2 + text_width(ylabel) // 2, ylabel, BLACK)


def png_bytes(cv):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    stride = 3 * cv.w
    raw = b"".join(b"\x00" + bytes(cv.px[y * stride:(y + 1) * stride]) for y in range(cv.h))
    ihdr = struct.pack(">IIBBBBB", cv.w, cv.h, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def write_atomic(path, data):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description="Plot train/val loss and lr from a run's log.jsonl as a PNG.")
    ap.add_argument("log", help="log.jsonl written by train_gpt2 / train_lora (or the run directory)")
    ap.add_argument("-o", "--out", help="PNG to write (default: loss.png next to the log)")
    ap.add_argument("--title", help="title (default: the run directory)")
    ap.add_argument("--width", type=int, default=900)
    ap.add_argument("--height", type=int, default=640)
    a = ap.parse_args()
    log = os.path.join(a.log, "log.jsonl") if os.path.isdir(a.log) else a.log
    if not os.path.isfile(log):
        sys.exit("error: '%s' not found (give a run's log.jsonl or its directory)" % log)
    if not (320 <= a.width <= 8000 and 240 <= a.height <= 8000):
        sys.exit("error: --width must be in [320, 8000] and --height in [240, 8000]")
    train, val, lr, acc, vacc = read_log(log)
    if not train and not val:
        sys.exit("error: '%s' holds no train_loss or val_loss values" % log)
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(log)), "loss.png")
    title = a.title if a.title is not None else os.path.basename(os.path.dirname(os.path.abspath(log)))

    cv = Canvas(a.width, a.height)
    steps = [s for s, _ in train + val + lr]
    xlim = (min(steps), max(steps))
    l, r = 110, a.width - 30
    split = int(a.height * (0.62 if lr else 0.88))
    if acc or vacc:  # the loss's panel shares its room with the reward accuracy's
        mid = 46 + (split - 46) * 3 // 5
        draw_panel(cv, (l, mid + 30, r, split), xlim, [(acc, BLUE, False), (vacc, ORANGE, True)], "accuracy")
        split = mid
    cv.text(l, 12, title, BLACK)
    draw_panel(cv, (l, 46, r, split), xlim, [(train, BLUE, False), (val, ORANGE, True)], "loss")
    split = int(a.height * (0.62 if lr else 0.88))
    legend = [("train loss", BLUE)] * bool(train) + [("val loss", ORANGE)] * bool(val)
    x = r - 10 - sum(text_width(s) + 40 for s, _ in legend)
    for s, colour in legend:
        cv.fill(x, 20, x + 22, 26, colour)
        cv.text(x + 28, 16, s, BLACK)
        x += text_width(s) + 40
    if lr:
        draw_panel(cv, (l, split + 44, r, a.height - 44), xlim, [(lr, GREEN, False)], "lr")
    cv.text((l + r) // 2 - text_width("step") // 2, a.height - 20, "step", BLACK)
    write_atomic(out, png_bytes(cv))
    last = "train %.4f at step %d" % (train[-1][1], train[-1][0]) if train else ""
    best = "; best val %.4f at step %d" % min(((v, s) for s, v in val)) if val else ""
    accs = "; reward accuracy %.2f (held-out %.2f)" % (acc[-1][1] if acc else float("nan"), vacc[-1][1] if vacc else float("nan")) if acc or vacc else ""
    print("wrote %s (%dx%d): %s%s%s" % (out, a.width, a.height, last, best, accs))


if __name__ == "__main__":
    main()
