"""``kubectl sj``: the user's view of ScavengerJobs (installed with the package as the ``kubectl-sj`` plugin).

    kubectl sj list [-n NS | -A] [-o json]       every SJ: phase, why it waits, runs, interruptions, lost work
    kubectl sj describe NAME [-n NS] [-o json]   one SJ and the timeline of its runs
    kubectl sj why NAME [-n NS]                  why it waits (its Admitted condition), or that it runs
    kubectl sj suspend NAME / resume NAME        sets spec.suspend
    kubectl sj timeline [-n NS | -A] -o FILE.svg runs and interruptions of many SJs over time, as a picture

The timeline is read from the SJ's status, which keeps every run's start and every interruption for as
long as the SJ exists, and from its Events (which the API server keeps for an hour) where they say more.
Lost work per interruption is estimated as the operator's metrics do: the time since the run's current
checkpoint period began.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from sj_operator.api import ScavengerJobSpec, ScavengerJobStatus
from sj_operator.api.fields import format_duration
from sj_operator.names import GROUP, KIND, PLURAL, VERSION
from sj_operator.policy.conditions import admitted_condition
from sj_operator.policy.lifecycle import interruption_reason, lost_work

__all__ = ["Entry", "describe_lines", "list_rows", "main", "render_svg", "timeline"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --- pure: what the commands show ---------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One moment of an SJ's timeline."""

    at: datetime
    what: str
    """created, launched, running, interrupted, finished, suspended, resumed, start-timeout"""
    detail: str = ""
    lost_work_seconds: float | None = None


def _time(raw: Any) -> datetime | None:
    if not raw:
        return None
    return datetime.fromisoformat(str(raw).replace("Z", "+00:00"))


def _status(sj: Mapping[str, Any]) -> ScavengerJobStatus:
    return ScavengerJobStatus.model_validate(sj.get("status") or {})


def _duration(sj: Mapping[str, Any]) -> timedelta:
    try:
        return ScavengerJobSpec.model_validate(sj.get("spec") or {}).duration
    except ValueError:
        return ScavengerJobSpec.model_fields["duration"].default  # type: ignore[no-any-return]


_EVENT_ENTRIES = {"Launched": "launched", "Suspended": "suspended", "Resumed": "resumed",
                  "StartTimeout": "start-timeout"}


