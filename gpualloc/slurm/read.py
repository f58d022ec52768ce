"""Readers of what Slurm's own commands print: `squeue --json`, `sinfo --json`,
`scontrol show job -d`, the job completion log (jobcomp/filetxt), host lists
(`n[1-3,7]`), GRES strings (`gpu:h100:4(IDX:0-2,5)`) and the `key=value`
hints a job carries in its comment.

Pure functions of text: nothing here runs a command. Whatever the input
(truncated, mutated, another Slurm version's field types), a reader returns
a value or raises `SlurmReadError` with one line saying what was wrong and
where; never another exception. Written against Slurm 22.05 (openapi
v0.0.38); fields that later versions wrap (`{"set": .., "number": ..}`,
`job_state` as a list) are read in either form.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

# A job's hostlist, GRES or comment is at most this long: beyond, the input is refused.
MAX_FIELD = 100_000
MAX_HOSTS = 100_000
MAX_INDEX = 4096
"""GPU indices inside one node above this are refused (a mutated IDX range
would otherwise expand to millions)."""


class SlurmReadError(ValueError):
    """Slurm printed something this reader cannot make sense of; the message names it."""


def _short(v, width: int = 50) -> str:
    r = repr(v)
    return r if len(r) <= width else r[: width - 5] + " ...>"


# ---- small formats ----------------------------------------------------------------------

def _ranges(text: str, what: str, limit: int) -> list[int]:
    """'0-3,5' -> [0, 1, 2, 3, 5]; widths of zero-padded numbers are not kept."""
    out: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"(\d{1,9})(?:-(\d{1,9}))?", part.strip())
        if not m:
            raise SlurmReadError(f"{what}: cannot read the range {_short(part)}")
        a = int(m.group(1))
        b = int(m.group(2)) if m.group(2) is not None else a
        if b < a or len(out) + b - a + 1 > limit:
            raise SlurmReadError(f"{what}: range {_short(part)} is reversed or too long")
        out.extend(range(a, b + 1))
    return out


def hostlist(text: str) -> list[str]:
    """Slurm's compressed host list: 'n[1-3,7],gpu-a[01-02]' -> names."""
    if not isinstance(text, str) or len(text) > MAX_FIELD:
        raise SlurmReadError(f"host list {_short(text)}: not a string of a sane length")
    out: list[str] = []
    i = 0
    text = text.strip()
    while i < len(text):
        m = re.compile(r"([^,\[\]]*)(?:\[([^\]]*)\])?([^,\[\]]*)").match(text, i)
        prefix, inner, suffix = m.group(1), m.group(2), m.group(3)
        if m.end() == i or (not prefix and inner is None):
            raise SlurmReadError(f"host list {_short(text)}: cannot read at {_short(text[i:i + 20])}")
        if inner is None:
            out.append(prefix + suffix)
        else:
            for part in inner.split(","):
                mm = re.fullmatch(r"(\d{1,9})(?:-(\d{1,9}))?", part)
                if not mm:
                    raise SlurmReadError(f"host list {_short(text)}: bad range {_short(part)}")
                width = len(mm.group(1))
                for n in _ranges(part, f"host list {_short(text)}", MAX_HOSTS - len(out)):
                    out.append(f"{prefix}{n:0{width}d}{suffix}")
        i = m.end()
        if i < len(text):
            if text[i] != ",":
                raise SlurmReadError(f"host list {_short(text)}: unexpected {_short(text[i])}")
            i += 1
    if any(not h or any(c.isspace() for c in h) for h in out):
        raise SlurmReadError(f"host list {_short(text)}: an empty or blank host name")
    return out


