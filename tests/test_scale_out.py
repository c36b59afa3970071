"""Scale-out and reliability (issue "Scale-out and reliability", items 1–3).

* A hierarchical sweep gives the same table and front on the local pool and on a 2-worker Dask LocalCluster.
* A SIGKILLed sweep resumes to the result of an uninterrupted run and never evaluates a finished chunk twice.
* ``optimize --workers 2`` finds exactly the requested trials on PostgreSQL and on a journal file.
* A SIGKILLed worker leaves no RUNNING trial behind (the sampler runs on an in-memory mirror and each trial is
  stored whole, a batch per write), loses no stored trial, and a resumed run adds exactly the trials it is asked for.

Everything runs the installed ``deepstack`` console script in subprocesses, as a user would. The PostgreSQL tests
need ``DEEPSTACK_TEST_POSTGRES`` (CI's ``.ci/postgres.sh`` sets it); without it only they are skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
from conftest import MINI8, assert_user_error, write_space

REPO = Path(__file__).resolve().parent.parent
POSTGRES = os.environ.get("DEEPSTACK_TEST_POSTGRES")
needs_postgres = pytest.mark.skipif(not POSTGRES, reason="DEEPSTACK_TEST_POSTGRES is not set (CI sets it: "
                                    "`. .ci/postgres.sh; pg_start` starts a throw-away server on 127.0.0.1)")


def _exe() -> str:
    beside = Path(sys.executable).parent / "deepstack"
    exe = str(beside) if beside.exists() else shutil.which("deepstack")
    assert exe, "the deepstack console script is not installed"
    return exe


def deepstack(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([_exe(), *map(str, args)], capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------------------------- a killed study worker (part 1)


@pytest.fixture(scope="module")
def study_space(tmp_path_factory) -> Path:
    return write_space(tmp_path_factory.mktemp("space") / "study.toml", chips=("standard",), hops=(1.0,))


def _study_name(label: str) -> str:
    return f"scale-out-{label}-{uuid.uuid4().hex[:10]}"


def _storage(url: str):
    if url.startswith("journal:"):
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(url.removeprefix("journal:")))
    return url


def _trials(url: str, study: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=_storage(url)).get_trials(deepcopy=False)


def _complete(trials) -> list[optuna.trial.FrozenTrial]:
    return [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]


def _optimize(space: Path, url: str, study: str, trials: int, out: Path, *extra: str) -> list[str]:
    # --refine 0: these tests count the trials a run adds (the local search after them is tests/test_refine.py's)
    return ["optimize", "--space", str(space), "--storage", url, "--study", study, "--trials", str(trials),
            "--refine", "0", "--seed", "7", "--out", str(out), *extra]


def _cleanup(url: str, study: str) -> None:
    if url.startswith("postgresql"):
        optuna.delete_study(study_name=study, storage=url)


@pytest.fixture(scope="module")
def killed_studies(study_space, tmp_path_factory):
    """For each RDB storage (SQLite always, PostgreSQL when configured): a study whose only worker was SIGKILLed
    after at least one trial had completed."""
    folder = tmp_path_factory.mktemp("killed")
    urls = {"sqlite": f"sqlite:///{folder / 'study.db'}"}
    if POSTGRES:
        urls["postgresql"] = POSTGRES
    runs = {}
    for kind, url in urls.items():
        # the tables exist before any worker starts, so polling never races the worker creating them
        runs[kind] = Run(optuna.storages.RDBStorage(url), url, _study_name(kind), study_space, folder)
        runs[kind].start()
    try:
        yield {kind: (run.url, run.study, *run.kill_after_a_trial()) for kind, run in runs.items()}
    finally:
        for run in runs.values():
            run.stop()
            _cleanup(run.url, run.study)


class Run:
    """An ``optimize`` process working on one study until it is killed."""

    def __init__(self, storage, url: str, study: str, space: Path, out: Path):
        self.storage, self.url, self.study = storage, url, study
        self.args = [_exe(), *_optimize(space, url, study, 10_000, out, "--json")]
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc.stderr.close()

    def trials(self) -> list[optuna.trial.FrozenTrial]:
        try:
            return optuna.load_study(study_name=self.study, storage=self.storage).get_trials(deepcopy=False)
        except KeyError:  # not created yet
            return []

    def kill_after_a_trial(self) -> tuple[float, list, list]:
        """SIGKILL the process once the study has a COMPLETE trial. Returns the kill time and the trials as it left
        them (the COMPLETE ones, all of them)."""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"optimize ended early: {self.proc.stderr.read()!r}"
            if _complete(self.trials()):
                os.kill(self.proc.pid, signal.SIGKILL)
                self.stop()
                left = self.trials()
                return time.monotonic(), _complete(left), left
            time.sleep(0.05)
        raise AssertionError("no trial completed within 180 s")


# The recovery test runs in two halves: the kill comes first, the re-run last.


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=needs_postgres)])
def test_killed_worker_leaves_no_running_trial(kind, killed_studies):
    url, study, _, complete_before, left = killed_studies[kind]
    assert complete_before
    assert {t.state.name for t in left} <= {"COMPLETE", "FAIL"}  # FAIL: a proposal no schedule fits
    trials = {t.number: t for t in _trials(url, study)}
    assert {t.number for t in _complete(trials.values())} == {t.number for t in complete_before}


# ------------------------------------------------------------------------------------------------- sweeps


@pytest.fixture(scope="module")
def sweep_space(tmp_path_factory) -> Path:
    return write_space(tmp_path_factory.mktemp("space") / "scale-out.toml")


def sweep_args(space: Path, out: Path, *extra: str) -> list[str]:
    return ["sweep", "--mode", "hierarchical", "--space", str(space), "--out", str(out), *extra]


@pytest.fixture(scope="module")
def reference(sweep_space, tmp_path_factory) -> Path:
    """One uninterrupted sweep on the local process pool (2 workers) to compare the others with."""
    out = tmp_path_factory.mktemp("sweeps") / "reference"
    done = deepstack(*sweep_args(sweep_space, out, "--backend", "local", "--workers", "2", "--json"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["evaluations"] > 0
    assert len(_log(out)) >= 4  # two tier-1 chunks, one per later tier
    return out


def _log(out: Path) -> list[str]:
    path = out / "chunks" / "evaluated.log"  # a line per finished chunk: its name, then the second it finished
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def _front(out: Path) -> list[dict]:
    """The front's rows, without the command that reproduces each (it names the folder's own pareto.csv)."""
    rows = json.loads((out / "pareto.json").read_text())["pareto"]
    for row in rows:
        assert row.pop("command").endswith(f"--front {out}/pareto.csv")
    return rows


def assert_same_sweep(out: Path, reference: Path) -> None:
    assert (out / "points.csv").read_bytes() == (reference / "points.csv").read_bytes()
    assert _front(out) == _front(reference)
    assert _front(out), "the front is empty: the comparison would prove little"


def test_dask_local_cluster_matches_local_pool(sweep_space, reference, tmp_path):
    out = tmp_path / "dask"
    done = deepstack(*sweep_args(sweep_space, out, "--backend", "dask", "--workers", "2", "--json"))
    assert done.returncode == 0, done.stderr
    assert_same_sweep(out, reference)
    assert sorted(_log(out)) == sorted(_log(reference))


def test_killed_sweep_resumes_without_reevaluating(sweep_space, reference, tmp_path):
    out = tmp_path / "killed"
    args = [_exe(), *sweep_args(sweep_space, out, "--workers", "1")]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while not _log(out) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, f"the sweep ended before it could be killed: {proc.stderr.read()!r}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "summary.json").exists(), "killed after the sweep finished"
    finished = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (out / "chunks").glob("*.jsonl")}
    assert finished and len(_log(out)) < len(_log(reference))

    again = deepstack(*sweep_args(sweep_space, out, "--workers", "1", "--json"))
    assert again.returncode == 0, again.stderr
    assert_same_sweep(out, reference)
    log = _log(out)
    assert len(log) == len(set(log)), f"a chunk was evaluated twice: {log}"
    assert sorted(log) == sorted(_log(reference))
    for name, stamp in finished.items():  # chunks finished before the kill were read back, not recomputed
        path = out / "chunks" / name
        assert (path.stat().st_ino, path.stat().st_mtime_ns) == stamp, name


def test_other_sweep_in_same_folder_is_refused(cli, sweep_space, reference, tmp_path):
    out = tmp_path / "taken"
    shutil.copytree(reference, out)
    result = cli(*sweep_args(sweep_space, out, "--batch", "32", "--workers", "1"))
    assert_user_error(result, "--out", "another sweep")
    assert (out / "points.csv").read_bytes() == (reference / "points.csv").read_bytes()


def test_a_sweep_whose_noc_file_or_code_changed_is_not_resumed(cli, tmp_path):
    """Finished chunks are read back only by the very sweep that wrote them: after the NoC file the space names
    is edited, or with other code, they would mix two models' results into one points.csv."""
    noc = tmp_path / "net.toml"
    noc.write_text(MINI8.read_text())
    space = write_space(tmp_path / "one.toml", chips=("standard",), stacked=(2,), connected=(1,), hops=(1.0,),
                        level_bw=(1.0,), fsdp=(False,), noc=noc)
    out = tmp_path / "out"
    args = ["sweep", "--mode", "exhaustive", "--space", str(space), "--out", str(out), "--workers", "1"]
    assert cli(*args).code == 0
    points = (out / "points.csv").read_bytes()
    stamp = json.loads((out / "sweep.json").read_text())
    assert set(stamp["fingerprint"]) == {"sweep", "presets", "code"}
    assert cli(*args).code == 0  # the same sweep again: read back
    assert (out / "points.csv").read_bytes() == points

    before = noc.stat()
    noc.write_text(noc.read_text().replace("hop_latency_ns = 10.0", "hop_latency_ns = 40.0"))
    os.utime(noc, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))  # a coarse clock may not tick
    assert_user_error(cli(*args), "--out", "this sweep, but a chip or NoC file it names has changed since",
                      "give a new --out folder")
    assert (out / "points.csv").read_bytes() == points

    noc.write_text(noc.read_text().replace("hop_latency_ns = 40.0", "hop_latency_ns = 10.0"))
    os.utime(noc, ns=(before.st_atime_ns, before.st_mtime_ns + 2_000_000))
    (out / "sweep.json").write_text(json.dumps({**stamp, "fingerprint": {**stamp["fingerprint"], "code": "0" * 64}}))
    assert_user_error(cli(*args), "--out", "this sweep, but evaluated by other code", "give a new --out folder")
    assert (out / "points.csv").read_bytes() == points


