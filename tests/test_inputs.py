"""Every entry point survives any input: scenario files (`gpualloc.run`),
plans (`gpualloc.check`), trace CSVs (`gpualloc.trace csv`, and `alibaba`'s
pod and node lists) and run folders (`gpualloc.report`), as random bytes, cut
short, saved in another encoding, or valid with a field mutated. The
property: exit 0 with a valid output, or exit 2 with one line on stderr that
names the file; never a traceback, never a half-written output. In-process
through each command's `main` (the scenario through `run`, what the command
calls); the issue's five files also through the real commands, to show that
no traceback reaches stderr."""
from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import event, given
from hypothesis import strategies as st

from gpualloc import check as check_cmd
from gpualloc import report
from gpualloc import trace
from gpualloc.files import InputError, read_json
from gpualloc.policies.fifo import fifo
from gpualloc.run import USER_ERRORS, run
from gpualloc.scenario import ScenarioError, from_dict, load
from strategies import BOM, broken_bytes, broken_csv, csv_text, mutated, scenario_docs
from helpers import composed

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "gpualloc" / "examples" / "tiny.yaml"


# ---- the property ------------------------------------------------------------------------------

def call(main, argv: list[str]) -> tuple[int, str, str]:
    """A command's main in-process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse
            code = e.code
    return code, out.getvalue(), err.getvalue()


def one_line(err: str, names: Path | None = None) -> str:
    """stderr is one line, `error: ...`, naming the file when given."""
    assert "Traceback" not in err
    lines = err.rstrip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert names is None or str(names) in lines[0], (names, err)
    return lines[0]


def no_temporaries(folder: Path) -> None:
    """No half-written output: gpualloc.files writes beside the target as .NAME.*.tmp."""
    left = [p.name for p in folder.rglob("*.tmp")]
    assert not left, left


def choose(data, valid: bytes, docs=None) -> bytes:
    """`valid` as it is (a tenth of the time), or broken: its bytes broken,
    or (a JSON document, given as `docs`) a field mutated."""
    how = data.draw(st.sampled_from(["bytes", "field"] * 5 + ["as is"]), label="how")
    if how == "as is":
        event("as it is")
        return valid
    if docs is not None and how == "field":
        event("a field mutated")
        doc = data.draw(docs, label="document")
        return json.dumps(doc, allow_nan=True, default=repr).encode()
    event("bytes broken")
    return data.draw(broken_bytes(valid), label="bytes")


# ---- scenario files: gpualloc.run ----------------------------------------------------------------

@pytest.fixture(scope="module")
def fifo_cfg():
    return composed("+scenario=file", "policies=[fifo]")


@given(data=st.data(), fmt=st.sampled_from(["json", "yaml"]))
def test_scenario_files(fifo_cfg, data, fmt):
    doc = data.draw(scenario_docs(max_jobs=4, max_horizon=8), label="scenario")
    valid = (json.dumps(doc) if fmt == "json" else yaml.safe_dump(doc)).encode()
    raw = choose(data, valid, mutated(st.just(doc)))  # JSON is YAML too
    with tempfile.TemporaryDirectory() as tmp:
        path, out = Path(tmp) / f"scenario.{fmt}", Path(tmp) / "out"
        path.write_bytes(raw)
        cfg = replace(fifo_cfg, scenario=replace(fifo_cfg.scenario, path=str(path)))
        try:
            result = run(cfg, out)
        except USER_ERRORS as e:
            one_line(f"error: {e}\n", path)
            assert not (out / "metrics.json").exists()
            event("refused")
            return
        finally:
            no_temporaries(Path(tmp))
        event("planned")
        assert json.loads((out / "metrics.json").read_text())["policies"].keys() == {"fifo"}
        assert load(out / "scenario.json").name == result["scenario"]


# ---- plans: gpualloc.check -----------------------------------------------------------------------

def plan_doc(s) -> dict:
    return {"scenario": s.name, "policy": "fifo", "jobs": [j.id for j in s.jobs],
            "owner": fifo(s).owner.tolist()}


@given(data=st.data())
def test_plan_files(data):
    s = from_dict(data.draw(scenario_docs(max_jobs=4, max_horizon=6), label="scenario"))
    doc = plan_doc(s)
    if data.draw(st.booleans(), label="a cell to another job"):  # a plan still, feasible or not
        g, t = data.draw(st.integers(0, s.G - 1)), data.draw(st.integers(0, s.T - 1))
        doc["owner"][g][t] = data.draw(st.integers(-1, s.J - 1))
    raw = choose(data, json.dumps(doc).encode(), mutated(st.just(doc), max_mutations=2))
    with tempfile.TemporaryDirectory() as tmp:
        scen, plan = Path(tmp) / "s.json", Path(tmp) / "plan.json"
        s.save(scen)
        plan.write_bytes(raw)
        code, out, err = call(check_cmd.main, [str(scen), str(plan)])
    if code == 2:
        one_line(err, plan)
        assert out == ""
        event("refused")
    else:
        # A plan: the verdict, nothing on stderr.
        assert (code, err) in ((0, ""), (1, "")), (code, err)
        assert out.startswith("feasible" if code == 0 else "infeasible:"), out
        event("feasible" if code == 0 else "infeasible")


# ---- traces: gpualloc.trace csv and alibaba ------------------------------------------------------

def traced(raw: bytes, argv: list[str], fmt: str = "json",
           beside: dict[str, bytes] | None = None) -> None:
    """The trace command on a file of `raw` bytes (SRC in `argv`, OUT the
    scenario file to write; `beside`: more files in its folder, by the names
    `argv` gives them): a scenario
    file written whole, or one line naming the problem (and the file, when
    its bytes were the problem) and no file."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "src.csv", Path(tmp) / "out" / f"s.{fmt}"
        src.write_bytes(raw)
        for name, data in (beside or {}).items():
            (Path(tmp) / name).write_bytes(data)
        paths = {"SRC": src, "OUT": out, **{name: Path(tmp) / name for name in beside or {}}}
        argv = [str(paths.get(a, a)) for a in argv]
        code, stdout, err = call(trace.main, argv)
        no_temporaries(Path(tmp))
        if code == 0:
            assert err == "" and stdout.rstrip().endswith(f"wrote {out}"), (stdout, err)
            load(out)  # a valid scenario
            event("converted")
            return
        line = one_line(err)
        assert code == 2 and not out.exists()
    if "not UTF-8" in line or "NUL" in line or "UTF-16" in line:
        assert str(src) in line
    event("refused")