def natural_key(name: str) -> list:
    """n2 before n10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


@dataclass
class Gres:
    type: str | None
    count: int
    idx: list[int] | None = None


def gres(text: str) -> Gres | None:
    """One GPU entry of a GRES string: 'gpu:h100:4(IDX:0-3)', 'gres:gpu:2',
    'gpu:4', 'gres/gpu=8'. None when it names no GPU."""
    if not isinstance(text, str) or len(text) > MAX_FIELD:
        raise SlurmReadError(f"GRES {_short(text)}: not a string of a sane length")
    for item in _split_top(text):
        item = item.strip()
        if item.startswith("gres:"):
            item = item[5:]
        if item.startswith("gres/"):
            item = item[5:].replace("=", ":", 1)
        if not (item == "gpu" or item.startswith("gpu:") or item.startswith("gpu(")):
            continue
        m = re.fullmatch(r"gpu(?::([A-Za-z0-9_.\-]+))??(?::(\d{1,9}))?(?:\(([^)]*)\))?(?:\(S:[^)]*\))?",
                         item)
        if not m:
            raise SlurmReadError(f"GRES {_short(text)}: cannot read {_short(item)}")
        kind, count, extra = m.group(1), m.group(2), m.group(3)
        if kind is not None and kind.isdigit() and count is None:
            kind, count = None, kind
        idx = None
        if extra and extra.startswith("IDX:"):
            body = extra[4:]
            idx = [] if body in ("", "N/A") else _ranges(body, f"GRES {_short(text)}", MAX_INDEX)
            if any(i >= MAX_INDEX for i in idx):
                raise SlurmReadError(f"GRES {_short(text)}: GPU index beyond {MAX_INDEX}")
        return Gres(type=kind, count=int(count) if count is not None else 1, idx=idx)
    return None


def _split_top(text: str) -> list[str]:
    """Split at commas outside parentheses ('gpu:2(IDX:0,1),mps:1')."""
    out, depth, cur = [], 0, []
    for c in text:
        if c == "(":
            depth += 1
        elif c == ")":
            depth = max(0, depth - 1)
        if c == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    out.append("".join(cur))
    return out


def preemptible(hints: dict[str, str]) -> bool:
    """A comment's `preemptible=1` (or true, yes)."""
    return hints.get("preemptible", "").lower() in ("1", "true", "yes")


def steps_hint(hints: dict[str, str], key: str) -> int:
    """A comment's `key=`, a whole number of steps >= 0 (0 without it)."""
    value = hints.get(key, "0")
    if not value.isdigit():
        raise SlurmReadError(f"comment {key}={value!r} is not a whole number of steps >= 0")
    return int(value)


def resumed(hints: dict[str, str]) -> int:
    """Steps that a run of a preemptible job serve requeued adds to its
    length: PROBLEM.md's later segment restores for `restart_cost=` steps,
    then makes what is left after the progress made before (`done=`, which
    serve writes into the comment as it requeues the job). 0 for any other
    job. The snapshot, `executed` and the lab's sleep all read it here."""
    if "done" not in hints or not preemptible(hints):
        return 0
    return steps_hint(hints, "restart_cost") - steps_hint(hints, "done")


def comment_hints(text: str | None) -> dict[str, str]:
    """'kind=training priority=3 runtime=90m' (spaces, commas or semicolons
    between pairs) -> {kind: training, ...}. Words without '=' are ignored."""
    if not text:
        return {}
    if not isinstance(text, str) or len(text) > MAX_FIELD:
        raise SlurmReadError(f"comment {_short(text)}: not a string of a sane length")
    out = {}
    for word in re.split(r"[\s,;]+", text.strip()):
        key, eq, value = word.partition("=")
        if eq and key:
            out[key.lower()] = value
    return out


