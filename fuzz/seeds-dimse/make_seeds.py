#!/usr/bin/env python3
"""Seeds for the `dimse` fuzz target: P-DATA PDUs as a Storage SCU sends them (a C-ECHO-RQ, a
C-STORE-RQ whose command spans two PDVs followed by a data set in two PDUs, a release request).
Written by hand from PS3.7 (command sets) and PS3.8 (PDU and PDV layout); run from this folder."""
import struct


def elem(e, value):
    return struct.pack("<HHI", 0, e, len(value)) + value


def uid(s):
    b = s.encode()
    return b + (b"\0" if len(b) % 2 else b"")


def command(field, msg_id, sop_class, sop_instance=None, data=False):
    body = elem(0x0002, uid(sop_class)) + elem(0x0100, struct.pack("<H", field))
    body += elem(0x0110, struct.pack("<H", msg_id))
    if field == 1:
        body += elem(0x0700, struct.pack("<H", 0))
    body += elem(0x0800, struct.pack("<H", 0 if data else 0x0101))
    if sop_instance:
        body += elem(0x1000, uid(sop_instance))
    return elem(0x0000, struct.pack("<I", len(body))) + body


def pdv(ctx, command, last, data):
    return struct.pack(">IBB", len(data) + 2, ctx, (1 if command else 0) | (2 if last else 0)) + data


def pdata(*pdvs):
    items = b"".join(pdvs)
    return struct.pack(">BBI", 4, 0, len(items)) + items


echo = pdata(pdv(1, True, True, command(0x30, 1, "1.2.840.10008.1.1")))
store_cmd = command(1, 2, "1.2.840.10008.5.1.4.1.1.2", "1.2.826.0.1.3680043.2.1125.1", True)
dataset = elem(0x0008, b"ISO_IR 100") + b"\xe0\x7f\x10\x00" + struct.pack("<I", 8) + bytes(8)
store = (pdata(pdv(3, True, False, store_cmd[:20]), pdv(3, True, True, store_cmd[20:]))
         + pdata(pdv(3, False, False, dataset[:10])) + pdata(pdv(3, False, True, dataset[10:])))
release = struct.pack(">BBI", 5, 0, 4) + bytes(4)
open("echo.bin", "wb").write(echo)
open("store.bin", "wb").write(store + release)
open("command.bin", "wb").write(store_cmd)
