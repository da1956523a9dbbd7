"""`create_hdf5_dataset report OUT [--output PATH]`: see the output, as one self-contained HTML page.

The key numbers of data_params.json and of a recount of the files, and plots
of the rows (real tokens, padding, documents, loss-valid tokens per sequence;
sources; files), PNGs embedded as data URIs. Needs matplotlib
(`pip install matplotlib`), imported only when a report is drawn.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import html
import io
import sys
from typing import Optional

import numpy as np

from pipelines.tools.common import basename, doc_word, load_params, require_dir
from transforms.core import verify as V
from transforms.core.modes import TURNS
from transforms.io import fs
from transforms.io.dataset import iter_row_blocks, list_h5_files, open_h5

__all__ = ["ReportData", "collect_report_data", "build_report", "write_report", "add_parser", "run"]


@dataclasses.dataclass
class ReportData:
    params: Optional[dict]
    spec: V.DatasetSpec
    file_rows: dict  # name -> rows
    real: np.ndarray  # [n, sides]: real tokens of each row's sequences (DPO: chosen, rejected; else one)
    trained: np.ndarray  # [n, sides]
    docs: np.ndarray  # per row: documents (VSL), trained spans (Chat), prompt tokens (DPO), else EOS tokens
    msl: int

    @property
    def sides(self) -> tuple:
        return self.spec.sides


def collect_report_data(out_dir: str) -> ReportData:
    params, _ = load_params(out_dir)
    spec, _ = V.dataset_spec(params)
    k = len(spec.sides)
    file_rows: dict[str, int] = {}
    real, trained, docs = [], [], []
    msl = spec.max_seq_length or 0
    for path in list_h5_files(out_dir):
        with open_h5(path) as f:
            d = f["data"]
            file_rows[basename(path)] = int(d.shape[0])
            msl = int(d.shape[2])
            for _, block in iter_row_blocks(d):
                block = np.asarray(block, dtype=np.int64)
                seqs = V.sequences(block, spec)  # DPO: row i's sides at k*i .. k*i + k-1
                real.append(V.real_lengths(seqs, spec).reshape(-1, k))
                loss = V.loss_positions(seqs, spec)
                trained.append(loss.sum(axis=1).reshape(-1, k))
                if k > 1:
                    docs.append(np.where(loss[::k].any(axis=1), np.argmax(loss[::k], axis=1) + 1, 0))
                elif spec.loss == TURNS:
                    docs.append(V.trained_runs(block, spec))
                else:
                    docs.append(V.documents_per_row(block, spec))
    cat = lambda xs, *shape: np.concatenate(xs) if xs else np.zeros((0, *shape), dtype=np.int64)  # noqa: E731
    return ReportData(params, spec, file_rows, cat(real, k), cat(trained, k), cat(docs), msl)


_SIDE_COLORS = ("#3b6ea5", "#c0504d")


def _figures(data: ReportData) -> list[tuple[str, str, str]]:
    """(title, caption, base64 PNG) of every plot. DPO: each per-sequence plot shows both sides, side by side."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    def png(fig) -> str:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        return base64.b64encode(buf.getvalue()).decode("ascii")

    def hist(values: np.ndarray, xlabel: str, bins, color="#3b6ea5") -> tuple[str, str]:
        """(PNG, caption suffix): a log y axis when one bin dwarfs the rest (packed rows are mostly full).
        `values` [n] or, one column per side, [n, sides]."""
        fig = Figure(figsize=(7, 3.2))
        ax = fig.subplots()
        suffix = ""
        columns = values.ndim == 2 and values.shape[1] > 1
        if len(values):
            if columns:
                counts, _, _ = ax.hist([values[:, i] for i in range(values.shape[1])], bins=bins,
                                       color=list(_SIDE_COLORS[:values.shape[1]]), label=list(data.sides),
                                       edgecolor="white", linewidth=0.3)
                counts = np.asarray(counts).ravel()
                ax.legend(fontsize=8)
            else:
                counts, _, _ = ax.hist(values.ravel(), bins=bins, color=color, edgecolor="white", linewidth=0.3)
            nonzero = np.sort(counts[counts > 0])
            if len(nonzero) > 1 and nonzero[-1] > 0.9 * len(values):
                ax.set_yscale("log")
                suffix = " Log scale: one value dominates."
        else:
            ax.text(0.5, 0.5, "no rows", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("sequences")
        ax.grid(axis="y", alpha=0.3)
        return png(fig), suffix

    def int_bins(values: np.ndarray):
        """Unit-wide bins centred on integers (wider past 64 values), the last holding the maximum."""
        hi = int(values.max()) if values.size else 1
        step = max(1, -(-(hi + 1) // 64))
        return np.arange(-0.5, hi + step + 0.5, step)

    def stats1(values: np.ndarray, fmt) -> str:
        if not len(values):
            return "no rows"
        return (f"mean {fmt.format(values.mean())}, median {fmt.format(np.median(values))}, "
                f"min {fmt.format(values.min())}, max {fmt.format(values.max())}")

    def stats(values: np.ndarray, fmt="{:.0f}") -> str:
        """Of one series, or per side ("chosen: mean …; rejected: mean …")."""
        if values.ndim == 2 and values.shape[1] > 1:
            return "; ".join(f"{name}: {stats1(values[:, i], fmt)}" for i, name in enumerate(data.sides))
        return stats1(values.ravel(), fmt)

    def plot(title: str, caption: str, made: tuple[str, str]) -> tuple[str, str, str]:
        return title, caption + made[1], made[0]

    msl = max(data.msl, 1)
    dpo = len(data.sides) > 1
    per = "per side" if dpo else "per sequence"
    both = f"Both sides of every row ({' and '.join(data.sides)}). " if dpo else ""
    pad_frac = 1.0 - data.real / msl
    if dpo:
        third = plot("Prompt tokens per example", "The prompt both sides start with (|P|: the first trained position "
                     f"+ 1). {stats(data.docs)}.", hist(data.docs, "prompt tokens", int_bins(data.docs), "#4f9a5a"))
    elif data.spec.loss == TURNS:
        third = plot("Trained spans per sequence", "Runs of trained positions in each row: the assistant turns it "
                     f"trains. {stats(data.docs, '{:.2f}')}.",
                     hist(data.docs, "trained spans", int_bins(data.docs), "#4f9a5a"))
    else:
        word = doc_word(data.spec)
        third = plot(f"{word.capitalize()}s per sequence", (
            f"{word.capitalize()}s packed into each row (a {word} starts at each position_ids 0 of the real part). "
            if data.spec.vsl else
            "EOS tokens among each row's real inputs (a document continuing into the next row counts where it ends). ")
            + f"{stats(data.docs, '{:.2f}')}.",
            hist(data.docs, f"{word}s" if data.spec.vsl else "EOS tokens", int_bins(data.docs), "#4f9a5a"))
    out = [
        plot(f"Real (non-pad) tokens {per}", f"{both}Out of {data.msl}. {stats(data.real)}.",
             hist(data.real, "real tokens", int_bins(data.real))),
        plot(f"Padding fraction {per}", f"{both}{stats(pad_frac, '{:.3f}')}.",
             hist(pad_frac, "pad tokens / max_seq_length", np.linspace(0, 1, 41), "#a5673b")),
        third,
        plot(f"Loss-valid tokens {per}", f"{both}Positions whose label is trained"
             + (" (the response's tokens)" if dpo else "") + f". {stats(data.trained)}.",
             hist(data.trained, "loss-valid tokens", int_bins(data.trained), "#7a4fa0")),
    ]
    out.append(_sources_figure(data, Figure, png))
    names = list(data.file_rows)
    fig = Figure(figsize=(7, max(2.5, min(12, 0.22 * len(names) + 1))))
    ax = fig.subplots()
    if names:
        ax.barh(range(len(names)), list(data.file_rows.values()), color="#3b6ea5")
        ax.set_yticks(range(len(names)), names, fontsize=7 if len(names) > 20 else 9)
        ax.invert_yaxis()
    ax.set_xlabel("sequences")
    ax.grid(axis="x", alpha=0.3)
    out.append(("Sequences per output file", f"{len(names)} files, {sum(data.file_rows.values())} sequences.",
                png(fig)))
    return out


def _sources_figure(data: ReportData, Figure, png) -> tuple[str, str, str]:
    per = ((data.params or {}).get("input") or {}).get("per_source") or {}
    fig = Figure(figsize=(7, 3.2))
    ax = fig.subplots()
    tokens_key = next((k for k in ("tokens", "num_tokens", "tokens_written") if any(k in b for b in per.values())),
                      None)
    if not per:
        ax.text(0.5, 0.5, "no per-source data in data_params.json", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
        return ("Tokens per source file", "data_params.json has no input.per_source section (reference "
                "outputs have none), so there is nothing to plot.", png(fig))
    items = sorted(per.items(), key=lambda kv: -kv[1].get(tokens_key or "documents_read", 0))
    shown = items[:40]
    fig.set_size_inches(7, max(2.5, 0.25 * len(shown) + 1))
    labels = [s if len(s) <= 40 else "…" + s[-39:] for s, _ in shown]
    y = np.arange(len(shown))
    if tokens_key:
        ax.barh(y, [b.get(tokens_key, 0) for _, b in shown], color="#3b6ea5")
        ax.set_xlabel("tokens")
        title, caption = "Tokens per source file", "Tokens written per input file."
    else:
        used = [b.get("used", 0) for _, b in shown]
        dropped = [b.get("dropped", 0) for _, b in shown]
        bad = [b.get("bad", 0) for _, b in shown]
        ax.barh(y, used, color="#4f9a5a", label="used")
        ax.barh(y, dropped, left=used, color="#d9a441", label="dropped")
        ax.barh(y, bad, left=np.add(used, dropped), color="#c0504d", label="bad")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_xlabel("documents")
        title = "Documents per source file"
        caption = ("data_params.json records documents, not tokens, per source file (input.per_source), "
                   "so this shows documents used / dropped / bad.")
    ax.set_yticks(y, labels, fontsize=7 if len(shown) > 20 else 9)
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    if len(items) > len(shown):
        caption += f" The {len(shown)} largest of {len(items)} sources are shown."
    return title, caption, png(fig)


def _table(rows: list[tuple[str, object]]) -> str:
    body = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _fmt(v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_fmt(x)}" for k, x in v.items()) or "—"
    return str(v)


# The chat and DPO settings data_params.json records under `dataset`.
_CHAT_KEYS = ("messages_key", "role_key", "content_key", "train_on_all_assistant_turns", "truncate", "prompt_key",
              "chosen_key", "rejected_key", "max_prompt_length")


def _key_numbers(data: ReportData) -> list[tuple[str, list]]:
    p = data.params or {}
    setup, proc, ds = p.get("setup") or {}, p.get("processing") or {}, p.get("dataset") or {}
    config = [("mode", data.spec.mode), ("written by", "reference" if data.spec.producer == V.REFERENCE
                                         else "create_hdf5_dataset")]
    for key in ("input_dir", "metadata_files", "hf_dataset", "hf_split"):
        if setup.get(key):
            config.append((key, setup[key]))
    for key in ("tokenizer_type", "huggingface_tokenizer", "encoder_file", "vocab_file", "max_seq_length", "seed"):
        if proc.get(key) is not None:
            config.append((key, proc[key]))
    for key in ("pack_sequences", "inverted_mask", "use_ftfy", "min_sequence_len", "fold_long_doc",
                "position_ids_dtype") + _CHAT_KEYS:
        if key in ds:
            config.append((key, ds[key]))
    if data.spec.traits is not None and data.spec.traits.templated and "chat_template" in proc:
        template = proc["chat_template"]
        config.append(("chat_template", "the tokenizer's own" if template is None
                       else template if len(str(template)) <= 60 else str(template)[:59] + "…"))
    sections = [("Configuration", config)]
    if isinstance(p.get("post-process"), dict):
        sections.append(("post-process", sorted(p["post-process"].items())))
    if isinstance(p.get("h5_dataset_stats"), dict):
        sections.append(("h5_dataset_stats", sorted(p["h5_dataset_stats"].items())))
    inp = p.get("input")
    if isinstance(inp, dict):
        sections.append(("input", [(k, inp[k]) for k in ("documents_read", "good", "bad", "bad_by_reason", "used",
                                                         "dropped", "dropped_by_reason", "files") if k in inp]))
    real = data.real
    recount = [("files", len(data.file_rows)), ("sequences", int(len(real)))]
    if len(data.sides) > 1:
        recount.append((f"sides ({' + '.join(data.sides)})", int(real.size)))
    recount += [("real tokens", int(real.sum())), ("loss-valid tokens", int(data.trained.sum())),
                ("pad tokens", int(real.size * data.msl - real.sum()))]
    if len(data.sides) > 1:
        for i, name in enumerate(data.sides):
            recount += [(f"{name} real tokens", int(real[:, i].sum())),
                        (f"{name} loss-valid tokens", int(data.trained[:, i].sum()))]
        recount.append(("prompt tokens (once per example)", int(data.docs.sum())))
    elif data.spec.loss == TURNS:
        recount.append(("trained spans (assistant turns)", int(data.docs.sum())))
    elif data.spec.vsl:
        docs = int(data.docs.sum())
        word = doc_word(data.spec)
        recount += [(f"{word}s (packed segments)", docs),
                    (f"{word}s per sequence", f"{docs / len(real):.4f}" if len(real) else "—")]
    else:
        recount.append(("EOS tokens (documents)", int(data.docs.sum())))
    sections.append(("Recounted from the files", recount))
    return sections


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 1.5em .5em 0;font-size:.9em;display:inline-table;vertical-align:top}
th,td{border:1px solid #ddd;padding:.2em .6em;text-align:left}th{background:#f5f5f5;font-weight:600}
td{font-variant-numeric:tabular-nums}.cap{color:#555;font-size:.9em}img{max-width:100%}
.tables h3{font-size:1em;margin:.8em 0 .2em}.tables div{display:inline-block;vertical-align:top}
"""


def build_report(out_dir: str) -> str:
    """The self-contained HTML report (PNG plots as data URIs). Needs matplotlib."""
    require_dir(out_dir)
    data = collect_report_data(out_dir)
    figures = _figures(data)
    tables = "".join(f"<div><h3>{html.escape(title)}</h3>{_table(rows)}</div>"
                     for title, rows in _key_numbers(data))
    plots = "".join(
        f'<h2>{html.escape(title)}</h2><p class="cap">{html.escape(caption)}</p>'
        f'<img alt="{html.escape(title)}" src="data:image/png;base64,{b64}">'
        for title, caption, b64 in figures)
    missing = "" if data.params is not None else "<p><b>data_params.json is missing: the dataset is incomplete.</b></p>"
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Dataset report: {html.escape(out_dir)}</title><style>{_CSS}</style></head><body>"
            f"<h1>Dataset report</h1><p><code>{html.escape(out_dir)}</code></p>{missing}"
            f"<h2>Key numbers</h2><div class=\"tables\">{tables}</div>{plots}</body></html>\n")


def write_report(out_dir: str, output: Optional[str] = None) -> str:
    """Write the report (default OUT/report.html); returns its path."""
    text = build_report(out_dir)
    path = output or fs.join(out_dir, "report.html")
    fs.write_text_atomic(path, text)
    return path


def add_parser(sub) -> None:
    """`report` and its flags, as a subcommand of the tools' parser."""
    r = sub.add_parser("report", help="write OUT/report.html with plots and the key numbers")
    r.add_argument("out_dir")
    r.add_argument("--output", help="where to write the report (default OUT/report.html)")


def run(args: argparse.Namespace) -> int:
    """Write the report and print its path; 2 without matplotlib."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("create_hdf5_dataset report: error: matplotlib is needed: pip install matplotlib", file=sys.stderr)
        return 2
    print(f"wrote {write_report(args.out_dir, args.output)}")
    return 0