@pytest.mark.parametrize(("edited", "says", "then"), [
    ("noc", "--space: a chip or NoC file it names changed while the sweep ran", "has changed since"),
    ("space", "--space: the space file changed while the sweep ran", "holds another sweep"),
])
def test_a_sweep_whose_files_changed_while_it_ran_writes_no_results(tmp_path, edited, says, then):
    """The workers read the NoC file (and the space) as they find them: edited after the first chunk, the later
    chunks time another network or another space than the first. The sweep ends with one line naming the file
    that changed and writes no points.csv or front; its chunks stay, and the same command is then refused as a
    changed sweep."""
    from deepstack.errors import UserInputError
    from deepstack.search.space import load_space, scenarios
    from deepstack.search.sweep import sweep

    noc = tmp_path / "net.toml"
    noc.write_text(MINI8.read_text())
    space = write_space(tmp_path / "two.toml", chips=("standard",), stacked=(2,), connected=(1, 2), hops=(1.0,),
                        level_bw=(1.0,), fsdp=(False,), noc=noc)
    out = tmp_path / "out"
    path, old, new = ((noc, "hop_latency_ns = 10.0", "hop_latency_ns = 40.0") if edited == "noc"
                      else (space, "hop_latency_scale = [1.0]", "hop_latency_scale = [2.0]"))
    stat = path.stat()

    def edit_after_the_first_chunk(done: int, total: int) -> None:
        if done == 1:
            path.write_text(path.read_text().replace(old, new))
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a coarse clock may not tick

    kwargs = {"mode": "exhaustive", "space": str(space), "scenario": scenarios(load_space(str(space)))[0],
              "objectives": ["stps", "tokens_per_joule"], "out": str(out), "workers": 1}
    with pytest.raises(UserInputError, match=says) as raised:
        sweep(**kwargs, progress=edit_after_the_first_chunk)
    assert "new --out folder" in str(raised.value) and "\n" not in str(raised.value)
    assert ("a chip or NoC file" in str(raised.value)) == (edited == "noc")
    assert not (out / "points.csv").exists() and not (out / "pareto.csv").exists()
    assert len(list((out / "chunks").glob("*.jsonl"))) == 2
    with pytest.raises(UserInputError, match=then):  # an edited space is another sweep
        sweep(**kwargs)