def duration_seconds(text: str) -> float:
    """'90s', '15m', '2h', '1d' or plain minutes -> seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip().lower())
    if not m:
        raise SlurmReadError(f"runtime {_short(text)}: expected a number with s, m, h or d")
    return float(m.group(1)) * {"s": 1, "m": 60, "": 60, "h": 3600, "d": 86400}[m.group(2)]


# ---- squeue --json ----------------------------------------------------------------------

FINISHED = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
            "DEADLINE", "OUT_OF_MEMORY"}


@dataclass
class SlurmJob:
    id: int
    name: str
    state: str
    """PENDING, RUNNING, COMPLETED, ... (the first state Slurm lists)."""
    partition: str = ""
    qos: str = ""
    priority: int = 0
    comment: str = ""
    reason: str = ""
    nodes: list[str] = field(default_factory=list)
    node_count: int = 1
    gpus_per_node: int = 0
    gpus_total: int = 0
    gpu_type: str | None = None
    time_limit_min: int | None = None
    """None: unlimited or not set."""
    submit: int | None = None
    start: int | None = None
    end: int | None = None
    """Epoch seconds; for a pending or running job, Slurm's expectation."""
    idx: dict[str, list[int]] = field(default_factory=dict)
    """node -> GPU indices, while it runs (Slurm erases them at its end)."""
    required_nodes: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return self.state == "PENDING" and self.reason.startswith("JobHeld")

    @property
    def gpus(self) -> int:
        return self.gpus_total or self.gpus_per_node * max(self.node_count, 1)

    @property
    def hints(self) -> dict[str, str]:
        return comment_hints(self.comment)


def _loads(text: str | bytes, what: str):
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SlurmReadError(f"{what}: not valid JSON ({first})") from None
    except RecursionError:
        raise SlurmReadError(f"{what}: nested too deeply") from None


def _number(v, what: str, null_ok: bool = True) -> int | None:
    """An integer field, plain or in the later {"set", "infinite", "number"} form."""
    if isinstance(v, dict):
        if v.get("infinite") is True or v.get("set") is False:
            return None
        v = v.get("number")
    if v is None and null_ok:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or abs(v) > 2**63:
        raise SlurmReadError(f"{what}: expected a number, got {_short(v)}")
    return int(v)


def _text(v, what: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str) or len(v) > MAX_FIELD:
        raise SlurmReadError(f"{what}: expected a string, got {_short(v)}")
    return v


def _epoch(v, what: str) -> int | None:
    n = _number(v, what)
    return n if n else None  # Slurm writes 0 for "not yet"


def _errors(doc, what: str) -> None:
    """Slurm 22.05's `squeue --json` and `sinfo --json` exit 0 with an empty
    list and an `errors` entry when the controller is out of reach: that is
    a failure, not an empty cluster."""
    errs = doc.get("errors") if isinstance(doc, dict) else None
    if errs:
        first = errs[0] if isinstance(errs, list) else errs
        if isinstance(first, dict):
            first = f"{first.get('description') or first.get('error')} ({first.get('source')})"
        raise SlurmReadError(f"{what}: Slurm reports an error: {_short(first, 120)}")


def squeue(text: str | bytes) -> list[SlurmJob]:
    """The jobs of `squeue --json` (any state the controller still holds)."""
    doc = _loads(text, "squeue --json")
    _errors(doc, "squeue --json")
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SlurmReadError("squeue --json: no 'jobs' list in the document")
    return [_job(j, i) for i, j in enumerate(doc["jobs"])]


