"""How a jailed interpreter is started: the bubblewrap command line, the plain-subprocess
fallback, the probe that decides between them, and killing a jail.

The bubblewrap jail unshares every namespace (user, pid, net, ipc, uts, cgroup; no network at
all), sees only read-only binds of ``/usr`` (plus ``/etc/alternatives`` and ``/etc/ld.so.cache``
so shared libraries resolve, and the interpreter's prefix when it lives elsewhere), a fresh
``/proc`` and ``/dev``, a private tmpfs ``/tmp`` as its only writable directory (and a small
``/dev/shm``), an environment built from nothing, ``--die-with-parent`` and ``--new-session``,
and further user namespaces disabled inside. The driver is the jail's pid 1 (``--as-pid-1``):
it makes itself non-dumpable before any untrusted code runs and forks that code, so no
jailed process has a parent whose memory or descriptors it could reach.
When the host runs as root the jail is started as an unprivileged uid (65534 by default),
because the kernel ignores RLIMIT_NPROC for root (inside its own user namespace each jail
counts its processes separately). The rlimits themselves are set by the driver before any
untrusted code runs. The driver arrives pre-compiled by the jail's own interpreter in a sealed
read-only memfd. Long-lived jails are started from one long-lived thread:
``--die-with-parent`` fires when the *thread* that started bubblewrap ends.

Writable tmpfs dirs bound in bytes *and in files*: every file, directory or link costs host
kernel memory (inode, dentry) that neither the address-space limit nor the tmpfs size counts;
millions of empty files grew the host kernel by GBs. bubblewrap 0.8 cannot
set ``nr_inodes``, and cgroup v2 is not usable here (checked Nov 2026: a v1 hybrid whose
unified hierarchy has no controllers), so when the host runs as root each jail is started
through ``unshare --mount`` + ``mount -t tmpfs -o size=..,nr_inodes=..`` + ``setpriv``: two
tmpfs mounts (``/tmp``: ``disk_mb`` and ``disk_files``; ``/dev/shm``: 16 MB and 256 files)
made in a private mount namespace of that jail alone, then bound in by bubblewrap. This costs
a few ms of cold start (a shell and two ``mount`` runs).

The fallback (no bubblewrap, or a probe that fails) is a plain subprocess with the same rlimits,
a cleared environment and a temporary work dir, dropped to an unprivileged uid of its own when
root (:data:`FALLBACK_UID`, so jails' processes never count against its process limit). It
does NOT hide the filesystem or the network, does not bound the work dir at all, and a
process that calls ``setsid`` can outlive the run; it is used only where the caller asks for it
(``isolation="subprocess"``, or ``allow_unjailed=True`` with ``auto``), with a loud warning.

Control groups (root hosts with usable controllers, see :mod:`pipelines.sandbox.cgroups`):
every jail joins a group of its own from the root mount helper before bubblewrap starts, with a
quota of one CPU and one memory cap for all its processes, files and shared memory. A runner's
jail keeps CAP_SYS_ADMIN inside its own user namespace (``--cap-add``; never on the host) so
its driver can give each candidate mount, IPC and pid namespaces of its own (see ``_driver``).

Not guaranteed: anything against kernel exploits (no seccomp filter is installed); the file
count of ``/tmp`` of sessions and one-shot runs when the host is not root, or cannot mount
(then bubblewrap's own tmpfs is used, with a warning); a CPU quota and a memory cap per jail
where the host gives no control groups (then memfds and SysV shared memory are bounded only by
the file-size, open-files and process rlimits, and a neighbour can slow a program past its
wall-clock limit).

Reaping: every process weft starts is waited for by weft. A jail is killed from the inside out
(its init first, so bubblewrap reaps it, then bubblewrap), because killing bubblewrap first
would hand the init to the host's pid 1 as a zombie. weft does not make itself a subreaper and
installs no SIGCHLD handler. The host folder of the tmpfs mount points
(``weft-jail-mnt-<pid>.<host tag>-*`` in the temp dir) is removed at exit; one left by a
process killed with SIGKILL is removed by the next process that starts jails.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import logging
import os
import queue
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

from pipelines.sandbox import cgroups
from pipelines.sandbox.result import ISOLATION_BWRAP, ISOLATION_SUBPROCESS, Limits

log = logging.getLogger(__name__)

DEFAULT_PYTHON = "/usr/bin/python3"
DEFAULT_UID = 65534
# The plain-subprocess fallback runs as a uid of its own: the kernel counts every process of a
# uid on the host against that uid's RLIMIT_NPROC, processes inside bubblewrap jails of the same
# uid included, so jails beside it would otherwise use up the fallback's process limit.
FALLBACK_UID = 65533
JAIL_WORKDIR = "/tmp"
SHM_MB = 16
SHM_FILES = 256  # files + directories in the jail's /dev/shm
PYTHON_FLAGS = ("-s", "-P")  # no user site-packages, no script dir on sys.path
_RO_BINDS = ("/usr", "/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime")
_TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_MB = 1024 * 1024
MOUNT_DIR_PREFIX = "weft-jail-mnt-"
_MOUNT_DIR_RE = re.compile(re.escape(MOUNT_DIR_PREFIX) + r"(?P<pid>\d+)\.(?P<tag>[0-9a-f]{8})-.+")
# how long bubblewrap may take to reap its killed init and exit before it is killed itself
INIT_EXIT_S = 2.0


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot be provided on this machine."""


