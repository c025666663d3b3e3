"""The HTML of the "Table writes" view: one server-rendered page over the same data as the JSON
endpoints (no build step, works inside the Airflow UI's iframe). The template lives here rather
than in a data file so it ships with the package as code does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, select_autoescape

from .rows import ATTEMPTS_FIRST

_env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))


def _when(iso: str | None) -> str:
    if not iso:
        return ""
    return datetime.fromisoformat(iso).strftime("%m-%d %H:%M:%S")


def _partitions(parts: Any) -> str:
    if parts is None:
        return "whole table"
    if isinstance(parts, Sequence) and not isinstance(parts, str):
        return ", ".join(
            "/".join(f"{k}={v}" for k, v in p.items()) if isinstance(p, Mapping) else str(p) for p in parts
        )
    return str(parts)


def ti_url(row: Mapping[str, Any]) -> str | None:
    """The task instance's page in the Airflow UI."""
    if not row.get("dag_id") or not row.get("run_id") or not row.get("task_id"):
        return None
    url = f"/dags/{quote(row['dag_id'], safe='')}/runs/{quote(row['run_id'], safe='')}/tasks/{quote(row['task_id'], safe='')}"
    if row.get("map_index", -1) not in (-1, None):
        url += f"/mapped/{row['map_index']}"
    return url


def _bars(entries: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, float]]:
    """Where each write's run (start to end) sits on a common time axis, in percent."""
    spans = {}
    for i, e in enumerate(entries):
        start = e.get("started_at") or e.get("granted_at")
        end = e.get("ended_at") or start
        if start and end:
            spans[i] = (datetime.fromisoformat(start).timestamp(), datetime.fromisoformat(end).timestamp())
    if not spans:
        return {}
    low = min(s for s, _ in spans.values())
    high = max(e for _, e in spans.values())
    width = max(high - low, 1e-9)
    return {
        i: {"left": 100 * (s - low) / width, "width": max(100 * (e - s) / width, 0.8)}
        for i, (s, e) in spans.items()
    }


_env.filters["when"] = _when
_env.filters["partitions"] = _partitions
_env.globals["ti_url"] = ti_url

