"""The seccomp filter holds for every system call ABI a process can use, on every jailing backend.

An x86-64 process can also make x32 calls (the syscall number with bit 30 set) and i386 calls
(``int 0x80``). A filter that only compares numbers of the native ABI lets such a call through:
nsjail's kafel policy did (an x32 ``socket(AF_INET)`` got past its "no network" rule and met
only the kernel's ENOSYS, which kernels built with x32 enabled do not answer), and it could not
refuse ``memfd_secret`` at all. Every backend now loads the pool's libseccomp filter, which kills
a call of any other ABI outright.
"""

from __future__ import annotations

import platform

import pytest

from sandbox import Status
from tests.sandbox.jails import QUICK

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x32 and i386 ABIs are x86-64's")

X32_SOCKET = (
    "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
    "fd = libc.syscall(ctypes.c_long(0x40000000 | 41), 2, 1, 0)  # x32 socket(AF_INET, SOCK_STREAM)\n"
    "print('returned', fd, os.strerror(ctypes.get_errno()))"
)
# mov eax, 359 (i386 socket); mov ebx, 2 (AF_INET); mov ecx, 1; xor edx, edx; int 0x80; ret
I386_SOCKET = (
    "import ctypes, mmap\n"
    "code = bytes([0x53, 0xb8, 0x67, 1, 0, 0, 0xbb, 2, 0, 0, 0, 0xb9, 1, 0, 0, 0, 0x31, 0xd2, 0xcd, 0x80, 0x5b,"
    " 0xc3])\n"
    "page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\npage.write(code)\n"
    "call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))\n"
    "print('returned', call())"
)


@pytest.mark.parametrize("code", [X32_SOCKET, I386_SOCKET], ids=["x32", "i386"])
def test_a_call_through_another_abi_is_killed(jail, code):
    if jail.name == "docker":
        pytest.skip("docker: the daemon's own seccomp profile applies")
    result = jail.run(code, limits=QUICK)
    assert result.status is Status.VIOLATION, result
    assert "returned" not in result.stdout, result