@dataclass(frozen=True)
class JailSpec:
    """Everything needed to start jailed interpreters (resolved once per sandbox).
    ``inode_mounts``: (unshare, mount, setpriv, sh) when the jail's writable dirs are tmpfs
    mounts with an inode limit made by the host in a private mount namespace (root only)."""

    isolation: str
    python: str
    bwrap: str | None = None
    uid: int | None = None
    extra_ro_binds: tuple[str, ...] = ()
    inode_mounts: tuple[str, str, str, str] | None = None
    candidate_namespaces: bool = False


def jail_env() -> dict[str, str]:
    """The whole environment the jailed code sees (nothing is inherited from the host)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": JAIL_WORKDIR,
        "TMPDIR": JAIL_WORKDIR,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }


def rlimit_spec(limits: Limits, *, cpu: bool = True, cpu_grace_s: int = 1) -> str:
    """The driver's rlimit argument: 'as_bytes,cpu_soft,cpu_hard,fsize,nofile,nproc'."""
    cpu_soft = limits.cpu_seconds if cpu else -1
    cpu_hard = cpu_soft + cpu_grace_s if cpu else -1
    return ",".join(str(v) for v in (
        limits.memory_mb * _MB, cpu_soft, cpu_hard, limits.file_size_mb * _MB,
        limits.open_files, limits.processes))


def _python_binds(python: str) -> tuple[str, ...]:
    """Read-only binds an interpreter outside /usr needs (its real file's prefix)."""
    real = Path(os.path.realpath(python))
    if str(real).startswith("/usr/"):
        return ()
    # <prefix>/bin/python3.X -> bind <prefix>
    return (str(real.parent.parent),)


