#!/usr/bin/env python3
"""Seeds for the `wire` fuzz target: the first byte picks how the rest is cut into reads (bit 7
set: pieces of 1-8 bytes, else up to 8 KiB), the rest is what a peer sends after the
association. Made from the `dimse` seeds (run `../seeds-dimse/make_seeds.py` first) plus an
A-ABORT; run from this folder."""
import struct

store = open("../seeds-dimse/store.bin", "rb").read()
echo = open("../seeds-dimse/echo.bin", "rb").read()
abort = struct.pack(">BBIBBBB", 7, 0, 4, 0, 0, 2, 1)
open("store-small-reads.bin", "wb").write(b"\x85" + store)
open("store-large-reads.bin", "wb").write(b"\x05" + store)
open("echo-abort.bin", "wb").write(b"\x91" + echo + abort)
