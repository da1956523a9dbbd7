"""Real Beam engines on this machine: Prism, a standalone Flink cluster, Spark. Set up, started, stopped.

    python scripts/engines.py setup prism|flink|spark   # build or fetch into .runners/ (kept: a second call is free)
    python scripts/engines.py prism-cache               # put Prism where `--runner DirectRunner` looks for it
    python scripts/engines.py flink start|stop|flags   # JobManager, TaskManager, job server, SDK worker pool
    python scripts/engines.py spark start|stop|flags   # Spark's job server (local[2]) and an SDK worker pool

Everything comes from the package registries: Prism is built by `go install`
at the Beam version the project pins; Flink and Spark run Beam's Java job
servers on a classpath Maven resolves. The job-server jars (one shaded jar
per engine) are not served by the Maven registry this machine reaches, and the
runner modules only at a few Beam versions; 2.62.0 is the newest at which
the Flink runner, the Spark runner and the job service all resolve
(JAVA_BEAM_VERSION). A 2.62 job server runs the 2.77 Python SDK's jobs: the
job and Fn APIs are stable across those releases (tested: tests/test_engines.py).

SDK workers are separate Python processes started by Beam's worker pool
(`--environment_type EXTERNAL`); each runs in a HOME, TMPDIR and cache
directory of its own (`worker`), so nothing a job needs can reach a worker
through this machine's paths by accident.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
RUNNERS = ROOT / ".runners"  # git-ignored; kept between runs
JAVA_BEAM_VERSION = "2.62.0"
FLINK_VERSION = "1.19"  # beam-runners-flink-1.19 at 2.62.0 brings Flink 1.19.0
SPARK_VERSION = "3.5.1"  # Spark is `provided` by Beam's Spark 3 runner: named here
JAVA_OPENS = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in ("java.lang", "java.nio", "java.util")]
_PRISM_PACKAGE = "github.com/apache/beam/sdks/v2/go/cmd/prism"


def beam_version() -> str:
    from apache_beam.version import __version__

    return __version__


class Missing(RuntimeError):
    """A tool an engine needs is not on this machine (the message says which)."""


def _need(*tools: str) -> None:
    absent = [t for t in tools if shutil.which(t) is None]
    if absent:
        raise Missing(f"{', '.join(absent)} not found on PATH")


def _run(cmd: list, log: Path, **kwargs) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, **kwargs)
    if proc.returncode:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}); {log}:\n{tail}")


# ---------------------------------------------------------------- set-up (cached under .runners/)


def setup_prism() -> Path:
    """Prism built from the Go module proxy at the SDK's own version."""
    version = beam_version()
    directory = RUNNERS / f"prism-{version}"
    binary = directory / "prism"
    if binary.exists():
        return binary
    _need("go")
    RUNNERS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".prism-", dir=RUNNERS))
    try:
        _run(["go", "install", f"{_PRISM_PACKAGE}@v{version}"], RUNNERS / "logs" / "prism-build.log",
             env={**os.environ, "GOBIN": str(tmp)})
        directory.mkdir(parents=True, exist_ok=True)
        os.replace(tmp / "prism", binary)  # whole or not at all
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return binary


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.create-hdf5-dataset</groupId><artifactId>{name}</artifactId><version>1</version>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""


