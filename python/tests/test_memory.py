"""Importing ninf keeps freed array buffers in the process for the next call
(`ninf::memory`), unless NINF_CLIENT_MALLOC=system says to leave the allocator alone. Each
case runs in a fresh interpreter: the setting is the process's."""

import os
import subprocess
import sys

PROBE = """
import ctypes, json
import ninf

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                 "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
before = libc.mallinfo2()
block = bytearray(64 << 20)
during = libc.mallinfo2()
del block
after = libc.mallinfo2()
print(json.dumps({
    "mapped_for_block": during.hblkhd - before.hblkhd,
    "heap_for_block": during.arena - before.arena,
    "heap_kept_after": after.arena - before.arena,
}))
"""


def probe(setting):
    env = dict(os.environ)
    env.pop("NINF_CLIENT_MALLOC", None)
    if setting is not None:
        env["NINF_CLIENT_MALLOC"] = setting
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    import json

    return json.loads(out.stdout)


def test_a_large_buffer_comes_from_the_heap_and_stays_for_the_next_call():
    seen = probe(None)
    assert seen["mapped_for_block"] == 0, seen
    # The heap grows by the block less whatever free room it already had (a few KiB).
    assert seen["heap_for_block"] >= 63 << 20, seen
    assert seen["heap_kept_after"] >= seen["heap_for_block"], seen


def test_system_leaves_glibcs_own_choice_a_fresh_mapping_returned_at_once():
    seen = probe("system")
    assert seen["mapped_for_block"] >= 64 << 20, seen
    assert seen["heap_kept_after"] < 1 << 20, seen
