import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpualloc.check import check
from gpualloc.config import RunConfig
from gpualloc.online import run_policy
from gpualloc.policies import POLICIES
from gpualloc.scenario import load
from gpualloc.trace import (PRIMARY, CsvColumns, TraceError, Window, convert, main, parse_pool,
                            read_alibaba, read_csv, read_nodes, trace_pools)

REPO = Path(__file__).resolve().parents[1]
# An excerpt of the trace, cut by tests/data/cut_alibaba.py (source, licence and
# the command: tests/data/README.md): every pod of the windows converted below,
# the pods within 6 h of them, those deleted at the trace's end, the whole node
# list. Conversions of those windows give what the whole trace gives; only the
# rows read and the `outside` count differ.
TRACE = REPO / "tests" / "data" / "alibaba-gpu-v2023"
EXAMPLE = REPO / "gpualloc" / "examples" / "alibaba_134d_168h.json"
HOUR, DAY = 3600.0, 86400.0


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gpualloc.trace", *args], capture_output=True,
                          text=True, cwd=cwd or REPO)


@pytest.fixture(scope="module")
def week():
    """The shipped week, converted again from the trace."""
    records = read_alibaba(TRACE / "openb_pod_list_gpuspec33.csv")
    pools = trace_pools(read_nodes(TRACE / "openb_node_list_gpu_node.csv"), {}, sample_gpus=64)
    return convert(records, Window(start=134 * DAY, steps=168, step_s=HOUR), pools,
                   "alibaba_134d_168h")


def test_alibaba_week_counts(week):
    # Every pod under exactly one primary rule; the numbers are facts of the
    # trace under the documented rules (the README's table), but `outside`:
    # the excerpt's 1,635 pods (of the trace's 8,152) leave 140 outside the
    # window (6,657 in the whole trace).
    c = week.counts
    assert sum(c[k] for k in PRIMARY) == week.rows == 1635
    assert {k: c[k] for k in PRIMARY} == {
        "outside": 140, "no_gpu": 194, "never_ran_dropped": 62, "no_model": 0,
        "service": 880, "rigid": 359}
    assert {k: v for k, v in c.items() if k not in PRIMARY and v} == {
        "fractional_service": 158, "fractional_rigid": 324, "never_ran_service": 82,
        "cut_service": 37, "running_at_start": 8, "past_end": 9, "short": 250, "trace_end": 26}
    s = week.scenario
    assert (s.G, s.T, s.J, week.services) == (64, 168, 375, 16)
    assert 32 <= s.G <= 128 and s.J <= 400 and 96 <= s.T <= 168
    # Priorities on the project's scale: serving 9, training 5-8, batch 2.
    allowed = {"realtime_inference": {9}, "training": {5, 8}, "batch_inference": {2}}
    assert all(j.priority in allowed[j.kind] for j in s.jobs)


def test_shipped_example_is_reproducible(week):
    assert load(EXAMPLE).to_dict() == week.scenario.to_dict()


@pytest.mark.slow  # the allocator on 64 GPUs x 375 jobs x 168 steps: ~15-30 s on 2 cores
def test_every_policy_plans_the_trace(week):
    # A checked plan from each policy of the registry, offline; exact (CP-SAT)
    # refuses a scenario this large, saying so.
    s = week.scenario
    for name in POLICIES:
        if name == "exact":
            from gpualloc.policies.exact import ExactTooLarge
            with pytest.raises(ExactTooLarge, match="above exact.max_variables"):
                run_policy(name, s, RunConfig(policies=[name]), "cpu")
            continue
        plan = run_policy(name, s, RunConfig(policies=[name]), "cpu")
        assert check(s, plan.owner).ok, name


def test_alibaba_default_list_whole_cluster():
    # The pod list without gpu_spec, on the trace's own 1,213 GPU nodes.
    records = read_alibaba(TRACE / "openb_pod_list_default.csv")
    pools = trace_pools(read_nodes(TRACE / "openb_node_list_gpu_node.csv"), {})
    r = convert(records, Window(start=140 * DAY, steps=96, step_s=HOUR), pools, "d")
    assert r.scenario.G == 6212 and sum(p.count for p in r.scenario.pools) == 1213
    assert r.counts["narrowed"] == r.counts["no_model"] == 0
    assert all(j.gpu_types is None for j in r.scenario.jobs)
    assert sum(r.counts[k] for k in PRIMARY) == r.rows == 1075
    # As the whole trace gives them, but `outside` (7,226 of its 8,152 pods).
    assert {k: r.counts[k] for k in PRIMARY} == {
        "outside": 149, "no_gpu": 129, "never_ran_dropped": 41, "no_model": 0,
        "service": 595, "rigid": 161}
    assert (r.scenario.J, r.services) == (164, 3)