def _job(d, i: int) -> SlurmJob:
    where = f"squeue --json: jobs[{i}]"
    if not isinstance(d, dict):
        raise SlurmReadError(f"{where}: expected an object, got {_short(d)}")
    jid = _number(d.get("job_id"), f"{where}.job_id", null_ok=False)
    where = f"squeue --json: job {jid}"
    state = d.get("job_state")
    if isinstance(state, list):
        state = state[0] if state else None
    state = _text(state, f"{where}.job_state")
    if not state:
        raise SlurmReadError(f"{where}: no job_state")
    count = _number(d.get("node_count"), f"{where}.node_count") or 1
    per_node = gres(_text(d.get("tres_per_node"), f"{where}.tres_per_node") or "")
    per_job = gres(_text(d.get("tres_per_job"), f"{where}.tres_per_job") or "")
    nodes_text = _text(d.get("nodes"), f"{where}.nodes")
    nodes = hostlist(nodes_text) if nodes_text else []
    detail = d.get("gres_detail") or []
    if not isinstance(detail, list):
        raise SlurmReadError(f"{where}.gres_detail: expected a list, got {_short(detail)}")
    idx: dict[str, list[int]] = {}
    for k, item in enumerate(detail):
        g = gres(_text(item, f"{where}.gres_detail[{k}]"))
        if g is not None and g.idx is not None and k < len(nodes):
            idx[nodes[k]] = g.idx
    req_text = _text(d.get("required_nodes"), f"{where}.required_nodes")
    limit = _number(d.get("time_limit"), f"{where}.time_limit")
    if limit is not None and (limit <= 0 or limit >= 2**32 - 2):
        limit = None  # 0: not set; 0xfffffffe / 0xffffffff: unlimited
    kind = (per_node.type if per_node else None) or (per_job.type if per_job else None)
    return SlurmJob(
        id=jid, name=_text(d.get("name"), f"{where}.name"), state=state.upper(),
        partition=_text(d.get("partition"), f"{where}.partition"),
        qos=_text(d.get("qos"), f"{where}.qos"),
        priority=_number(d.get("priority"), f"{where}.priority") or 0,
        comment=_text(d.get("comment"), f"{where}.comment"),
        reason=_text(d.get("state_reason"), f"{where}.state_reason"),
        nodes=nodes, node_count=count,
        gpus_per_node=per_node.count if per_node else 0,
        gpus_total=per_job.count if per_job else 0,
        gpu_type=kind, time_limit_min=limit,
        submit=_epoch(d.get("submit_time"), f"{where}.submit_time"),
        start=_epoch(d.get("start_time"), f"{where}.start_time"),
        end=_epoch(d.get("end_time"), f"{where}.end_time"),
        idx=idx, required_nodes=hostlist(req_text) if req_text else [])


# ---- sinfo --json -----------------------------------------------------------------------

@dataclass
class SlurmNode:
    name: str
    state: str
    """idle, mixed, allocated, down, drained, ... (lower case, flags dropped)."""
    partitions: list[str]
    gpus: int
    gpu_type: str | None
    flags: list[str] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        bad = {"down", "drain", "drained", "draining", "fail", "failing", "future", "unknown",
               "not_responding", "maint", "reboot_requested", "power_down", "powered_down"}
        return self.state not in bad and not bad & {f.lower() for f in self.flags}


def sinfo(text: str | bytes) -> list[SlurmNode]:
    """The nodes of `sinfo --json`, in natural name order (n2 before n10)."""
    doc = _loads(text, "sinfo --json")
    _errors(doc, "sinfo --json")
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise SlurmReadError("sinfo --json: no 'nodes' list in the document")
    nodes = {}
    for i, d in enumerate(doc["nodes"]):
        where = f"sinfo --json: nodes[{i}]"
        if not isinstance(d, dict):
            raise SlurmReadError(f"{where}: expected an object, got {_short(d)}")
        name = _text(d.get("name"), f"{where}.name")
        if not name or any(c.isspace() or c in ",[]" for c in name):
            raise SlurmReadError(f"{where}: bad node name {_short(name)}")
        state = d.get("state")
        if isinstance(state, list):
            flags = [_text(s, f"{where}.state") for s in state[1:]]
            state = state[0] if state else ""
        else:
            flags = d.get("state_flags") or []
            if not isinstance(flags, list):
                raise SlurmReadError(f"{where}.state_flags: expected a list")
            flags = [_text(s, f"{where}.state_flags") for s in flags]
        parts = d.get("partitions") or []
        if not isinstance(parts, list):
            raise SlurmReadError(f"{where}.partitions: expected a list")
        g = gres(_text(d.get("gres"), f"{where}.gres"))
        nodes[name] = SlurmNode(name=name, state=_text(state, f"{where}.state").lower(),
                                partitions=[_text(p, f"{where}.partitions") for p in parts],
                                gpus=g.count if g else 0, gpu_type=g.type if g else None,
                                flags=flags)
    return [nodes[n] for n in sorted(nodes, key=natural_key)]


