"""A seccomp-BPF filter for candidate processes, assembled here (no libseccomp) and applied to every thread
(`SECCOMP_FILTER_FLAG_TSYNC`). Denied calls fail with EPERM, so a candidate sees an ordinary error.

What it denies and why (x86_64; other architectures get no filter and the layer reports False):
- reading or writing another process: ptrace, process_vm_readv/writev, kcmp, pidfd_getfd;
- changing what the process can see or be: mount and the new mount API, umount, pivot_root, chroot,
  unshare, setns, and clone with a namespace flag (clone3 answers ENOSYS, so libc falls back to clone,
  whose flags a filter can read);
- kernel-wide state: BPF, keyrings, module loading, kexec, reboot, swap, accounting, the clocks, I/O ports,
  userfaultfd, file handles (open_by_handle_at reads any file of a mount);
- inet, inet6 and packet sockets (a candidate needs no network; the network namespace is the first layer);
- where the PID namespace did not hold (`restrict_pids`): kill, tkill, tgkill, prlimit64, setpriority,
  sched_setaffinity, sched_setscheduler/setparam/setattr and ioprio_set aimed at a process other than itself
  (pid 0 or its own pid), so it cannot stop, renice, starve or limit the evaluator's processes.

    install_filter(os.getpid(), restrict_pids=True)   # in the candidate, after no_new_privs
"""

from __future__ import annotations

import ctypes
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
LD_W_ABS, JEQ, JSET, JGE, RET = 0x20, 0x15, 0x45, 0x35, 0x06
NR, ARCH = 0, 4

DENY = {  # x86_64 numbers
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "bpf": 321, "add_key": 248, "request_key": 249, "keyctl": 250,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320,
    "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "settimeofday": 164, "clock_settime": 227,
    "clock_adjtime": 305, "adjtimex": 159, "iopl": 172, "ioperm": 173, "userfaultfd": 323,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "lookup_dcookie": 212, "quotactl": 179,
}
# syscall -> index of its pid argument (checked only where the PID namespace did not hold)
PID_ARG = {"kill": (62, 0), "tkill": (200, 0), "tgkill": (234, 0), "prlimit64": (302, 0), "setpriority": (141, 1),
           "sched_setaffinity": (203, 0), "sched_setscheduler": (144, 0), "sched_setparam": (142, 0),
           "sched_setattr": (314, 0), "ioprio_set": (251, 1)}
SOCKET, CLONE, CLONE3 = 41, 56, 435
DENIED_DOMAINS = (2, 10, 17)  # AF_INET, AF_INET6, AF_PACKET
NS_CLONE_FLAGS = 0x7E020080  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|NEWTIME


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _deny_if_eq(value: int, ret: int = RET_ERRNO | EPERM) -> list[bytes]:
    return [_ins(JEQ, value, 0, 1), _ins(RET, ret)]


def _arg(i: int) -> int:
    return 16 + 8 * i  # seccomp_data.args[i], low 32 bits (little endian)


def program(own_pid: int, restrict_pids: bool) -> list[bytes]:
    """The filter as BPF instructions. Each test is a local block that reloads the syscall number after."""
    prog = [_ins(LD_W_ABS, ARCH), _ins(JEQ, AUDIT_ARCH_X86_64, 1, 0), _ins(RET, RET_ERRNO | EPERM),
            _ins(LD_W_ABS, NR), _ins(JGE, 0x40000000, 0, 1), _ins(RET, RET_ERRNO | EPERM)]  # x32 ABI
    for nr in DENY.values():
        prog += _deny_if_eq(nr)
    prog += _deny_if_eq(CLONE3, RET_ERRNO | ENOSYS)
    # socket(domain, ...): no inet / packet sockets
    block = [_ins(LD_W_ABS, _arg(0))] + [i for d in DENIED_DOMAINS for i in _deny_if_eq(d)] + [_ins(LD_W_ABS, NR)]
    prog += [_ins(JEQ, SOCKET, 0, len(block))] + block
    # clone(flags, ...): no new namespaces
    block = [_ins(LD_W_ABS, _arg(0)), _ins(JSET, NS_CLONE_FLAGS, 0, 1), _ins(RET, RET_ERRNO | EPERM), _ins(LD_W_ABS, NR)]
    prog += [_ins(JEQ, CLONE, 0, len(block))] + block
    if restrict_pids:
        for nr, idx in PID_ARG.values():
            # allowed: 0 (itself) and its own pid; anything else is another process
            block = [_ins(LD_W_ABS, _arg(idx)), _ins(JEQ, 0, 2, 0), _ins(JEQ, own_pid, 1, 0),
                     _ins(RET, RET_ERRNO | EPERM), _ins(LD_W_ABS, NR)]
            prog += [_ins(JEQ, nr, 0, len(block))] + block
    prog.append(_ins(RET, RET_ALLOW))
    return prog


def install_filter(own_pid: int, restrict_pids: bool, errors: dict[str, str] | None = None) -> bool:
    """Apply the filter to every thread of this process (needs no_new_privs or CAP_SYS_ADMIN)."""
    errors = errors if errors is not None else {}
    if platform.machine() != "x86_64":
        errors["seccomp"] = f"no filter for {platform.machine()} (x86_64 only)"
        return False
    prog = b"".join(program(own_pid, restrict_pids))
    buf = ctypes.create_string_buffer(prog, len(prog))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog)
    if libc.syscall(317, 1, 1, ctypes.byref(fprog)) != 0:
        errors["seccomp"] = f"seccomp: errno {ctypes.get_errno()}"
        return False
    return True