def _dependency(coordinate: str) -> str:
    group, artifact, version = coordinate.split(":")
    return (f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version></dependency>")


# slf4j-simple: the job servers log through SLF4J and bring no binding; without one they say nothing.
JAVA_ENGINES = {
    "flink": [f"org.apache.beam:beam-runners-flink-{FLINK_VERSION}:{JAVA_BEAM_VERSION}",
              "org.slf4j:slf4j-simple:1.7.30"],
    "spark": [f"org.apache.beam:beam-runners-spark-3:{JAVA_BEAM_VERSION}",
              f"org.apache.spark:spark-core_2.12:{SPARK_VERSION}",
              f"org.apache.spark:spark-streaming_2.12:{SPARK_VERSION}",
              "org.slf4j:slf4j-simple:1.7.30"],
}
JOB_SERVER_MAIN = {"flink": "org.apache.beam.runners.flink.FlinkJobServerDriver",
                   "spark": "org.apache.beam.runners.spark.SparkJobServerDriver"}


def setup_java(engine: str) -> Path:
    """The engine's job-server classpath (a directory of jars) and a launcher jar naming it."""
    directory = RUNNERS / f"{engine}-beam-{JAVA_BEAM_VERSION}"
    lib, done = directory / "lib", directory / ".complete"
    if done.exists():
        return directory
    _need("java", "mvn")
    directory.mkdir(parents=True, exist_ok=True)
    pom = directory / "pom.xml"
    pom.write_text(_POM.format(name=f"{engine}-job-server",
                               dependencies="\n".join(_dependency(c) for c in JAVA_ENGINES[engine])))
    shutil.rmtree(lib, ignore_errors=True)
    _run(["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={lib}"],
         RUNNERS / "logs" / f"{engine}-maven.log")
    _launcher_jar(directory / "job-server.jar", JOB_SERVER_MAIN[engine], sorted(lib.glob("*.jar")))
    done.write_text(json.dumps({"beam": JAVA_BEAM_VERSION, "jars": len(list(lib.glob("*.jar")))}))
    return directory


def _launcher_jar(path: Path, main_class: str, jars: list) -> None:
    """A jar holding only a manifest: its Main-Class and its Class-Path (the jars beside it), so that
    `java -jar` runs the job server, as Beam's FlinkRunner starts one (--flink_job_server_jar)."""
    def wrap(line: str) -> str:  # manifest lines are at most 72 bytes; continuations start with a space
        out, line = [line[:72]], line[72:]
        while line:
            out.append(" " + line[:71])
            line = line[71:]
        return "\r\n".join(out)

    class_path = " ".join(f"lib/{j.name}" for j in jars)
    manifest = "".join(wrap(x) + "\r\n" for x in (
        "Manifest-Version: 1.0", f"Main-Class: {main_class}", f"Class-Path: {class_path}")) + "\r\n"
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", manifest)
    os.replace(tmp, path)


def prism_cache(home: Optional[Path] = None) -> Path:
    """Prism where Beam's DirectRunner looks before downloading it: ~/.apache_beam/cache/prism/bin, as the
    release zip and its unpacked binary (what a laptop holds after the first download)."""
    binary = setup_prism()
    version = beam_version()
    name = f"apache_beam-v{version}-prism-linux-amd64"
    cache = Path(home or Path.home()) / ".apache_beam" / "cache" / "prism" / "bin"
    cache.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(cache / f"{name}.zip", "w") as z:
        z.write(binary, name)
    shutil.copy2(binary, cache / name)
    return cache / name


# ---------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, ready, procs: list, log: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{what}: a process exited ({proc.returncode}); {log}:\n"
                                   + log.read_text(errors="replace")[-3000:])
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{what}: not ready after {timeout:.0f} s; {log}")


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _start(cmd: list, log: Path, **kwargs) -> subprocess.Popen:
    """A process in a session of its own: stop() ends it and everything it started."""
    log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "ab")
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, **kwargs)


