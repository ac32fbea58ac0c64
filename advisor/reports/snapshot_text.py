"""A snapshot as a readable terminal table.

Everything the target said (its URL, version, model names, config labels, replica labels, notes and
missing reasons) reaches Rich markup only through `_e` (advisor.escape.markup)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from advisor.escape import markup as _e
from advisor.units import fmt
from probes import Snapshot
from probes.snapshot import INTERPOLATED

# The signals a person reads first, in this order; the rest follow as the catalog lists them.
GROUPS = [
    ("Latency", ["ttft_p50", "ttft_p95", "ttft_p99", "tpot_p50", "tpot_p95", "itl_p95", "e2e_p95", "e2e_p99",
                 "queue_time_p95", "prefill_time_p95", "decode_time_p95"]),
    ("Load", ["request_rate", "prompt_tokens_per_s", "generation_tokens_per_s", "requests_running_avg",
              "requests_running_max", "requests_waiting_avg", "requests_waiting_max", "prompt_len_mean",
              "output_len_mean"]),
    ("Cache & scheduler", ["kv_cache_usage_avg", "kv_cache_usage_max", "prefix_cache_hit_rate",
                           "preemptions_per_s", "admission_rejections_per_s", "spec_acceptance_rate"]),
    ("Outcomes", ["error_rate", "abort_rate"]),
    ("GPU", ["gpu_util_avg", "gpu_memory_used_frac", "gpu_sm_active_avg", "gpu_tensor_active_avg",
             "gpu_dram_active_avg", "gpu_power_avg"]),
]


def render(snap: Snapshot, console: Console, show_all: bool = False) -> None:
    e = snap.engine
    head = (f"[bold]{_e(snap.target)}[/] via {_e(snap.via)}, window {snap.window_s:.0f}s, "
            f"at {snap.taken_at:%Y-%m-%d %H:%M:%S %Z}")
    console.print(head, highlight=False)
    console.print(_e(f"engine: {e.kind or '?'} {e.version or ''}  models: {', '.join(e.models) or '?'}"
                     + (f"  (filtered to {snap.model})" if snap.model else "")), highlight=False)
    if e.config:
        keys = ["enable_prefix_caching", "block_size", "cache_dtype", "num_gpu_blocks", "gpu_memory_utilization"]
        shown = ", ".join(f"{k}={e.config[k]}" for k in keys if k in e.config)
        console.print(f"config: {_e(shown)}  [dim](from {_e(e.config_source)})[/]", highlight=False)
    listed = {n for _, names in GROUPS for n in names}
    groups = GROUPS + ([("Other", [n for n in snap.signals if n not in listed])] if show_all else [])
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("signal")
    table.add_column("value", justify="right")
    table.add_column("note / missing because", overflow="fold")
    for title, names in groups:
        table.add_row(f"[bold]{title}[/]", "", "")
        for n in names:
            s = snap.signals.get(n)
            if s is None or (not show_all and s.value is None and n.startswith("gpu_") and n != "gpu_util_avg"):
                continue
            note = "" if s.note == INTERPOLATED else (s.note or "")
            table.add_row(f"  {_e(n)}", _e(fmt(s.value, s.unit)),
                          f"[dim]{_e(note)}[/]" if s.present else f"[yellow]{_e(s.missing)}[/]")
    console.print(table)
    if len(snap.replicas) > 1:
        rt = Table(title=f"{len(snap.replicas)} replicas", show_edge=False)
        for c in ("replica", "req/s", "ttft p95", "tpot p95", "waiting", "kv max"):
            rt.add_column(c, justify="right" if c != "replica" else "left")
        for r in snap.replicas[:20]:
            g = r.signals.get
            rt.add_row(_e(r.key), *(fmt(g(n).value, g(n).unit) if g(n) else "-" for n in
                                ("request_rate", "ttft_p95", "tpot_p95", "requests_waiting_avg", "kv_cache_usage_max")))
        console.print(rt)
    if snap.gpu and not snap.gpu.available:
        console.print(f"[dim]GPU: {_e(snap.gpu.reason)}[/]", highlight=False)
    for p in snap.problems + e.problems:
        console.print(f"[yellow]note:[/] {_e(p)}", highlight=False)
    if any(s.note == INTERPOLATED for s in snap.signals.values()):
        console.print("[dim]Quantiles are interpolated from the engine's histogram buckets.[/]")
    console.print(f"[dim]{snap.queries} queries to the data source[/]")