def test_sample_keeps_every_model():
    nodes = read_nodes(TRACE / "openb_node_list_gpu_node.csv")
    pools = trace_pools(nodes, {}, sample_gpus=64)
    assert sum(p.count * p.gpus_per_node for p in pools) == 64
    assert {p.gpu_type for p in pools} == {m for m, _ in nodes}
    assert pools[0].gpu_type == "G2"  # the trace's largest pool first
    with pytest.raises(TraceError, match="sample-gpus 16"):
        trace_pools(nodes, {}, sample_gpus=16)


def test_excerpt_is_cut_by_its_script(tmp_path):
    # tests/data/cut_alibaba.py still runs from the root, and cutting the excerpt
    # again changes nothing: it holds no row outside the script's rule (a row
    # lost from the windows shows in the counts above).
    r = subprocess.run([sys.executable, "tests/data/cut_alibaba.py", str(TRACE), "--out",
                        str(tmp_path)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in TRACE.glob("*.csv"))
    assert names == sorted(p.name for p in tmp_path.iterdir()) and len(names) == 4
    for name in names:
        assert (tmp_path / name).read_bytes() == (TRACE / name).read_bytes(), name


POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time\n")


def pods(tmp_path, *rows):
    path = tmp_path / "pods.csv"
    path.write_text(POD_HEADER + "".join(r + "\n" for r in rows))
    return path


def test_alibaba_rules_by_hand(tmp_path):
    h = 3600
    path = pods(
        tmp_path,
        f"ls-a,1,1,1,500,,LS,Running,{10 * h},{12 * h},{10 * h}",      # half GPU, 2 h
        f"ls-b,1,1,1,500,,LS,Running,{10 * h},{11 * h},{10 * h}",      # half GPU, 1 h
        f"ls-c,1,1,1,1000,,LS,Pending,{11 * h},{11 * h + 60},",        # never ran: demand
        f"be-run,1,1,1,1000,T4|V100M32,BE,Running,{5 * h},{13 * h},{6 * h}",  # running at start
        f"be-wait,1,1,2,1000,,BE,Running,{9 * h},{14 * h},{11 * h}",   # waiting at start
        f"be-frac,1,1,1,300,,BE,Failed,{12 * h + 10},{12 * h + 70},{12 * h + 20}",  # short
        f"be-never,1,1,1,1000,,BE,Pending,{12 * h},{13 * h},",         # never ran: dropped
        f"cpu,1,1,0,0,,BE,Running,{12 * h},{13 * h},{12 * h}",         # no GPU
        f"be-a10,1,1,1,1000,A10,BE,Running,{12 * h},{13 * h},{12 * h}",  # model not in cluster
        f"late,1,1,1,1000,,Burstable,Running,{30 * h},{31 * h},{30 * h}",  # after the window
        f"long,1,1,8,1000,,Guaranteed,Running,{13 * h},{40 * h},{13 * h}",  # past the end
    )
    pools = [parse_pool("t4:2:4:T4:16"), parse_pool("g2:1:8:G2:32")]
    r = convert(read_alibaba(path), Window(start=10 * h, steps=6, step_s=h), pools, "hand")
    c = r.counts
    assert {k: c[k] for k in PRIMARY} == {"outside": 1, "no_gpu": 1, "never_ran_dropped": 1,
                                          "no_model": 1, "service": 3, "rigid": 4}
    assert (c["fractional_service"], c["never_ran_service"], c["running_at_start"],
            c["waiting_at_start"], c["fractional_rigid"], c["short"], c["narrowed"],
            c["past_end"], c["trace_end"]) == (2, 1, 1, 1, 1, 1, 1, 1, 1)
    jobs = {j.id: j for j in r.scenario.jobs}
    svc = [j for j in r.scenario.jobs if j.kind == "realtime_inference"]
    assert len(svc) == 1 and svc[0].priority == 9
    # Two half-GPU pods make one replica; the pending pod wants one at 11 h.
    assert svc[0].demand == [1, 2, 0, 0, 0, 0]
    run = jobs["be-run"]  # ran 6 h .. 13 h: 3 h left at the start
    assert (run.arrival, run.duration, run.gpu_types, run.kind, run.priority) == (
        0, 3, ["T4"], "batch_inference", 2)
    assert (jobs["be-wait"].arrival, jobs["be-wait"].duration, jobs["be-wait"].gpus) == (0, 3, 2)
    assert (jobs["be-frac"].arrival, jobs["be-frac"].duration, jobs["be-frac"].gpus) == (2, 1, 1)
    assert (jobs["long"].kind, jobs["long"].priority, jobs["long"].duration) == ("training", 8, 27)
    keep = convert(read_alibaba(path), Window(start=10 * h, steps=6, step_s=h), pools, "hand",
                   never_ran="keep")
    assert keep.counts["never_ran_kept"] == 1
    assert {j.id: j.duration for j in keep.scenario.jobs}["be-never"] == 1


def test_alibaba_mean_demand(tmp_path):
    h = 3600
    path = pods(tmp_path, f"ls,1,1,1,1000,,LS,Running,{h + 900},{h + 2700},{h + 900}")
    pools = [parse_pool("a:1:8:G2:32")]
    peak = convert(read_alibaba(path), Window(start=0, steps=3, step_s=h), pools, "p")
    mean = convert(read_alibaba(path), Window(start=0, steps=3, step_s=h), pools, "m",
                   demand="mean")
    assert peak.scenario.jobs[0].demand == [0, 1, 0]
    assert mean.scenario.jobs[0].demand == [0, 1, 0]  # half a replica, rounded up


@pytest.mark.parametrize("row, message", [
    ("p,1,1,x,1000,,BE,Running,0,10,0", "line 2: field 'num_gpu' must be an integer"),
    ("p,1,1,1,0,,BE,Running,0,10,0", "line 2: field 'gpu_milli' must be in 1..1000"),
    ("p,1,1,1,1000,,XX,Running,0,10,0", "line 2: field 'qos' is 'XX'"),
    ("p,1,1,1,1000,,BE,Running,5,1,", "line 2: field 'deletion_time' must be a finite number >= 5"),
    ("p,1,1,1,1000,,BE,Running,0,10,20", "line 2: field 'scheduled_time' 20 is after"),
    ("p,1,1,1,1000,,BE,Running,0,10", "line 2: fewer fields"),
])
def test_alibaba_bad_rows(tmp_path, row, message):
    with pytest.raises(TraceError, match=message.replace("(", r"\(")):
        read_alibaba(pods(tmp_path, row))


def test_alibaba_cli(tmp_path, capsys):
    out = tmp_path / "a.json"
    r = cli("alibaba", str(TRACE / "openb_pod_list_gpuspec33.csv"), "--start", "134d",
            "--length", "168h", "--sample-gpus", "64", "--name", "alibaba_134d_168h", "-o",
            str(out))
    assert r.returncode == 0, r.stderr
    assert "880  serving" in r.stdout and "1635  (total)" in r.stdout
    assert load(out).to_dict() == load(EXAMPLE).to_dict()
    # Errors: exit 2, named, no traceback, no file (in-process from here on).
    assert main(["alibaba", str(TRACE / "openb_pod_list_multigpu50.csv"), "--start", "1d",
                 "--length", "1d", "-o", str(tmp_path / "m.json")]) == 2
    assert "missing column" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()
    assert main(["alibaba", str(TRACE / "openb_pod_list_default.csv"), "--start", "134d",
                 "--length", "7h", "--step", "2h", "-o", str(tmp_path / "x.json")]) == 2
    assert "not a whole number of --step" in capsys.readouterr().err
    assert main(["alibaba", str(TRACE / "openb_pod_list_default.csv"), "--start", "134d",
                 "--length", "7h", "--kind", "LS=serving", "-o", str(tmp_path / "x.json")]) == 2
    assert "--kind 'LS=serving': kind must be one of" in capsys.readouterr().err


# ---- the generic CSV importer ------------------------------------------------------------

def write(tmp_path, text, name="jobs.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


COLS = CsvColumns(id="id", submit="submit", duration="minutes", gpus="gpus", gpu_type="type",
                  priority="prio", kind="kind")


def test_csv_import(tmp_path):
    path = write(tmp_path, "id,submit,minutes,gpus,type,prio,kind\n"
                           "a,0,90,8,H100,6,train\n"
                           "b,30,120,2,,,batch_inference\n"
                           "c,60,10,0.5,H100|B200,2,batch_inference\n"
                           "d,120,600,1,,9,serve\n"
                           "e,150,60,1,,9,serve\n"
                           "z,6000,60,1,,,\n")
    records = read_csv(path, COLS, time_unit=60, duration_unit=60, kind="quantization",
                       priority=3, kind_map={"train": "training", "serve": "realtime_inference"})
    pools = [parse_pool("h100:2:8:H100:80")]
    r = convert(records, Window(start=0, steps=6, step_s=3600), pools, "csv")
    jobs = {j.id: j for j in r.scenario.jobs}
    assert {k: r.counts[k] for k in PRIMARY} == {"outside": 1, "no_gpu": 0,
                                                 "never_ran_dropped": 0, "no_model": 0,
                                                 "service": 2, "rigid": 3}
    assert (jobs["a"].kind, jobs["a"].priority, jobs["a"].duration, jobs["a"].gpu_types) == (
        "training", 6, 2, ["H100"])
    assert (jobs["b"].priority, jobs["b"].arrival, jobs["b"].duration) == (3, 0, 2)
    assert (jobs["c"].gpus, jobs["c"].gpu_types) == (1, ["H100"])  # B200: not in the cluster
    assert r.counts["narrowed"] == 1 and r.counts["fractional_rigid"] == 1
    svc = [j for j in r.scenario.jobs if j.kind == "realtime_inference"]
    assert len(svc) == 1 and svc[0].demand == [0, 0, 2, 2, 1, 1]  # e: 2.5 h .. 3.5 h
    assert svc[0].arrival == 2


@pytest.mark.parametrize("rows, message", [
    ("a,0,10,1\nb,x,10,1\n", "line 3: field 'submit_time' must be a number, got 'x'"),
    ("a,0,10,1\nb,0,-1,1\n", "line 3: field 'duration' must be a finite number >= 0"),
    ("a,0,10,1\na,5,10,1\n", "line 3: field 'job_id': job 'a' already on line 2"),
    ("a,0,10,1\n,5,10,1\n", "line 3: field 'job_id' is empty"),
    ("a,0,10,1\nb,0,10,nan\n", "line 3: field 'num_gpus' must be a finite number"),
    ("a,0,10,1\nb,0,10\n", "line 3: fewer fields"),
    ("a,0,10,1,7\n", "line 2: 5 fields, the header has 4"),
])
def test_csv_bad_rows(tmp_path, rows, message):
    path = write(tmp_path, "job_id,submit_time,duration,num_gpus\n" + rows)
    with pytest.raises(TraceError, match=message):
        read_csv(path, CsvColumns(), 1.0, 1.0)


def test_csv_cli(tmp_path, capsys):
    # In-process through main() (test_alibaba_cli runs the real command).
    def cli(*argv):
        code = main(list(argv))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(argv, code, out, err)

    path = write(tmp_path, "job,t,d,n,k\nj1,0,2,4,tr\nj2,1,1,16,tr\nj3,3,5,1,bi\n")
    out = tmp_path / "s.yaml"
    args = ["csv", str(path), "--id-col", "job", "--submit-col", "t", "--duration-col", "d",
            "--gpus-col", "n", "--kind-col", "k", "--kind-map", "tr=training", "--kind-map",
            "bi=batch_inference", "--time-unit", "h", "--gpus", "16", "--realtime-services", "2",
            "--length", "12h", "-o", str(out)]
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    s = load(out)
    assert (s.G, s.T, s.J) == (16, 12, 5)
    assert sum(j.kind == "realtime_inference" for j in s.jobs) == 2
    assert [j.duration for j in s.jobs if j.rigid] == [2, 1, 5]
    # Bad rows and options: exit 2, the line or option named, no traceback, no file.
    bad = write(tmp_path, "job,t,d,n,k\nj1,0,2,4,tr\nj2,1,oops,16,tr\n", "bad.csv")
    out2 = tmp_path / "bad.json"
    r = cli(*[str(bad) if a == str(path) else str(out2) if a == str(out) else a for a in args])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{bad} line 3: field 'd' must be a number, got 'oops'" in r.stderr
    assert not out2.exists()
    r = cli("csv", str(path), "--id-col", "job", "-o", str(out2))
    assert r.returncode == 2 and "missing column 'submit_time'" in r.stderr
    r = cli("csv", str(path), "--id-col", "job", "--submit-col", "t", "--duration-col", "d",
            "--gpus-col", "n", "-o", str(out2))
    assert r.returncode == 2 and "--gpus N or --pool" in r.stderr
    r = cli("csv", str(path), "--id-col", "job", "--submit-col", "t", "--duration-col", "d",
            "--gpus-col", "n", "--pool", "x:1:8", "-o", str(out2))
    assert r.returncode == 2 and "--pool 'x:1:8'" in r.stderr


def test_csv_preemptible_kinds(tmp_path, capsys):
    # --preemptible/--restart-cost post-process the written scenario, like --min-served.
    def cli(*extra):
        code = main(["csv", str(path), "--kind-col", "k", "--time-unit", "h", "--gpus", "16",
                     "--realtime-services", "1", "--length", "12h", "-o", str(out), *extra])
        out_, err = capsys.readouterr()
        return subprocess.CompletedProcess(extra, code, out_, err)

    path = write(tmp_path, "job_id,submit_time,duration,num_gpus,k\n0,0,2,4,training\n"
                           "1,1,1,8,batch_inference\n2,3,5,1,quantization\n3,4,2,2,training\n")
    out = tmp_path / "s.json"
    r = cli("--preemptible", "training", "quantization", "--restart-cost", "2",
            "--min-served", "0.5")
    assert r.returncode == 0, r.stderr
    assert "preemptible: 3 jobs (training, quantization), restart_cost 2" in r.stdout
    s = load(out)
    assert {j.id: (j.preemptible, j.restart_cost) for j in s.jobs} == {
        "0": (True, 2), "1": (False, 0), "2": (True, 2), "3": (True, 2),
        "rt-synthetic-0": (False, 0)}
    assert [j.min_served for j in s.jobs if not j.rigid] == [0.5]
    r = cli("--preemptible", "batch_inference")  # restart cost 0 unless given
    assert r.returncode == 0, r.stderr
    assert [(j.id, j.restart_cost) for j in load(out).jobs if j.preemptible] == [("1", 0)]
    r = cli()  # neither: no job preemptible, no field written
    assert r.returncode == 0 and "preemptible:" not in r.stdout
    assert not any("preemptible" in j for j in json.loads(out.read_text())["jobs"])
    # Errors: exit 2, one line naming the option, no file.
    out.unlink()
    r = cli("--restart-cost", "3")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("error: --restart-cost 3: only with --preemptible KIND "
                                "(a restart cost is paid by preemptible jobs only)")
    assert not out.exists()
    for extra, message in [(["--preemptible", "serving"], "invalid choice: 'serving'"),
                           (["--preemptible", "realtime_inference"],
                            "invalid choice: 'realtime_inference'"),
                           (["--preemptible"], "expected at least one argument"),
                           (["--preemptible", "training", "--restart-cost", "-1"],
                            "'-1': must be an integer >= 0"),
                           (["--preemptible", "training", "--restart-cost", "1.5"],
                            "'1.5': must be an integer >= 0")]:
        with pytest.raises(SystemExit) as e:
            cli(*extra)
        err = capsys.readouterr().err
        assert e.value.code == 2 and message in err and "Traceback" not in err, (extra, err)
        assert not out.exists()


def test_run_alibaba_scenario(tmp_path):
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from gpualloc.config import register_configs
    from gpualloc.run import run

    register_configs()
    with initialize_config_module("gpualloc.conf", version_base=None):
        cfg = OmegaConf.to_object(compose("config", overrides=["+scenario=alibaba",
                                                               "policies=[fifo]"]))
    result = run(cfg, tmp_path)
    assert (result["scenario"], result["gpus"], result["jobs"]) == ("alibaba_134d_168h", 64, 375)
    assert json.loads((tmp_path / "metrics.json").read_text())["policies"]["fifo"]