def stop_pid(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM to a process's session, then SIGKILL if it has not ended."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        try:  # reap it when it is our child
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


class WorkerPool:
    """Beam's worker_pool_main: starts an SDK worker process per request of the runner, each through
    `worker` (its own HOME, TMPDIR and cache) with this interpreter."""

    def __init__(self, base: Path, port: Optional[int] = None):
        self.base = base
        self.port = port or free_port()
        self.proc: Optional[subprocess.Popen] = None

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    def start(self) -> "WorkerPool":
        self.base.mkdir(parents=True, exist_ok=True)
        boot = self.base / "sdk_worker"
        boot.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" worker "$@"\n')
        boot.chmod(0o755)
        log = self.base / "worker_pool.log"
        env = {**os.environ, "CREATE_HDF5_WORKER_ROOT": str(self.base / "workers")}
        self.proc = _start([sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                            f"--service_port={self.port}", f"--container_executable={boot}"], log, env=env)
        _wait("SDK worker pool", lambda: _port_open(self.port), [self.proc], log)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid)
            self.proc = None

    def worker_pids(self) -> list:
        """The SDK worker processes the pool has started and that are alive (its children)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == self.proc.pid and b"worker" in cmdline:
                pids.append(int(entry.name))
        return sorted(pids)

    def workers_started(self) -> int:
        root = self.base / "workers"
        return len(list(root.iterdir())) if root.exists() else 0


def worker(argv: list) -> None:
    """An SDK worker as the container contract starts one (--id, --control_endpoint, ...): in a HOME,
    TMPDIR and XDG cache of its own, as on a machine of its own."""
    parser = argparse.ArgumentParser()
    for name in ("id", "control_endpoint", "logging_endpoint", "artifact_endpoint", "provision_endpoint"):
        parser.add_argument(f"--{name}")
    args, _ = parser.parse_known_args(argv)
    parent = os.environ.get("CREATE_HDF5_WORKER_ROOT") or tempfile.gettempdir()
    os.makedirs(parent, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"worker-{args.id}-", dir=parent))
    env = {"HOME": root / "home", "TMPDIR": root / "tmp", "XDG_CACHE_HOME": root / "home" / ".cache"}
    for key, path in env.items():
        path.mkdir(parents=True, exist_ok=True)
        os.environ[key] = str(path)
    tempfile.tempdir = None  # computed again from TMPDIR
    os.chdir(root)  # a relative path the launcher handed on would name nothing here, as on a remote worker
    from apache_beam.runners.worker.sdk_worker import SdkHarness

    SdkHarness(args.control_endpoint, worker_id=args.id).run()


class FlinkCluster:
    """A standalone Flink session cluster (JobManager and TaskManager, separate JVMs), Beam's Flink job server
    submitting to it, and an SDK worker pool."""

    def __init__(self, base: Optional[Path] = None, slots: int = 2):
        self.base = Path(base or RUNNERS / "flink-cluster")
        self.slots = slots
        self.lib = setup_java("flink") / "lib"
        self.rest_port, self.rpc_port = free_port(), free_port()
        self.job_port, self.artifact_port = free_port(), free_port()
        self.pool = WorkerPool(self.base / "pool")
        self.procs: dict = {}

    # -- the Beam flags of a job on this cluster
    def flags(self, parallelism: int = 2) -> list:
        # --flink_master names the cluster's REST address: the job server submits there (as it would anyway),
        # and the launcher follows the running job's counters through it.
        return ["--runner", "PortableRunner", "--job_endpoint", f"localhost:{self.job_port}",
                "--environment_type", "EXTERNAL", "--environment_config", self.pool.address,
                "--parallelism", str(parallelism), "--flink_master", f"localhost:{self.rest_port}"]

    def _java(self, main: str, *args: str, jvm: tuple = ()) -> list:
        return ["java", *JAVA_OPENS, *jvm, "-cp", f"{self.lib}/*", main, *args]

    def _resources(self, which: str) -> tuple:
        """(JVM flags, dynamic settings) Flink's own start scripts compute for a JobManager or TaskManager."""
        out = subprocess.run(self._java("org.apache.flink.runtime.util.bash.BashJavaUtils", which,
                                        "--configDir", str(self.base / "conf")),
                             capture_output=True, text=True, check=True).stdout
        lines = [ln.split(":", 1)[1] for ln in out.splitlines() if ln.startswith("BASH_JAVA_UTILS_EXEC_RESULT:")]
        return tuple(lines[0].split()), tuple(lines[1].split()) if len(lines) > 1 else ()

    def start(self) -> "FlinkCluster":
        (self.base / "conf").mkdir(parents=True, exist_ok=True)
        (self.base / "conf" / "flink-conf.yaml").write_text("\n".join([
            "jobmanager.rpc.address: localhost", f"jobmanager.rpc.port: {self.rpc_port}",
            "jobmanager.bind-host: localhost", "rest.address: localhost", "rest.bind-address: localhost",
            f"rest.port: {self.rest_port}", "taskmanager.host: localhost", "taskmanager.bind-host: localhost",
            f"taskmanager.numberOfTaskSlots: {self.slots}", "jobmanager.memory.process.size: 1024m",
            f"parallelism.default: {self.slots}",
            # Beam's Fn API data plane (gRPC) takes a TaskManager's direct memory, a group's element of tens
            # of MB at a time: with Flink's default sizing (300 MB direct) the bench corpus failed with
            # "OutOfMemoryError: Direct buffer memory".
            # And Beam's Flink runner gathers all the values of a key of a GroupByKey on the heap: the writer
            # of a file gets all its rows at once (the bench corpus in one file, ~35 MB of chunks, ran the
            # heap out with 0.4 GB of task heap). 6 GB, a fifth of it managed (the sorters), leaves ~2.4 GB.
            "taskmanager.memory.process.size: 6144m", "taskmanager.memory.managed.fraction: 0.2",
            "taskmanager.memory.task.off-heap.size: 1024m",
            # The TaskManager's classpath holds Beam's runner already: loading the jars staged with the job
            # child-first as well put netty's classes in two loaders (IllegalAccessError between them).
            "classloader.resolve-order: parent-first",
            # A task that fails (a killed TaskManager or SDK worker) is restarted, not the job failed.
            "restart-strategy.type: fixed-delay", "restart-strategy.fixed-delay.attempts: 3",
            "restart-strategy.fixed-delay.delay: 2 s",
            # Heartbeats decide how soon a killed TaskManager is noticed.
            "heartbeat.interval: 2000", "heartbeat.timeout: 10000", ""]))
        self.start_jobmanager()
        self.start_taskmanager()
        self.start_job_server()
        self.pool.start()
        self.save()
        return self

    def start_jobmanager(self) -> None:
        jvm, dynamic = self._resources("GET_JM_RESOURCE_PARAMS")
        log = self.base / "logs" / "jobmanager.log"
        self.procs["jobmanager"] = _start(self._java(
            "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint",
            "--configDir", str(self.base / "conf"), *dynamic, jvm=jvm), log)
        _wait("Flink JobManager", lambda: self._rest("/overview") is not None, [self.procs["jobmanager"]], log)

    def start_taskmanager(self) -> None:
        jvm, dynamic = self._resources("GET_TM_RESOURCE_PARAMS")
        log = self.base / "logs" / "taskmanager.log"
        before = len(self._rest("/taskmanagers")["taskmanagers"])
        self.procs["taskmanager"] = _start(self._java(
            "org.apache.flink.runtime.taskexecutor.TaskManagerRunner",
            "--configDir", str(self.base / "conf"), *dynamic, jvm=jvm), log)
        _wait("Flink TaskManager", lambda: self.registered_taskmanagers() > before,
              [self.procs["taskmanager"]], log)

    def jobs(self) -> list:
        """Flink's jobs: [{"id", "status"}], newest state of each."""
        return (self._rest("/jobs") or {}).get("jobs", [])

    def failures(self, job_id: str) -> int:
        """Task failures Flink recorded for a job (each restarted what it hit)."""
        return len((self._rest(f"/jobs/{job_id}/exceptions") or {}).get("exceptionHistory", {}).get("entries", []))

    def registered_taskmanagers(self) -> int:
        return sum(1 for tm in self._rest("/taskmanagers")["taskmanagers"] if tm.get("slotsNumber"))

    def start_job_server(self) -> None:
        log = self.base / "logs" / "job_server.log"
        self.procs["job_server"] = _start(self._java(
            JOB_SERVER_MAIN["flink"], "--job-port", str(self.job_port), "--artifact-port", str(self.artifact_port),
            "--expansion-port", "0", "--flink-master", f"localhost:{self.rest_port}",
            "--flink-conf-dir", str(self.base / "conf")), log)
        _wait("Beam Flink job server", lambda: _port_open(self.job_port), [self.procs["job_server"]], log)

    def kill(self, name: str) -> None:
        """SIGKILL one process (a fault test): the cluster must carry on without it."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def _rest(self, path: str):
        try:
            with urllib.request.urlopen(f"http://localhost:{self.rest_port}{path}", timeout=2) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None

    def save(self) -> None:
        state = {"flags": self.flags(), "rest": f"http://localhost:{self.rest_port}",
                 "pids": {name: p.pid for name, p in self.procs.items()} | {"worker_pool": self.pool.proc.pid}}
        (self.base / "state.json").write_text(json.dumps(state, indent=2) + "\n")

    def stop(self) -> None:
        self.pool.stop()
        for name in ("job_server", "taskmanager", "jobmanager"):
            proc = self.procs.pop(name, None)
            if proc is not None:
                stop_pid(proc.pid)
        (self.base / "state.json").unlink(missing_ok=True)


class SparkJobServer:
    """Beam's Spark job server on an in-process Spark (local[N]), and an SDK worker pool."""

    def __init__(self, base: Optional[Path] = None, cores: int = 2):
        self.base = Path(base or RUNNERS / "spark-job-server")
        self.cores = cores
        self.lib = setup_java("spark") / "lib"
        self.job_port, self.artifact_port = free_port(), free_port()
        self.pool = WorkerPool(self.base / "pool")
        self.proc: Optional[subprocess.Popen] = None

    def flags(self, parallelism: int = 2) -> list:
        return ["--runner", "PortableRunner", "--job_endpoint", f"localhost:{self.job_port}",
                "--environment_type", "EXTERNAL", "--environment_config", self.pool.address]

    def start(self) -> "SparkJobServer":
        log = self.base / "logs" / "job_server.log"
        self.proc = _start(["java", *JAVA_OPENS, "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
                            "-cp", f"{self.lib}/*", JOB_SERVER_MAIN["spark"], "--job-port", str(self.job_port),
                            "--artifact-port", str(self.artifact_port), "--expansion-port", "0",
                            "--spark-master-url", f"local[{self.cores}]"], log)
        _wait("Beam Spark job server", lambda: _port_open(self.job_port), [self.proc], log)
        self.pool.start()
        state = {"flags": self.flags(), "pids": {"job_server": self.proc.pid, "worker_pool": self.pool.proc.pid}}
        (self.base / "state.json").write_text(json.dumps(state, indent=2) + "\n")
        return self

    def stop(self) -> None:
        self.pool.stop()
        if self.proc is not None:
            stop_pid(self.proc.pid)
            self.proc = None
        (self.base / "state.json").unlink(missing_ok=True)


