"""Checks for the status page's browser test (status_page_browser_test.sh),
with nothing but the Python standard library.

  steps URL JOB                 prints the job's state and steps_done from /api/jobs
  wait URL JOB MIN_STEPS SECS   waits until the job is RUNNING with MIN_STEPS done
  dom FILE JOB STATE MIN MAX VAL_MIN VAL_MAX
                                the DOM Chromium dumped: the chart canvas is
                                there, has a non-zero size, charts JOB, holds
                                between MIN and MAX training points and
                                VAL_MIN..VAL_MAX validation points, and the
                                summary says STATE
  png FILE MIN_TRAIN MIN_VAL    Chromium's screenshot: at least MIN_TRAIN
                                pixels of the training line's colour and
                                MIN_VAL of the validation colour are drawn
Exits non-zero with the reason when a check fails.
"""
import html.parser
import json
import struct
import sys
import time
import urllib.request
import zlib

TRAIN_RGB = (0x25, 0x63, 0xEB)
VALIDATION_RGB = (0xEA, 0x58, 0x0C)


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def job_status(url, job):
    with urllib.request.urlopen(url + "api/jobs", timeout=10) as response:
        jobs = json.load(response)["jobs"]
    for j in jobs:
        if j["id"] == job:
            return j
    fail("%s is not in /api/jobs" % job)


class ChartFinder(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.canvas = None
        self.summary = ""
        self._in_summary = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "canvas" and attrs.get("id") == "loss-chart":
            self.canvas = attrs
        self._in_summary = attrs.get("id") == "chart-summary"

    def handle_endtag(self, tag):
        self._in_summary = False

    def handle_data(self, data):
        if self._in_summary:
            self.summary += data


def check_dom(path, job, state, lo, hi, val_lo, val_hi):
    finder = ChartFinder()
    with open(path, encoding="utf-8") as f:
        finder.feed(f.read())
    c = finder.canvas
    if c is None:
        fail("no <canvas id=loss-chart> in the page")
    if int(c.get("width", "0")) <= 0 or int(c.get("height", "0")) <= 0:
        fail("the chart has no size: %r" % c)
    if c.get("data-job") != job:
        fail("the chart shows %r, not %s" % (c.get("data-job"), job))
    points = int(c.get("data-points", "-1"))
    val_points = int(c.get("data-validation-points", "-1"))
    if not lo <= points <= hi:
        fail("the chart holds %d training points, expected %d..%d" % (points, lo, hi))
    if not val_lo <= val_points <= val_hi:
        fail("the chart holds %d validation points, expected %d..%d" % (val_points, val_lo, val_hi))
    if not finder.summary.startswith(state):
        fail("the chart summary is %r, expected state %s" % (finder.summary, state))
    print("dom ok: %s %d training and %d validation points, %s" %
          (job, points, val_points, finder.summary))


def read_png(path):
    """8-bit RGB or RGBA, non-interlaced (what Chromium writes)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("%s is not a PNG" % path)
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace != 0:
        fail("unexpected PNG format %r" % (header,))
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous, pos = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[pos], bytearray(raw[pos + 1:pos + 1 + stride])
        pos += 1 + stride
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = previous[i]
            c = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(line)
        previous = line
    return width, height, channels, rows


def check_png(path, min_train, min_val):
    width, height, channels, rows = read_png(path)
    near = lambda px, rgb: sum(abs(px[k] - rgb[k]) for k in range(3)) < 60
    train = val = 0
    for line in rows:
        for x in range(width):
            px = line[x * channels:x * channels + 3]
            if near(px, TRAIN_RGB):
                train += 1
            elif near(px, VALIDATION_RGB):
                val += 1
    if train < min_train:
        fail("%d training-line pixels in the screenshot, expected at least %d" % (train, min_train))
    if val < min_val:
        fail("%d validation pixels in the screenshot, expected at least %d" % (val, min_val))
    print("png ok: %dx%d, %d training and %d validation pixels" % (width, height, train, val))


def main():
    command, args = sys.argv[1], sys.argv[2:]
    if command == "steps":
        j = job_status(args[0], args[1])
        print(j["state"], j["steps_done"])
    elif command == "wait":
        url, job, min_steps, seconds = args[0], args[1], int(args[2]), float(args[3])
        deadline = time.time() + seconds
        while True:
            j = job_status(url, job)
            if j["state"] == "RUNNING" and j["steps_done"] >= min_steps:
                return
            if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") or time.time() > deadline:
                fail("%s is %s at step %d, not running past step %d" %
                     (job, j["state"], j["steps_done"], min_steps))
            time.sleep(0.1)
    elif command == "dom":
        check_dom(args[0], args[1], args[2], *(int(a) for a in args[3:7]))
    elif command == "png":
        check_png(args[0], int(args[1]), int(args[2]))
    else:
        fail("unknown command " + command)


if __name__ == "__main__":
    main()
