"""What speculative decoding reports (get_stats, /stats, /metrics): how many drafts, how many kept."""

from __future__ import annotations


def speculative_stats(method: str | None, c: dict[str, int]) -> dict:
    """Speculative decoding's counters (chapter 9): how many drafts, how many kept, tokens per verification."""
    drafts, accepted, verified = c["draft_tokens"], c["accepted_draft_tokens"], c["verified_steps"]
    return {"method": method, "draft_tokens": drafts, "accepted_draft_tokens": accepted, "verified_steps": verified,
            "off_steps": c["speculation_off_steps"],  # steps that did not draft: a prefill, or too many decoding
            "acceptance_rate": accepted / drafts if drafts else 0.0,
            # tokens a request emits per verification: the drafts kept plus the target's own token
            "mean_accepted_length": (accepted + verified) / verified if verified else 0.0}
