"""What a process serves on HTTP: its health, and its Prometheus metrics read back as figures.

The requests are plain HTTP/1.0 over a socket, so reading the operator's ``/metrics`` needs no client library
and keeps no connection open between scrapes. The second half reads the operator's own metrics
(``sj_operator.metrics``): its API calls by operation, the lags of its event loop and its collector's pauses,
its start timeouts and the Events it dropped.
"""
from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping

WRITE_VERBS = ("create_", "patch_", "replace_", "delete_")
"""How the operator's API operations that write begin."""


def http_get(port: int, path: str, timeout: float) -> tuple[int, bytes]:
    """The status and body of ``GET path`` on localhost's ``port``."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        raw = b"".join(iter(lambda: sock.recv(65536), b""))
    head, _, body = raw.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split(b" ")
    if len(status) < 2 or not status[1].isdigit():  # an OSError, as when nothing listens yet
        raise ConnectionError(f"no HTTP response on port {port}: {raw[:80]!r}")
    return int(status[1]), body


def scrape(port: int) -> dict[str, float]:
    """The metrics served on ``port``, ``name{labels}`` -> value."""
    out: dict[str, float] = {}
    for line in http_get(port, "/metrics", timeout=10)[1].decode().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def by_label(metrics: Mapping[str, float], prefix: str) -> dict[str, float]:
    """The series whose key starts with ``prefix`` (a metric's name and its first label up to the value's
    quote, ``name{label="``), by that label's value."""
    return {k[len(prefix):-2]: v for k, v in metrics.items() if k.startswith(prefix)}


def calls_by_operation(metrics: Mapping[str, float]) -> dict[str, float]:
    """The operator's API calls so far, by operation (``create_namespaced_job``)."""
    return by_label(metrics, 'scavenger_api_requests_total{operation="')


def writes(calls: Mapping[str, float]) -> dict[str, float]:
    """Of ``calls`` by operation, those that write."""
    return {op: n for op, n in calls.items() if op.startswith(WRITE_VERBS)}


APISERVER_WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})
"""The API server's request verbs (``apiserver_request_total``) that write."""


def series(text: str, name: str) -> Iterator[tuple[dict[str, str], float]]:
    """Each series of metric ``name`` in a Prometheus text exposition: its labels (values unquoted) and its value."""
    prefix = f"{name}{{"
    for line in text.splitlines():
        if line.startswith(prefix):
            labels, _, value = line[len(prefix):].rpartition("} ")
            parsed = dict(part.split("=", 1) for part in labels.split('",') if "=" in part)
            yield {k: v.strip('"') for k, v in parsed.items()}, float(value)


def apiserver_writes(text: str, *, refused: bool = False) -> dict[str, float]:
    """The writes an API server has served so far, from its metrics' text (``apiserver_request_total``), by
    resource and verb (``pods/status PATCH``, ``jobs POST``), whoever made them: the operator, the controllers, the
    scheduler, kwok. Requests refused count too (each cost the server a request). ``refused``: only those the
    server answered with an error, by resource, verb and code (``pods/status PATCH 409``): they wrote nothing
    and woke no watch, so what was written is the difference."""
    out: dict[str, float] = {}
    for label, value in series(text, "apiserver_request_total"):
        if label.get("verb") not in APISERVER_WRITE_VERBS:
            continue
        code = label.get("code", "")
        if refused and code.startswith("2"):
            continue
        resource = label.get("resource", "") + (f"/{label['subresource']}" if label.get("subresource") else "")
        key = f"{resource} {label['verb']}" + (f" {code}" if refused else "")
        out[key] = out.get(key, 0.0) + value
    return out


def watches_closed(text: str) -> dict[str, float]:
    """The watches an API server has closed so far because their client fell behind, from its metrics' text
    (``apiserver_terminated_watchers_total``), by resource (``pods``). A client whose watch is closed watches again
    from where it was, or lists everything again when that is no longer in the server's window: kwok then replays
    its pods' stages, work of the simulated nodes a run is charged with."""
    out: dict[str, float] = {}
    for label, value in series(text, "apiserver_terminated_watchers_total"):
        group, resource = label.get("group", ""), label.get("resource", "")
        key = f"{resource}.{group}" if group else resource
        out[key] = out.get(key, 0.0) + value
    return out


