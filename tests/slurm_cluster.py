"""A real one-node SLURM cluster (accounting + fake GPUs) for the tests, started and stopped by PID.

Debian's ``slurm-wlm`` (22.05) + ``slurmdbd`` + ``munge`` + ``mariadb-server`` are installed on demand
(``apt-get``, root only). State, logs, sockets and the MariaDB data live in one fresh folder under
/tmp (the daemons run as root, munge and mysql, who cannot enter pytest's 0700 tmp folders). The
configuration goes to SLURM's standard place, /etc/slurm/{slurm,gres,slurmdbd}.conf, and munge uses
its standard socket: the job step that snakemake-executor-plugin-slurm starts inside each job
(``srun`` from the job script) runs with all ``SLURM_*`` variables except the job id removed, so a
private ``SLURM_CONF`` does not reach it. A configuration that this module did not write is never
overwritten (the test is skipped instead) and the files it wrote are removed by ``stop()``.
Each daemon runs in the foreground as a direct child of this process (``-D``/``-F``, no runuser in
between), in its own session, and is stopped through its PID (SIGTERM, then SIGKILL), newest first.

The node claims more CPUs, memory and GPUs than the machine has (``SlurmdParameters=config_overrides``),
so that the project's real SLURM profile (cluster-sized requests) is submitted unchanged. The GPUs are
GRES entries backed by ``/dev/null`` and ``/dev/zero``: SLURM allocates and accounts them like real
ones (``AllocTRES`` shows ``gres/gpu``); the jobs themselves run on the CPU.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PACKAGES = ["slurm-wlm", "slurmdbd", "munge", "mariadb-server"]
COMMANDS = ["slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "mariadb-install-db", "sbatch", "sacct",
            "sacctmgr"]

# What the fake node offers: at least what the profile asks of one job, and room for two jobs at once.
NODE_CPUS = 32
NODE_MEMORY_MB = 256_000
NODE_GPUS = 2  # each backed by a device file: /dev/null, /dev/zero
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
SLURM_ETC = Path("/etc/slurm")
MARKER = "# written by intact tests/slurm_cluster.py; removed when its cluster stops\n"


class ClusterUnavailable(Exception):
    """SLURM cannot be installed or started here (not root, no package source): the test is skipped."""


def missing_commands() -> list[str]:
    return [c for c in COMMANDS if shutil.which(c, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None]


def ensure_packages(log: Path) -> None:
    """Install Debian's SLURM, slurmdbd, munge and MariaDB unless their commands are already there."""
    if not missing_commands():
        return
    if os.geteuid() != 0:
        raise ClusterUnavailable(f"SLURM is not installed ({', '.join(missing_commands())} missing) and installing it "
                                 "needs root")
    if shutil.which("apt-get") is None:
        raise ClusterUnavailable("SLURM is not installed and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with open(log, "a") as out:
        for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]):
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=600)
            if proc.returncode != 0:
                raise ClusterUnavailable(f"`{' '.join(cmd)}` failed ({proc.returncode}); see {log}")
    if missing_commands():
        raise ClusterUnavailable(f"after installing {PACKAGES}: still missing {missing_commands()}")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_until(predicate, timeout: float, what: str, interval: float = 0.25, diagnose=None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    detail = f"\n{diagnose()}" if diagnose else ""
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")


class SlurmCluster:
    """One node (this machine) with ``NODE_GPUS`` fake GPUs, one partition and accounting through slurmdbd.

    ``env`` is the environment to run SLURM commands (and Snakemake) against this cluster.
    """

    cluster_name = "intacttest"
    partition = "gpu"
    account = "intact"

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root or tempfile.mkdtemp(prefix="intact-slurm-"))
        self.root.chmod(0o755)
        self.host = socket.gethostname().split(".")[0]
        self.user = "root"
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.etc = SLURM_ETC
        self.written: list[Path] = []
        self.logs = self.root / "log"
        self.env = {
            **os.environ,
            "SLURM_CONF": str(self.etc / "slurm.conf"),
            "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin",
        }
        for var in list(self.env):  # a surrounding SLURM job's settings must not leak into this cluster
            if var.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and var != "SLURM_CONF":
                del self.env[var]

    # ---- life cycle ------------------------------------------------------------------------------
    def start(self) -> SlurmCluster:
        if os.geteuid() != 0:
            raise ClusterUnavailable("starting munged, MariaDB and the SLURM daemons needs root")
        for name in ("slurm.conf", "gres.conf", "slurmdbd.conf"):
            path = self.etc / name
            if path.exists() and not path.read_text(errors="replace").startswith(MARKER):
                raise ClusterUnavailable(f"{path} exists and was not written by these tests: not touching a real SLURM "
                                         "setup")
        for d in (self.etc, self.logs, self.root / "run", self.root / "state", self.root / "spool"):
            d.mkdir(parents=True, exist_ok=True)
        self.ctld_port, self.slurmd_port, self.dbd_port = free_ports(3)
        atexit.register(self.stop)
        self._start_munge()
        self._start_mariadb()
        self._write_slurm_conf()
        self._start_slurmdbd()
        self._register_accounts()
        self._start("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.etc / "slurm.conf")])
        wait_until(lambda: self.run(["scontrol", "ping"], check=False).returncode == 0, 30, "slurmctld",
                   diagnose=lambda: self._tail("slurmctld"))
        self._start("slurmd", ["slurmd", "-D", "-N", self.host, "-f", str(self.etc / "slurm.conf")])
        wait_until(self._node_idle, 60, "the node to become idle", diagnose=self._diagnose)
        return self

    def stop(self) -> None:
        """Cancel what is left in the queue, then stop every daemon this object started, newest first.

        Idempotent; also registered with atexit by start()."""
        if any(name == "slurmctld" and p.poll() is None for name, p in self.procs):
            self.run(["scancel", "--full", "-u", self.user], check=False)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.run(["squeue", "-h"], check=False).stdout.strip():
                time.sleep(0.5)
        for pid in self._our_stepds():  # job steps that outlived the queue (should not happen)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for _name, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        self.procs.clear()
        atexit.unregister(self.stop)
        for path in self.written:
            path.unlink(missing_ok=True)
        self.written.clear()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> SlurmCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs}

    # ---- commands --------------------------------------------------------------------------------
    def run(self, cmd: list[str], check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
        return proc

    def sacct(self, fields: list[str], all_steps: bool = False) -> list[dict[str, str]]:
        """This cluster's jobs (allocations only, unless ``all_steps``) as dicts, read from slurmdbd."""
        cmd = ["sacct", "-a", "-P", "-n", "--format", ",".join(fields), "--starttime", "now-1days"]
        if not all_steps:
            cmd.append("-X")
        out = self.run(cmd).stdout
        return [dict(zip(fields, line.split("|", len(fields) - 1))) for line in out.splitlines() if line.strip()]

    # ---- pieces ----------------------------------------------------------------------------------
    def _start(self, name: str, cmd: list[str], user: str | None = None, env: dict | None = None) -> subprocess.Popen:
        log = open(self.logs / f"{name}.out", "ab")
        # the Popen's PID is the daemon itself (no runuser/sudo in between): stopping it stops the daemon
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env or self.env, cwd=self.root,
                                start_new_session=True, user=user, group=user, extra_groups=[] if user else None)
        log.close()
        self.procs.append((name, proc))
        return proc

    def _our_stepds(self) -> list[int]:
        """PIDs of slurmstepd processes of this cluster: they run in its folder and hold its slurmd log."""
        root = str(self.root)
        pids = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if not (proc / "cmdline").read_bytes().startswith(b"slurmstepd"):
                    continue
                if os.readlink(proc / "cwd") == root or any(os.readlink(fd).startswith(root + "/")
                                                            for fd in (proc / "fd").iterdir()):
                    pids.append(int(proc.name))
            except OSError:
                continue
        return pids

    def _tail(self, name: str, n: int = 30) -> str:
        texts = []
        for path in sorted(self.logs.glob(f"{name}*")):
            lines = path.read_text(errors="replace").splitlines()[-n:]
            texts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(texts)

    def _diagnose(self) -> str:
        node = self.run(["scontrol", "show", "node"], check=False)
        return node.stdout + node.stderr + "\n" + self._tail("slurmd") + "\n" + self._tail("slurmctld")

    def _node_idle(self) -> bool:
        out = self.run(["sinfo", "-h", "-N", "-o", "%t"], check=False).stdout.split()
        return bool(out) and all(s == "idle" for s in out)

    def _start_munge(self) -> None:
        """munged on its standard socket (SLURM's clients only look there for the dbd connection).

        A munged that already answers there (same key file) is used as it is, and left running."""
        self.munge_socket = MUNGE_SOCKET
        if self.munge_socket.exists() and subprocess.run(["munge", "-n"], capture_output=True).returncode == 0:
            return
        key = Path("/etc/munge/munge.key")
        if not key.exists():
            subprocess.run(["runuser", "-u", "munge", "--", "mungekey", "--create", "--keyfile", str(key)], check=True)
        d = self.munge_socket.parent
        d.mkdir(mode=0o755, parents=True, exist_ok=True)
        shutil.chown(d, "munge", "munge")
        own = self.root / "munge"
        own.mkdir(mode=0o700, exist_ok=True)
        shutil.chown(own, "munge", "munge")
        self._start("munged", ["munged", "-F", f"--socket={self.munge_socket}", f"--key-file={key}",
                               f"--pid-file={own / 'munged.pid'}", f"--log-file={own / 'munged.log'}",
                               f"--seed-file={own / 'munged.seed'}"], user="munge")
        wait_until(lambda: subprocess.run(["munge", "-n"], capture_output=True).returncode == 0, 20, "munged",
                   diagnose=lambda: self._tail("munged"))

    def _start_mariadb(self) -> None:
        data = self.root / "mysql"
        data.mkdir()
        shutil.chown(data, "mysql", "mysql")
        self.mysql_socket = self.root / "run" / "mysqld.sock"
        (self.root / "run").chmod(0o777)
        with open(self.logs / "mariadb-install-db.out", "ab") as out:
            subprocess.run(["mariadb-install-db", "--no-defaults", "--user=mysql", f"--datadir={data}",
                            "--auth-root-authentication-method=socket", "--skip-test-db"],
                           stdout=out, stderr=subprocess.STDOUT, check=True, timeout=120)
        self._start("mariadbd", ["mariadbd", "--no-defaults", "--user=mysql", f"--datadir={data}",
                                 f"--socket={self.mysql_socket}", "--skip-networking",
                                 f"--pid-file={self.root / 'run' / 'mysqld.pid'}",
                                 "--innodb-buffer-pool-size=64M", "--skip-log-bin"])
        ping = ["mariadb-admin", "--no-defaults", f"--socket={self.mysql_socket}", "-u", "root", "ping"]
        wait_until(lambda: subprocess.run(ping, capture_output=True).returncode == 0, 60, "MariaDB",
                   diagnose=lambda: self._tail("mariadbd"))

    def _write_slurm_conf(self) -> None:
        r = self.root
        auth = f"AuthInfo=socket={self.munge_socket}"  # the default; written out for clarity
        self._write(self.etc / "slurm.conf", f"""\
ClusterName={self.cluster_name}
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
{auth}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
LaunchParameters=use_interactive_step
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
SlurmdParameters=config_overrides
GresTypes=gpu
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={self.dbd_port}
AccountingStorageTRES=gres/gpu
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
MinJobAge=300
KillWait=5
InactiveLimit=0
SlurmdTimeout=60
MessageTimeout=20
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={NODE_CPUS} RealMemory={NODE_MEMORY_MB} Gres=gpu:{NODE_GPUS} State=UNKNOWN
PartitionName={self.partition} Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")
        files = ",".join(["/dev/null", "/dev/zero"][:NODE_GPUS])
        self._write(self.etc / "gres.conf", f"NodeName={self.host} Name=gpu File={files}\n")
        self._write(self.etc / "slurmdbd.conf", f"""\
AuthType=auth/munge
{auth}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.dbd_port}
SlurmUser=root
DebugLevel=info
LogFile={r}/log/slurmdbd.log
PidFile={r}/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
""", mode=0o600)

    def _write(self, path: Path, text: str, mode: int = 0o644) -> None:
        self.written.append(path)
        path.write_text(MARKER + text)
        path.chmod(mode)

    def _start_slurmdbd(self) -> None:
        # the MySQL client library inside slurmdbd finds the private server through MYSQL_UNIX_PORT
        self._start("slurmdbd", ["slurmdbd", "-D"], env={**self.env, "MYSQL_UNIX_PORT": str(self.mysql_socket)})
        wait_until(lambda: self.run(["sacctmgr", "-n", "list", "cluster"], check=False).returncode == 0, 60,
                   "slurmdbd", diagnose=lambda: self._tail("slurmdbd"))

    def _register_accounts(self) -> None:
        self.run(["sacctmgr", "-i", "add", "cluster", self.cluster_name])
        self.run(["sacctmgr", "-i", "add", "account", self.account, f"Cluster={self.cluster_name}",
                  "Description=intact tests", "Organization=intact"])
        self.run(["sacctmgr", "-i", "add", "user", self.user, f"Account={self.account}",
                  f"DefaultAccount={self.account}", f"Cluster={self.cluster_name}"])