def timeline(sj: Mapping[str, Any], events: Sequence[Mapping[str, Any]] = ()) -> list[Entry]:
    """The SJ's history, oldest first: from its status (runs that ran, interruptions with their reason
    and estimated lost work, the finish) and, where the API server still keeps them, its Events (launches,
    suspensions, start timeouts; the reason of earlier interruptions)."""
    st = _status(sj)
    entries: list[Entry] = []
    created = _time((sj.get("metadata") or {}).get("creationTimestamp"))
    if created is not None:
        entries.append(Entry(created, "created"))
    interrupted_events = [e for e in events if e.get("reason") == "Interrupted"]
    for e in events:
        what = _EVENT_ENTRIES.get(str(e.get("reason")))
        at = _time(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp"))
        if what is not None and at is not None:
            entries.append(Entry(at, what, str(e.get("message") or "")))
    for at in st.running_timestamps:
        entries.append(Entry(at, "running"))
    lost = lost_work(st.running_timestamps, st.interrupted_timestamps, _duration(sj))
    for i, (at, seconds) in enumerate(zip(st.interrupted_timestamps, lost, strict=True)):
        reason: str
        if i == len(st.interrupted_timestamps) - 1 and st.last_interruption_reason:
            reason = st.last_interruption_reason
        elif i < len(interrupted_events):
            reason = interruption_reason(str(interrupted_events[i].get("message") or ""))
        else:
            reason = "unknown"
        entries.append(Entry(at, "interrupted", reason, seconds.total_seconds()))
    if st.finished_timestamp is not None and st.phase is not None:
        entries.append(Entry(st.finished_timestamp, "finished", st.phase.value))
    return _in_order(sorted(entries, key=lambda e: e.at))


_NEXT = {"created": ("launched", "suspended"), "launched": ("running", "interrupted", "start-timeout", "finished"),
         "running": ("interrupted", "finished", "suspended"), "interrupted": ("launched", "suspended", "finished"),
         "start-timeout": ("launched",), "suspended": ("resumed",), "resumed": ("launched",)}


def _in_order(entries: list[Entry]) -> list[Entry]:
    """Times have one-second resolution: within a second, the entries are put in the order a run goes
    through (launched, running, interrupted or finished, launched again...)."""
    out: list[Entry] = []
    i = 0
    while i < len(entries):
        tied = [e for e in entries[i:] if e.at == entries[i].at]
        i += len(tied)
        while tied:
            follows = _NEXT.get(out[-1].what, ()) if out else ("created",)
            pick = min(tied, key=lambda e: follows.index(e.what) if e.what in follows else len(follows))
            tied.remove(pick)
            out.append(pick)
    return out


def _age(since: datetime | None, now: datetime) -> str:
    return "-" if since is None else format_duration(max(now - since, timedelta(0)))


def _why(st: ScavengerJobStatus) -> tuple[str, str]:
    cond = admitted_condition(st.conditions)
    if cond is None:
        return ("-", "")
    return (cond.reason or "-", cond.message or "") if cond.status == "False" else ("Admitted", cond.message or "")


def list_rows(sjs: Iterable[Mapping[str, Any]], now: datetime, *, namespaces: bool) -> list[dict[str, Any]]:
    """One row per SJ: what `kubectl sj list` prints."""
    rows = []
    for sj in sjs:
        meta, st = sj.get("metadata") or {}, _status(sj)
        lost = sum(x.total_seconds() for x in lost_work(st.running_timestamps, st.interrupted_timestamps,
                                                             _duration(sj)))
        row = {"namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
               "phase": st.phase.value if st.phase else "-", "admitted": _why(st)[0], "runs": st.attempt,
               "interruptions": st.interrupted_count, "lostWorkSeconds": lost,
               "age": _age(_time(meta.get("creationTimestamp")), now)}
        if not namespaces:
            del row["namespace"]
        rows.append(row)
    return rows


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as a kubectl-like table: upper-case headers, columns two spaces apart."""
    if not rows:
        return "No ScavengerJobs found."
    headers = list(rows[0])
    cells = [[_cell(h, row[h]) for h in headers] for row in rows]
    titles = [_title(h) for h in headers]
    widths = [max(len(t), *(len(c[i]) for c in cells)) for i, t in enumerate(titles)]
    lines = ["  ".join(t.ljust(w) for t, w in zip(titles, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _title(key: str) -> str:
    return {"lostWorkSeconds": "LOST WORK"}.get(key, key.upper())


def _cell(key: str, value: Any) -> str:
    if key == "lostWorkSeconds":
        return format_duration(timedelta(seconds=round(value))) if value else "0s"
    return str(value)


def describe_lines(sj: Mapping[str, Any], entries: Sequence[Entry], now: datetime) -> list[str]:
    """What `kubectl sj describe` prints."""
    meta, st, spec = sj.get("metadata") or {}, _status(sj), sj.get("spec") or {}
    why, message = _why(st)
    lines = [
        f"Name:           {meta.get('namespace')}/{meta.get('name')}",
        f"Phase:          {st.phase.value if st.phase else '-'}" + (f" ({st.message})" if st.message else ""),
        f"Admitted:       {why}" + (f": {message}" if message else ""),
        f"Image:          {spec.get('image', '-')}",
        f"Pods:           {spec.get('parallelism', 1)}" + (" (MPI)" if spec.get("mpi") else ""),
        f"Checkpoints:    every {spec.get('duration', '1h')}",
        f"Runs:           {st.attempt} (current: {st.job_name or '-'})"
        + (f", configuration {st.config_index} of {len(spec['fallbacks'])} fallback(s)" if spec.get("fallbacks")
           else "") + (f", {st.wasted_runs} wasted in a row" if st.wasted_runs else ""),
        f"Interruptions:  {st.interrupted_count}" + (f", last {st.last_interruption_reason}"
                                                     if st.last_interruption_reason else ""),
        f"Age:            {_age(_time(meta.get('creationTimestamp')), now)}",
        "",
        "Timeline:",
    ]
    start = entries[0].at if entries else now
    for e in entries:
        offset = "+" + format_duration(max(e.at - start, timedelta(0))) if e.at > start else "0s"
        text = f"  {e.at.strftime('%Y-%m-%d %H:%M:%S')}  {offset:>8}  {e.what}"
        if e.what == "interrupted":
            text += f" ({e.detail}), lost about {format_duration(timedelta(seconds=round(e.lost_work_seconds or 0)))}"
        elif e.detail:
            text += f": {e.detail}"
        lines.append(text)
    return lines


_COLORS = {"running": "#2e7d32", "starting": "#9e9e9e", "interrupted": "#c62828", "Succeeded": "#1565c0",
           "Failed": "#6a1b9a"}


def _spans(sj: Mapping[str, Any], now: datetime) -> tuple[list[tuple[datetime, datetime]], list[datetime]]:
    """The intervals the SJ ran, and its interruptions."""
    st = _status(sj)
    stops = sorted([*st.interrupted_timestamps, *([st.finished_timestamp] if st.finished_timestamp else [])])
    spans = []
    for start in st.running_timestamps:
        end = next((s for s in stops if s >= start), now)
        spans.append((start, end))
    return spans, list(st.interrupted_timestamps)


def render_svg(sjs: Sequence[Mapping[str, Any]], now: datetime) -> str:
    """A timeline picture: one row per SJ, a green bar while it ran, a red mark at each interruption, a
    blue (Succeeded) or purple (Failed) mark at the finish; the x axis is wall-clock time."""
    rows = [(sj, *_spans(sj, now)) for sj in sjs]
    created = [t for sj, _, _ in rows if (t := _time((sj.get("metadata") or {}).get("creationTimestamp")))]
    start = min(created, default=now)
    end = max(now, start + timedelta(seconds=1))
    label_w, width, row_h, top = 260, 1000, 22, 40
    scale = (width - label_w - 20) / (end - start).total_seconds()

    def x(t: datetime) -> float:
        return label_w + (t - start).total_seconds() * scale

    height = top + row_h * len(rows) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="14">ScavengerJobs from {start:%Y-%m-%d %H:%M:%S} to {end:%H:%M:%S} '
           f'UTC ({format_duration(end - start)}): running, <tspan fill="{_COLORS["interrupted"]}">interrupted'
           f'</tspan>, <tspan fill="{_COLORS["Succeeded"]}">succeeded</tspan></text>']
    for i, (sj, spans, interruptions) in enumerate(rows):
        meta, st = sj.get("metadata") or {}, _status(sj)
        y = top + i * row_h
        out.append(f'<text x="10" y="{y + 15}">{escape(str(meta.get("namespace")))}/'
                   f'{escape(str(meta.get("name")))}</text>')
        out.append(f'<line x1="{label_w}" y1="{y + 11}" x2="{width - 20}" y2="{y + 11}" stroke="#eeeeee"/>')
        for a, b in spans:
            out.append(f'<rect x="{x(a):.1f}" y="{y + 4}" width="{max(x(b) - x(a), 1):.1f}" height="14" '
                       f'fill="{_COLORS["running"]}"><title>ran {a:%H:%M:%S} to {b:%H:%M:%S}</title></rect>')
        for t in interruptions:
            out.append(f'<rect x="{x(t) - 1.5:.1f}" y="{y + 1}" width="3" height="20" '
                       f'fill="{_COLORS["interrupted"]}"><title>interrupted {t:%H:%M:%S}</title></rect>')
        if st.finished_timestamp is not None and st.phase is not None:
            out.append(f'<circle cx="{x(st.finished_timestamp):.1f}" cy="{y + 11}" r="5" '
                       f'fill="{_COLORS.get(st.phase.value, "black")}"><title>{st.phase.value} '
                       f'{st.finished_timestamp:%H:%M:%S}</title></circle>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# --- I/O: the API and the terminal ----------------------------------------------------------------------

class _Cluster:
    def __init__(self) -> None:
        try:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        self.custom = client.CustomObjectsApi()
        self.core = client.CoreV1Api()

    def sjs(self, namespace: str | None) -> list[dict[str, Any]]:
        if namespace is None:
            result = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        else:
            result = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        items: list[dict[str, Any]] = result["items"]  # type: ignore[index]
        return sorted(items, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        sj: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)  # type: ignore[assignment]
        return sj

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        items = self.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name},involvedObject.kind={KIND}").items
        items.sort(key=lambda e: int(e.metadata.resource_version or 0))
        return [{"reason": e.reason, "message": e.message,
                 "lastTimestamp": e.last_timestamp.isoformat() if e.last_timestamp else None,
                 "eventTime": e.event_time.isoformat() if e.event_time else None} for e in items]

    def suspend(self, namespace: str, name: str, value: bool) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                                   {"spec": {"suspend": value}})


def _current_namespace() -> str:
    try:
        _, active = config.list_kube_config_contexts()  # type: ignore[no-untyped-call]
        return str(active.get("context", {}).get("namespace") or "default")
    except (config.ConfigException, OSError):
        return "default"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubectl sj", description="ScavengerJobs: what runs, what waits and why.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str, *, named: bool = False, many: bool = False,
                output: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        if named:
            p.add_argument("name")
        p.add_argument("-n", "--namespace", help="namespace (default: the context's)")
        if many:
            p.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
        if output:
            p.add_argument("-o", "--output", choices=["table", "json"], default="table")
        return p

    command("list", "every SJ: phase, why it waits, runs, interruptions, estimated lost work", many=True)
    command("describe", "one SJ and the timeline of its runs", named=True)
    command("why", "why the SJ waits (its Admitted condition), or that it was admitted", named=True)
    command("suspend", "stop the SJ's run and keep it from starting (spec.suspend=true)", named=True, output=False)
    command("resume", "let the SJ run again (spec.suspend=false)", named=True, output=False)
    pic = command("timeline", "draw runs and interruptions of many SJs over time as SVG", many=True, output=False)
    pic.add_argument("-o", "--output", required=True, metavar="FILE.svg", help="where to write the picture")
    return parser


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)


def run(argv: Sequence[str], now: datetime | None = None) -> int:
    args = _parser().parse_args(argv)
    now = now or datetime.now(UTC).replace(microsecond=0)
    cluster = _Cluster()
    namespace = None if getattr(args, "all_namespaces", False) else (args.namespace or _current_namespace())
    try:
        return _dispatch(args, cluster, namespace, now)
    except ApiException as exc:
        reason = json.loads(exc.body).get("message") if exc.body else exc.reason
        print(f"error: {reason}", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace, cluster: _Cluster, namespace: str | None, now: datetime) -> int:
    if args.command == "list":
        rows = list_rows(cluster.sjs(namespace), now, namespaces=namespace is None)
        print(_json(rows) if args.output == "json" else table(rows))
        return 0
    if args.command == "timeline":
        sjs = cluster.sjs(namespace)
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(render_svg(sjs, now))
        print(f"wrote {args.output}: {len(sjs)} ScavengerJob(s)", file=sys.stderr)
        return 0
    assert namespace is not None
    if args.command in ("suspend", "resume"):
        cluster.suspend(namespace, args.name, args.command == "suspend")
        print(f"scavengerjob.{GROUP}/{args.name} {'suspended' if args.command == 'suspend' else 'resumed'}")
        return 0
    sj = cluster.get(namespace, args.name)
    if args.command == "why":
        why, message = _why(_status(sj))
        if args.output == "json":
            print(_json({"admitted": why == "Admitted", "reason": why, "message": message}))
        else:
            print(f"{why}: {message}" if message else why)
        return 0
    entries = timeline(sj, cluster.events(namespace, args.name))
    if args.output == "json":
        print(_json({"metadata": sj.get("metadata", {}), "status": sj.get("status", {}),
                     "timeline": [{**asdict(e), "at": e.at.isoformat()} for e in entries]}))
    else:
        print("\n".join(describe_lines(sj, entries, now)))
    return 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