def test_a_sweep_folder_of_an_earlier_versions_sweep_is_refused(cli, sweep_space, reference, tmp_path):
    # an earlier version stamped its folder with one digest, not the fingerprint's parts
    out = tmp_path / "older"
    shutil.copytree(reference, out)
    (out / "sweep.json").write_text(json.dumps({"fingerprint": "0123456789abcdef", "wall_s": 1.0}))
    result = cli(*sweep_args(sweep_space, out, "--workers", "1"))
    assert_user_error(result, f"--out: {out} holds a sweep recorded by an earlier version", "give a new --out folder")
    assert (out / "points.csv").read_bytes() == (reference / "points.csv").read_bytes()


@pytest.mark.parametrize("stamp", ["", "{}", "[1]", '{"wall_s": 1.0}'])
def test_a_sweep_folder_whose_stamp_cannot_be_read_is_refused(cli, sweep_space, reference, tmp_path, stamp):
    # the stamp is what lets the chunks beside it be read back as this sweep's: unreadable, it vouches for none
    out = tmp_path / "damaged"
    shutil.copytree(reference, out)
    (out / "sweep.json").write_text(stamp)
    result = cli(*sweep_args(sweep_space, out, "--workers", "1"))
    assert_user_error(result, "--out", "sweep.json cannot be read", "give a new --out folder")
    assert (out / "points.csv").read_bytes() == (reference / "points.csv").read_bytes()


