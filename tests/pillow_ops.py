#!/usr/bin/env python3
"""The reference for dicomflow's operators: Pillow applied to dicomflow's own 8-bit rendering.

Used by tests/it/dataset.rs (`resize_matches_pillow`), and by hand:

    python3 tests/pillow_ops.py CASES.json

CASES.json is a list of objects:
    base           PNG rendered without operators (dicomflow run ... with no --resize etc.)
    ours           PNG rendered with the operators
    invert         bool
    rotate         0, 90, 180 or 270 (clockwise)
    flip           "none", "h", "v" or "hv" (after the rotation)
    resize         "none", "WxH", "N" (longest side) or "scale:F"
    fit            "stretch", "pad" or "crop" (with WxH)
    interpolation  "nearest", "bilinear" or "area"

For each case it applies ImageOps.invert, Image.transpose, Image.resize (NEAREST, BILINEAR,
BOX) and, for pad/crop, a paste on black or a centred crop, to `base`, and prints one JSON line
per case: the size, the largest absolute difference from `ours` and how many samples differ,
and whether the height shrinks more than the width (Pillow 13 then runs its vertical pass
first, python-pillow/Pillow#9549, which moves near-ties by 1; Pillow 4 to 12, and dicomflow,
always run the horizontal pass first).
The sizes are computed here independently: a rounded quotient a*b/c rounds half up, a scale
rounds half away from zero (Python's round() would round half to even: not used).
"""
import json
import math
import sys

import numpy as np
from PIL import Image, ImageOps

FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "area": Image.Resampling.BOX,
}
ROTATIONS = {
    90: Image.Transpose.ROTATE_270,  # Pillow rotates counter-clockwise
    180: Image.Transpose.ROTATE_180,
    270: Image.Transpose.ROTATE_90,
}


def quotient(a, b, c):
    """a*b/c rounded half up, at least 1."""
    return max(1, (2 * a * b + c) // (2 * c))


def sizes(w, h, resize, fit):
    """(scaled size, canvas size) for an oriented image of w x h."""
    if resize == "none":
        return (w, h), (w, h)
    if resize.startswith("scale:"):
        f = float(resize[6:])
        s = (max(1, math.floor(w * f + 0.5)), max(1, math.floor(h * f + 0.5)))
        return s, s
    if "x" not in resize:
        n = int(resize)
        s = (n, quotient(h, n, w)) if w >= h else (quotient(w, n, h), n)
        return s, s
    cw, ch = (int(v) for v in resize.split("x"))
    wider = cw * h <= ch * w
    if fit == "stretch":
        s = (cw, ch)
    elif fit == "pad":
        s = (cw, min(ch, quotient(h, cw, w))) if wider else (min(cw, quotient(w, ch, h)), ch)
    else:
        s = (max(cw, quotient(w, ch, h)), ch) if wider else (cw, max(ch, quotient(h, cw, w)))
    return s, (cw, ch)


def reference(case):
    im = Image.open(case["base"])
    im.load()
    if case.get("invert"):
        im = ImageOps.invert(im)
    rotate = case.get("rotate", 0)
    if rotate:
        im = im.transpose(ROTATIONS[rotate])
    flip = case.get("flip", "none")
    if "h" in flip:
        im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    if "v" in flip:
        im = im.transpose(Image.Transpose.FLIP_TOP_BOTTOM)
    (sw, sh), (cw, ch) = sizes(im.width, im.height, case.get("resize", "none"),
                               case.get("fit", "stretch"))
    case["height_shrinks_more"] = sh * im.width < sw * im.height and sh < im.height
    if (sw, sh) != im.size:
        im = im.resize((sw, sh), FILTERS[case.get("interpolation", "bilinear")])
    if (cw, ch) != (sw, sh):
        if sw <= cw and sh <= ch:
            canvas = Image.new(im.mode, (cw, ch))
            canvas.paste(im, ((cw - sw) // 2, (ch - sh) // 2))
            im = canvas
        else:
            x, y = (sw - cw) // 2, (sh - ch) // 2
            im = im.crop((x, y, x + cw, y + ch))
    return im


def main():
    cases = json.load(open(sys.argv[1]))
    for case in cases:
        want = reference(case)
        got = Image.open(case["ours"])
        got.load()
        line = {"ours": case["ours"], "want_size": list(want.size),
                "got_size": list(got.size), "mode": got.mode,
                "height_shrinks_more": case["height_shrinks_more"],
                "pillow": Image.__version__}
        if want.size == got.size and want.mode == got.mode:
            d = np.abs(np.asarray(want, dtype=np.int16) - np.asarray(got, dtype=np.int16))
            line["max_diff"] = int(d.max())
            line["differing"] = int((d > 0).sum())
        print(json.dumps(line))


if __name__ == "__main__":
    main()