def loop_lag(metrics: Mapping[str, float]) -> dict[str, float]:
    """From ``scavenger_event_loop_lag_seconds``: the bucket bound the longest lag fell under (how long a
    stretch of work held the operator's loop at most; inf past the last bound), and how often it was over
    a second, over the whole run; the same of the garbage collector's full collections
    (``scavenger_gc_pause_seconds{generation="2"}``), and the seconds all its collections took, in all and by
    generation (with how many there were and the objects they freed)."""
    figures: dict[str, float] = {}
    for name, prefix in (("loop_lag", 'scavenger_event_loop_lag_seconds_bucket{le="'),
                         ("gc_full", 'scavenger_gc_pause_seconds_bucket{generation="2",le="')):
        buckets = sorted((float(le), v) for le, v in by_label(metrics, prefix).items())
        if buckets:
            total = buckets[-1][1]
            figures[f"{name}_worst_le"] = next(le for le, count in buckets if count >= total)
            figures[f"{name}_over_1s"] = total - dict(buckets).get(1.0, total)
    figures["gc_seconds"] = sum(v for k, v in metrics.items() if k.startswith("scavenger_gc_pause_seconds_sum"))
    for generation in range(3):
        label = f'{{generation="{generation}"}}'
        figures[f"gc_seconds_gen{generation}"] = metrics.get(f"scavenger_gc_pause_seconds_sum{label}", 0.0)
        figures[f"gc_count_gen{generation}"] = metrics.get(f"scavenger_gc_pause_seconds_count{label}", 0.0)
        figures[f"gc_collected_gen{generation}"] = metrics.get(f"scavenger_gc_collected_objects_total{label}", 0.0)
    return figures


COUNTS = {"operator_start_timeouts": "scavenger_start_timeouts_total",
          "operator_events_dropped": "scavenger_events_dropped_total",
          "operator_events_replaced": "scavenger_events_replaced_total",
          "operator_launch_paced": "scavenger_launch_paced_seconds_total"}
"""The operator's counters read as figures of a run, by figure."""


def counts(metrics: Mapping[str, float]) -> dict[str, float]:
    """From the operator's counters (`COUNTS`): the runs it deleted for a start timeout (its clock starts once
    the scheduler decided about every pod, so a scheduler that is behind never adds one), the Events it dropped
    because its backlog was at its cap, and the steering Events it replaced by the SJ's next toggle while they
    waited (not dropped: the next one says how many it stands for). A counter the operator does not export (an
    older operator) is left out, not taken as 0."""
    return {figure: metrics[name] for figure, name in COUNTS.items() if name in metrics}


def toggle_lateness(before: Mapping[str, float], after: Mapping[str, float],
                    within: Mapping[str, float]) -> dict[str, float]:
    """From ``scavenger_protection_toggle_lateness_seconds``, between two scrapes: for each toggle (``protect``,
    ``unprotect``), how many routine toggles the operator wrote, the bucket bound the slowest fell under (inf past
    the last), and the share written within ``within[toggle]`` seconds (counted at the largest bucket bound not
    above it: a share that can only be lower than the truth)."""
    figures: dict[str, float] = {}
    for toggle, bound in within.items():
        prefix = "scavenger_protection_toggle_lateness_seconds_bucket{le=\""
        suffix = f'",toggle="{toggle}"}}'
        buckets = sorted((float(key[len(prefix):-len(suffix)]), after[key] - before.get(key, 0.0))
                         for key in after if key.startswith(prefix) and key.endswith(suffix))
        if not buckets or not (total := buckets[-1][1]):
            continue
        figures[f"toggles_{toggle}"] = total
        figures[f"toggles_{toggle}_worst_le"] = next(le for le, count in buckets if count >= total)
        figures[f"toggles_{toggle}_in_time_share"] = max((count for le, count in buckets if le <= bound),
                                                        default=0.0) / total
    return figures