# ---- scontrol show job -d -----------------------------------------------------------------

def scontrol_jobs(text: str) -> dict[int, dict]:
    """`scontrol show job -d` (scontrol has no --json in 22.05) -> job id ->
    {"name", "state", "nodes", "idx": node -> GPU indices}. The key=value
    layout is read field by field; JobName and Comment may hold anything up
    to the end of their line."""
    if not isinstance(text, str) or len(text) > 50 * MAX_FIELD * 10:
        raise SlurmReadError("scontrol show job: not text of a sane length")
    jobs: dict[int, dict] = {}
    cur = None
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("JobId="):
            m = re.match(r"JobId=(\d{1,12})(?:\s+(?:ArrayJobId|HetJobId)\S*)*(?:\s+JobName=(.*))?$", s)
            if not m:
                raise SlurmReadError(f"scontrol show job: line {n}: cannot read {_short(s)}")
            cur = {"name": m.group(2) or "", "state": "", "nodes": [], "idx": {}}
            jobs[int(m.group(1))] = cur
            continue
        if cur is None or not s:
            continue
        if s.startswith("JobState="):
            cur["state"] = s.split()[0].split("=", 1)[1]
        elif s.startswith("NodeList="):
            v = s.split()[0].split("=", 1)[1]  # "NodeList= SchedNodeList=..." when pending
            cur["nodes"] = hostlist(v) if v and v != "(null)" else []
        elif s.startswith("Nodes=") and " GRES=" in s:
            m = re.match(r"Nodes=(\S+)\s.*GRES=(\S*)", s)
            if not m:
                raise SlurmReadError(f"scontrol show job: line {n}: cannot read {_short(s)}")
            g = gres(m.group(2)) if m.group(2) else None
            if g is not None and g.idx is not None:
                for host in hostlist(m.group(1)):
                    cur["idx"][host] = g.idx
    return jobs


# ---- jobcomp/filetxt ------------------------------------------------------------------------

def jobcomp(text: str) -> list[dict]:
    """The job completion log (JobCompType=jobcomp/filetxt): one record a
    line, `Key=Value` pairs -> dicts with "id", "name", "state", "nodes",
    "start", "end" (ISO strings as written). Name may hold spaces: fields
    are cut at the next known key."""
    if not isinstance(text, str):
        raise SlurmReadError("job completion log: not text")
    keys = ("JobId", "UserId", "GroupId", "Name", "JobState", "Partition", "TimeLimit",
            "StartTime", "EndTime", "NodeList", "NodeCnt", "ProcCnt", "WorkDir")
    pat = re.compile(r"(?:^|\s)(" + "|".join(keys) + r")=")
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        marks = list(pat.finditer(line))
        if not marks or marks[0].group(1) != "JobId":
            raise SlurmReadError(f"job completion log: line {n}: no JobId= at its start")
        rec = {}
        for a, b in zip(marks, marks[1:] + [None]):
            rec[a.group(1)] = line[a.end(): b.start() if b else len(line)].strip()
        try:
            jid = int(rec["JobId"])
        except ValueError:
            raise SlurmReadError(f"job completion log: line {n}: JobId {_short(rec['JobId'])}") from None
        nodes = rec.get("NodeList", "")
        out.append({"id": jid, "name": rec.get("Name", ""), "state": rec.get("JobState", ""),
                    "nodes": hostlist(nodes) if nodes and nodes != "(null)" else [],
                    "start": rec.get("StartTime", ""), "end": rec.get("EndTime", "")})
    return out
