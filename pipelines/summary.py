"""What the command says when a job has ended, from its data_params.json: the summary line, and whether too
many records were bad (--max_bad_record_fraction: the command then exits with 3)."""

from typing import Optional

from transforms.core.decontam import LISTING_DIR
from transforms.core.langid import LISTING_DIR as LANGUAGE_DIR
from transforms.core.quality import LISTING_DIR as QUALITY_DIR
from transforms.io import fs
from transforms.io.dead_letters import DEAD_LETTER_DIR

__all__ = ["summary_line", "bad_share_problem"]


def summary_line(params: dict, output_dir: str, seconds: float) -> str:
    """The line printed when a job has ended: "Wrote N sequences (T tokens, ...) in F files to OUT in S s: ..."."""
    inp = params["input"]

    def by_reason(counts: dict) -> str:
        # Most frequent first, then by name: "json_decode 2, missing_key 1".
        return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    dropped = f", {inp['dropped']} dropped ({by_reason(inp['dropped_by_reason'])})" if inp["dropped"] else ""
    bad = (f", {inp['bad']} bad record{'s' if inp['bad'] != 1 else ''} ({by_reason(inp['bad_by_reason'])}; "
           f"see {fs.join(output_dir, DEAD_LETTER_DIR)})" if inp["bad"] else "")
    repeats = f" ({inp['repeats']} of them repeats)" if inp.get("repeats") else ""
    tail = f"in {seconds:.1f}s: {inp['documents_read']} documents read, {inp['used']} used{repeats}{dropped}{bad}."
    if "mixture" in params:
        tail += " Mixture: " + ", ".join(
            f"{name} {s['realized_share']:.2%} of the tokens (target {s['target_share']:.2%})"
            for name, s in params["mixture"]["sources"].items()) + "."
    if "language" in params:
        found = params["language"]["detected"]
        top = sorted(found, key=lambda k: (-found[k]["documents"], k))
        more = f" and {len(top) - 5} more" if len(top) > 5 else ""
        removed = params["language"]["documents_removed"]
        tail += (" Languages: " + ", ".join(f"{k} {found[k]['documents']}" for k in top[:5]) + more
                 + (f"; {removed} records removed, see {fs.join(output_dir, LANGUAGE_DIR)}" if removed else "") + ".")
    if "quality" in params:
        rules = {}
        for body in params["quality"]["filters"].values():
            rules.update(body["documents_removed"])
        top = sorted(rules, key=lambda k: (-rules[k], k))
        cut = params["quality"].get("documents_cut", 0)
        tail += (f" Quality filters: {params['quality']['documents_removed']} records removed"
                 + (" (" + ", ".join(f"{k} {rules[k]}" for k in top) + ")" if top else "")
                 + (f", {cut} cut to the lines their rules keep" if cut else "")
                 + (f"; see {fs.join(output_dir, QUALITY_DIR)}" if top or cut else "") + ".")
    if "decontamination" in params:
        d = params["decontamination"]
        cut = (f", {d['documents_cut']} cut ({d['characters_cut']} characters cut out)"
               if d.get("documents_cut") else "")
        tail += (f" Decontamination: {d['documents_removed']} records removed ({d['characters_removed']} characters)"
                 f"{cut}, "
                 f"{d['ngrams_matched']} evaluation n-grams found, {d['ngrams_boilerplate']} left out as "
                 f"boilerplate; see {fs.join(output_dir, LISTING_DIR)}.")
    if "outputs" in params:  # a split job: one dataset per output
        each = "; ".join(f"{o['path']}: {o['sequences']} sequences, {o['documents']} documents "
                         f"({o['fraction_obtained']:.2%} of {o['fraction_asked']:.2%} asked)"
                         + (" - EMPTY" if not o["sequences"] else "") for o in params["outputs"])
        return f"Wrote {len(params['outputs'])} datasets to {output_dir} ({each}) {tail}"
    post = params["post-process"]
    empty = " (an EMPTY dataset)" if not post["n_examples"] else ""
    return (f"Wrote {post['n_examples']} sequences ({post['num_tokens']} tokens, "
            f"{post['loss_valid_tokens']} loss-valid) in {len(params['files'])} files to {output_dir}{empty} {tail}")


def bad_share_problem(params: dict, limit: Optional[float]) -> Optional[str]:
    """What to say when the bad records' share of those read is over `limit` (None: no limit, or under it)."""
    inp = params["input"]
    if limit is None or not inp["documents_read"]:
        return None
    share = inp["bad"] / inp["documents_read"]
    if share > limit:
        return (f"{inp['bad']} of {inp['documents_read']} records were bad ({share:.2%}), more than "
                f"max_bad_record_fraction {limit:.2%}; the dataset was written, see "
                f"{fs.join(params['setup']['output_dir'], DEAD_LETTER_DIR)}")
    return None