# ---------------------------------------------------------------- command line


def _stop_saved(base: Path) -> None:
    state_file = base / "state.json"
    if not state_file.exists():
        print(f"nothing running ({state_file} is absent)")
        return
    for pid in json.loads(state_file.read_text())["pids"].values():
        stop_pid(pid)
    state_file.unlink()
    print("stopped")


def main(argv: Optional[list] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        worker(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="engines.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    setup = sub.add_parser("setup", help="build or fetch an engine into .runners/")
    setup.add_argument("engine", choices=["prism", "flink", "spark", "all"])
    sub.add_parser("prism-cache", help="copy Prism into Beam's cache, where --runner DirectRunner finds it")
    for engine in ("flink", "spark"):
        p = sub.add_parser(engine, help=f"start, stop or show the flags of the local {engine} engine")
        p.add_argument("action", choices=["start", "stop", "flags"])
    args = parser.parse_args(argv)
    try:
        if args.command == "setup":
            for engine in (["prism", "flink", "spark"] if args.engine == "all" else [args.engine]):
                print(setup_prism() if engine == "prism" else setup_java(engine))
        elif args.command == "prism-cache":
            print(prism_cache())
        else:
            base = RUNNERS / ("flink-cluster" if args.command == "flink" else "spark-job-server")
            state_file = base / "state.json"
            if args.action == "stop":
                _stop_saved(base)
            elif args.action == "flags":
                if not state_file.exists():
                    print(f"not running: python scripts/engines.py {args.command} start", file=sys.stderr)
                    return 1
                print(" ".join(json.loads(state_file.read_text())["flags"]))
            else:
                if state_file.exists():
                    _stop_saved(base)
                engine = FlinkCluster() if args.command == "flink" else SparkJobServer()
                engine.start()
                print(" ".join(engine.flags()))
    except Missing as e:
        print(f"engines.py: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