@pytest.mark.parametrize("address", ["bogus", "tcp://[::1"])
def test_malformed_scheduler_address_is_a_user_error(cli, sweep_space, tmp_path, address):
    result = cli(*sweep_args(sweep_space, tmp_path / "out", "--backend", "dask", "--scheduler", address))
    assert_user_error(result, "--scheduler")


# ------------------------------------------------------------------------------------- studies on several workers


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=needs_postgres), "journal"])
def test_two_workers_find_exactly_the_requested_trials(backend, study_space, tmp_path):
    url = POSTGRES if backend == "postgresql" else f"journal:{tmp_path / 'j.log'}"
    study = _study_name(backend)
    try:
        done = deepstack(*_optimize(study_space, url, study, 6, tmp_path, "--workers", "2", "--json"))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["trials"] == 6
        trials = _trials(url, study)
        assert len(_complete(trials)) == 6, [(t.number, t.state.name) for t in trials]
        assert len(trials) == 6
    finally:
        _cleanup(url, study)


def test_two_workers_run_a_batch_of_any_size(study_space, tmp_path):
    # a batch of 6 on 2 workers is 2 chunks of 3 inner problems: the pool's warm-up took every chunk's result for
    # a sweep's (rows, JSON lines) pair and failed to unpack three ("not enough values to unpack")
    url = f"journal:{tmp_path / 'b.log'}"
    done = deepstack(*_optimize(study_space, url, "batch6", 6, tmp_path, "--workers", "2", "--trials-per-batch", "6",
                                "--json"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["trials"] == 6


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=needs_postgres), "journal"])
def test_two_processes_share_one_study(backend, study_space, tmp_path):
    """Two ``optimize`` processes on one study at once: each samples on its own in-memory mirror, adds its own
    trials to the shared record (one write per batch) and mirrors the other's at its next batch."""
    url = POSTGRES if backend == "postgresql" else f"journal:{tmp_path / 'shared.log'}"
    study = _study_name(f"{backend}-shared")
    deepstack(*_optimize(study_space, url, study, 0, tmp_path))  # create the study before both start
    try:
        procs = [subprocess.Popen([_exe(), *_optimize(study_space, url, study, 4, tmp_path / str(seed), "--seed",
                                                      str(seed), "--json")],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
        outs = [proc.communicate(timeout=240) for proc in procs]
        assert [proc.returncode for proc in procs] == [0, 0], [err[-2000:] for _, err in outs]
        assert [json.loads(out)["run"]["told"] for out, _ in outs] == [4, 4]
        trials = _trials(url, study)
        assert len(_complete(trials)) == 8 and len(trials) == 8, [(t.number, t.state.name) for t in trials]
        assert sorted(t.number for t in trials) == list(range(8))
    finally:
        _cleanup(url, study)


# ---------------------------------------------------------------------------------- a killed study worker (part 2)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=needs_postgres)])
def test_killed_workers_study_resumes_with_the_requested_trials(kind, killed_studies, study_space, tmp_path):
    url, study, _, complete_before, _ = killed_studies[kind]
    done = deepstack(*_optimize(study_space, url, study, 3, tmp_path, "--json"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["added"] == 3

    trials = {t.number: t for t in _trials(url, study)}
    for before in complete_before:  # no completed trial was lost or changed
        after = trials[before.number]
        assert after.state == optuna.trial.TrialState.COMPLETE
        assert (after.values, after.params) == (before.values, before.params)
    assert not [t for t in trials.values() if t.state in (optuna.trial.TrialState.RUNNING,
                                                          optuna.trial.TrialState.WAITING)]
    assert len(_complete(trials.values())) == len(complete_before) + 3