@st.composite
def job_tables(draw):
    """A valid generic job CSV: header, then 1-5 jobs."""
    rows = [["job_id", "submit_time", "duration", "num_gpus", "gpu_type", "priority", "kind"]]
    for i in range(draw(st.integers(1, 5))):
        rows.append([f"j{i}", str(draw(st.integers(0, 600))), str(draw(st.integers(1, 300))),
                     draw(st.sampled_from(["0.5", "1", "2", "4", "8"])),
                     draw(st.sampled_from(["", "H100", "H100|B200"])),
                     draw(st.sampled_from(["", "3", "9"])),
                     draw(st.sampled_from(["", "training", "realtime_inference", "serve"]))])
    return rows


CSV_OPTIONS = ["--type-col", "gpu_type", "--priority-col", "priority", "--kind-col", "kind",
               "--kind-map", "serve=realtime_inference", "--time-unit", "m", "--gpus", "16"]


@given(raw=broken_csv(job_tables()), fmt=st.sampled_from(["json", "yaml"]),
       length=st.sampled_from([[], ["--length", "12h"]]))
def test_trace_csv_files(raw, fmt, length):
    traced(raw, ["csv", "SRC", *CSV_OPTIONS, *length, "-o", "OUT"], fmt)


POD_HEADER = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
              "pod_phase", "creation_time", "deletion_time", "scheduled_time"]
HOUR = 3600