@functools.lru_cache(maxsize=1)
def _host_tag() -> str:
    """Names this host and pid namespace in mount folder names, so a pid in a name is checked
    only where it means the same process."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    digest = hashlib.sha256(f"{socket.gethostname()}|{namespace}".encode()).hexdigest()
    return digest[:8]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def remove_stale_mount_dirs(parent: str | None = None) -> list[str]:
    """Remove the mount folders (``weft-jail-mnt-<pid>.<host tag>-*``) that processes killed
    before their exit handler ran left in ``parent`` (default: the temp dir). A folder is removed
    only when its owner pid names a process of this host and pid namespace that no longer runs,
    it belongs to this user, and it holds nothing but the two empty, unmounted mount points
    (each is removed with ``rmdir``, which fails on anything not empty). Returns the removed
    folders; anything else is left alone."""
    parent = parent or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        match = _MOUNT_DIR_RE.fullmatch(name)
        if match is None or match["tag"] != _host_tag():
            continue
        pid = int(match["pid"])
        if pid == os.getpid() or _pid_alive(pid):
            continue
        top = os.path.join(parent, name)
        try:
            st = os.lstat(top)
            inside = os.listdir(top) if stat.S_ISDIR(st.st_mode) else None
        except OSError:
            continue
        if inside is None or st.st_uid != os.geteuid() or not set(inside) <= {"tmp", "shm"}:
            continue
        points = [os.path.join(top, sub) for sub in inside]
        if any(os.path.islink(p) or os.path.ismount(p) for p in points):
            continue
        try:
            for point in points:
                os.rmdir(point)
            os.rmdir(top)
        except OSError as exc:  # not empty, or another process removed it first
            log.debug("left mount folder %s: %s", top, exc)
            continue
        removed.append(top)
    if removed:
        log.info("removed %d stale sandbox mount folder(s) of dead processes: %s",
                 len(removed), removed)
    return removed


@functools.lru_cache(maxsize=1)
def _mount_points() -> tuple[str, str]:
    """Two empty host directories the per-jail tmpfs mounts go on (inside each jail's own
    private mount namespace, so the host never sees them mounted). Their folder's name carries
    this process's pid, so the next process to start jails can remove it if this one is killed
    before its exit handler runs (see :func:`remove_stale_mount_dirs`)."""
    remove_stale_mount_dirs()
    top = tempfile.mkdtemp(prefix=f"{MOUNT_DIR_PREFIX}{os.getpid()}.{_host_tag()}-")
    os.chmod(top, 0o755)
    points = (os.path.join(top, "tmp"), os.path.join(top, "shm"))
    for point in points:
        os.mkdir(point, 0o755)
    atexit.register(shutil.rmtree, top, True)
    return points


# Join the jail's control groups (the count, then each group's cgroup.procs), mount the two
# size- and inode-limited tmpfs dirs, then drop to the jail's uid and start bubblewrap (exec:
# same pid, so --die-with-parent still watches the launching thread).
_MOUNT_SCRIPT = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 97; shift; '
                 'n=$((n - 1)); done; '
                 '"$1" -t tmpfs -o "$2" weft-tmp "$3" && "$1" -t tmpfs -o "$4" weft-shm "$5" '
                 '&& shift 5 && exec "$@"')


def candidate_mounts(limits: Limits) -> str:
    """The driver's argument for the tmpfs mounts each candidate of a runner gets:
    '/tmp bytes,/tmp files,/dev/shm bytes,/dev/shm files'."""
    return f"{limits.disk_mb * _MB},{limits.disk_files},{SHM_MB * _MB},{SHM_FILES}"


def _inode_prefix(spec: JailSpec, limits: Limits, groups: tuple[str, ...] = ()) -> list[str]:
    """The command that puts the jail in its control groups, makes its private tmpfs mounts and
    drops privileges, or []."""
    if spec.inode_mounts is None or spec.uid is None:
        return []
    unshare, mount, setpriv, sh = spec.inode_mounts
    tmp_dir, shm_dir = _mount_points()
    owner = f"mode=0700,uid={spec.uid},gid={spec.uid},nosuid,nodev"
    tmp_opts = f"size={limits.disk_mb * _MB},nr_inodes={limits.disk_files},{owner}"
    shm_opts = f"size={SHM_MB * _MB},nr_inodes={SHM_FILES},{owner}"
    joins = [str(len(groups))] + [os.path.join(group, "cgroup.procs") for group in groups]
    return [unshare, "--mount", "--propagation", "private", "--", sh, "-c", _MOUNT_SCRIPT, "sh",
            *joins, mount, tmp_opts, tmp_dir, shm_opts, shm_dir,
            setpriv, f"--reuid={spec.uid}", f"--regid={spec.uid}", "--clear-groups", "--"]


def bwrap_argv(spec: JailSpec, limits: Limits, *, as_pid_1: bool = True,
               keep_admin: bool = False, groups: tuple[str, ...] = ()) -> list[str]:
    """The bubblewrap command line (without the command to run inside). With
    ``spec.inode_mounts`` it starts with the host-side mount-and-drop prefix (run it as root).
    ``keep_admin``: the jail's init keeps CAP_SYS_ADMIN in the jail's own user namespace (a
    runner's driver, which gives each candidate namespaces of its own and drops it).
    ``groups``: control-group folders the jail joins (see :mod:`pipelines.sandbox.cgroups`)."""
    assert spec.bwrap is not None
    argv = _inode_prefix(spec, limits, groups)
    argv += [spec.bwrap, "--unshare-all", "--unshare-user", "--disable-userns",
             "--die-with-parent", "--new-session", "--clearenv"]
    if keep_admin:
        argv += ["--cap-add", "CAP_SYS_ADMIN"]
    for key, value in jail_env().items():
        argv += ["--setenv", key, value]
    for path in _RO_BINDS + _python_binds(spec.python) + spec.extra_ro_binds:
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    for path in _TOP_LINKS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    if spec.inode_mounts is not None and spec.uid is not None:
        tmp_dir, shm_dir = _mount_points()
        argv += ["--bind", shm_dir, "/dev/shm", "--bind", tmp_dir, JAIL_WORKDIR]
    else:
        argv += ["--size", str(SHM_MB * _MB), "--tmpfs", "/dev/shm",
                 "--size", str(limits.disk_mb * _MB), "--tmpfs", JAIL_WORKDIR]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", JAIL_WORKDIR]
    if as_pid_1:
        argv.append("--as-pid-1")
    argv.append("--")
    return argv


@functools.lru_cache(maxsize=1)
def driver_source() -> str:
    """The in-jail driver's source text (read on first use)."""
    return (Path(__file__).with_name("_driver.py")).read_text(encoding="utf-8")


_COMPILE = ("import marshal, sys; sys.stdout.buffer.write(marshal.dumps(compile("
            "sys.stdin.buffer.read().decode('utf-8'), '<string>', 'exec')))")
_SEALS = ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE")


@functools.lru_cache(maxsize=4)
def driver_code_fd(python: str) -> tuple[int, int] | None:
    """(fd, size) of a sealed, read-only memfd holding the driver compiled by ``python`` itself
    (marshal is version-specific), so a jail start skips compiling ~600 lines; None when that
    cannot be done here (then the source is passed with ``-c``). Kept open for the process."""
    try:
        import fcntl

        done = subprocess.run([python, *PYTHON_FLAGS, "-c", _COMPILE],
                              input=driver_source().encode("utf-8"), capture_output=True,
                              env={}, timeout=30, check=False)
        if done.returncode != 0 or not done.stdout:
            return None
        fd = os.memfd_create("weft-driver", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        view = memoryview(done.stdout)
        while view:
            view = view[os.write(fd, view):]
        seals = 0
        for name in _SEALS:
            seals |= getattr(fcntl, name)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        return fd, len(done.stdout)
    except (OSError, AttributeError, subprocess.SubprocessError, ValueError):
        return None


def python_argv(spec: JailSpec, driver_args: list[str]) -> tuple[list[str], tuple[int, ...]]:
    """The interpreter's argv running the driver, and the fds it needs passed."""
    compiled = driver_code_fd(spec.python)
    if compiled is None:
        return [spec.python, *PYTHON_FLAGS, "-c", driver_source(), *driver_args], ()
    fd, size = compiled
    boot = (f"import marshal,os;c=marshal.loads(os.pread({fd},{size},0));os.close({fd});"
            "del marshal;exec(c)")
    return [spec.python, *PYTHON_FLAGS, "-c", boot, *driver_args], (fd,)


@dataclass
class Launch:
    """A started jail: the process, the temp work dir to remove (fallback only) and the jail's
    control groups (removed when it ends)."""

    proc: subprocess.Popen
    workdir: str | None
    isolation: str
    groups: tuple[str, ...] = ()


def _drop_privileges_kwargs(spec: JailSpec) -> dict:
    if spec.uid is None or (spec.isolation == ISOLATION_BWRAP and spec.inode_mounts):
        return {}  # none wanted, or the mount prefix drops them itself (setpriv)
    return {"user": spec.uid, "group": spec.uid, "extra_groups": []}


class _LauncherThread:
    """One long-lived thread that starts long-lived jails.

    bubblewrap's ``--die-with-parent`` uses PR_SET_PDEATHSIG, which fires when the *thread*
    that started the process ends, not the process. A session or runner started from a
    short-lived worker thread (a ThreadPoolExecutor's) would be killed when that thread exits,
    so kernels are started from here; the jail then lives until it is killed or this process
    ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while True:
            fn, box, done = self._jobs.get()
            try:
                box.append((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - handed back to the calling thread
                box.append((False, exc))
            done.set()

    def call(self, fn):
        if threading.current_thread() is threading.main_thread():
            return fn()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="weft-jail-launcher",
                                                daemon=True)
                self._thread.start()
        box: list = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value


_LAUNCHER = _LauncherThread()


def launch(spec: JailSpec, limits: Limits, driver_args: list[str], *, pass_fds: tuple[int, ...],
           stdin, stdout, stderr, as_pid_1: bool = True, long_lived: bool = False,
           keep_admin: bool = False) -> Launch:
    """Start the driver in the jail (or in the fallback) with the given descriptors.
    ``long_lived`` jails (sessions, runners) are started from a thread that lives as long as
    the process (see :class:`_LauncherThread`); ``keep_admin``: see :func:`bwrap_argv`."""
    if long_lived:
        return _LAUNCHER.call(lambda: launch(spec, limits, driver_args, pass_fds=pass_fds,
                                             stdin=stdin, stdout=stdout, stderr=stderr,
                                             as_pid_1=as_pid_1, keep_admin=keep_admin))
    priv = _drop_privileges_kwargs(spec)
    py_argv, py_fds = python_argv(spec, driver_args)
    pass_fds = tuple(pass_fds) + py_fds
    if spec.isolation == ISOLATION_BWRAP:
        groups = cgroups.create(limits.memory_mb, _host_tag()) if spec.inode_mounts else ()
        argv = bwrap_argv(spec, limits, as_pid_1=as_pid_1, keep_admin=keep_admin,
                          groups=groups) + py_argv
        try:
            proc = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=stderr, env={},
                                    cwd="/", pass_fds=pass_fds, start_new_session=True, **priv)
        except BaseException:
            cgroups.remove(groups)
            raise
        return Launch(proc, None, ISOLATION_BWRAP, groups)
    workdir = tempfile.mkdtemp(prefix="weft-sandbox-")
    if spec.uid is not None:
        os.chown(workdir, spec.uid, spec.uid)
    env = dict(jail_env(), HOME=workdir, TMPDIR=workdir)
    try:
        proc = subprocess.Popen(py_argv, stdin=stdin, stdout=stdout,
                                stderr=stderr, env=env, cwd=workdir, pass_fds=pass_fds,
                                start_new_session=True, **priv)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return Launch(proc, workdir, ISOLATION_SUBPROCESS)


def _children(pid: int) -> list[int]:
    """The child pids of ``pid`` (all its threads'), from /proc; [] when it is gone."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                found += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            continue
    return found


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
        return int(text[text.rindex(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _kill_children(pid: int) -> None:
    """SIGKILL every child of ``pid`` through a pidfd opened while it is still ``pid``'s child
    (so a recycled pid is never signalled)."""
    for child in _children(pid):
        try:
            fd = os.pidfd_open(child)
        except OSError:
            continue
        try:
            if _parent_of(child) == pid:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)


def kill_jail(launch_: Launch) -> None:
    """Kill the jail and reap it, leaving no zombie anywhere.

    A bubblewrap jail is killed from the inside out: first the jail's init (bubblewrap's child,
    pid 1 of the jail's pid namespace; the kernel then kills everything else in the namespace),
    so that bubblewrap itself reaps it and exits, and only then bubblewrap's process group.
    Killing bubblewrap first would orphan the init to the host's pid 1, where it stays a zombie
    until that reaps it (never, in a container whose pid 1 does not reap)."""
    proc = launch_.proc
    if launch_.isolation == ISOLATION_BWRAP:
        deadline = time.monotonic() + INIT_EXIT_S
        while proc.poll() is None and time.monotonic() < deadline:
            _kill_children(proc.pid)  # again each round: an init may appear during start-up
            try:
                proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a SIGKILLed process always exits
        log.error("sandbox process %s did not exit after SIGKILL", proc.pid)


def cleanup(launch_: Launch) -> None:
    """After the jail ended: kill leftovers of its group (fallback) and remove its work dir."""
    if launch_.isolation == ISOLATION_SUBPROCESS:
        try:
            os.killpg(launch_.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if launch_.workdir:
        shutil.rmtree(launch_.workdir, ignore_errors=True)
    if launch_.groups and launch_.proc.returncode is not None:
        cgroups.remove(launch_.groups)
        launch_.groups = ()


# ---------------------------------------------------------------------------------------------
# choosing the isolation level


def _default_uid() -> int | None:
    return DEFAULT_UID if os.geteuid() == 0 else None


def _check_python(python: str) -> None:
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise SandboxUnavailable(
            f"sandbox interpreter {python!r} not found; install the system Python "
            "(apt-get install python3) or pass python=... to LocalSandbox")


# What a runner's driver does for each candidate (new mount, IPC and pid namespaces, a tmpfs on
# /tmp), tried once by the probe: ``ok`` when the jail allows it.
_NAMESPACE_PROBE = ("import ctypes, sys; c = ctypes.CDLL(None); "
                    "ok = c.unshare(0x28020000) == 0 and "
                    "c.mount(b'weft', b'/tmp', b'tmpfs', 6, b'size=65536') == 0; "
                    "sys.stdout.write('ok' if ok else 'no')")


def _probe_bwrap(spec: JailSpec, keep_admin: bool = False) -> str | None:
    """Run ``python3 -c pass`` in the jail (with ``keep_admin``: the per-candidate namespace
    set-up a runner does); None when it works, else what went wrong."""
    code = _NAMESPACE_PROBE if keep_admin else "import sys; sys.stdout.write('ok')"
    argv = bwrap_argv(spec, Limits(), keep_admin=keep_admin) + [spec.python, *PYTHON_FLAGS,
                                                                 "-c", code]
    try:
        done = subprocess.run(argv, capture_output=True, env={}, cwd="/", timeout=20,
                              start_new_session=True, check=False,
                              **_drop_privileges_kwargs(spec))
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    if done.returncode != 0 or done.stdout != b"ok":
        return (f"exit {done.returncode}: "
                f"{done.stderr.decode('utf-8', 'replace').strip()[:500]}")
    return None


def _inode_tools(uid: int | None) -> tuple[str, str, str, str] | None:
    """(unshare, mount, setpriv, sh) when the host can make inode-limited tmpfs mounts for its
    jails (running as root, dropping to ``uid``, util-linux present), else None."""
    if uid is None or os.geteuid() != 0:
        return None
    tools = tuple(shutil.which(name) for name in ("unshare", "mount", "setpriv", "sh"))
    return tools if all(tools) else None  # type: ignore[return-value]


def _with_candidate_namespaces(spec: JailSpec) -> JailSpec:
    """``spec`` with candidate namespaces when this host's bubblewrap lets a runner's jail keep
    CAP_SYS_ADMIN in its own user namespace; else unchanged, with a warning (runners then kill
    leftovers by pid and wipe the work dir instead, which a candidate can outlast)."""
    problem = _probe_bwrap(spec, keep_admin=True)
    if problem is None:
        return replace(spec, candidate_namespaces=True)
    message = (f"weft sandbox: per-candidate namespaces unavailable ({problem}); warm runners "
               "kill leftovers by pid and wipe their work dir between candidates instead, which a "
               "candidate can outlast, and SysV IPC objects persist across candidates")
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    log.warning(message)
    return spec


@functools.lru_cache(maxsize=16)
def resolve_spec(isolation: str = "auto", python: str = DEFAULT_PYTHON,
                 uid: int | None = -1, extra_ro_binds: tuple[str, ...] = (),
                 allow_unjailed: bool = False) -> JailSpec:
    """Decide how jails are started. ``isolation``: ``auto`` (bubblewrap when it works; where
    it does not, raise :class:`SandboxUnavailable` unless ``allow_unjailed`` opts in to the
    fallback, which is then taken with a loud warning), ``bwrap`` (raise when unavailable) or
    ``subprocess`` (the fallback, chosen explicitly).
    ``uid=-1`` means, when running as root: 65534 for jails, 65533 for the fallback
    (:data:`FALLBACK_UID`); else the current user."""
    if isolation not in ("auto", ISOLATION_BWRAP, ISOLATION_SUBPROCESS):
        raise ValueError(f"isolation must be 'auto', 'bwrap' or 'subprocess', got {isolation!r}")
    real_uid = _default_uid() if uid == -1 else uid
    if real_uid is not None and os.geteuid() != 0:
        raise ValueError("uid can only be chosen when running as root")
    _check_python(python)
    if isolation in ("auto", ISOLATION_BWRAP):
        bwrap = shutil.which("bwrap")
        problem = "bubblewrap (bwrap) is not installed"
        if bwrap:
            tools = _inode_tools(real_uid)
            spec = JailSpec(ISOLATION_BWRAP, python, bwrap, real_uid, extra_ro_binds, tools)
            problem = _probe_bwrap(spec)
            if problem is None:
                return _with_candidate_namespaces(spec)
            if tools is not None:  # e.g. root without CAP_SYS_ADMIN in a container
                plain = JailSpec(ISOLATION_BWRAP, python, bwrap, real_uid, extra_ro_binds)
                if _probe_bwrap(plain) is None:
                    plain = _with_candidate_namespaces(plain)
                    message = (f"weft sandbox: inode-limited tmpfs mounts failed ({problem}); "
                               "jails get bubblewrap's own tmpfs, whose file count is not "
                               "bounded by Limits.disk_files")
                    warnings.warn(message, RuntimeWarning, stacklevel=2)
                    log.warning(message)
                    return plain
        if isolation == ISOLATION_BWRAP:
            raise SandboxUnavailable(
                f"bubblewrap jail unavailable: {problem}. Install it (apt-get install "
                "bubblewrap), make sure unprivileged user namespaces are enabled, or use "
                "isolation='subprocess' knowingly.")
        if not allow_unjailed:
            raise SandboxUnavailable(
                f"bubblewrap jail unavailable: {problem}. Model-written code will not run "
                "outside the jail: install bubblewrap (apt-get install bubblewrap) and make "
                "sure unprivileged user namespaces are enabled. To accept the much weaker "
                "plain-subprocess fallback anyway, opt in with allow_unjailed=True "
                "(SandboxResource(allow_unjailed=True)) or isolation='subprocess'.")
        message = (f"weft sandbox: {problem}; FALLING BACK to a plain subprocess with rlimits "
                   "only: untrusted code can read the host filesystem, reach the network and "
                   "leave processes behind. Install bubblewrap (apt-get install bubblewrap).")
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        log.warning(message)
        print(f"WARNING: {message}", file=sys.stderr)
    if uid == -1 and real_uid is not None:
        real_uid = FALLBACK_UID
    return JailSpec(ISOLATION_SUBPROCESS, python, None, real_uid, extra_ro_binds)