_TEMPLATE = _env.from_string(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Table writes - occflow</title>
<style>
 body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#1f2933;background:#fff}
 h1{font-size:20px;margin:0 0 8px} h2{font-size:16px;margin:20px 0 6px} h3{font-size:14px;margin:10px 0 4px}
 form{display:flex;gap:8px;align-items:center;margin-bottom:8px}
 input{padding:3px 6px;border:1px solid #9aa5b1;border-radius:3px}
 table{border-collapse:collapse;width:100%;margin-bottom:6px}
 th,td{border-bottom:1px solid #e4e7eb;padding:3px 6px;text-align:left;vertical-align:top}
 th{background:#f5f7fa;font-weight:600}
 .card{border:1px solid #cbd2d9;border-radius:6px;padding:6px 10px;margin-bottom:10px}
 .muted{color:#7b8794} .num{text-align:right;font-variant-numeric:tabular-nums}
 .kind{font-family:monospace;background:#fde2e2;color:#8a1c1c;padding:0 4px;border-radius:3px}
 .ok{color:#1d7a3a} .bad{color:#b42318} .wait{color:#b7791f}
 tr.attempt td{background:#fffaf0;font-size:13px} tr.focus td{background:#e6f0ff}
 .bar{position:relative;height:10px;background:#f0f4f8;min-width:120px}
 .bar span{position:absolute;top:0;height:10px;background:#3e7bfa;border-radius:2px}
 .bar span.lost{background:#e55353} .totals span{margin-right:16px}
 button{font-size:12px} td.nowrap{white-space:nowrap}
</style></head>
<body>
<h1>Table writes</h1>
<form method="get" action="{{ base }}/">
 <label>DAG <input name="dag_id" value="{{ filters.dag_id or '' }}" list="dags" placeholder="all"></label>
 <label>Table <input name="table" value="{{ filters.table or '' }}" list="tables" placeholder="all"></label>
 {% if filters.run_id %}<input type="hidden" name="run_id" value="{{ filters.run_id }}"><span class="muted">run {{ filters.run_id }}</span>{% endif %}
 <button type="submit">Filter</button> <a href="{{ base }}/">clear</a>
 <datalist id="dags">{% for d in dag_ids %}<option value="{{ d }}">{% endfor %}</datalist>
 <datalist id="tables">{% for t in table_names %}<option value="{{ t }}">{% endfor %}</datalist>
</form>
{% if store_error %}<p class="bad" data-testid="store-error">Lease store not readable: {{ store_error }}</p>{% endif %}

<h2>Live leases and waiting queue</h2>
{% if not tables %}<p class="muted" data-testid="no-leases">No live lease and no waiting write{% if filters.table %} on {{ filters.table }}{% endif %}.</p>{% endif %}
{% for t in tables %}
<div class="card" data-testid="table-card" data-table="{{ t.table }}">
 <h3>{{ t.table }}</h3>
 <table data-testid="leases"><tr><th>holder</th><th>operation</th><th>partitions</th><th>fence</th><th>since</th><th>expires</th>{% if can_release %}<th></th>{% endif %}</tr>
 {% for l in t.leases %}<tr data-testid="lease-row" data-lease="{{ l.lease_id }}">
  <td>{% set u = ti_url(l.holder) %}{% if u %}<a href="{{ u }}" target="_top">{{ l.holder.dag_id }}.{{ l.holder.task_id }}{% if l.holder.map_index >= 0 %}[{{ l.holder.map_index }}]{% endif %}</a> <span class="muted">try {{ l.holder.try_number }}</span>{% else %}<span class="muted">outside Airflow: {{ l.holder.host }} pid {{ l.holder.pid }}</span>{% endif %}</td>
  <td>{{ l.operation }}</td><td>{{ l.partitions | partitions }}</td><td class="num">{{ l.fence }}</td>
  <td>{{ l.acquired | when }}</td><td>{{ l.expires | when }}</td>
  {% if can_release %}<td><button data-release="{{ l.lease_id }}">release</button></td>{% endif %}
 </tr>{% else %}<tr><td colspan="7" class="muted">no live lease</td></tr>{% endfor %}
 </table>
 <table data-testid="waiting"><tr><th>#</th><th>waiting</th><th>operation</th><th>partitions</th><th>since</th></tr>
 {% for w in t.waiting %}<tr data-testid="waiting-row">
  <td class="num">{{ w.place }}</td>
  <td>{% set u = ti_url(w.holder) %}{% if u %}<a href="{{ u }}" target="_top">{{ w.holder.dag_id }}.{{ w.holder.task_id }}{% if w.holder.map_index >= 0 %}[{{ w.holder.map_index }}]{% endif %}</a>{% else %}<span class="muted">{{ w.holder.host }} pid {{ w.holder.pid }}</span>{% endif %}</td>
  <td class="wait">{{ w.operation }}</td><td>{{ w.partitions | partitions }}</td><td>{{ w.enqueued | when }}</td>
 </tr>{% else %}<tr><td colspan="5" class="muted">nothing waiting</td></tr>{% endfor %}
 </table>
</div>
{% endfor %}

<h2>Timeline</h2>
<p class="totals" data-testid="totals"><span>{{ totals.writes }} writes</span><span>{{ totals.committed }} committed</span><span data-testid="total-failed">{{ totals.failed }} failed</span><span data-testid="total-skipped">{{ totals.skipped }} skipped</span>{% if totals.refused %}<span data-testid="total-refused" title="tries that ended before their first attempt">{{ totals.refused }} refused before a first attempt</span>{% endif %}{% if totals.malformed %}<span class="bad">{{ totals.malformed }} malformed reports</span>{% endif %}<span>{{ totals.attempts }} attempts</span><span>{{ totals.conflicts }} conflicts</span>{% if totals.failures %}<span data-testid="total-failures" title="attempts that failed without a write conflict">{{ totals.failures }} failures (not conflicts)</span>{% endif %}<span>{{ '%.1f' % totals.wasted_seconds }} s wasted</span>{% if totals.grant_to_start_seconds is not none %}<span data-testid="total-grant-to-start" title="seconds leases were held before their write's first attempt started">{{ '%.1f' % totals.grant_to_start_seconds }} s granted before start</span>{% endif %}</p>
{% if not history %}<p class="muted" data-testid="no-history">No lease history recorded: set <code>OCCFLOW_LEASE_HISTORY=1</code> for the workers to see when each write waited for and held its lease.</p>{% endif %}
{% if history_error %}<p class="bad">Lease history not readable: {{ history_error }}</p>{% endif %}
<table data-testid="timeline">
<tr><th>when</th><th>run</th><th>task / lease</th><th>table</th><th>operation</th><th>partitions</th><th>state</th><th class="num">attempts</th><th class="num">wasted s</th><th>lease</th><th>commit</th><th>time</th></tr>
{% for e in entries %}
{% if e.kind == 'write' %}
<tr data-testid="write-row" data-task="{{ e.task_id }}" data-try="{{ e.try_number }}" data-map-index="{{ e.map_index }}" data-table="{{ e.table or '' }}" data-status="{{ e.status or '' }}"{% if focus and e.task_id == focus.task_id and e.run_id == focus.run_id and e.map_index == focus.map_index %} class="focus" id="focus"{% endif %}>
 <td class="nowrap" title="{{ e.at }}">{{ e.at | when }}</td><td class="muted">{{ e.dag_id }}<br>{{ e.run_id }}</td>
 <td>{% set u = ti_url(e) %}<a href="{{ u }}" target="_top">{{ e.task_id }}{% if e.map_index >= 0 %}[{{ e.map_index }}]{% endif %}</a>{% if e.try_number %} <span class="muted">try {{ e.try_number }}</span>{% endif %}</td>
 <td>{{ e.table or '' }}</td><td>{{ e.operation or '' }}</td><td>{{ e.partitions | partitions if e.report else '' }}</td>
 <td class="{{ 'ok' if e.committed else ('bad' if e.status == 'failed' or e.state in ('failed', 'upstream_failed') else 'wait') }}" data-testid="state">{{ 'committed' if e.committed else (e.status or e.state) }}{% if e.refused %} <span data-testid="refused">before its first attempt</span>{% endif %}{% if e.reason %}<br><span class="muted" data-testid="reason" title="{{ e.reason }}">{{ e.reason[:240] }}</span>{% endif %}{% if e.malformed %} <span class="bad" data-testid="malformed">malformed report: {{ e.malformed[:120] }}</span>{% endif %}</td>
 <td class="num">{{ e.attempts if e.attempts is not none else '' }}</td>
 <td class="num">{{ '%.1f' % e.wasted_seconds if e.wasted_seconds is not none else '' }}</td>
 <td data-testid="lease">{% if e.lease %}fence {{ e.lease.fence }}, waited {{ '%.1f' % e.lease.waited_seconds }} s{% if e.lease.held_seconds is not none %}, held {{ '%.1f' % e.lease.held_seconds }} s{% endif %}{% elif e.fence %}fence {{ e.fence }}{% else %}<span class="muted">no lease</span>{% endif %}{% if e.grant_to_start_seconds is not none %}<br><span data-testid="grant-to-start" data-seconds="{{ e.grant_to_start_seconds }}" title="from the lease's grant to the start of the first attempt">granted {{ '%.1f' % e.grant_to_start_seconds }} s before start</span>{% endif %}</td>
 <td>{% if e.version is not none %}v{{ e.version }}{% elif e.snapshot_id %}snapshot {{ e.snapshot_id }}{% endif %}</td>
 <td><div class="bar">{% if loop.index0 in bars %}<span class="{{ 'lost' if e.conflict_count else '' }}" style="left:{{ '%.2f' % bars[loop.index0].left }}%;width:{{ '%.2f' % bars[loop.index0].width }}%"></span>{% endif %}</div></td>
</tr>
{% for c in e.conflicts %}{% if e.conflicts_left_out and loop.index0 == attempts_first %}<tr class="attempt" data-testid="attempts-left-out" data-task="{{ e.task_id }}" data-count="{{ e.conflicts_left_out }}">
 <td></td><td></td><td colspan="10" class="muted">&hellip; and {{ e.conflicts_left_out }} more attempts (not shown)</td>
</tr>{% endif %}<tr class="attempt" data-testid="attempt-row" data-task="{{ e.task_id }}" data-kind="{{ c.kind }}" data-outcome="{{ c.outcome }}">
 <td></td><td></td><td colspan="2">attempt {{ c.attempt }} {{ c.outcome }}: <span class="kind">{{ c.kind }}</span></td>
 <td colspan="3">{% if c.outcome != 'lost' %}<span class="muted">{{ (c.error or c.reason or '')[:200] }}</span>{% elif c.winner %}winner: <b data-testid="winner">{{ c.winner }}</b>{% if c.winner_task %} <a data-testid="winner-task" href="{{ ti_url({'dag_id': c.winner_dag or e.dag_id, 'run_id': c.winner_run or e.run_id, 'task_id': c.winner_task, 'map_index': -1}) }}" target="_top">{{ c.winner_task }}</a>{% endif %}{% else %}<span class="muted">winner not known</span>{% endif %}</td>
 <td class="num">&rarr; {{ c.action or '?' }}</td><td></td>
 <td colspan="3" class="muted">{% if c.seconds is not none %}engine call {{ '%.1f' % c.seconds }} s. {% endif %}{{ (c.reason or '')[:140] }}</td>
</tr>{% endfor %}
{% else %}
<tr data-testid="lease-span-row" data-table="{{ e.table }}" data-dag="{{ e.dag_id or '' }}" data-task="{{ e.task_id or '' }}">
 <td class="nowrap" title="{{ e.at }}">{{ e.at | when }}</td><td class="muted">lease{% if e.dag_id %}<br>{{ e.dag_id }}{% endif %}</td>
 <td class="muted">{% set u = ti_url(e) %}{% if u %}<a href="{{ u }}" target="_top">{{ e.task_id }}{% if e.map_index >= 0 %}[{{ e.map_index }}]{% endif %}</a>{% else %}{{ e.lease_id[:8] }}{% endif %}</td><td>{{ e.table }}</td><td>{{ e.operation }}</td><td>{{ e.partitions | partitions }}</td>
 <td>{{ e.ended_by or 'live' }}</td><td></td><td></td>
 <td>fence {{ e.fence }}, waited {{ '%.1f' % e.waited_seconds }} s{% if e.held_seconds is not none %}, held {{ '%.1f' % e.held_seconds }} s{% endif %}</td><td></td>
 <td><div class="bar">{% if loop.index0 in bars %}<span style="left:{{ '%.2f' % bars[loop.index0].left }}%;width:{{ '%.2f' % bars[loop.index0].width }}%;background:#9aa5b1"></span>{% endif %}</div></td>
</tr>
{% endif %}
{% else %}<tr><td colspan="12" class="muted" data-testid="no-writes">No write yet{% if filters.dag_id or filters.table %} for this filter{% endif %}.</td></tr>
{% endfor %}
</table>
{% if focus %}<script>var f = document.getElementById("focus"); if (f) { f.scrollIntoView({block: "center"}); }</script>{% endif %}
<p class="muted">Read from the lease store ({{ store_url }}) and the write reports in XCom. Refreshed {{ now }}.</p>
{% if can_release %}
<script>
document.querySelectorAll("button[data-release]").forEach(function (b) {
  b.addEventListener("click", function () {
    if (!confirm("Release this lease? Its writer will not commit and goes back through admission.")) return;
    fetch("{{ base }}/api/leases/" + encodeURIComponent(b.dataset.release) + "/release",
          {method: "POST", credentials: "same-origin", headers: {"X-Occflow-Action": "release"}})
      .then(function (r) { if (!r.ok) { alert("release refused: " + r.status); } location.reload(); });
  });
});
</script>
{% endif %}
</body></html>
"""
)


def render(context: Mapping[str, Any]) -> str:
    entries = context["entries"]
    return _TEMPLATE.render(**context, bars=_bars(entries), attempts_first=ATTEMPTS_FIRST)