@st.composite
def pod_tables(draw):
    """A valid Alibaba pod list: header, then 1-5 pods around a 8 h window."""
    rows = [POD_HEADER]
    for i in range(draw(st.integers(1, 5))):
        gpus = draw(st.sampled_from([0, 1, 1, 2, 8]))
        created = draw(st.integers(0, 12 * HOUR))
        deleted = created + draw(st.integers(0, 6 * HOUR))
        started = draw(st.sampled_from(["", str(created), str((created + deleted) // 2)]))
        rows.append([f"p{i}", "1000", "1024", str(gpus),
                     str(draw(st.sampled_from([300, 500, 1000])) if gpus == 1 else 1000),
                     draw(st.sampled_from(["", "T4", "G2", "T4|G2", "A10"])),
                     draw(st.sampled_from(["LS", "BE", "Burstable", "Guaranteed"])), "Running",
                     str(created), str(deleted), started])
    return rows


@st.composite
def node_tables(draw):
    rows = [["sn", "cpu_milli", "memory_mib", "gpu", "model"]]
    for i in range(draw(st.integers(1, 6))):
        rows.append([f"n{i}", "64000", "262144", draw(st.sampled_from(["0", "1", "2", "4", "8"])),
                     draw(st.sampled_from(["T4", "G2", "P100", "V100M32"]))])
    return rows


WINDOW = ["--start", "2h", "--length", "8h"]
POOLS = ["--pool", "t4:2:4:T4:16", "--pool", "g2:1:8:G2:32"]


@given(raw=broken_csv(pod_tables()))
def test_trace_alibaba_pod_lists(raw):
    traced(raw, ["alibaba", "SRC", *WINDOW, *POOLS, "-o", "OUT"])


@given(raw=broken_csv(node_tables()), sample=st.sampled_from([[], ["--sample-gpus", "8"]]))
def test_trace_alibaba_node_lists(raw, sample):
    pods = csv_text([POD_HEADER, ["p0", "1000", "1024", "1", "1000", "", "BE", "Running",
                                  str(3 * HOUR), str(5 * HOUR), str(3 * HOUR)]])
    traced(raw, ["alibaba", "pods.csv", *WINDOW, "--nodes", "SRC", *sample, "-o", "OUT"],
           beside={"pods.csv": pods.encode()})


# ---- run folders: gpualloc.report ----------------------------------------------------------------

@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> dict[str, bytes]:
    """The files of one finished run (tiny, fifo and greedy), by path in its folder."""
    folder = tmp_path_factory.mktemp("run")
    run(composed("+scenario=file", "policies=[fifo,greedy]"), folder)
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "overrides.yaml").write_text("- +scenario=file\n- seed=0\n")
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def write_run(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def reported(root: Path, *args: str) -> tuple[list[dict], str, str]:
    """The report of `root`: exit 0, report.csv (read back) and report.md whole."""
    code, out, err = call(report.main, [str(root), *args])
    assert code == 0 and "Traceback" not in err, err
    no_temporaries(root)
    with open(root / "report.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return rows, (root / "report.md").read_text(), err


@given(data=st.data(), name=st.sampled_from(["metrics.json", ".hydra/overrides.yaml"]))
def test_report_folders(good_run, data, name):
    # Run 0 is good; one file of run 1 is broken: run 1 is reported, or listed
    # as failed with the reason, and run 0 is reported either way.
    valid = good_run[name]
    doc = json.loads(valid) if name.endswith(".json") else yaml.safe_load(valid)
    raw = choose(data, valid, mutated(st.just(doc)))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_run(root / "0", good_run)
        write_run(root / "1", {**good_run, name: raw})
        rows, md, err = reported(root, "--no-plots")
        runs = report.find_runs(root)
    assert {("tiny", "", "fifo"), ("tiny", "", "greedy")} <= {
        (r["scenario"], r["setting"], r["policy"]) for r in rows}
    assert runs[0].result is not None
    failed = runs[1].result is None
    assert f"2 runs: {1 + (not failed)} finished, {int(failed)} failed." in md
    if failed:
        event("run 1 failed")
        [line] = [ln for ln in md.splitlines() if ln.startswith("- `1` ")]
        assert line.split(": ", 1)[1].strip(), line  # the reason
        assert "1 of 2 runs failed" in err
    else:
        event("run 1 reported")


def test_report_pictures_of_broken_runs(good_run, tmp_path):
    # Pictures are drawn for the runs whose files allow it: a scenario name
    # with maths characters and a path in it is drawn (into the report folder);
    # a truncated plan and a binary scenario.json are notes.
    root = tmp_path / "m"
    metrics = json.loads(good_run["metrics.json"])
    write_run(root / "0", good_run)
    odd = "../$\\frac{x"
    write_run(root / "1", {**good_run, "metrics.json": json.dumps({**metrics, "scenario": odd})
                           .encode()})
    write_run(root / "2", {**good_run, "metrics.json": json.dumps({**metrics, "scenario": "cut"})
                           .encode(), "plan_greedy.json": good_run["plan_greedy.json"][:50]})
    write_run(root / "3", {**good_run, "metrics.json": json.dumps({**metrics, "scenario": "bin"})
                           .encode(), "scenario.json": b"\x89PNG\r\n\x1a\n\x00"})
    rows, md, err = reported(root)
    assert {r["scenario"] for r in rows} == {"tiny", odd, "cut", "bin"}
    drawn = sorted(p.name for p in root.glob("*.png"))
    assert drawn == ["gains.png", "gantt_.._frac_x.png", "gantt_tiny.png",
                     "utilization_.._frac_x.png", "utilization_tiny.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # nothing outside the folder
    assert "no charts for cut, seed 0:" in err and "plan_greedy.json" in err
    assert "no charts for bin, seed 0:" in err and "not UTF-8" in err


@pytest.mark.parametrize("name, raw, message", [
    ("s.json", b'{"name": "\\ud800x"}', "a string holds '\\ud800' (half a surrogate pair)"),
    ("s.yaml", b'name: "\\udc00"\n', "a string holds '\\udc00' (half a surrogate pair)"),
    ("s.yaml", b"name: &a [*a]\nhorizon: 3\n", "missing field 'cluster'"),  # holds itself
    ("s.json", b'{"horizon": NaN}', "NaN is not a valid JSON number"),
    ("s.json", b"[" * 100_000, "nested too deeply to read"),
    ("s.yaml", b"a: 1\n\tb: 2\n", "line 2: not valid YAML"),
    ("s.json", b'{"name": 1,\n "x": }', "line 2: not valid JSON: Expecting value (column 7)"),
])
def test_documents_no_text_could_hold(tmp_path, name, raw, message):
    # What parses but could not be printed, what holds itself, and the
    # parsers' own errors: one line naming the file.
    path = tmp_path / name
    path.write_bytes(raw)
    with pytest.raises(ScenarioError) as e:
        load(path)
    assert message in one_line(f"error: {e.value}\n", path)


def test_paths_that_are_no_file(tmp_path):
    for path, message in ((tmp_path, "is a folder, not a file"),
                          (tmp_path / "missing.json", "cannot read (No such file"),
                          (f"{tmp_path}/a\0b.json", "cannot read (embedded null byte)")):
        with pytest.raises(InputError, match=re.escape(message)):
            read_json(path)


# ---- the five files ----------------------------------------------------------------------

JOBS_CSV = "job_id,submit_time,duration,num_gpus\na,0,60,2\nb,30,120,1\n"


def test_trace_csv_with_a_byte_order_mark(tmp_path):
    # What a spreadsheet saves: the mark before the first column's name.
    src, out = tmp_path / "jobs.csv", tmp_path / "s.json"
    src.write_bytes(BOM + JOBS_CSV.encode())
    code, stdout, err = call(trace.main, ["csv", str(src), "--time-unit", "m", "--gpus", "8",
                                          "-o", str(out)])
    assert (code, err) == (0, ""), err
    s = load(out)
    assert [(j.id, j.arrival, j.duration, j.gpus) for j in s.jobs] == [("a", 0, 1, 2),
                                                                      ("b", 0, 2, 1)]


def test_scenario_with_a_byte_order_mark(tmp_path, fifo_cfg):
    path = tmp_path / "tiny.json"
    doc = yaml.safe_load(TINY.read_text())
    path.write_bytes(BOM + json.dumps(doc).encode())
    assert load(path).to_dict() == from_dict(doc).to_dict()
    yaml_path = tmp_path / "tiny.yaml"
    yaml_path.write_bytes(BOM + TINY.read_bytes())
    assert load(yaml_path).to_dict() == from_dict(doc).to_dict()
    result = run(replace(fifo_cfg, scenario=replace(fifo_cfg.scenario, path=str(path))),
                 tmp_path / "out")
    assert result["scenario"] == "tiny" and result["jobs"] == 5


@pytest.mark.parametrize("raw, message", [
    (JOBS_CSV.replace("b,30", "bé,30").encode("latin-1"),
     "line 3: not UTF-8 text (byte 0xe9 at column 2)"),
    (BOM + JOBS_CSV.replace("b,30", "éé\xff,30").encode("utf-8").replace(b"\xc3\xbf", b"\xff"),
     "line 3: not UTF-8 text (byte 0xff at column 3)"),  # columns in characters, not bytes
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "line 1: not UTF-8 text (byte 0x89 at column 1)"),
    (JOBS_CSV.encode() + b"c,0,1,1\x00\n", "line 4: not a text file (a NUL byte)"),
    (JOBS_CSV.encode("utf-16"), "UTF-16 text"),
])
def test_trace_csv_not_utf8(tmp_path, raw, message):
    src, out = tmp_path / "jobs.csv", tmp_path / "s.json"
    src.write_bytes(raw)
    code, stdout, err = call(trace.main, ["csv", str(src), "--gpus", "8", "-o", str(out)])
    assert code == 2 and message in one_line(err, src)
    assert not out.exists()


def test_plan_not_utf8(tmp_path):
    s = load(TINY)
    scen, plan = tmp_path / "s.json", tmp_path / "plan.json"
    s.save(scen)
    plan.write_bytes(json.dumps(plan_doc(s)).replace('"fifo"', '"fïfo"').encode("latin-1"))
    code, out, err = call(check_cmd.main, [str(scen), str(plan)])
    assert code == 2 and out == ""
    assert "line 1: not UTF-8 text (byte 0xef at column" in one_line(err, plan)
    # The same plan in UTF-8, with and without the mark: a verdict.
    for mark in (b"", BOM):
        plan.write_bytes(mark + json.dumps(plan_doc(s)).encode())
        assert call(check_cmd.main, [str(scen), str(plan)]) == (0, "feasible\n", "")


def test_report_with_a_malformed_metrics_beside_good_ones(good_run, tmp_path):
    # metrics.json without its scenario: the run is failed, with the reason;
    # the two good runs are reported.
    metrics = json.loads(good_run["metrics.json"])
    del metrics["scenario"]
    write_run(tmp_path / "0", good_run)
    write_run(tmp_path / "1", {**good_run, "metrics.json": json.dumps(metrics).encode()})
    write_run(tmp_path / "2", {**good_run, "metrics.json": good_run["metrics.json"].replace(
        b'"seed": 0', b'"seed": 1')})
    rows, md, err = reported(tmp_path, "--no-plots")
    assert [(r["scenario"], r["policy"], r["n"], r["seeds"]) for r in rows] == [
        ("tiny", "fifo", "2", "0 1"), ("tiny", "greedy", "2", "0 1")]
    assert "3 runs: 2 finished, 1 failed." in md
    assert ("- `1` `+scenario=file seed=0`: metrics.json: field 'scenario' must be a scenario "
            "name, got None") in md
    assert "1 of 3 runs failed: see report.md" in err


@pytest.mark.slow
def test_the_five_files_through_the_commands(good_run, tmp_path):
    # The five files through the real commands, started together:
    # each process spends most of its time importing torch.
    s = load(TINY)
    (tmp_path / "bom.csv").write_bytes(BOM + JOBS_CSV.encode())
    (tmp_path / "bom.json").write_bytes(BOM + json.dumps(s.to_dict()).encode())
    (tmp_path / "latin1.csv").write_bytes(JOBS_CSV.replace("b,30", "bé,30").encode("latin-1"))
    s.save(tmp_path / "s.json")
    (tmp_path / "plan.json").write_bytes(
        json.dumps(plan_doc(s)).replace('"fifo"', '"fïfo"').encode("latin-1"))
    metrics = json.loads(good_run["metrics.json"])
    del metrics["scenario"]
    write_run(tmp_path / "runs" / "0", good_run)
    write_run(tmp_path / "runs" / "1", {**good_run, "metrics.json": json.dumps(metrics).encode()})
    commands = {
        "bom.csv": ["gpualloc.trace", "csv", "bom.csv", "--gpus", "8", "-o", "a.json"],
        "bom.json": ["gpualloc.run", "+scenario=file", "scenario.path=bom.json",
                     "policies=[fifo]", "hydra.run.dir=out"],
        "latin1.csv": ["gpualloc.trace", "csv", "latin1.csv", "--gpus", "8", "-o", "b.json"],
        "plan.json": ["gpualloc.check", "s.json", "plan.json"],
        "runs": ["gpualloc.report", "runs", "--no-plots"],
    }
    procs = {name: subprocess.Popen([sys.executable, "-m", *argv], cwd=tmp_path, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for name, argv in commands.items()}
    done = {}
    for name, p in procs.items():
        out, err = p.communicate(timeout=300)
        done[name] = (p.returncode, out, err)
    for name, (code, out, err) in done.items():
        assert "Traceback" not in err, (name, err)
    for name in ("bom.csv", "bom.json"):
        assert done[name][0] == 0, done[name]
    assert load(tmp_path / "a.json").J == 2
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["scenario"] == "tiny"
    for name in ("latin1.csv", "plan.json"):
        code, out, err = done[name]
        assert code == 2 and "not UTF-8 text" in one_line(err, Path(name)), (name, err)
    assert not (tmp_path / "b.json").exists()
    code, out, err = done["runs"]
    assert code == 0 and "1 of 2 runs failed" in err
    assert "field 'scenario' must be a scenario name" in (tmp_path / "runs" / "report.md").read_text()
